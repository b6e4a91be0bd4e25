// Package classpool carries out the growth of the class backend's pools
// (provisioner/backend, class.go), pools in front of another StorageClass:
// a new volume is asked of the backing class through a claim of the
// provisioner's own, kept, and handed over to the user's claim (grow.go)
// or made a free member ahead of claims (ahead.go, which provisioner/ahead
// calls); a member is evicted by handing it back to the provisioner of its
// storage (handback.go). The
// claims it makes and the volumes it keeps are looked at by a loop of its
// own, which runs while the provisioner leads.
package classpool

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/clock"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/memory"
)

// Provisioner is what the class pools ask of the provisioner they grow for.
type Provisioner interface {
	// Reserve holds a place among the volumes of class for the volume
	// named name, within maxVolumes (0: no limit), as the provisioner
	// counts them; false when the class has no room.
	Reserve(class, name string, maxVolumes int) bool
	// Requeue hands claim back to the library's work queue.
	Requeue(claim *corev1.PersistentVolumeClaim)
	// Issued records that pv, a new member of the pool of class, was issued
	// to claim: the cache does not show it yet.
	Issued(claim *corev1.PersistentVolumeClaim, class, pv string)
}

// Config is what the class pools work with.
type Config struct {
	// Name is the provisioner's name: the volumes it keeps say so
	// (wellknown.KeptBy), and it hands them over as its own.
	Name string
	// ControllerID labels the backing claims (wellknown.BackingClaimOf) and the
	// members (wellknown.VolumeManagedBy).
	ControllerID string
	// Namespace holds the backing claims.
	Namespace string
	Client    kubernetes.Interface
	// Volumes is the shared volume informer's cache, with Indexers.
	Volumes cache.Indexer
	// BackingClaims lists the backing claims: those of Namespace labelled
	// BackingClaimSelector(ControllerID).
	BackingClaims corelisters.PersistentVolumeClaimLister
	// Claims lists the claims that wait for a volume.
	Claims corelisters.PersistentVolumeClaimLister
	// Pools is the VolumePools' cache.
	Pools cache.Indexer
	// Pending is the provisioner's record of the volumes on their way.
	Pending  *memory.Pending
	Recorder record.EventRecorder
	Clock    clock.PassiveClock
	// AheadBound is how long a backing claim asked for a member made ahead
	// may wait for its volume before it is given up.
	AheadBound time.Duration
	// Created counts the new members by class; Evictions the members
	// handed back, by class and cause.
	Created, Evictions *prometheus.CounterVec
}

// Pools are the class backend's pools: the backing claims made for them
// and the loop that looks at them, by the UID of the claim each was made
// for.
type Pools struct {
	cfg Config
	p   Provisioner
	// queue tidies up, by the UID of the claim they are for, the backing
	// claims and kept volumes no claim wants any more, and takes members
	// made ahead through their steps.
	queue *controller.Loop[*corev1.PersistentVolumeClaim, types.UID]
	// relayed remembers when a failure of each backing claim was last
	// relayed.
	relayed relayTimes
}

// New returns the class pools of cfg, growing for p. They share the
// provisioner's clock and record of volumes on their way (cfg.Clock,
// cfg.Pending): build them after those.
func New(cfg Config, p Provisioner) *Pools {
	b := &Pools{cfg: cfg, p: p}
	q := &controller.Loop[*corev1.PersistentVolumeClaim, types.UID]{
		Name: "provisioner-backing", Ref: backingFor, Sync: b.Sync, Workers: 1,
		Sweep: sweepInterval,
	}
	// Any change of a backing claim, its deletion included, is looked at
	// for its claim.
	q.Gone = func(c *corev1.PersistentVolumeClaim) {
		if uid, ok := backingFor(c); ok {
			q.Add(uid)
		}
	}
	q.Sweeper = b.sweep
	b.queue = q
	return b
}

// Watch queues, by the claim they are for, the backing claims of backing
// (those BackingClaims lists) as they change, the claims of claims that no
// longer wait for a volume, and the volumes of volumes kept for a claim.
// Call it once, before Run.
func (b *Pools) Watch(backing, claims, volumes cache.SharedIndexInformer) error {
	if err := b.queue.Watch(backing); err != nil {
		return fmt.Errorf("watching backing claims: %w", err)
	}
	if err := controller.WatchMapped(b.queue, claims, claimGone); err != nil {
		return fmt.Errorf("watching claims: %w", err)
	}
	if err := controller.WatchMapped(b.queue, volumes, b.keptVolumeChanged); err != nil {
		return fmt.Errorf("watching volumes: %w", err)
	}
	return nil
}

// Run works the queue, and sweeps it every sweepInterval, until ctx is done.
func (b *Pools) Run(ctx context.Context) { b.queue.Run(ctx) }

// sweepInterval is how often sweep runs.
const sweepInterval = 10 * time.Second

// sweep looks again at everything a backing claim was made for: the steps
// follow the events of the backing claims and the volumes, and a restart,
// or a watch that missed one, must not leave a volume halfway.
func (b *Pools) sweep(context.Context) {
	claims, _ := b.cfg.BackingClaims.PersistentVolumeClaims(b.cfg.Namespace).List(labels.Everything())
	for _, c := range claims {
		if uid, ok := backingFor(c); ok {
			b.queue.Add(uid)
		}
	}
	for _, uid := range b.KeptUIDs() {
		b.queue.Add(uid)
	}
}

// BackingClaimSelector selects the backing claims of controllerID.
func BackingClaimSelector(controllerID string) string {
	return wellknown.BackingClaimOf + "=" + controllerID
}

// backingClaimName is the name of the backing claim for claim: the name the
// library gives claim's volume.
func backingClaimName(uid types.UID) string { return "pvc-" + string(uid) }

// backingFor is the UID of the claim backing was made for.
func backingFor(backing *corev1.PersistentVolumeClaim) (types.UID, bool) {
	uid := backing.Annotations[wellknown.BackingForUID]
	return types.UID(uid), uid != ""
}

// keptVolumeChanged looks at a volume kept for a claim (step 3), on every change
// and at start-up: a restarted provisioner finds the volumes a crash left
// between steps.
func (b *Pools) keptVolumeChanged(e controller.Event[*corev1.PersistentVolume]) []types.UID {
	if e.Type == controller.Deleted {
		return nil
	}
	if uid := keptFor(e.Obj); uid != "" && e.Obj.Annotations[wellknown.KeptBy] == b.cfg.Name {
		return []types.UID{uid}
	}
	return nil
}

// claimGone looks again at what was made for a claim that no longer waits
// for a volume: deleted, or bound and so out of the provisioner's cache.
func claimGone(e controller.Event[*corev1.PersistentVolumeClaim]) []types.UID {
	if e.Type != controller.Deleted {
		return nil
	}
	return []types.UID{e.Obj.UID}
}

// keptFor is the UID of the claim pv is kept for (step 3), if it is one a
// backing provisioner made that was not handed over yet.
func keptFor(pv *corev1.PersistentVolume) types.UID {
	return types.UID(pv.Annotations[wellknown.BackingForUID])
}

// indexKeptFor indexes the volumes kept for a claim.
const indexKeptFor = "reclaimable-provisioner/backing-for"

// Indexers are the indexes of the volume cache the class pools read.
func Indexers() cache.Indexers { return cache.Indexers{indexKeptFor: byKeptFor} }

// byKeptFor indexes a kept volume by "<provisioner that kept it>/<UID of
// the claim it is kept for>".
func byKeptFor(obj any) ([]string, error) {
	if pv, ok := obj.(*corev1.PersistentVolume); ok && keptFor(pv) != "" {
		return []string{pv.Annotations[wellknown.KeptBy] + "/" + string(keptFor(pv))}, nil
	}
	return nil, nil
}

// keptVolume returns the volume this provisioner kept for the claim of
// uid, if any.
func (b *Pools) keptVolume(uid types.UID) *corev1.PersistentVolume {
	objs, _ := b.cfg.Volumes.ByIndex(indexKeptFor, b.cfg.Name+"/"+string(uid))
	if len(objs) == 0 {
		return nil
	}
	return objs[0].(*corev1.PersistentVolume)
}

// KeptUIDs are the UIDs of the claims this provisioner keeps volumes for.
func (b *Pools) KeptUIDs() []types.UID {
	var out []types.UID
	for _, key := range b.cfg.Volumes.ListIndexFuncValues(indexKeptFor) {
		if uid, ok := strings.CutPrefix(key, b.cfg.Name+"/"); ok && b.keptVolume(types.UID(uid)) != nil {
			out = append(out, types.UID(uid))
		}
	}
	return out
}

// Pending names the volumes of class on their way through backing claims,
// with the node each is for, by the name the library gives them (the
// backing claim's). They count against the class's limits.
func (b *Pools) Pending(class string) map[string]string {
	out := map[string]string{}
	for name, v := range b.InFlight(class) {
		out[name] = v.Node
	}
	return out
}

// Volume is a volume on its way through a backing claim: the node it is
// for, and whether it is a member made ahead of claims.
type Volume struct {
	Node  string
	Ahead bool
}

// InFlight lists the volumes of class on their way through backing claims,
// by the backing claim's name: a backing claim, or a volume kept (step 3)
// and not handed over yet, which stands for its backing claim from then on.
func (b *Pools) InFlight(class string) map[string]Volume {
	out := map[string]Volume{}
	claims, _ := b.cfg.BackingClaims.PersistentVolumeClaims(b.cfg.Namespace).List(labels.Everything())
	for _, c := range claims {
		if c.Annotations[wellknown.PoolClass] == class {
			out[c.Name] = Volume{Node: c.Annotations[volumehelpers.AnnSelectedNode], Ahead: c.Annotations[wellknown.MadeAhead] != ""}
		}
	}
	for _, uid := range b.KeptUIDs() {
		if pv := b.keptVolume(uid); pv != nil && pv.Annotations[wellknown.PoolClass] == class {
			out[backingClaimName(uid)] = Volume{Node: nodeOf(pv), Ahead: pv.Annotations[wellknown.MadeAhead] != ""}
		}
	}
	return out
}

// AheadInFlight counts the members of class asked for ahead of claims on
// their way: backing claims, and volumes kept and not yet members.
func (b *Pools) AheadInFlight(class string) int {
	n := 0
	for _, v := range b.InFlight(class) {
		if v.Ahead {
			n++
		}
	}
	return n
}

// Cached reports whether the cache shows the backing claim of that name,
// or the volume kept for it.
func (b *Pools) Cached(name string) bool {
	if _, err := b.cfg.BackingClaims.PersistentVolumeClaims(b.cfg.Namespace).Get(name); err == nil {
		return true
	}
	uid, ok := strings.CutPrefix(name, "pvc-")
	return ok && b.keptVolume(types.UID(uid)) != nil
}

// nodeOf is the node a volume's affinity pins it to, if one.
func nodeOf(pv *corev1.PersistentVolume) string {
	if a := pv.Spec.NodeAffinity; a != nil && a.Required != nil && len(a.Required.NodeSelectorTerms) == 1 {
		for _, e := range a.Required.NodeSelectorTerms[0].MatchExpressions {
			if e.Key == corev1.LabelHostname && len(e.Values) == 1 {
				return e.Values[0]
			}
		}
	}
	return ""
}
