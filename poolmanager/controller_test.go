package poolmanager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/client/clientset/versioned/fake"
	poolinformers "github.com/reclaimable/reclaimable/client/informers/externalversions"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// fakeProvisioner serves members and records what is asked of it.
type fakeProvisioner struct {
	members   []*corev1.PersistentVolume
	finishErr error
	evicted   []string
	made      int
	// usage is what members held as they came back, by name.
	usage map[string]v1alpha1.MemberUsage
}

func (f *fakeProvisioner) Members(*storagev1.StorageClass) ([]*corev1.PersistentVolume, error) {
	return f.members, nil
}
func (f *fakeProvisioner) Waiting(string) int { return 0 }
func (f *fakeProvisioner) CheckAhead(*storagev1.StorageClass, *v1alpha1.VolumePool) error {
	return nil
}
func (f *fakeProvisioner) AheadInFlight(string) int { return 0 }
func (f *fakeProvisioner) MakeAhead(_ context.Context, _ *storagev1.StorageClass, _ *v1alpha1.VolumePool, n int) (int, error) {
	f.made += n
	return n, nil
}
func (f *fakeProvisioner) FinishAhead(context.Context, *storagev1.StorageClass) error {
	return f.finishErr
}
func (f *fakeProvisioner) CheckEvict(*storagev1.StorageClass) error { return nil }
func (f *fakeProvisioner) Evict(_ context.Context, pv *corev1.PersistentVolume, _ string) (bool, error) {
	f.evicted = append(f.evicted, pv.Name)
	return true, nil
}
func (f *fakeProvisioner) Usage(pv *corev1.PersistentVolume) (v1alpha1.MemberUsage, bool) {
	u, ok := f.usage[pv.Name]
	return u, ok
}

// newTestController is a pool manager of pool and class over p, its caches
// filled by hand, its queues run by nobody: a test calls the syncs.
func newTestController(t *testing.T, pool *v1alpha1.VolumePool, sc *storagev1.StorageClass, p Provisioner) (*Controller, *fake.Clientset) {
	t.Helper()
	client := fake.NewSimpleClientset(pool)
	poolInformer := poolinformers.NewSharedInformerFactory(client, 0).Reclaimable().V1alpha1().VolumePools().Informer()
	if err := poolInformer.AddIndexers(cache.Indexers{pools.PoolsByClass: func(obj any) ([]string, error) {
		return []string{obj.(*v1alpha1.VolumePool).Spec.StorageClassName}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	if err := poolInformer.GetIndexer().Add(pool); err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(k8sfake.NewClientset(), 0)
	classes := factory.Storage().V1().StorageClasses()
	if err := classes.Informer().GetIndexer().Add(sc); err != nil {
		t.Fatal(err)
	}
	c, err := newController(client, poolInformer, classes, factory.Core().V1().PersistentVolumes().Informer(), p, testProvisioner, record.NewFakeRecorder(100), prometheus.NewRegistry(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c, client
}

// Members made ahead whose storage cannot be made (their node is gone, the
// lifecycle pod fails) hold up neither the pool's status nor its
// evictions: finishing them is the ahead queue's work, retried with
// back-off, and the Ready condition says why it fails.
func TestStatusAndEvictionDoNotWaitForMembersMadeAhead(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	p := &fakeProvisioner{
		finishErr: errors.New("node n1 is not ready"),
		members: []*corev1.PersistentVolume{
			aheadMember("half", true),
			member("idle", corev1.VolumeAvailable, annotate(wellknown.ReleasedAt, t0.Format(time.RFC3339)), transitioned(t0)),
			member("kept", corev1.VolumeAvailable, annotate(wellknown.ReleasedAt, t1.Format(time.RFC3339)), transitioned(t1)),
		},
	}
	pl := pool("warm", minAvailable(1), func(p *v1alpha1.VolumePool) {
		p.Spec.EvictAfter = &metav1.Duration{Duration: time.Minute}
	})
	c, client := newTestController(t, pl, class(nil), p)
	c.clock = testingclock.NewFakePassiveClock(t1)

	if err := c.sync(ctx, "warm"); err != nil {
		t.Fatalf("status sync: %v, want the status written whatever the members made ahead do", err)
	}
	got, err := client.ReclaimableV1alpha1().VolumePools().Get(ctx, "warm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.ObservedGeneration != pl.Generation || got.Status.Total != 3 {
		t.Errorf("status %+v: want it written, three members", got.Status)
	}
	if len(p.evicted) != 1 || p.evicted[0] != "idle" {
		t.Errorf("evicted %v, want the idle member alone: minAvailable keeps the other", p.evicted)
	}
	if c.ahead.Len() != 1 {
		t.Errorf("ahead queue holds %d pools, want the pool with a half-made member", c.ahead.Len())
	}

	if err := c.syncAhead(ctx, "warm"); err == nil {
		t.Fatal("ahead sync succeeded, want the failure returned for the queue's back-off")
	}
	// The status write reads the pool from the cache: give it the newer one.
	if err := c.poolIndex.Update(got); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	got, err = client.ReclaimableV1alpha1().VolumePools().Get(ctx, "warm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := meta.FindStatusCondition(got.Status.Conditions, ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != reasonMembersNotMade {
		t.Errorf("Ready %+v, want False, %s", ready, reasonMembersNotMade)
	}

	// Once the members can be made, the condition clears.
	p.finishErr = nil
	if err := c.syncAhead(ctx, "warm"); err != nil {
		t.Fatalf("ahead sync: %v", err)
	}
	if err := c.poolIndex.Update(got); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	got, _ = client.ReclaimableV1alpha1().VolumePools().Get(ctx, "warm", metav1.GetOptions{})
	if ready := meta.FindStatusCondition(got.Status.Conditions, ConditionReady); ready == nil || ready.Reason == reasonMembersNotMade {
		t.Errorf("Ready %+v, want the failure gone", ready)
	}
}

// etcdRequestLimit is etcd's default largest request (--max-request-bytes):
// an object written larger is refused by the API server.
const etcdRequestLimit = 3 << 19 // 1.5 MiB

// refuseLargeStatus has client refuse, as the API server would, a
// VolumePool status larger than etcd takes, and records the size of the
// largest status written.
func refuseLargeStatus(client *fake.Clientset, largest *int) {
	client.PrependReactor("update", "volumepools", func(action k8stesting.Action) (bool, runtime.Object, error) {
		update, ok := action.(k8stesting.UpdateAction)
		if !ok || action.GetSubresource() != "status" {
			return false, nil, nil
		}
		b, err := json.Marshal(update.GetObject())
		if err != nil {
			return true, nil, err
		}
		if len(b) > etcdRequestLimit {
			return true, nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("etcdserver: request is too large (%d bytes)", len(b)))
		}
		*largest = max(*largest, len(b))
		return false, nil, nil
	})
}

// largePool is a pool of n idle members of a directory class, each
// measured as it came back, and its provisioner.
func largePool(n int) (*fakeProvisioner, *v1alpha1.VolumePool) {
	p := &fakeProvisioner{usage: map[string]v1alpha1.MemberUsage{}}
	returned := t0.Format(time.RFC3339)
	for i := range n {
		name := fmt.Sprintf("pvc-%08d-5e1f-4c1a-9b7d-%012d", i, i)
		p.members = append(p.members, member(name, corev1.VolumeAvailable, annotate(wellknown.ReleasedAt, returned), transitioned(t0)))
		p.usage[name] = v1alpha1.MemberUsage{Volume: name, Bytes: int64(1<<30 + i), Returned: returned}
	}
	pl := pool("large", func(p *v1alpha1.VolumePool) {
		p.Spec.EvictAfter = &metav1.Duration{Duration: time.Minute}
	})
	return p, pl
}

// BenchmarkDecideLargePool decides the status and evictions of a pool of
// 20,000 idle measured members, and reports the size of its status.
func BenchmarkDecideLargePool(b *testing.B) {
	p, pl := largePool(20000)
	v := view{pool: pl, owner: pl, class: class(nil), provisioner: testProvisioner, members: p.members, usage: p.usage, now: metav1.NewTime(t1)}
	var r result
	for b.Loop() {
		r = decide(v)
	}
	s, err := json.Marshal(r.status)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(s)), "status-bytes")
	b.ReportMetric(float64(len(r.evict)), "evictions")
}

// A pool of 20,000 idle measured members keeps evicting: its status stays
// far below what etcd takes, whatever the number of members, and a status
// the API server refuses holds up no eviction.
func TestLargePoolKeepsEvicting(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const n = 20000
	p, pl := largePool(n)
	c, client := newTestController(t, pl, class(nil), p)
	c.clock = testingclock.NewFakePassiveClock(t1)
	c.recorder = &record.FakeRecorder{} // an event per eviction, none kept
	largest := 0
	refuseLargeStatus(client, &largest)

	if err := c.sync(ctx, "large"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if len(p.evicted) != n {
		t.Errorf("evicted %d members, want all %d: each has been idle an hour past evictAfter", len(p.evicted), n)
	}
	got, err := client.ReclaimableV1alpha1().VolumePools().Get(ctx, "large", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Total != n || got.Status.UsedBytes == nil || got.Status.UsedBytes.Value() != int64(n)<<30+int64(n*(n-1)/2) {
		t.Errorf("status total %d, usedBytes %v; want %d members and the sum of every measure", got.Status.Total, got.Status.UsedBytes, n)
	}
	// The bound leaves room for the rest of the pool and its conditions.
	if largest == 0 || largest > etcdRequestLimit/8 {
		t.Errorf("largest status written %d bytes, want one written, at most %d", largest, etcdRequestLimit/8)
	}
}

// A status the API server refuses, for whatever reason, is retried, and
// the evictions due are made all the same.
func TestEvictionDoesNotWaitForTheStatusWrite(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	p := &fakeProvisioner{members: []*corev1.PersistentVolume{
		member("idle", corev1.VolumeAvailable, annotate(wellknown.ReleasedAt, t0.Format(time.RFC3339)), transitioned(t0)),
	}}
	pl := pool("refused", func(p *v1alpha1.VolumePool) {
		p.Spec.EvictAfter = &metav1.Duration{Duration: time.Minute}
	})
	c, client := newTestController(t, pl, class(nil), p)
	c.clock = testingclock.NewFakePassiveClock(t1)
	client.PrependReactor("update", "volumepools", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is unavailable")
	})
	if err := c.sync(ctx, "refused"); err == nil {
		t.Error("sync succeeded, want the refused write returned for a retry")
	}
	if len(p.evicted) != 1 {
		t.Errorf("evicted %v, want the idle member though the status could not be written", p.evicted)
	}
}
