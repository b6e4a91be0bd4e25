package podwatcher

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func TestDecideClaim(t *testing.T) {
	gone := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const grace = 30 * time.Second
	claim := func(mods ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		c := managedClaim("c", kindPod, "p", "uid-p")
		for _, m := range mods {
			m(c)
		}
		return c
	}
	orphan := func(c *corev1.PersistentVolumeClaim) { c.OwnerReferences = nil }
	for _, tt := range []struct {
		name      string
		claim     *corev1.PersistentVolumeClaim
		ownerGone bool
		now       time.Time
		want      claimVerdict
	}{
		{"owner exists", claim(), false, gone.Add(time.Hour), claimVerdict{action: leaveClaim}},
		{"owner exists, no reference", claim(orphan), false, gone, claimVerdict{action: leaveClaim}},
		{"another controller ID's", claim(func(c *corev1.PersistentVolumeClaim) { c.Labels[wellknown.ClaimManagedBy] = "other" }), true, gone.Add(time.Hour), claimVerdict{action: leaveClaim}},
		{"already being deleted", claim(func(c *corev1.PersistentVolumeClaim) { c.DeletionTimestamp = &metav1.Time{Time: gone} }), true, gone.Add(time.Hour), claimVerdict{action: leaveClaim}},
		{"gone, referenced, just found", claim(), true, gone, claimVerdict{action: waitForCollector, wait: grace}},
		{"gone, referenced, within the grace", claim(), true, gone.Add(10 * time.Second), claimVerdict{action: waitForCollector, wait: 20 * time.Second}},
		{"gone, referenced, at the end of the grace", claim(), true, gone.Add(grace), claimVerdict{action: deleteClaim}},
		{"gone, referenced, past the grace", claim(), true, gone.Add(time.Hour), claimVerdict{action: deleteClaim}},
		{"gone, no reference: orphaned", claim(orphan), true, gone, claimVerdict{action: deleteClaim}},
		{"gone, reference to another UID", claim(func(c *corev1.PersistentVolumeClaim) { c.OwnerReferences[0].UID = "uid-other" }), true, gone, claimVerdict{action: deleteClaim}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := decideClaim(tt.claim, testID, tt.ownerGone, gone, tt.now, grace); got != tt.want {
				t.Errorf("decideClaim = %+v, want %+v", got, tt.want)
			}
		})
	}
}
