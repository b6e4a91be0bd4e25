//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// evictAfter removes the members no claim has had for that long, with
// their directories, least recently used first, and keeps minAvailable
// free ones: three consumers at once on the real node leave three
// members; once idle, the two used least recently go, the third stays
// with its data.
func TestNodeEvictAfterRemovesIdleMembers(t *testing.T) {
	const evictAfter = 5 * time.Second
	c := newDirectoryScrubCase(t, wellknown.OnReleaseKeep, nil, func(s *v1alpha1.VolumePoolSpec) {
		s.MaxVolumes, s.MinAvailable = ptr.To[int32](3), ptr.To[int32](1)
		s.ReuseScope, s.ReserveFor = wellknown.ReuseScopeCluster, &metav1.Duration{}
		s.EvictAfter = &metav1.Duration{Duration: evictAfter}
	})
	client := framework.Client()
	volumes := c.threeConsumers(t, "fill", "/cache")

	// The member used last: released last, by the second the releaser
	// records, then by name, as the pool manager orders them.
	var survivor *corev1.PersistentVolume
	released := map[string]time.Time{}
	for _, pv := range volumes {
		var at time.Time
		framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
			got, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			at, err = time.Parse(time.RFC3339, got.Annotations[wellknown.ReleasedAt])
			return err == nil, nil
		}, fmt.Sprintf("volume %s to be back in the pool", pv.Name))
		released[pv.Name] = at
		if survivor == nil || at.After(released[survivor.Name]) || at.Equal(released[survivor.Name]) && pv.Name > survivor.Name {
			survivor = pv
		}
	}
	for _, pv := range volumes {
		if pv.Name == survivor.Name {
			continue
		}
		framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}, fmt.Sprintf("idle member %s to be evicted", pv.Name))
		if _, err := os.Stat(pv.Spec.HostPath.Path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the directory of evicted member %s: %v, want it removed", pv.Name, err)
		}
		framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: "default", Kind: "VolumePool", Name: c.pool, Reason: "MemberEvicted", Message: pv.Name})
	}

	// The last free member stays (minAvailable 1), watched until it has
	// been idle for evictAfter and two looks of the pool manager more.
	watch := time.Until(released[survivor.Name].Add(evictAfter + 3*time.Second))
	framework.Consistently(t, max(watch, time.Second), func(ctx context.Context) (bool, error) {
		got, err := client.CoreV1().PersistentVolumes().Get(ctx, survivor.Name, metav1.GetOptions{})
		return err == nil && !pools.Evicting(got) && got.DeletionTimestamp == nil, err
	}, fmt.Sprintf("the last free member %s to stay: minAvailable 1", survivor.Name))
	if names := entryNames(t, survivor.Spec.HostPath.Path); strings.Join(names, ",") != "objects,readonly,top.txt" {
		t.Errorf("the member that stays holds %v, want its consumer's data", names)
	}
	c.inv.Check(t, 10*time.Second)
}

// A pool whose maximum is lowered below its members keeps them by default
// and counts the surplus; with shrinkToMaximum its free members go, the
// largest first, never a bound one, down to the maximum.
func TestVolumePoolShrinksToItsMaximumOnlyWhenAllowed(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	r := newVolumePoolCase(t, map[string]string{wellknown.ReserveFor: "0s", wellknown.ReuseScope: wellknown.ReuseScopeCluster}, ns)
	ctx := context.Background()
	client := framework.Client()
	sizes := map[string]string{"big": "3Gi", "mid": "2Gi", "small": "1Gi", "kept": "1Gi"}
	for name, size := range sizes {
		claim := claimOf(r.class, name)
		claim.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(size)
		if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	volumes := map[string]*corev1.PersistentVolume{}
	for name := range sizes {
		volumes[name] = boundVolume(t, ns, name)
	}
	for _, name := range []string{"big", "mid", "small"} {
		r.deleteGone(ns, name)
	}
	r.waitPoolStatus("three members free, one bound", poolCounts{free: 3, bound: 1, total: 4})

	setPool := func(mutate func(*v1alpha1.VolumePoolSpec)) {
		t.Helper()
		framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
			p, err := volumePools(t).Get(ctx, r.pool, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			mutate(&p.Spec)
			_, err = volumePools(t).Update(ctx, p, metav1.UpdateOptions{})
			return err == nil, nil
		}, "the pool's spec to be updated")
	}
	setPool(func(s *v1alpha1.VolumePoolSpec) { s.MaxVolumes = ptr.To[int32](2) })
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		p, err := volumePools(t).Get(ctx, r.pool, metav1.GetOptions{})
		return err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.Surplus == 2, err
	}, "the pool's status to count a surplus of 2")
	framework.Consistently(t, 3*time.Second, func(ctx context.Context) (bool, error) {
		for _, pv := range volumes {
			if _, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{}); err != nil {
				return false, err
			}
		}
		return true, nil
	}, "every member to stay without shrinkToMaximum")

	setPool(func(s *v1alpha1.VolumePoolSpec) { s.ShrinkToMaximum = true })
	for _, name := range []string{"big", "mid"} {
		pv := volumes[name]
		framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}, fmt.Sprintf("the %s free member %s to be evicted", sizes[name], pv.Name))
		if _, err := os.Stat(pv.Spec.HostPath.Path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the directory of evicted member %s: %v, want it removed", pv.Name, err)
		}
		framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: "default", Kind: "VolumePool", Name: r.pool, Reason: "MemberEvicted", Message: pv.Name})
	}
	r.waitPoolStatus("shrunk to the maximum", poolCounts{free: 1, bound: 1, total: 2})
	for _, name := range []string{"small", "kept"} {
		if _, err := client.CoreV1().PersistentVolumes().Get(ctx, volumes[name].Name, metav1.GetOptions{}); err != nil {
			t.Errorf("member %s: %v, want it kept", name, err)
		}
	}
	r.inv.Check(t, 10*time.Second)
}

// evictPoolCase is a pool at most two volumes, reserving none and shared
// across namespaces, with mutate's eviction settings.
func evictPoolCase(t *testing.T, ns string, mutate func(*v1alpha1.VolumePoolSpec)) *poolCase {
	t.Helper()
	r := newVolumePoolCase(t, map[string]string{wellknown.ReserveFor: "0s", wellknown.ReuseScope: wellknown.ReuseScopeCluster}, ns)
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		p, err := volumePools(t).Get(ctx, r.pool, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		p.Spec.MaxVolumes = ptr.To[int32](2)
		mutate(&p.Spec)
		_, err = volumePools(t).Update(ctx, p, metav1.UpdateOptions{})
		return err == nil, nil
	}, "the pool's eviction settings to be set")
	return r
}

// At its maximum, a pool with evictForClaims serves a claim that no free
// member fits after its least recently used member is evicted.
func TestVolumePoolEvictsForAClaimAtItsMaximum(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	r := evictPoolCase(t, ns, func(s *v1alpha1.VolumePoolSpec) { s.EvictForClaims = true })
	client := framework.Client()
	ctx := context.Background()
	volumes := map[string]*corev1.PersistentVolume{}
	for _, name := range []string{"first", "second"} {
		r.create(ns, name)
		volumes[name] = boundVolume(t, ns, name)
	}
	for _, name := range []string{"first", "second"} {
		r.deleteGone(ns, name)
		waitInPool(t, volumes[name].Name)
	}
	r.waitPoolStatus("two free members, at the maximum", poolCounts{free: 2, total: 2})
	// Released within a second of each other, the two are told apart by
	// name, as the provisioner does.
	lru, mru := volumes["first"], volumes["second"]
	if releasedAt(t, lru.Name).After(releasedAt(t, mru.Name)) || releasedAt(t, lru.Name).Equal(releasedAt(t, mru.Name)) && lru.Name > mru.Name {
		lru, mru = mru, lru
	}

	big := claimOf(r.class, "big")
	big.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("5Gi")
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: ns, Kind: "PersistentVolumeClaim", Name: "big", Reason: "EvictingForClaim", Message: lru.Name})
	got := boundVolume(t, ns, "big")
	if got.Name == lru.Name || got.Name == mru.Name {
		t.Fatalf("claim big got member %s, which does not fit it", got.Name)
	}
	if _, err := client.CoreV1().PersistentVolumes().Get(ctx, lru.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the least recently used member %s: %v, want it evicted", lru.Name, err)
	}
	if _, err := os.Stat(lru.Spec.HostPath.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the directory of the evicted member: %v, want it removed", err)
	}
	if _, err := client.CoreV1().PersistentVolumes().Get(ctx, mru.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the member used last %s: %v, want it kept", mru.Name, err)
	}
	framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: "default", Kind: "VolumePool", Name: r.pool, Reason: "MemberEvicted", Message: lru.Name})
	r.inv.Check(t, 10*time.Second)
}

// releasedAt is when the releaser last returned volume to the pool, to the
// second.
func releasedAt(t *testing.T, volume string) time.Time {
	t.Helper()
	pv, err := framework.Client().CoreV1().PersistentVolumes().Get(context.Background(), volume, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.RFC3339, pv.Annotations[wellknown.ReleasedAt])
	if err != nil {
		t.Fatalf("volume %s: released-at: %v", volume, err)
	}
	return at
}

// A member evicted for idleness while a claim comes for it: each claim is
// served, and the member is either issued or evicted, never both
// (invariant 10). Claims arrive at times spread around the member's
// eviction, the PV controller and the provisioner both racing for it.
func TestVolumePoolEvictionRacingAClaim(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	const evictAfter = time.Second
	r := evictPoolCase(t, ns, func(s *v1alpha1.VolumePoolSpec) { s.EvictAfter = &metav1.Duration{Duration: evictAfter} })
	client := framework.Client()
	issued, evicted := 0, 0
	for i := range 8 {
		name := fmt.Sprintf("run-%d", i)
		r.create(ns, name)
		member := boundVolume(t, ns, name)
		r.deleteGone(ns, name)
		var releasedAt time.Time
		framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
			pv, err := client.CoreV1().PersistentVolumes().Get(ctx, member.Name, metav1.GetOptions{})
			if err != nil || pv.Status.Phase != corev1.VolumeAvailable {
				return false, err
			}
			releasedAt, err = time.Parse(time.RFC3339, pv.Annotations[wellknown.ReleasedAt])
			return err == nil, nil
		}, "the member to be back in the pool")
		// The member is due for eviction evictAfter after the end of the
		// second its release is recorded in. The next claim comes from
		// half a second before that to a second after, in steps.
		at := releasedAt.Add(time.Second + evictAfter - 500*time.Millisecond + time.Duration(i)*200*time.Millisecond)
		framework.Eventually(t, 30*time.Second, func(context.Context) (bool, error) { return !time.Now().Before(at), nil }, "the claim's moment")
		next := fmt.Sprintf("next-%d", i)
		r.create(ns, next)
		got := boundVolume(t, ns, next)
		if got.Name == member.Name {
			issued++
		} else {
			evicted++
			framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
				_, err := client.CoreV1().PersistentVolumes().Get(ctx, member.Name, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			}, fmt.Sprintf("member %s, which the claim did not get, to be evicted", member.Name))
		}
		r.deleteGone(ns, next)
	}
	t.Logf("the member went to the claim %d times, was evicted first %d times", issued, evicted)
	r.inv.Check(t, 10*time.Second)
}

// Byte watermarks: three consumers on the real node each leave 40 MiB in
// a member of their own; once the three are back in the pool and
// measured (120 MiB, above the high watermark of 100 MiB), the least
// recently used goes (80 MiB; the next would leave 40, below the low one
// of 60 MiB), and only it.
func TestNodeEvictAboveBytes(t *testing.T) {
	c := newDirectoryScrubCase(t, wellknown.OnReleaseKeep, nil, func(s *v1alpha1.VolumePoolSpec) {
		s.MaxVolumes = ptr.To[int32](3)
		s.ReuseScope, s.ReserveFor = wellknown.ReuseScopeCluster, &metav1.Duration{}
		s.EvictAboveBytes, s.EvictDownToBytes = ptr.To(resource.MustParse("100Mi")), ptr.To(resource.MustParse("60Mi"))
	})
	client := framework.Client()
	volumes := c.threeConsumers(t, "bulk", "/cache/blob", "40")
	var lru *corev1.PersistentVolume
	for _, pv := range volumes {
		waitInPool(t, pv.Name)
		if lru == nil || releasedAt(t, pv.Name).Before(releasedAt(t, lru.Name)) || releasedAt(t, pv.Name).Equal(releasedAt(t, lru.Name)) && pv.Name < lru.Name {
			lru = pv
		}
	}
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().PersistentVolumes().Get(ctx, lru.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}, fmt.Sprintf("the least recently used member %s to be evicted", lru.Name))
	framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: "default", Kind: "VolumePool", Name: c.pool, Reason: "MemberEvicted", Message: lru.Name})
	var pool *v1alpha1.VolumePool
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		var err error
		pool, err = volumePools(t).Get(ctx, c.pool, metav1.GetOptions{})
		return err == nil && len(pool.Status.Usage) == 2 && pool.Status.Total == 2, err
	}, "the pool's status to count the two members left")
	if used := pool.Status.UsedBytes; used == nil || used.Value() < 80<<20 || used.Value() > 82<<20 {
		t.Errorf("status usedBytes %v, want the two members' 80 MiB", used)
	}
	framework.Consistently(t, 3*time.Second, func(ctx context.Context) (bool, error) {
		for _, pv := range volumes {
			if pv.Name == lru.Name {
				continue
			}
			if got, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{}); err != nil || pools.Evicting(got) {
				return false, fmt.Errorf("member %s went too: %v", pv.Name, err)
			}
		}
		return true, nil
	}, "the other two members to stay: a second eviction would go below the low watermark")
	c.inv.Check(t, 10*time.Second)
}

// threeConsumers runs three pods at once on the real node, each with a
// claim of its own and the consumer's args, then deletes them one after
// the other, and with them their claims; it returns their volumes by pod.
func (c *scrubCase) threeConsumers(t *testing.T, args ...string) map[string]*corev1.PersistentVolume {
	t.Helper()
	consumers := []string{"a", "b", "c"}
	for _, name := range consumers {
		if _, err := framework.Client().CoreV1().Pods(c.ns).Create(context.Background(), nodePod(name, "cache-"+name, c.class, 1000, args...), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	volumes := map[string]*corev1.PersistentVolume{}
	for _, name := range consumers {
		waitSucceeded(t, c.ns, name)
		volumes[name] = boundVolume(t, c.ns, "cache-"+name)
	}
	for _, name := range consumers {
		deletePod(t, c.ns, name, "cache-"+name)
	}
	return volumes
}
