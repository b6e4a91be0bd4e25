package pools

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// MaxReserveFor bounds a reservation: a volume is the pool's, and a week is
// longer than any schedule that comes back to its cache.
const MaxReserveFor = 7 * 24 * time.Hour

// ParseReserveFor reads the reserveFor parameter of a StorageClass: a
// duration from 0 (no reservation) to MaxReserveFor.
func ParseReserveFor(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > MaxReserveFor {
		return 0, fmt.Errorf("parameter %q must be a duration between 0 and %s such as 10m, not %q", wellknown.ReserveFor, MaxReserveFor, s)
	}
	return d, nil
}

// DefaultReserveFor is reserveFor on a class that does not set it. Measured
// with the bench: where claim names come back it gives a claim its own
// volume 100% of the time instead of 12%, and where they do not it costs a
// claim of a new name a few milliseconds at p50 (the provisioner issues it
// the oldest reservation instead of the PV controller binding a free volume
// itself). Ten minutes covers a CI pipeline's jobs coming back.
const DefaultReserveFor = 10 * time.Minute

// ReserveFor is how long class keeps a released volume for its last claim:
// DefaultReserveFor without the parameter. The provisioner reports an
// invalid value on the class's claims.
func ReserveFor(class *storagev1.StorageClass) (time.Duration, error) {
	if class == nil {
		return 0, nil
	}
	s, ok := class.Parameters[wellknown.ReserveFor]
	if !ok {
		return DefaultReserveFor, nil
	}
	return ParseReserveFor(s)
}

// Reserved reports whether pv is held by the releaser for its last claim's
// namespace and name: a claimRef without UID and the reserved-until
// annotation, whatever its value (the releaser ends a reservation whose time
// it cannot read at once). A claimRef without UID and without the
// annotation is an administrator's pre-binding, which only that claim may
// take.
func Reserved(pv *corev1.PersistentVolume) bool {
	ref := pv.Spec.ClaimRef
	_, annotated := pv.Annotations[wellknown.ReservedUntil]
	return ref != nil && ref.UID == "" && annotated
}

// PreBound reports whether an administrator pre-bound pv to a claim to
// come: a claimRef by name (no UID) that is none of this installation's
// own (a reservation, a hold, a member made ahead). Kubernetes never
// deletes such a volume; no eviction may either.
func PreBound(pv *corev1.PersistentVolume) bool {
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.UID != "" || Reserved(pv) || Unissued(pv) {
		return false
	}
	_, held := HeldFor(pv)
	return !held
}
