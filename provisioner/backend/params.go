package backend

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Names of the StorageClass parameters every backend shares; a backend
// names its own. The growth limits (MaxVolumes, MaxVolumesPerNode,
// MaxCapacity) are read here for the backends that list them.
const (
	ParamBackend      = "backend"
	ParamSelectorKeys = "selectorKeys"
)

// Params is a validated StorageClass configuration: the parameters every
// backend shares, and the backend's view of the class.
type Params struct {
	Backend string // the backend's name
	// Pool is the backend's view of the class.
	Pool Class
	// SelectorKeys are the label keys a claim's selector may use.
	SelectorKeys sets.Set[string]

	// ReserveFor keeps a released volume for its last claim's namespace and
	// name this long (the releaser does); 0: not at all. Default:
	// pools.DefaultReserveFor.
	ReserveFor time.Duration
	// Namespaced (reuseScope namespace, the default) issues a volume again
	// only to claims of the namespace it was last bound in.
	Namespaced bool
	// Scrub (onRelease Scrub or ScrubUnlessSucceeded) may empty a
	// released volume before any claim may have it: the releaser decides,
	// and the provisioner takes no Released volume itself.
	Scrub bool
	// ScrubAcross lets a claim that finds no free member have a volume
	// held for another namespace once it is emptied.
	ScrubAcross bool
	// KeyLabel names the label, or else annotation, whose value is a
	// claim's cache key (the claim's, else its owning Pod's); "": claims
	// have no key.
	KeyLabel string
	// KeyRequired (keyPolicy Require) gives a claim no member last used
	// under another key.
	KeyRequired bool
	// EvictForClaims, a VolumePool's setting (no class parameter), has a
	// claim at maxVolumes evict the least recently used member.
	EvictForClaims bool

	// MaxVolumesPerNamespace bounds the members one namespace has, bound
	// or held for it (reuseScope namespace only); 0: no limit.
	MaxVolumesPerNamespace int

	// Growth limits, for a backend that lists them among its parameters.
	MaxVolumes int // 0: no limit
	// MaxVolumesPerNode bounds the volumes on one node (wellknown.Node), for a
	// backend whose volumes are each on one node's disk; 0: no limit.
	MaxVolumesPerNode int
	MaxCapacity       *resource.Quantity // nil: no limit beyond what a volume can hold
}

// CommonParams may be set on a class of any backend.
var CommonParams = []string{ParamBackend, ParamSelectorKeys, wellknown.ReserveFor, wellknown.ReuseScope, wellknown.OnRelease, wellknown.ScrubAcrossNamespaces, wellknown.KeyLabel, wellknown.KeyPolicy, wellknown.MaxVolumesPerNamespace}

// ParseParameters validates the parameters of class for one of backends. All
// problems are reported at once, so that an administrator fixes a class in
// one go.
func ParseParameters(class *storagev1.StorageClass, backends map[string]Backend) (*Params, error) {
	in := class.Parameters
	p := &Params{Backend: in[ParamBackend], SelectorKeys: sets.New[string]()}
	b, ok := backends[p.Backend]
	if !ok {
		return nil, fmt.Errorf("parameter %q must be %s, not %q", ParamBackend, Names(backends), p.Backend)
	}
	allowed := append(slices.Clone(CommonParams), b.Parameters()...)

	var errs []error
	for _, name := range sortedKeys(in) {
		if !slices.Contains(allowed, name) {
			errs = append(errs, fmt.Errorf("unknown parameter %q for backend %q (known: %s)", name, p.Backend, strings.Join(allowed, ", ")))
		}
	}
	if s, ok := in[ParamSelectorKeys]; ok {
		for _, key := range strings.Split(s, ",") {
			key = strings.TrimSpace(key)
			if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("%s: %q is not a label key: %s", ParamSelectorKeys, key, strings.Join(msgs, "; ")))
				continue
			}
			p.SelectorKeys.Insert(key)
		}
	}
	if class.ReclaimPolicy != nil && *class.ReclaimPolicy == corev1.PersistentVolumeReclaimRecycle {
		errs = append(errs, errors.New("reclaimPolicy Recycle is not supported; use Retain to keep volumes in the pool or Delete to remove them"))
	}
	p.ReserveFor = pools.DefaultReserveFor
	if s, ok := in[wellknown.ReserveFor]; ok {
		d, err := pools.ParseReserveFor(s)
		if err != nil {
			errs = append(errs, err)
		}
		p.ReserveFor = d
	}
	namespaced, err := pools.ParseReuseScope(in[wellknown.ReuseScope])
	if err != nil {
		errs = append(errs, err)
	}
	p.Namespaced = namespaced
	onRelease, err := pools.ParseOnRelease(in[wellknown.OnRelease])
	if err != nil {
		errs = append(errs, err)
	}
	p.Scrub = onRelease != wellknown.OnReleaseKeep
	if v, ok := in[wellknown.ScrubAcrossNamespaces]; ok {
		if p.ScrubAcross, err = strconv.ParseBool(v); err != nil {
			errs = append(errs, fmt.Errorf("parameter %q must be true or false, not %q", wellknown.ScrubAcrossNamespaces, v))
		}
	}
	if p.KeyLabel = in[wellknown.KeyLabel]; p.KeyLabel != "" {
		if msgs := validation.IsQualifiedName(p.KeyLabel); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a label key: %s", wellknown.KeyLabel, p.KeyLabel, strings.Join(msgs, "; ")))
		}
	}
	if p.KeyRequired, err = pools.ParseKeyPolicy(in[wellknown.KeyPolicy], p.KeyLabel, p.Namespaced); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, p.parseGrowthLimits(in, allowed)...)
	if p.MaxVolumesPerNamespace > 0 && !p.Namespaced {
		// A free member of a cluster-scoped class has no claimRef: the PV
		// controller binds it to a claim of any namespace, and the
		// provisioner could count nothing.
		errs = append(errs, fmt.Errorf("parameter %q needs %s %q: under %q the PV controller gives free volumes to claims of any namespace without asking the provisioner", wellknown.MaxVolumesPerNamespace, wellknown.ReuseScope, wellknown.ReuseScopeNamespace, wellknown.ReuseScopeCluster))
	}
	pool, poolErrs := b.ForClass(class)
	errs = append(errs, poolErrs...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	p.Pool = pool
	return p, nil
}

// parseGrowthLimits reads the limits on new volumes that the flow enforces
// for any backend that grows, if the backend allows them, and the share of
// one namespace (any backend).
func (p *Params) parseGrowthLimits(in map[string]string, allowed []string) []error {
	var errs []error
	for _, limit := range []struct {
		name string
		into *int
	}{{MaxVolumes, &p.MaxVolumes}, {MaxVolumesPerNode, &p.MaxVolumesPerNode}, {wellknown.MaxVolumesPerNamespace, &p.MaxVolumesPerNamespace}} {
		if s, ok := in[limit.name]; ok && slices.Contains(allowed, limit.name) {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				errs = append(errs, fmt.Errorf("parameter %q must be a positive integer, not %q", limit.name, s))
			}
			*limit.into = n
		}
	}
	if s, ok := in[MaxCapacity]; ok && slices.Contains(allowed, MaxCapacity) {
		q, err := resource.ParseQuantity(s)
		if err != nil || q.Sign() <= 0 || q.CmpInt64(math.MaxInt64) >= 0 {
			errs = append(errs, fmt.Errorf("parameter %q must be a positive size such as 100Gi, not %q", MaxCapacity, s))
		} else {
			p.MaxCapacity = &q
		}
	}
	return errs
}

// NodeAffinity turns the class's allowedTopologies into the node affinity of
// a new volume: the nodes where the volume's path leads to the directory the
// provisioner made. The scheduler only picks such nodes for a claim that
// waits for its first consumer, so the volume fits the selected node.
func NodeAffinity(class *storagev1.StorageClass) *corev1.VolumeNodeAffinity {
	if len(class.AllowedTopologies) == 0 {
		return nil
	}
	terms := make([]corev1.NodeSelectorTerm, 0, len(class.AllowedTopologies))
	for _, t := range class.AllowedTopologies {
		var term corev1.NodeSelectorTerm
		for _, e := range t.MatchLabelExpressions {
			term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{
				Key: e.Key, Operator: corev1.NodeSelectorOpIn, Values: slices.Clone(e.Values),
			})
		}
		terms = append(terms, term)
	}
	return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: terms}}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
