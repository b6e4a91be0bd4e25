package provisioner

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/reclaimable/reclaimable/internal/keys"
)

func heldFor(ns string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ns, Name: "old"}
		pv.Annotations[keys.HeldForNamespace] = ns
		pv.Status.Phase = corev1.VolumeAvailable
	}
}

// A volume that cannot be handed to the scrub for a claim is not hidden
// behind "the pool is exhausted": a refusal of the API server is a Warning
// on the claim, and the claim is tried again with back-off; a volume that
// changed since the cache showed it is looked at again, without a Warning.
func TestExhaustedPoolSaysWhyItCannotScrubForTheClaim(t *testing.T) {
	for _, tt := range []struct {
		name    string
		err     error
		warning string
	}{
		{"refused", apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumes"}, "a", errors.New("no")),
			`Warning ProvisioningFailed failed to provision volume with StorageClass "pool": handing volume a, held for another namespace, to the scrub for this claim (scrubAcrossNamespaces):`},
		{"changed meanwhile", apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumes"}, "a", errors.New("changed")), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			claim := claimFor("tenant-b", "job", "1Gi")
			f := newFixture(t, []*corev1.PersistentVolume{volume("a", "1Gi", heldFor("tenant-a"))}, claim)
			f.client.PrependReactor("update", "persistentvolumes", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tt.err
			})
			_, _, err := f.provision(f.directoryClass(map[string]string{"maxVolumes": "1", keys.ScrubAcrossNamespaces: "true"}), claim)
			if err == nil || errors.Is(err, errExhausted) {
				t.Fatalf("Provision: %v, want an error that the library retries, not a wait for a freed volume", err)
			}
			var warnings []string
			for _, e := range f.events() {
				if strings.HasPrefix(e, "Warning ") {
					warnings = append(warnings, e)
				}
			}
			switch {
			case tt.warning == "" && len(warnings) > 0:
				t.Errorf("warnings %q, want none", warnings)
			case tt.warning != "" && (len(warnings) != 1 || !strings.HasPrefix(warnings[0], tt.warning)):
				t.Errorf("warnings %q, want one starting %q", warnings, tt.warning)
			}
			if hasEvent(f.events(), "Normal ScrubbingToShare") {
				t.Error("ScrubbingToShare said, though nothing is being emptied")
			}
		})
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
