package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The class-pool run: a pool of the class backend in front of a CSI class
// (the tests' driver behind the real external-provisioner), against the
// same claims of the CSI class itself: what a user asks of a pool in front
// of their driver ("is it faster than my driver?"). It measures claim
// created -> Bound: on the CSI class, each claim a new volume; on the pool,
// claims no member fits (a new volume through the backing class), then
// claims its free members serve.

// ClassPool is the class-pool run's report.
type ClassPool struct {
	Concurrency int `json:"concurrency"`
	Cycles      int `json:"cycles"`
	ClassRuns
	// Zoned is the same in two zones, binding on first consumer.
	Zoned *ZonedClassPool `json:"zoned,omitempty"`
}

// ClassRuns are the figures of claims on a CSI class and on a pool in
// front of it.
type ClassRuns struct {
	// Direct: the claims on the CSI class, each a new volume.
	Direct Summary `json:"direct_claim_created_to_bound"`
	// Miss: the pool's claims no member fits.
	Miss Summary `json:"miss_claim_created_to_bound"`
	// Hit: the pool's claims a free member serves.
	Hit    Summary `json:"hit_claim_created_to_bound"`
	HitPct float64 `json:"hit_pct"`
	// Creates are the volumes the driver made for the pool's claims: one
	// per miss, none for a hit.
	MissCreates int `json:"miss_creates"`
	HitCreates  int `json:"hit_creates"`
	Failed      int `json:"failed,omitempty"`
}

// The class-pool run's classes and driver.
const (
	csiClass       = "bench-csi"
	classPoolClass = "bench-classpool"
	benchDriver    = "bench.csi.reclaimable.io"
)

// classPool runs cycles claims at concurrency on the CSI class, then on
// the pool (classRuns).
func (b *bench) classPool(ctx context.Context, cycles, concurrency int) (*ClassPool, error) {
	r := &ClassPool{Concurrency: concurrency, Cycles: cycles}
	csi, err := b.startCSI(ctx, benchDriver, false)
	if err != nil {
		return nil, err
	}
	defer b.stopCSI(csi)
	if err := b.csiClasses(ctx, csiClass, classPoolClass, benchDriver, storagev1.VolumeBindingImmediate); err != nil {
		return nil, err
	}
	r.ClassRuns = b.classRuns(ctx, csi, cycles, concurrency, csiClass, classPoolClass, func(ctx context.Context, _ int, name, class, size string, pool bool) (cycleTimes, error) {
		if pool {
			return b.claimCycleOf(ctx, b.ns, name, class, size)
		}
		return b.directCycle(ctx, name, class, size)
	})
	if r.Failed > 0 {
		return r, fmt.Errorf("%d cycles failed", r.Failed)
	}
	return r, nil
}

// classCycle runs the claim name of class and size, the seq-th of its
// run; pool says whether class is the pool's.
type classCycle func(ctx context.Context, seq int, name, class, size string, pool bool) (cycleTimes, error)

// classRuns runs cycles claims at concurrency on the CSI class direct,
// then on the pool in front of it: first of strictly growing sizes from
// 2 GiB (no member fits a later one), then of 1 GiB, which every member
// fits; csi counts the volumes its driver made.
func (b *bench) classRuns(ctx context.Context, csi *cluster.CSI, cycles, concurrency int, direct, pool string, cycle classCycle) ClassRuns {
	var (
		r    ClassRuns
		size atomic.Int64
	)
	run := func(class string, sized func() string) (Summary, float64, int) {
		return b.boundRun(ctx, concurrency, cycles, func(ctx context.Context, seq int) (cycleTimes, error) {
			return cycle(ctx, seq, fmt.Sprintf("%s-%d", class, seq), class, sized(), class == pool)
		})
	}
	creates := func() int {
		calls, err := csi.Calls()
		if err != nil {
			return -1
		}
		return len(calls.Created)
	}
	oneGi := func() string { return "1Gi" }
	growing := func() string { return fmt.Sprintf("%dMi", 2048+size.Add(1)) }

	var failed int
	r.Direct, _, failed = run(direct, oneGi)
	r.Failed += failed
	before := creates()
	r.Miss, _, failed = run(pool, growing)
	r.Failed += failed
	r.MissCreates = creates() - before
	before = creates()
	r.Hit, r.HitPct, failed = run(pool, oneGi)
	r.Failed += failed
	r.HitCreates = creates() - before
	return r
}

// startCSI builds and starts the driver named name, zonal or not, and its
// sidecar.
func (b *bench) startCSI(ctx context.Context, name string, zonal bool) (*cluster.CSI, error) {
	driver, err := cluster.BuildCSIDriver(ctx, b.cfg.Dir)
	if err != nil {
		return nil, err
	}
	sidecar, err := cluster.EnsureExternalProvisioner(ctx, b.cfg.Log)
	if err != nil {
		return nil, err
	}
	// A unix socket's path is at most 107 bytes: not under the run's
	// directory, which may be long.
	dir, err := os.MkdirTemp("", "bench-csi-")
	if err != nil {
		return nil, err
	}
	c, err := cluster.StartCSI(driver, sidecar, b.cluster.Kubeconfig, name, dir, nil, zonal)
	if err != nil {
		return nil, err
	}
	b.logf("CSI driver %s (zonal: %v) and its external-provisioner running", name, zonal)
	return c, nil
}

// stopCSI stops the driver and its sidecar, and moves their logs into the
// run's directory, which --keep keeps, out of the short-pathed one their
// socket needed.
func (b *bench) stopCSI(c *cluster.CSI) {
	c.Stop()
	logs := filepath.Join(b.cfg.Dir, "csi")
	if err := os.MkdirAll(logs, 0o755); err == nil {
		for _, what := range []string{"driver", "sidecar"} {
			// Copied, not renamed: the two may be on different file systems.
			data, err := os.ReadFile(c.LogPath(what))
			if err == nil {
				err = os.WriteFile(filepath.Join(logs, what+".log"), data, 0o644)
			}
			if err != nil {
				b.logf("keeping the CSI %s log: %v", what, err)
			}
		}
	}
	_ = os.RemoveAll(c.Dir)
}

// csiClasses creates the class csi of driver and the pool class pool in
// front of it, both of binding, whose released members are free to any
// claim at once.
func (b *bench) csiClasses(ctx context.Context, csi, pool, driver string, binding storagev1.VolumeBindingMode) error {
	for _, sc := range []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: csi}, Provisioner: driver, ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: &binding},
		{ObjectMeta: metav1.ObjectMeta{Name: pool, Annotations: map[string]string{wellknown.ClassControllerID: controllerID}},
			Provisioner: provisionerName, ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimRetain), VolumeBindingMode: &binding,
			Parameters: map[string]string{"backend": "class", "backingClass": csi, wellknown.ReserveFor: "0", wellknown.ReuseScope: wellknown.ReuseScopeCluster}},
	} {
		if _, err := b.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// directCycle creates a claim of the CSI class, waits for it to be bound
// and deletes it; the sidecar deletes its volume.
func (b *bench) directCycle(ctx context.Context, name, class, size string) (cycleTimes, error) {
	ctx, cancel := context.WithTimeout(ctx, cycleTimeout)
	defer cancel()
	var t cycleTimes
	t.start = time.Now()
	created, err := b.client.CoreV1().PersistentVolumeClaims(b.ns).Create(ctx, objects.NewClaim(b.ns, name, class, size), metav1.CreateOptions{})
	if err != nil {
		return t, fmt.Errorf("creating claim %s: %w", name, err)
	}
	uid := created.UID
	if err := b.rec.wait(ctx, func() bool { c := b.rec.claims[uid]; return c != nil && !c.bound.IsZero() }); err != nil {
		return t, fmt.Errorf("waiting for claim %s to be bound: %w", name, err)
	}
	if err := b.client.CoreV1().PersistentVolumeClaims(b.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return t, fmt.Errorf("deleting claim %s: %w", name, err)
	}
	t.claim = b.rec.snapshot(uid)
	return t, nil
}
