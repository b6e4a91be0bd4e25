package classpool_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/ahead"
	"github.com/reclaimable/reclaimable/provisioner/classpool"
)

// aheadPoolNamed is a VolumePool of class "pool" that keeps min members
// made ahead of claims.
func aheadPoolNamed(name string, min int32) *v1alpha1.VolumePool {
	return &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.VolumePoolSpec{StorageClassName: "pool", MinAvailable: ptr.To(min)}}
}

// askAhead asks the backing class for n members of pool ahead of claims,
// each of the pool's template, as the members made ahead do for a class
// that binds at once (ahead.Members.Make).
func (f *fixture) askAhead(pool *v1alpha1.VolumePool, n int) (int, error) {
	return f.pools.AskAhead(context.Background(), classpool.Ahead{Class: f.class.Name, Pool: pool.Name, Backing: f.backing, Shape: ahead.Claim(pool, "").Spec}, n)
}

// Members made ahead of claims (minAvailable) come through backing claims
// too, of the pool's template, and become free members made ahead: the
// steps of the hand-over, without a claim.
func TestAClassPoolMakesMembersAheadThroughItsBackingClass(t *testing.T) {
	f := newFixture(t, clock.RealClock{}, nil)
	if asked, err := f.askAhead(aheadPoolNamed("pool", 1), 1); asked != 1 || err != nil {
		t.Fatalf("AskAhead = %d, %v", asked, err)
	}
	claims := f.ServedBackingClaims()
	if len(claims) != 1 {
		t.Fatalf("backing claims = %v; want one", claims)
	}
	backing := &claims[0]
	uid := types.UID(backing.Annotations[wellknown.BackingForUID])
	if backing.Annotations[wellknown.MadeAhead] != "pool" || uid == "" || !backing.Spec.Resources.Requests.Storage().Equal(ahead.DefaultCapacity) {
		t.Fatalf("backing claim = %+v, want one of the pool's template, made ahead", backing)
	}
	if n := f.aheadInFlight("pool"); n != 1 {
		t.Errorf("AheadInFlight = %d, want the one asked for", n)
	}

	f.DriverMade(backing)
	if err := f.pools.Sync(context.Background(), uid); err != nil {
		t.Fatal(err)
	}
	if kept := f.Server(testBackingVolume); kept.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain || kept.Annotations[wellknown.MadeAhead] != "pool" {
		t.Fatalf("kept volume = policy %s, annotations %v", kept.Spec.PersistentVolumeReclaimPolicy, kept.Annotations)
	}
	f.CatchUp(testBackingVolume)
	if n := f.aheadInFlight("pool"); n != 1 {
		t.Errorf("AheadInFlight, kept = %d, want 1", n)
	}
	if err := f.pools.Sync(context.Background(), uid); err != nil {
		t.Fatal(err)
	}
	pv := f.Server(testBackingVolume)
	if !pools.Unissued(pv) || pv.Spec.StorageClassName != "pool" || pv.Annotations[wellknown.ProvisionedBy] != testProvisioner ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain || pv.Annotations[wellknown.BackingForUID] != "" {
		t.Fatalf("member = class %s, policy %s, claimRef %+v, annotations %v; want a free member made ahead",
			pv.Spec.StorageClassName, pv.Spec.PersistentVolumeReclaimPolicy, pv.Spec.ClaimRef, pv.Annotations)
	}
	f.CatchUp(testBackingVolume)
	if n := f.aheadInFlight("pool"); n != 0 {
		t.Errorf("AheadInFlight, made = %d, want 0", n)
	}
}

// A backing claim asked for a member made ahead that the backing class does
// not bind is not waited for without end: once it has waited three times
// --lifecycle-timeout, or at once when its pool is gone or wants no member
// made ahead any more, it is deleted (it holds no data: nothing was bound)
// and its place under maxVolumes is given back.
func TestAMemberAheadTheBackingClassDoesNotMakeIsGivenUp(t *testing.T) {
	for _, tt := range []struct {
		name  string
		age   time.Duration
		pool  *v1alpha1.VolumePool
		given bool
		event string
	}{
		{"waiting within the bound", time.Minute, aheadPoolNamed("pool", 1), false, ""},
		{"waiting past the bound", 3*time.Minute + time.Second, aheadPoolNamed("pool", 1), true, "Warning MemberNotMade Class disk did not bind a volume to claim"},
		{"its pool wants none ahead", time.Minute, aheadPoolNamed("pool", 0), true, "Normal MemberNotMade Asking class disk for a member ahead of claims is cancelled"},
		{"its pool is gone", time.Minute, nil, true, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, testingclock.NewFakePassiveClock(t0()), nil)
			if asked, err := f.askAhead(aheadPoolNamed("pool", 1), 1); asked != 1 || err != nil {
				t.Fatalf("AskAhead = %d, %v", asked, err)
			}
			if tt.pool != nil {
				if err := f.Pools.Add(tt.pool); err != nil {
					t.Fatal(err)
				}
			}
			claims := f.ServedBackingClaims()
			if len(claims) != 1 {
				t.Fatalf("backing claims = %v; want one", claims)
			}
			backing := claims[0].DeepCopy()
			backing.UID = "uid-backing"
			backing.CreationTimestamp = metav1.NewTime(t0().Add(-tt.age))
			if _, err := f.Client.CoreV1().PersistentVolumeClaims(testBackingNS).Update(context.Background(), backing, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := f.BackingClaims.Add(backing); err != nil {
				t.Fatal(err)
			}
			if err := f.pools.Sync(context.Background(), types.UID(backing.Annotations[wellknown.BackingForUID])); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			_, err := f.Client.CoreV1().PersistentVolumeClaims(testBackingNS).Get(context.Background(), backing.Name, metav1.GetOptions{})
			if given := apierrors.IsNotFound(err); given != tt.given {
				t.Fatalf("backing claim deleted %v (%v), want %v", given, err, tt.given)
			}
			if tt.given {
				_ = f.BackingClaims.Delete(backing)
				if n := f.aheadInFlight("pool"); n != 0 {
					t.Errorf("AheadInFlight = %d, want the place given back", n)
				}
			}
			if events := f.Events(); tt.event != "" && !hasEvent(events, tt.event) {
				t.Errorf("events %q, want one starting %q", events, tt.event)
			}
		})
	}
}
