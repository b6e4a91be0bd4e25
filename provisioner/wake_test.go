package provisioner

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// A claim waiting for a full pool is woken when a scrub returns a member:
// the member was Released, and so looked freed, all through its scrub, and
// its return (with a claimRef naming no claim, which the PV controller
// binds to nobody) is the change that frees it.
func TestScrubbedMemberWakesTheClaimsWaiting(t *testing.T) {
	claim := claimFor("ns", "c", "1Gi")
	scrubbing := volume("a", "1Gi", returned("ns/job", t0()), released("lifecycle", wellknown.ScrubClaim("a"), "scrub-uid", t0()), func(pv *corev1.PersistentVolume) {
		pv.Annotations[wellknown.Scrub] = wellknown.ScrubDone
	})
	f := newFixture(t, []*corev1.PersistentVolume{scrubbing}, claim)
	class := f.directoryClass(map[string]string{"maxVolumes": "1"})
	if _, _, err := f.provision(class, claim); err == nil || !strings.Contains(err.Error(), "pool exhausted") {
		t.Fatalf("Provision while the only member is scrubbed = %v, want the pool exhausted", err)
	}
	f.requeued = nil
	done := scrubbing.DeepCopy()
	delete(done.Annotations, wellknown.Scrub)
	delete(done.Annotations, wellknown.LastClaim)
	done.Spec.ClaimRef = pools.AheadClaimRef("a")
	f.p.onVolume(scrubbing, done)
	if len(f.requeued) != 1 || f.requeued[0] != "c" {
		t.Errorf("requeued = %v once the member was emptied, want [c]", f.requeued)
	}
}
