package controller

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Gone reports whether an object no longer exists, with same telling the
// object looked for from another of its name (by UID, mostly). A cache can
// only prove that the object still exists: it may lag behind a create, so a
// missing entry proves nothing. Absence, or another object in its place, is
// the API server's to say, through live; every controller that deletes or
// frees something on an object's absence asks it so.
func Gone[T metav1.Object](ctx context.Context, same func(T) bool, cached func() (T, error), live func(context.Context) (T, error)) (bool, error) {
	if obj, err := cached(); err == nil && same(obj) {
		return false, nil
	}
	obj, err := live(ctx)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	}
	return !same(obj), nil
}
