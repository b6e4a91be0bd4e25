package provisioner

import (
	"flag"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

func TestConfigValidate(t *testing.T) {
	var defaults Config
	defaults.AddFlags(flag.NewFlagSet("test", flag.ContinueOnError))
	if err := defaults.validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	for _, c := range []Config{
		{DirectoryRoot: "relative", Workers: 1},
		{DirectoryRoot: "/var/lib/../lib", Workers: 1},
		{DirectoryRoot: "", Workers: 1},
		{DirectoryRoot: "/var/lib/reclaimable", Workers: 0},
	} {
		if err := c.validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// The library has no call to requeue a claim; the wrapped informer replays
// an update to the handler the library registered.
func TestClaimInformerRequeues(t *testing.T) {
	shared := informers.NewSharedInformerFactory(fake.NewClientset(), 0).Core().V1().PersistentVolumeClaims().Informer()
	i := &claimInformer{SharedIndexInformer: shared}
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", UID: "u"}}
	i.requeue(claim) // no handler yet: nothing happens

	var got []any
	if _, err := i.AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { got = append(got, obj) },
	}, 0); err != nil {
		t.Fatal(err)
	}
	i.requeue(claim)
	if len(got) != 1 || got[0] != claim {
		t.Errorf("handler saw %v, want the claim once", got)
	}
}
