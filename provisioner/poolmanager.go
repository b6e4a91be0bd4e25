package provisioner

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/provisioner/ahead"
)

// The questions the pool manager asks of the provisioner, and what it has
// the provisioner do (poolmanager.Provisioner): the provisioner knows which
// volumes form a class's pool (its backends) and which claims wait, and it
// makes and removes members' storage.

// Members lists the pool of class, a class of this provisioner as its
// VolumePool makes it, or says why the provisioner refuses the class.
func (c *Controller) Members(class *storagev1.StorageClass) ([]*corev1.PersistentVolume, error) {
	return c.provisioner.Members(class)
}

// Waiting counts the claims of the class named class that wait for a
// member because the pool cannot grow.
func (c *Controller) Waiting(class string) int { return c.provisioner.Waiting(class) }

// CheckAhead says why the pool of class, as pool makes it, cannot keep
// members made ahead of claims, or nil.
func (c *Controller) CheckAhead(class *storagev1.StorageClass, pool *v1alpha1.VolumePool) error {
	return c.provisioner.ahead().Check(class, pool)
}

// AheadInFlight counts the members of the class named class being made
// ahead that Members does not list yet.
func (c *Controller) AheadInFlight(class string) int { return c.provisioner.ahead().InFlight(class) }

// MakeAhead makes up to n members of class's pool ahead of claims.
func (c *Controller) MakeAhead(ctx context.Context, class *storagev1.StorageClass, pool *v1alpha1.VolumePool, n int) (int, error) {
	return c.provisioner.ahead().Make(ctx, class, pool, n)
}

// FinishAhead completes the members of class made ahead that a stopped
// provisioner left without their storage.
func (c *Controller) FinishAhead(ctx context.Context, class *storagev1.StorageClass) error {
	return c.provisioner.ahead().Finish(ctx, class)
}

// CheckEvict says why the members of class cannot be evicted, or nil.
func (c *Controller) CheckEvict(class *storagev1.StorageClass) error {
	return c.provisioner.CheckEvict(class)
}

// Evict removes member pv with its data for cause, unless it changed since
// the cache showed it; it reports whether it did.
func (c *Controller) Evict(ctx context.Context, pv *corev1.PersistentVolume, cause string) (bool, error) {
	return c.provisioner.Evict(ctx, pv, cause)
}

// Usage returns what member pv held when it last came back to the pool,
// if that return was measured.
func (c *Controller) Usage(pv *corev1.PersistentVolume) (v1alpha1.MemberUsage, bool) {
	return c.provisioner.Usage(pv)
}

// ahead is the provisioner's members made ahead of claims, on its caches
// and memories as they are now.
func (p *provisioner) ahead() *ahead.Members {
	return ahead.New(ahead.Config{
		Name: p.name, ControllerID: p.controllerID, Client: p.client, Volumes: p.volumes, Nodes: p.nodes,
		Backends: p.backends, Classes: p.classes, Pending: p.pending, Reserve: p.reserve, Clock: p.clock, Made: p.metrics.madeAhead,
	})
}
