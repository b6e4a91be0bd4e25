package provisioner

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/controllertest"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func TestConfigValidate(t *testing.T) {
	var defaults Config
	defaults.AddFlags(pflag.NewFlagSet("test", pflag.ContinueOnError))
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

// A claim refused with PoolExhausted is provisioned as soon as a volume of
// its class is freed, through the real library: the provisioner hands it
// back to the library's queue, whose own retry would come only after an
// hour here. Each failed attempt leaves one Warning, not the provisioner's
// and the library's copy of it.
func TestWaitingClaimIsProvisionedOnceAVolumeIsFreed(t *testing.T) {
	const name = "example.com/reclaimable"
	class := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: "pool"},
		Provisioner:       name,
		Parameters:        map[string]string{"backend": "static"},
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimRetain),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
	}
	member := volume("member", "1Gi", bound("ns", "first", "uid-ns-first"), func(pv *corev1.PersistentVolume) {
		pv.Annotations = map[string]string{}
		pv.Labels = map[string]string{wellknown.Pool: "pool"}
	})
	first := claimFor("ns", "first", "1Gi")
	claim := claimFor("ns", "waiting", "1Gi", func(c *corev1.PersistentVolumeClaim) {
		// What the PV controller sets on a claim for an external provisioner.
		c.Annotations = map[string]string{"volume.kubernetes.io/storage-provisioner": name}
	})
	client := fake.NewClientset(class, member, first, claim)
	// As the API server does: the keeper of unissued members and a take
	// may both write the freed member, and the later of the two must fail.
	controllertest.ResourceVersionPreconditions(client, corev1.SchemeGroupVersion.WithResource("persistentvolumes"))
	var leftOutNotices atomic.Int32
	leftOutEvent = func(ev *corev1.Event) {
		if ev.Reason == "Provisioning" && ev.InvolvedObject.UID == claim.UID {
			leftOutNotices.Add(1)
		}
	}
	t.Cleanup(func() { leftOutEvent = func(*corev1.Event) {} })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory := informers.NewSharedInformerFactory(client, 0)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	reg := prometheus.NewRegistry()
	claims := factory.Core().V1().PersistentVolumeClaims().Informer()
	c, err := newController(client, sources{factory: factory, claims: claims, backing: claims, backingNS: "reclaimable"}, broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "test"}), reg, name,
		Config{DirectoryRoot: t.TempDir(), Workers: 1},
		lib.RateLimiter(workqueue.NewItemExponentialFailureRateLimiter(time.Hour, time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	done := make(chan struct{})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()

	events := func(reason string) (n int) {
		list, err := client.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.InvolvedObject.UID == claim.UID && e.Reason == reason {
				n += int(max(e.Count, 1))
			}
		}
		return n
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return cond(), nil
		}); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	poll("the claim to be refused with PoolExhausted", func() bool { return events(reasonPoolExhausted) == 1 })
	// A class with no claim waiting has no series.
	waiting := func() float64 {
		v, _ := controllertest.Sample(t, reg, "reclaimable_provisioner_claims_waiting", "class", class.Name)
		return v
	}
	if n := waiting(); n != 1 {
		t.Errorf("claims_waiting = %v while the claim waits, want 1", n)
	}

	// The first claim is gone and the releaser returns its volume.
	if err := client.CoreV1().PersistentVolumeClaims("ns").Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	freed := member.DeepCopy()
	freed.Spec.ClaimRef, freed.Status.Phase = nil, corev1.VolumeAvailable
	if _, err := client.CoreV1().PersistentVolumes().Update(ctx, freed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("the freed volume to be issued to the waiting claim", func() bool {
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, member.Name, metav1.GetOptions{})
		return err == nil && pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.UID == claim.UID
	})
	poll("the claim to be counted waiting no more", func() bool { return waiting() == 0 })
	// The library records "Provisioning" before each attempt, through the
	// same broadcaster as its copy of a failure: once the second attempt's
	// is out, the first attempt's copy would be too.
	poll("the library's notices of both attempts, left out", func() bool { return leftOutNotices.Load() == 2 })
	if n := events("Provisioning"); n != 0 {
		t.Errorf("%d Provisioning events written, want none", n)
	}
	poll("the IssuedFromPool event", func() bool { return events(reasonIssuedFromPool) == 1 })
	if n := events(reasonProvisioningFailed); n != 0 {
		t.Errorf("%d ProvisioningFailed events besides PoolExhausted, want none", n)
	}
	if n := events(reasonPoolExhausted); n != 1 {
		t.Errorf("%d PoolExhausted events for one failed attempt, want 1", n)
	}
}
