package provisioner

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/reclaimable/reclaimable/internal/keys"
)

func heldFor(ns string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ns, Name: "old"}
		pv.Annotations[keys.HeldForNamespace] = ns
		pv.Status.Phase = corev1.VolumeAvailable
	}
}

// At its maximum, a pool with scrubAcrossNamespaces hands the volume held
// for another namespace longest to the scrub for a claim that finds
// nothing, and the claim waits for it; without the setting it only waits.
// A volume being emptied already is waited for, not joined by another.
func TestExhaustedPoolScrubsAVolumeOfAnotherNamespaceForTheClaim(t *testing.T) {
	for _, tt := range []struct {
		name    string
		across  string
		members []*corev1.PersistentVolume
		marked  string
	}{
		{"scrubAcrossNamespaces", "true", []*corev1.PersistentVolume{volume("a", "1Gi", heldFor("tenant-a")), volume("c", "1Gi", heldFor("tenant-c"))}, "a"},
		{"without it", "false", []*corev1.PersistentVolume{volume("a", "1Gi", heldFor("tenant-a")), volume("c", "1Gi", heldFor("tenant-c"))}, ""},
		{"one being emptied already", "true", []*corev1.PersistentVolume{volume("a", "1Gi", heldFor("tenant-a"), func(pv *corev1.PersistentVolume) {
			pv.Annotations[keys.Scrub] = keys.ScrubRunning
		}), volume("c", "1Gi", heldFor("tenant-c"))}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			claim := claimFor("tenant-b", "job", "1Gi")
			f := newFixture(t, tt.members, claim)
			_, _, err := f.provision(f.directoryClass(map[string]string{"maxVolumes": "2", keys.ScrubAcrossNamespaces: tt.across}), claim)
			if !errors.Is(err, errExhausted) {
				t.Fatalf("Provision: %v, want the claim to wait", err)
			}
			for _, pv := range tt.members {
				want := pv.Annotations[keys.Scrub]
				if pv.Name == tt.marked {
					want = keys.ScrubRequested
				}
				if got := f.server(pv.Name).Annotations[keys.Scrub]; got != want {
					t.Errorf("volume %s: scrub %q, want %q", pv.Name, got, want)
				}
			}
			if got := hasEvent(f.events(), "Normal ScrubbingToShare"); got != (tt.marked != "") {
				t.Errorf("ScrubbingToShare event: %v, want %v", got, tt.marked != "")
			}
		})
	}
}
