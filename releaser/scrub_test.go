package releaser

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func TestScrubOnRelease(t *testing.T) {
	for _, tt := range []struct {
		onRelease, outcome string
		want               bool
	}{
		{wellknown.OnReleaseKeep, "", false},
		{wellknown.OnReleaseKeep, wellknown.OutcomeFailed, false},
		{wellknown.OnReleaseScrub, "", true},
		{wellknown.OnReleaseScrub, wellknown.OutcomeSucceeded, true},
		{wellknown.OnReleaseScrubUnlessSucceeded, wellknown.OutcomeSucceeded, false},
		{wellknown.OnReleaseScrubUnlessSucceeded, wellknown.OutcomeFailed, true},
		// Deleted while it ran, a claim the podwatcher did not make, an
		// outcome nobody saw.
		{wellknown.OnReleaseScrubUnlessSucceeded, "", true},
		{wellknown.OnReleaseScrubUnlessSucceeded, "Maybe", true},
	} {
		got, why := scrubOnRelease(tt.onRelease, tt.outcome)
		if got != tt.want || got == (why == "") {
			t.Errorf("scrubOnRelease(%q, %q) = %v, %q; want %v with a reason exactly when scrubbed", tt.onRelease, tt.outcome, got, why, tt.want)
		}
	}
}

// A volume of a pool that scrubs is handed to the scrub, or returned to
// the pool, by how its claim's consumer ended, as the claim said it on
// the managed-claims watch before or as it went.
func TestSyncHandsToTheScrubByTheConsumersOutcome(t *testing.T) {
	ended := func(outcome string) *corev1.PersistentVolumeClaim {
		c := claim("claim-uid", testID)
		if outcome != "" {
			c.Annotations = map[string]string{wellknown.ConsumerOutcome: outcome}
		}
		now := metav1.Now()
		c.DeletionTimestamp = &now
		return c
	}
	scrubbing := func(onRelease string) *storagev1.StorageClass {
		c := class(testID)
		c.Provisioner = testProvisioner
		c.Parameters = map[string]string{wellknown.OnRelease: onRelease}
		return c
	}
	for _, tt := range []struct {
		name  string
		class *storagev1.StorageClass
		// seen is the claim's last version on the watch: updated
		// before it was deleted, or deleted.
		seen      *corev1.PersistentVolumeClaim
		updated   bool
		wantScrub string // the event's reason, "" for a release
	}{
		{"Scrub: whatever the outcome", scrubbing(wellknown.OnReleaseScrub), ended(wellknown.OutcomeSucceeded), false, "the class's pool has onRelease Scrub"},
		{"unless succeeded: succeeded", scrubbing(wellknown.OnReleaseScrubUnlessSucceeded), ended(wellknown.OutcomeSucceeded), false, ""},
		{"unless succeeded: succeeded, seen before the delete event", scrubbing(wellknown.OnReleaseScrubUnlessSucceeded), ended(wellknown.OutcomeSucceeded), true, ""},
		{"unless succeeded: failed", scrubbing(wellknown.OnReleaseScrubUnlessSucceeded), ended(wellknown.OutcomeFailed), false, "its consumer failed"},
		{"unless succeeded: no outcome", scrubbing(wellknown.OnReleaseScrubUnlessSucceeded), ended(""), false, "its consumer is not known to have succeeded"},
		{"unless succeeded: claim never seen", scrubbing(wellknown.OnReleaseScrubUnlessSucceeded), nil, false, "its consumer is not known to have succeeded"},
		{"invalid value: scrubbed", scrubbing("Sometimes"), ended(wellknown.OutcomeSucceeded), false, "the class's pool has onRelease Scrub"},
		{"Keep", scrubbing(wellknown.OnReleaseKeep), ended(wellknown.OutcomeFailed), false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pv := volume(corev1.VolumeReleased, labelled(testID), provisionedBy(testProvisioner))
			f := newFixture(t, testPolicy, []runtime.Object{pv, tt.class}...)
			switch {
			case tt.seen != nil && tt.updated:
				f.claimEvent(controller.Updated, tt.seen)
			case tt.seen != nil:
				f.claimEvent(controller.Deleted, tt.seen)
			}
			if err := f.sync(pv.Name); err != nil {
				t.Fatalf("sync: %v", err)
			}
			got := f.stored(pv.Name)
			if tt.wantScrub == "" {
				// Reserved for the claim's name, by the class's default.
				if ref := got.Spec.ClaimRef; ref == nil || ref.UID != "" || got.Annotations[wellknown.Scrub] != "" {
					t.Errorf("claimRef %+v, scrub %q: want released (reserved), not scrubbed", ref, got.Annotations[wellknown.Scrub])
				}
				wantEvents(t, f.events(), "Normal Reserved Returned to the pool with its data")
				return
			}
			if got.Spec.ClaimRef == nil || got.Annotations[wellknown.Scrub] != wellknown.ScrubRequested {
				t.Errorf("claimRef %+v, scrub %q: want the claimRef kept and the scrub requested", got.Spec.ClaimRef, got.Annotations[wellknown.Scrub])
			}
			wantEvents(t, f.events(), "Normal HandedToScrub Claim ns/data (UID claim-uid) no longer exists; "+tt.wantScrub)
		})
	}
}
