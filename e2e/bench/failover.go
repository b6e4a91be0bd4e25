package bench

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// defaultLeaseDuration is --leader-elect-lease-duration's default, which
// the benchmark keeps: the figure is the deployed one.
const defaultLeaseDuration = 15 * time.Second

// failover starts a standby of each controller, kills the three leaders at
// once (SIGKILL: the Leases are left to expire) and times until each
// standby acts:
//   - podwatcher: creates the claim of a pod created right after the kill;
//   - provisioner: creates a volume for that claim (it asks for a size no
//     pool volume has). The claim only exists once the podwatcher acted, so
//     this is an upper bound of the provisioner's own takeover;
//   - releaser: makes Available the volume of a claim deleted right after
//     the kill.
//
// The standbys then lead, and replace the installation.
func (b *bench) failover(ctx context.Context) (*Failover, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	standby := &installation{binary: b.inst.binary, logDir: b.inst.logDir, args: b.inst.args, extra: b.inst.extra, env: b.inst.env}
	if _, err := standby.start(ctx); err != nil {
		return nil, fmt.Errorf("starting the standbys: %w", err)
	}
	leaders := b.inst
	b.inst = standby // whatever happens, the standbys are stopped at the end

	// A claim bound from the pool, for the releaser to release.
	retained := "failover-release"
	created, err := b.client.CoreV1().PersistentVolumeClaims(b.ns).Create(ctx, objects.NewClaim(b.ns, retained, b.class, "1Gi"), metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	relUID := created.UID
	if err := b.rec.wait(ctx, func() bool { c := b.rec.claims[relUID]; return c != nil && !c.bound.IsZero() }); err != nil {
		return nil, fmt.Errorf("waiting for claim %s to bind: %w", retained, err)
	}

	for _, p := range leaders.procs {
		p.kill()
	}
	killed := time.Now()
	leaders.procs = nil

	if err := b.client.CoreV1().PersistentVolumeClaims(b.ns).Delete(ctx, retained, metav1.DeleteOptions{}); err != nil {
		return nil, err
	}
	podName := "failover-create"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: b.ns, Annotations: map[string]string{
			wellknown.EnabledKey("cache"):  "true",
			wellknown.TemplateKey("cache"): claimTemplate(b.class, fmt.Sprintf("%dMi", 2048+b.missSeq.Add(1))),
		}},
		Spec: podSpec(podName, ""),
	}
	if _, err := b.client.CoreV1().Pods(b.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, err
	}

	f := &Failover{LeaseDuration: defaultLeaseDuration.String()}
	newUID, err := b.waitBound(ctx, podName)
	if err != nil {
		return f, fmt.Errorf("waiting for the standby podwatcher and provisioner: %w", err)
	}
	rec := b.rec.snapshot(newUID)
	f.PodwatcherSeconds = rec.created.Sub(killed).Seconds()
	f.ProvisionerSeconds = b.rec.volumeFirstSeen(rec.volume).Sub(killed).Seconds()
	if err := b.rec.wait(ctx, func() bool { return !b.rec.claims[relUID].available.IsZero() }); err != nil {
		return f, fmt.Errorf("waiting for the standby releaser: %w", err)
	}
	f.ReleaserSeconds = b.rec.snapshot(relUID).available.Sub(killed).Seconds()
	zero := int64(0)
	_ = b.client.CoreV1().Pods(b.ns).Delete(ctx, podName, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	return f, nil
}
