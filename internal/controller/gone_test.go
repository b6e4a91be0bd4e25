package controller

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

func TestGone(t *testing.T) {
	claim := func(uid types.UID) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", UID: uid}}
	}
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumeclaims"}, "c")
	read := func(c *corev1.PersistentVolumeClaim, err error) func() (*corev1.PersistentVolumeClaim, error) {
		return func() (*corev1.PersistentVolumeClaim, error) { return c, err }
	}
	same := func(c *corev1.PersistentVolumeClaim) bool { return c.UID == "u1" }
	for _, tt := range []struct {
		name         string
		cached, live func() (*corev1.PersistentVolumeClaim, error)
		want, asked  bool
		wantErr      bool
	}{
		{"in the cache: exists, no request", read(claim("u1"), nil), nil, false, false, false},
		{"not cached, the API server has it", read(nil, notFound), read(claim("u1"), nil), false, true, false},
		{"not cached, the API server has not", read(nil, notFound), read(nil, notFound), true, true, false},
		{"another UID cached and live: recreated", read(claim("u2"), nil), read(claim("u2"), nil), true, true, false},
		{"another UID cached, the cache behind", read(claim("u2"), nil), read(claim("u1"), nil), false, true, false},
		{"the API server fails", read(nil, notFound), read(nil, errors.New("etcd is down")), false, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			asked := false
			live := func(context.Context) (*corev1.PersistentVolumeClaim, error) {
				asked = true
				return tt.live()
			}
			got, err := Gone(context.Background(), same, tt.cached, live)
			if got != tt.want || asked != tt.asked || (err != nil) != tt.wantErr {
				t.Errorf("Gone = %v, %v (asked the API server: %v); want %v, error %v (asked %v)", got, err, asked, tt.want, tt.wantErr, tt.asked)
			}
		})
	}
}
