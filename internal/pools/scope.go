package pools

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/reclaimable/reclaimable/internal/keys"
)

// ParseReuseScope reads the reuseScope parameter of a StorageClass: ""
// (absent) is namespace. It reports whether the class's volumes are issued
// only within the namespace they were last bound in.
func ParseReuseScope(s string) (namespaced bool, err error) {
	switch s {
	case "", keys.ReuseScopeNamespace:
		return true, nil
	case keys.ReuseScopeCluster:
		return false, nil
	}
	return false, fmt.Errorf("parameter %q must be %q (a volume goes only to claims of the namespace it was last bound in) or %q (to any claim, with its data), not %q",
		keys.ReuseScope, keys.ReuseScopeNamespace, keys.ReuseScopeCluster, s)
}

// NamespaceScoped reports whether the volumes of class, a class of the
// provisioner named provisioner, are issued again only within the
// namespace they were last bound in. Only that provisioner can scope an
// issue: on another provisioner's class the PV controller binds a free
// volume to any claim, so those classes are cluster-wide whatever they say.
// An invalid value scopes by namespace, the side that leaks nothing; the
// provisioner reports it on the class's claims.
func NamespaceScoped(class *storagev1.StorageClass, provisioner string) bool {
	if class == nil || class.Provisioner != provisioner {
		return false
	}
	namespaced, err := ParseReuseScope(class.Parameters[keys.ReuseScope])
	return namespaced || err != nil
}

// HeldFor reports the namespace pv is held for (keys.HeldForNamespace): a
// claimRef without UID and the annotation. A volume bound since keeps the
// annotation but is no longer held.
func HeldFor(pv *corev1.PersistentVolume) (string, bool) {
	ref := pv.Spec.ClaimRef
	ns, annotated := pv.Annotations[keys.HeldForNamespace]
	if ref == nil || ref.UID != "" || !annotated {
		return "", false
	}
	return ns, true
}
