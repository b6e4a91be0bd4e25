package releaser

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/keys"
)

func TestScrubOnRelease(t *testing.T) {
	for _, tt := range []struct {
		onRelease, outcome string
		want               bool
	}{
		{keys.OnReleaseKeep, "", false},
		{keys.OnReleaseKeep, keys.OutcomeFailed, false},
		{keys.OnReleaseScrub, "", true},
		{keys.OnReleaseScrub, keys.OutcomeSucceeded, true},
		{keys.OnReleaseScrubUnlessSucceeded, keys.OutcomeSucceeded, false},
		{keys.OnReleaseScrubUnlessSucceeded, keys.OutcomeFailed, true},
		// Deleted while it ran, a claim the podwatcher did not make, an
		// outcome nobody saw.
		{keys.OnReleaseScrubUnlessSucceeded, "", true},
		{keys.OnReleaseScrubUnlessSucceeded, "Maybe", true},
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
			c.Annotations = map[string]string{keys.ConsumerOutcome: outcome}
		}
		now := metav1.Now()
		c.DeletionTimestamp = &now
		return c
	}
	scrubbing := func(onRelease string) *storagev1.StorageClass {
		c := class(testID)
		c.Provisioner = testProvisioner
		c.Parameters = map[string]string{keys.OnRelease: onRelease}
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
		{"Scrub: whatever the outcome", scrubbing(keys.OnReleaseScrub), ended(keys.OutcomeSucceeded), false, "the class's pool has onRelease Scrub"},
		{"unless succeeded: succeeded", scrubbing(keys.OnReleaseScrubUnlessSucceeded), ended(keys.OutcomeSucceeded), false, ""},
		{"unless succeeded: succeeded, seen before the delete event", scrubbing(keys.OnReleaseScrubUnlessSucceeded), ended(keys.OutcomeSucceeded), true, ""},
		{"unless succeeded: failed", scrubbing(keys.OnReleaseScrubUnlessSucceeded), ended(keys.OutcomeFailed), false, "its consumer failed"},
		{"unless succeeded: no outcome", scrubbing(keys.OnReleaseScrubUnlessSucceeded), ended(""), false, "its consumer is not known to have succeeded"},
		{"unless succeeded: claim never seen", scrubbing(keys.OnReleaseScrubUnlessSucceeded), nil, false, "its consumer is not known to have succeeded"},
		{"invalid value: scrubbed", scrubbing("Sometimes"), ended(keys.OutcomeSucceeded), false, "the class's pool has onRelease Scrub"},
		{"Keep", scrubbing(keys.OnReleaseKeep), ended(keys.OutcomeFailed), false, ""},
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
				if ref := got.Spec.ClaimRef; ref == nil || ref.UID != "" || got.Annotations[keys.Scrub] != "" {
					t.Errorf("claimRef %+v, scrub %q: want released (reserved), not scrubbed", ref, got.Annotations[keys.Scrub])
				}
				wantEvents(t, f.events(), "Normal Reserved Returned to the pool with its data")
				return
			}
			if got.Spec.ClaimRef == nil || got.Annotations[keys.Scrub] != keys.ScrubRequested {
				t.Errorf("claimRef %+v, scrub %q: want the claimRef kept and the scrub requested", got.Spec.ClaimRef, got.Annotations[keys.Scrub])
			}
			wantEvents(t, f.events(), "Normal HandedToScrub Claim ns/data (UID claim-uid) no longer exists; "+tt.wantScrub)
		})
	}
}
