package match

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
)

// This file holds which selectors the provisioner understands: those it
// can honour with a member, or with the labels of a new volume.

// ClaimSelector parses claim's selector and refuses keys outside allowed:
// the provisioner must be able to give a claim a volume whose labels match,
// which it can only promise for labels it knows the meaning of.
func ClaimSelector(claim *corev1.PersistentVolumeClaim, allowed sets.Set[string]) (labels.Selector, error) {
	if claim.Spec.Selector == nil {
		return nil, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(claim.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("invalid selector: %w", err)
	}
	reqs, _ := sel.Requirements()
	var unknown []string
	for _, r := range reqs {
		if !allowed.Has(r.Key()) {
			unknown = append(unknown, r.Key())
		}
	}
	if len(unknown) > 0 {
		known := "none"
		if allowed.Len() > 0 {
			known = strings.Join(sets.List(allowed), ", ")
		}
		return nil, fmt.Errorf("the selector uses label keys this class does not know: %s (known: %s)", strings.Join(unknown, ", "), known)
	}
	return sel, nil
}

// LabelsFor returns labels a new volume must carry to match selector. A
// requirement that names one value sets that value; one that excludes values
// or the key is met by leaving the label out. A requirement that leaves the
// value open ("key exists", "key in (a, b)") cannot be met by choice.
func LabelsFor(selector labels.Selector) (map[string]string, error) {
	if selector == nil {
		return nil, nil
	}
	reqs, _ := selector.Requirements()
	out := map[string]string{}
	for _, r := range reqs {
		values := r.ValuesUnsorted()
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			if len(values) != 1 {
				return nil, fmt.Errorf("a new volume cannot be labelled to match %q: name exactly one value", r.String())
			}
			if v, ok := out[r.Key()]; ok && v != values[0] {
				return nil, fmt.Errorf("the selector asks for two values of %q", r.Key())
			}
			out[r.Key()] = values[0]
		case selection.NotEquals, selection.NotIn, selection.DoesNotExist:
		default:
			return nil, fmt.Errorf("a new volume cannot be labelled to match %q: name exactly one value", r.String())
		}
	}
	if !selector.Matches(labels.Set(out)) {
		return nil, fmt.Errorf("no set of labels matches the selector %q", selector.String())
	}
	return out, nil
}
