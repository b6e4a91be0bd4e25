package controllertest

import (
	"errors"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// ResourceVersionPreconditions makes the fake API server act like the real
// one on updates of a resource (say corev1 persistentvolumes): an update
// that carries a resourceVersion other than the stored one is refused with a
// Conflict, and an accepted one gets the next resourceVersion.
func ResourceVersionPreconditions(client *fake.Clientset, gvr schema.GroupVersionResource) {
	client.PrependReactor("update", gvr.Resource, func(action k8stesting.Action) (bool, runtime.Object, error) {
		update, ok := action.(k8stesting.UpdateAction)
		if !ok || update.GetSubresource() != "" {
			return false, nil, nil
		}
		obj := update.GetObject()
		m, err := meta.Accessor(obj)
		if err != nil {
			return true, nil, err
		}
		stored, err := client.Tracker().Get(gvr, m.GetNamespace(), m.GetName())
		if err != nil {
			return true, nil, err
		}
		sm, err := meta.Accessor(stored)
		if err != nil {
			return true, nil, err
		}
		if sm.GetResourceVersion() != m.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), m.GetName(), errors.New("the object has been modified"))
		}
		n, _ := strconv.Atoi(m.GetResourceVersion())
		m.SetResourceVersion(strconv.Itoa(n + 1))
		// The default reactor stores it.
		return false, nil, nil
	})
}

// Metric returns the value of the one sample of metric name whose labels
// include labelPairs (name, value, name, value...), counter or gauge, as
// gathered from reg; it fails the test when there is none.
func Metric(t testing.TB, reg prometheus.Gatherer, name string, labelPairs ...string) float64 {
	t.Helper()
	v, ok := Sample(t, reg, name, labelPairs...)
	if !ok {
		t.Fatalf("no sample of %s%v", name, labelPairs)
	}
	return v
}

// Sample is Metric for a series that may be absent: it reports whether
// there is one.
func Sample(t testing.TB, reg prometheus.Gatherer, name string, labelPairs ...string) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	samples:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labelPairs); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == labelPairs[i] && l.GetValue() == labelPairs[i+1] {
						found = true
					}
				}
				if !found {
					continue samples
				}
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}
