// Package ahead makes the members of a VolumePool's pool ahead of any
// claim (minAvailable) and completes those a stopped provisioner left
// half made. It keeps no state of its own: the provisioner builds it on its
// caches and memories as they are (New), and it asks the provisioner only
// to hold a place among a class's volumes (Config.Reserve).
package ahead

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/classpool"
	"github.com/reclaimable/reclaimable/provisioner/memory"
)

// A member made ahead of a class that grows through a maker is made in
// three steps, each safe to repeat: its volume object, whose claimRef
// names a claim that never exists (so the PV controller binds it to
// nobody) and which is marked storage-pending; then its storage, through
// the class's backend; then the mark goes. The object comes first so that
// a provisioner stopped at any point leaves something that lists what it
// started, and Finish completes it. A class pool asks its backing class
// instead (classpool.Pools.AskAhead), for a node of the least served of
// the pool's zones when it binds on first consumer (zones.go).

// Config is what members made ahead are made with: the provisioner's
// caches and memories as they are when New is called.
type Config struct {
	// Name is the provisioner's name, ControllerID its installation's.
	Name, ControllerID string
	Client             kubernetes.Interface
	// Volumes is the shared volume informer's cache; Nodes the nodes'.
	Volumes cache.Indexer
	Nodes   corelisters.NodeLister
	// Backends are the provisioner's, by name; Classes its class pools.
	Backends map[string]backend.Backend
	Classes  *classpool.Pools
	// Pending is the provisioner's record of the volumes on their way.
	Pending *memory.Pending
	// Reserve holds a place for the volume name of class on node ("" for
	// none), within max and maxPerNode (0: no limit), as the provisioner
	// counts the class's volumes; it returns the class's count besides it.
	Reserve func(class, name, node string, maxVolumes, maxPerNode int) (count, onNode int, ok bool)
	Clock   clock.PassiveClock
	// Made observes how long making a member took, by class.
	Made *prometheus.HistogramVec
}

// Members makes the members of pools ahead of claims.
type Members struct{ cfg Config }

// New returns the members made ahead of cfg.
func New(cfg Config) *Members { return &Members{cfg: cfg} }

// DefaultCapacity is the capacity of a member made ahead when the
// pool's template does not say.
var DefaultCapacity = resource.MustParse("1Gi")

// Check says why the pool of class (as pool makes it) cannot keep
// members made ahead, or nil when it can. It does no I/O.
func (m *Members) Check(class *storagev1.StorageClass, pool *v1alpha1.VolumePool) error {
	params, err := backend.ParseParameters(class, m.cfg.Backends)
	if err != nil {
		return err
	}
	maker, advice := params.Pool.Maker()
	placement := params.Pool.AheadPlacement()
	switch {
	case len(templateZones(pool)) > 0 && placement != backend.PlaceInZone:
		return fmt.Errorf("the template names zones, which only a class of the class backend that binds on first consumer makes members ahead in: this class's driver or backend chooses where each volume goes")
	case placement == backend.PlaceInZone && len(templateZones(pool)) == 0:
		return fmt.Errorf("the class's volumeBindingMode is %s: a member made ahead through its backing class is made for a node, and the template names no zones to make them in", backend.BindingMode(class))
	case placement == backend.PlaceInZone && len(m.zoneNodes(pool)) == 0:
		return fmt.Errorf("no Ready, schedulable node of the template's zones %v (label %s) matches its nodeSelector %v", templateZones(pool), corev1.LabelTopologyZone, templateNodes(pool))
	case params.Pool.BackingClass() != nil:
	case maker == nil:
		return fmt.Errorf("the %s backend makes no volumes (%s): it cannot keep members ready", params.Backend, advice)
	case placement == backend.PlaceOnNode && len(m.aheadNodes(class, pool)) == 0:
		return fmt.Errorf("no Ready, schedulable node matches the template's nodeSelector %v within the class's allowedTopologies: the %s backend makes each member on a node", templateNodes(pool), params.Backend)
	case class.ReclaimPolicy != nil && *class.ReclaimPolicy != corev1.PersistentVolumeReclaimRetain:
		return fmt.Errorf("the class's reclaimPolicy is %s: its volumes leave the pool when released, so members made ahead would be used once", *class.ReclaimPolicy)
	}
	claim := Claim(pool, "check")
	if maker != nil {
		if _, err := maker.Refuse(claim); err != nil {
			return fmt.Errorf("the template is refused: %w", err)
		}
	}
	if limit := params.MaxCapacity; limit != nil && claim.Spec.Resources.Requests.Storage().Cmp(*limit) > 0 {
		return fmt.Errorf("the template's capacity %s is above the class's %s %s", claim.Spec.Resources.Requests.Storage(), backend.MaxCapacity, limit)
	}
	return nil
}

// InFlight counts the members of class being made ahead that the
// cache does not show yet.
func (m *Members) InFlight(class string) int {
	n := 0
	for _, c := range m.aheadInFlight(class) {
		n += c
	}
	return n
}

func (m *Members) aheadInFlight(class string) map[string]int {
	out := m.cfg.Pending.AheadInFlight(class, func(name string) bool {
		_, exists, _ := m.cfg.Volumes.GetByKey(name)
		return exists || m.cfg.Classes.Cached(name)
	})
	if n := m.cfg.Classes.AheadInFlight(class); n > 0 {
		out[""] += n
	}
	return out
}

// Make makes up to n members of class's pool (class as pool makes it)
// ahead of claims, within its maxVolumes, and returns how many it made.
func (m *Members) Make(ctx context.Context, class *storagev1.StorageClass, pool *v1alpha1.VolumePool, n int) (int, error) {
	if err := m.Check(class, pool); err != nil {
		return 0, err
	}
	params, err := backend.ParseParameters(class, m.cfg.Backends)
	if err != nil {
		return 0, err
	}
	if backing := params.Pool.BackingClass(); backing != nil {
		return m.cfg.Classes.AskAhead(ctx, classpool.Ahead{Class: class.Name, Pool: pool.Name, Backing: backing,
			Shape: Claim(pool, "").Spec, MaxVolumes: params.MaxVolumes, Node: m.zonePlacer(class, pool)}, n)
	}
	maker, _ := params.Pool.Maker()
	for made := 0; made < n; made++ {
		name := "pvc-" + string(uuid.NewUUID())
		node, ok := m.placeAhead(class, pool, name, params)
		if !ok {
			return made, nil // the maximum is reached; claims may still free members
		}
		m.cfg.Pending.MarkAhead(name)
		start := m.cfg.Clock.Now()
		v := backend.NewVolume{Name: name, Claim: Claim(pool, name), Node: node}
		if err := m.makeAhead(ctx, class, params.Backend, maker, pool.Name, v); err != nil {
			return made, err
		}
		m.cfg.Made.WithLabelValues(class.Name).Observe(m.cfg.Clock.Since(start).Seconds())
	}
	return n, nil
}

func (m *Members) makeAhead(ctx context.Context, class *storagev1.StorageClass, backendName string, maker backend.Maker, pool string, v backend.NewVolume) error {
	plan, err := maker.Plan(v)
	if err != nil {
		m.cfg.Pending.Unreserve(v.Name)
		return err
	}
	pv := backend.VolumeObject(class, backendName, v, plan, backend.NodeAffinity(class), map[string]string{
		wellknown.ProvisionedBy:  m.cfg.Name,
		wellknown.MadeAhead:      pool,
		wellknown.StoragePending: "true",
	})
	pv.Spec.ClaimRef = pools.AheadClaimRef(v.Name)
	pv.Labels = pools.SetManagedBy(pv.Labels, m.cfg.ControllerID)
	created, err := m.cfg.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil {
		m.cfg.Pending.Unreserve(v.Name)
		return fmt.Errorf("creating volume %s ahead of claims: %w", v.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Making a member ahead of claims", "pv", v.Name, "pool", pool)
	return m.finishAhead(ctx, maker, created)
}

// finishAhead makes the storage of pv, a member made ahead whose storage is
// pending, and clears the mark: the member is free from then on.
func (m *Members) finishAhead(ctx context.Context, maker backend.Maker, pv *corev1.PersistentVolume) error {
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: wellknown.MadeAheadClaim(pv.Name)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: pv.Spec.AccessModes, VolumeMode: pv.Spec.VolumeMode,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: pv.Spec.Capacity[corev1.ResourceStorage]}},
		},
	}
	var node *corev1.Node
	if name := pv.Annotations[wellknown.Node]; name != "" {
		n, err := m.nodeNamed(name)
		if err != nil {
			return fmt.Errorf("making the storage of volume %s ahead of claims on node %s: %w", pv.Name, name, err)
		}
		node = n
	}
	if _, err := maker.Create(ctx, backend.NewVolume{Name: pv.Name, Claim: claim, Node: node}); err != nil {
		return fmt.Errorf("making the storage of volume %s ahead of claims: %w", pv.Name, err)
	}
	updated := pv.DeepCopy()
	delete(updated.Annotations, wellknown.StoragePending)
	// Guarded by the resourceVersion: a volume changed meanwhile is looked
	// at again from the cache, and its storage is made again, which reuses
	// what this call made.
	if _, err := m.cfg.Client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("marking volume %s ready: %w", pv.Name, err)
	}
	return nil
}

// Finish completes the members of class made ahead whose storage is
// still pending: a provisioner stopped between the steps left them, or
// making the storage failed. One that waits too long is the evictor's to
// remove (provisioner/evict).
func (m *Members) Finish(ctx context.Context, class *storagev1.StorageClass) error {
	params, err := backend.ParseParameters(class, m.cfg.Backends)
	if err != nil {
		return err
	}
	maker, _ := params.Pool.Maker()
	objs, _ := m.cfg.Volumes.ByIndex(pools.VolumesByClass, class.Name)
	var errs []error
	for _, o := range objs {
		pv, ok := o.(*corev1.PersistentVolume)
		if !ok || pv.Annotations[wellknown.ProvisionedBy] != m.cfg.Name || !pools.StoragePending(pv) || pv.DeletionTimestamp != nil || pools.Evicting(pv) {
			continue
		}
		if maker == nil {
			errs = append(errs, fmt.Errorf("volume %s waits for its storage, and the %s backend makes none", pv.Name, params.Backend))
			continue
		}
		klog.FromContext(ctx).Info("Finishing a member made ahead", "pv", pv.Name)
		errs = append(errs, m.finishAhead(ctx, maker, pv))
	}
	return errors.Join(errs...)
}

// Claim is the claim a member made ahead for pool is shaped after: the
// pool's template, with the name the member's claimRef gives, in no
// namespace any claim could be made in under that name by chance.
func Claim(pool *v1alpha1.VolumePool, pv string) *corev1.PersistentVolumeClaim {
	capacity := DefaultCapacity
	modes := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	if t := pool.Spec.Template; t != nil {
		if t.Capacity != nil {
			capacity = *t.Capacity
		}
		if len(t.AccessModes) > 0 {
			modes = t.AccessModes
		}
	}
	fs := corev1.PersistentVolumeFilesystem
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: pools.AheadNamespace, Name: wellknown.MadeAheadClaim(pv)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: modes, VolumeMode: &fs,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: capacity}},
		},
	}
}

// placeAhead holds a place within the class's maximum for a member made
// ahead, named name: for a node-local class, on the node of aheadNodes with
// the fewest free members of the class that has room (maxVolumesPerNode),
// which it returns. It reports false when there is no room.
func (m *Members) placeAhead(class *storagev1.StorageClass, pool *v1alpha1.VolumePool, name string, params *backend.Params) (*corev1.Node, bool) {
	if params.Pool.AheadPlacement() != backend.PlaceOnNode {
		_, _, ok := m.cfg.Reserve(class.Name, name, "", params.MaxVolumes, params.MaxVolumesPerNode)
		return nil, ok
	}
	nodes := m.aheadNodes(class, pool)
	free := m.aheadInFlight(class.Name)
	objs, _ := m.cfg.Volumes.ByIndex(pools.VolumesByClass, class.Name)
	for _, o := range objs {
		if pv, ok := o.(*corev1.PersistentVolume); ok && (pools.StateOf(pv) == pools.StateFree || pools.StoragePending(pv)) {
			free[pv.Annotations[wellknown.Node]]++
		}
	}
	slices.SortStableFunc(nodes, func(a, b *corev1.Node) int { return cmp.Compare(free[a.Name], free[b.Name]) })
	for _, node := range nodes {
		count, _, ok := m.cfg.Reserve(class.Name, name, node.Name, params.MaxVolumes, params.MaxVolumesPerNode)
		if ok {
			return node, true
		}
		if params.MaxVolumes > 0 && count >= params.MaxVolumes {
			return nil, false
		}
	}
	return nil, false
}

// aheadNodes lists, by name, the nodes members of class (a local class)
// are made ahead on: Ready, schedulable, within the class's
// allowedTopologies and the pool's template nodeSelector.
func (m *Members) aheadNodes(class *storagev1.StorageClass, pool *v1alpha1.VolumePool) []*corev1.Node {
	if m.cfg.Nodes == nil {
		return nil
	}
	all, err := m.cfg.Nodes.List(labels.SelectorFromSet(templateNodes(pool)))
	if err != nil {
		return nil
	}
	affinity := backend.NodeAffinity(class)
	var out []*corev1.Node
	for _, n := range all {
		if n.Spec.Unschedulable || !nodeReady(n) {
			continue
		}
		if affinity != nil {
			if ok, err := corev1helpers.MatchNodeSelectorTerms(n, affinity.Required); err != nil || !ok {
				continue
			}
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// templateNodes is the pool's template nodeSelector, nil for every node.
func templateNodes(pool *v1alpha1.VolumePool) map[string]string {
	if t := pool.Spec.Template; t != nil {
		return t.NodeSelector
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodeNamed is the node called name, from the cache.
func (m *Members) nodeNamed(name string) (*corev1.Node, error) {
	if m.cfg.Nodes == nil {
		return nil, errors.New("no node cache")
	}
	return m.cfg.Nodes.Get(name)
}
