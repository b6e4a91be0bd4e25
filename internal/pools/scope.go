package pools

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// ParseReuseScope reads the reuseScope parameter of a StorageClass: ""
// (absent) is namespace. It reports whether the class's volumes are issued
// only within the namespace they were last bound in.
func ParseReuseScope(s string) (namespaced bool, err error) {
	switch s {
	case "", wellknown.ReuseScopeNamespace:
		return true, nil
	case wellknown.ReuseScopeCluster:
		return false, nil
	}
	return false, fmt.Errorf("parameter %q must be %q (a volume goes only to claims of the namespace it was last bound in) or %q (to any claim, with its data), not %q",
		wellknown.ReuseScope, wellknown.ReuseScopeNamespace, wellknown.ReuseScopeCluster, s)
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
	namespaced, err := ParseReuseScope(class.Parameters[wellknown.ReuseScope])
	return namespaced || err != nil
}

// HeldFor reports the namespace pv is held for (wellknown.HeldForNamespace): a
// claimRef without UID and the annotation. A volume bound since keeps the
// annotation but is no longer held.
func HeldFor(pv *corev1.PersistentVolume) (string, bool) {
	ref := pv.Spec.ClaimRef
	ns, annotated := pv.Annotations[wellknown.HeldForNamespace]
	if ref == nil || ref.UID != "" || !annotated {
		return "", false
	}
	return ns, true
}

// ParseKeyPolicy reads the keyPolicy parameter of a class whose keyLabel
// is label ("" absent): "" is Prefer. It reports whether a claim may have
// only a member last used under its own key (or never used). Require
// needs a key to require, and reuseScope namespace (namespaced), under
// which every member used before is held: under cluster scope the PV
// controller binds a free member to any claim.
func ParseKeyPolicy(s, label string, namespaced bool) (required bool, err error) {
	switch s {
	case "", wellknown.KeyPolicyPrefer:
		return false, nil
	case wellknown.KeyPolicyRequire:
		switch {
		case label == "":
			return true, fmt.Errorf("parameter %q %s needs parameter %q: the label whose value is a claim's key", wellknown.KeyPolicy, s, wellknown.KeyLabel)
		case !namespaced:
			return true, fmt.Errorf("parameter %q %s needs %q %s: under %s the PV controller may bind a free volume to a claim of any key",
				wellknown.KeyPolicy, s, wellknown.ReuseScope, wellknown.ReuseScopeNamespace, wellknown.ReuseScopeCluster)
		}
		return true, nil
	}
	return false, fmt.Errorf("parameter %q must be %q (a claim prefers a volume last used under its key) or %q (it never gets one last used under another key), not %q",
		wellknown.KeyPolicy, wellknown.KeyPolicyPrefer, wellknown.KeyPolicyRequire, s)
}

// KeyRequired reports whether class, a class of the provisioner named
// provisioner, says keyPolicy Require and can hold it. An invalid setting
// is not required: the provisioner refuses the class's claims and says
// why, so no member is issued by key at all.
func KeyRequired(class *storagev1.StorageClass, provisioner string) bool {
	if class == nil || class.Provisioner != provisioner {
		return false
	}
	required, err := ParseKeyPolicy(class.Parameters[wellknown.KeyPolicy], class.Parameters[wellknown.KeyLabel], NamespaceScoped(class, provisioner))
	return required && err == nil
}
