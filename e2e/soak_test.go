//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

var (
	soakDuration = flag.Duration("soak.duration", 40*time.Second, "how long the chaos soak creates and deletes workloads")
	soakWorkers  = flag.Int("soak.workers", 6, "workloads in flight during the chaos soak")
	soakSeed     = flag.Uint64("soak.seed", 0, "seed of the soak's random choices; 0 picks one (it is logged)")
)

// soakStats are the counts the soak reports.
type soakStats struct {
	cycles, jobs, earlyDeletes, kills, restarts, apiserverRestarts, touches, touchConflicts atomic.Int64
	staticClaims, staticBound                                                               atomic.Int64
}

// TestSoakChaos runs a stream of annotated Pods and Jobs through the whole
// cycle while controllers are killed (SIGKILL, at random points, writes in
// flight) and restarted, two replicas of each compete for their Leases, the
// API server restarts once, and a foreign writer keeps updating the pool's
// volumes so that the controllers' writes conflict. Once quiet, nothing may
// be lost: the invariants hold, every remaining owner has its claim Bound,
// no claim outlives its owner, and every pool volume is Available or Bound.
//
// It does not run in parallel with other tests: it restarts the shared API
// server. `make soak` runs a long version.
func TestSoakChaos(t *testing.T) {
	seed := *soakSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -soak.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	ctx := context.Background()

	// Every released volume is scrubbed, by a scrub pod on the real node
	// (the class's lifecycle template pins it there: the consumers run on
	// kwok's nodes, which would fake its success), while the workloads
	// keep coming.
	framework.RealNode(t)
	helpers := framework.Namespace(t)
	scrubOnRealNode := `{"spec":{"nodeSelector":{"` + cluster.RealNodeLabel + `":"true"},"containers":[{"name":"scrub","image":"` + cluster.ReclaimableImage +
		`","imagePullPolicy":"IfNotPresent","args":["lifecycle","scrub"],"securityContext":{"runAsUser":0},"volumeMounts":[{"name":"pool","mountPath":"/pool"}]}]}}`
	if _, err := framework.Client().CoreV1().ConfigMaps(helpers).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "templates"},
		Data: map[string]string{"scrub": scrubOnRealNode}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := newCycleCase(t, "soak", map[string]string{"lifecycleTemplates": "templates"}, wellknown.OnReleaseScrub)
	id, ns, class, inv := c.id, c.ns, c.class, c.inv
	args := append(c.args, "--lifecycle-namespace="+helpers, "--lifecycle-image="+cluster.ReclaimableImage)
	// Eviction on: members no claim had for two seconds go (released ones
	// are held, not reserved, so that they may), and a claim at the maximum
	// evicts one (a little above the three claim names of each worker that
	// may be alive at once); members are evicted while claims come for
	// them (invariant 10). Two members are kept made ahead of claims
	// (minAvailable, of the claims' size), and every release goes through
	// the scrub (onRelease Scrub, invariant 9).
	pools := volumePools(t)
	if _, err := pools.Create(ctx, &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: class}, Spec: v1alpha1.VolumePoolSpec{
		StorageClassName: class, MaxVolumes: ptr.To(int32(3**soakWorkers + 2)), EvictForClaims: true,
		ReserveFor: &metav1.Duration{}, EvictAfter: &metav1.Duration{Duration: 2 * time.Second},
		MinAvailable: ptr.To[int32](2), Template: &v1alpha1.VolumePoolTemplate{Capacity: ptr.To(resource.MustParse("1Gi"))},
		OnRelease: wellknown.OnReleaseScrub,
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pools.Delete(context.Background(), class, metav1.DeleteOptions{}) })
	static, staticInv := c.soakStaticPool(t)
	replicas := []*framework.Process{framework.StartController(t, args...), framework.StartController(t, args...)}
	for _, p := range replicas {
		p.WaitReady(t)
	}
	waitStaticIssuedByTheProvisioner(t, static)

	var stats soakStats
	workCtx, stopWork := context.WithTimeout(ctx, *soakDuration)
	defer stopWork()
	var wg sync.WaitGroup
	errs := make(chan error, *soakWorkers+soakStaticWorkers+1)
	for w := range *soakWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wrng := rand.New(rand.NewPCG(seed, uint64(w)+1))
			if err := soakWorker(workCtx, w, ns, class, inv, wrng, &stats); err != nil {
				errs <- fmt.Errorf("worker %d: %w", w, err)
			}
		}()
	}
	for w := range soakStaticWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wrng := rand.New(rand.NewPCG(seed, uint64(*soakWorkers+w)+1))
			if err := soakStaticWorker(workCtx, w, ns, static, wrng, &stats); err != nil {
				errs <- fmt.Errorf("static worker %d: %w", w, err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		touchVolumes(workCtx, class, &stats)
	}()

	// Faults, from the test goroutine: kill a replica at a random moment,
	// start it again a little later, and restart the API server once.
	apiserverAt := time.Now().Add(*soakDuration / 2)
	for workCtx.Err() == nil {
		select {
		case <-workCtx.Done():
		case <-time.After(time.Duration(1000+rng.IntN(3000)) * time.Millisecond):
		}
		if workCtx.Err() != nil {
			break
		}
		if !apiserverAt.IsZero() && time.Now().After(apiserverAt) {
			if err := framework.Cluster().Restart(ctx, cluster.KubeAPIServer); err != nil {
				t.Fatalf("restarting the API server: %v", err)
			}
			stats.apiserverRestarts.Add(1)
			apiserverAt = time.Time{}
			continue
		}
		p := replicas[rng.IntN(len(replicas))]
		if exited, _ := p.Exited(); exited {
			p.Start()
			stats.restarts.Add(1)
			continue
		}
		p.Kill()
		stats.kills.Add(1)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, p := range replicas {
		if exited, _ := p.Exited(); exited {
			p.Start()
			stats.restarts.Add(1)
		}
	}

	// Quiet period: the end state must be reached, and stay.
	unsettled := ""
	// Before the wait, whose failure ends the test: said either way.
	defer func() {
		if unsettled != "" {
			t.Logf("unsettled: %s", unsettled)
		}
	}()
	framework.Eventually(t, 90*time.Second, func(ctx context.Context) (bool, error) {
		unsettled = soakUnsettled(ctx, ns, class, id)
		return unsettled == "", nil
	}, "the soak's end state: every owner's claim Bound, no claim of a gone owner, every pool volume Available or Bound (see the last thing unsettled below)")
	violations := inv.Check(t, 30*time.Second) + staticInv.Check(t, 10*time.Second)

	evictions := 0
	if events, err := framework.Client().CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + class + ",reason=MemberEvicted"}); err == nil {
		for _, e := range events.Items {
			evictions += int(max(e.Count, 1))
		}
	}
	t.Logf("soak: %d cycles (%d Jobs, %d owners deleted before their claim bound), %d members evicted; faults: %d kills, %d restarts, %d API server restarts, %d foreign writes (%d conflicted); invariant violations: %d",
		stats.cycles.Load(), stats.jobs.Load(), stats.earlyDeletes.Load(), evictions, stats.kills.Load(), stats.restarts.Load(),
		stats.apiserverRestarts.Load(), stats.touches.Load(), stats.touchConflicts.Load(), violations)
	if n := inv.Scrubs(); n == 0 {
		t.Error("no volume was scrubbed: the pool's onRelease Scrub was never exercised")
	} else {
		t.Logf("soak: %d volumes scrubbed", n)
	}
	if stats.cycles.Load() == 0 {
		t.Error("no cycle completed")
	}
	t.Logf("soak: static pool: %d claims, %d bound", stats.staticClaims.Load(), stats.staticBound.Load())
	if stats.staticBound.Load() == 0 {
		t.Error("no claim of the static pool was bound")
	}
}

// The soak's static pool: soakStaticMembers members an administrator
// labelled in, under keyPolicy Require (keyLabel team) and a
// maxVolumesPerNamespace below the claims its workers keep in flight.
const (
	soakStaticMembers = 4
	soakStaticMax     = 2
	soakStaticWorkers = 3
)

// soakStaticPool creates, beside the case's pool and served by the same
// installation, a static pool of soakStaticMembers members, and a checker
// of its invariants (13 and 14 among them). It returns the pool's class.
func (c *cycleCase) soakStaticPool(t *testing.T) (string, *framework.Invariants) {
	t.Helper()
	class := createClass(t, "soakstatic", c.id, c.provisioner, corev1.PersistentVolumeReclaimRetain, storagev1.VolumeBindingImmediate, map[string]string{"backend": "static"})
	volumePools := volumePools(t)
	if _, err := volumePools.Create(context.Background(), &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: class}, Spec: v1alpha1.VolumePoolSpec{
		StorageClassName: class, ReuseScope: wellknown.ReuseScopeNamespace, KeyLabel: "team", KeyPolicy: wellknown.KeyPolicyRequire,
		MaxVolumesPerNamespace: ptr.To(int32(soakStaticMax)),
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = volumePools.Delete(context.Background(), class, metav1.DeleteOptions{}) })
	inv := framework.WatchInvariants(t, framework.Scope{ControllerID: c.id, Classes: []string{class}, Namespaces: []string{c.ns},
		NamespaceScoped: []string{class}, KeyRequired: map[string]string{class: "team"}, MaxPerNamespace: map[string]int{class: soakStaticMax}})
	for range soakStaticMembers {
		name := framework.Name("soakstatic")
		framework.CreateVolume(t, objects.NewVolume(name, class, "1Gi", "/mnt/static/"+name, func(pv *corev1.PersistentVolume) {
			pv.Labels = map[string]string{wellknown.Pool: class}
		}))
	}
	return class, inv
}

// waitStaticIssuedByTheProvisioner waits until every member of the static
// pool class names a claim that never exists: from then on the provisioner
// alone issues them (docs/pools.md, "Members no claim has had").
func waitStaticIssuedByTheProvisioner(t *testing.T, class string) {
	t.Helper()
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		list, err := framework.Client().CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		n := 0
		for i := range list.Items {
			if pv := &list.Items[i]; pv.Spec.StorageClassName == class && pools.Unissued(pv) {
				n++
			}
		}
		return n == soakStaticMembers, nil
	}, "the static pool's members to name a claim that never exists")
}

// soakStaticWorker creates claims of the static pool class, one at a time,
// labelled team a, team b or neither at random, and deletes each once it
// is bound or after two seconds without: the workers together keep more
// claims in flight than the namespace's maximum, of keys that the members
// held for it do not all fit.
func soakStaticWorker(ctx context.Context, w int, ns, class string, rng *rand.Rand, stats *soakStats) error {
	claims := framework.Client().CoreV1().PersistentVolumeClaims(ns)
	for i := 0; ctx.Err() == nil; i++ {
		name := fmt.Sprintf("static-%d-%d", w, i)
		team := [...]string{"a", "b", ""}[rng.IntN(3)]
		claim := objects.NewClaim(ns, name, class, "1Gi", func(c *corev1.PersistentVolumeClaim) {
			if team != "" {
				c.Labels = map[string]string{"team": team}
			}
		})
		if err := retryTransient(ctx, func() error { _, err := claims.Create(ctx, claim, metav1.CreateOptions{}); return err }); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		stats.staticClaims.Add(1)
		waitCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if _, err := waitBound(waitCtx, ns, name); err == nil {
			stats.staticBound.Add(1)
		}
		cancel()
		deleteCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := retryTransient(deleteCtx, func() error {
			if err := claims.Delete(deleteCtx, name, metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
				return err
			}
			return nil
		})
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// soakWorker runs cycles until ctx is done: create an owner (a Pod, or a
// Job one time in four) asking for a claim, wait for the claim to bind and
// leave a marker in its volume, delete the owner. One time in six the
// owner is deleted before its claim binds. Claim names repeat every three
// cycles so that a claim recreated under an old name meets its volume again.
// The last owner is left in place for the end-state checks.
func soakWorker(ctx context.Context, w int, ns, class string, inv *framework.Invariants, rng *rand.Rand, stats *soakStats) error {
	for i := 0; ; i++ {
		claimName := fmt.Sprintf("cache-%d-%d", w, i%3)
		if err := waitGone(ctx, ns, claimName); err != nil {
			return nil // the run is over
		}
		name := fmt.Sprintf("owner-%d-%d", w, i)
		isJob := rng.IntN(4) == 0
		if err := retryTransient(ctx, func() error { return createOwner(ctx, ns, name, claimName, class, isJob) }); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if isJob {
			stats.jobs.Add(1)
		}
		early := rng.IntN(6) == 0
		if !early {
			pv, err := waitBound(ctx, ns, claimName)
			if err != nil {
				return nil // the run ended while waiting; this owner stays for the end checks
			}
			if dir := pv.Spec.HostPath; dir != nil {
				marker := filepath.Join(dir.Path, fmt.Sprintf("marker-%s", name))
				if err := os.WriteFile(marker, []byte(name), 0o644); err == nil {
					inv.Marker(pv.Name, marker)
				}
			}
		} else {
			stats.earlyDeletes.Add(1)
		}
		if ctx.Err() != nil {
			return nil
		}
		deleteCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := retryTransient(deleteCtx, func() error { return deleteOwner(deleteCtx, ns, name, isJob) })
		cancel()
		if err != nil {
			return err
		}
		stats.cycles.Add(1)
	}
}

// cycleCase is a namespace and a class of the directory backend (source
// hostPath, namespace reuse scope) watched by the invariant checker, and
// the arguments of a reclaimable process that runs the whole cycle for them.
type cycleCase struct {
	id, ns, class, provisioner string
	inv                        *framework.Invariants
	args                       []string
}

// newCycleCase is a cycleCase; params add to the class's, and a pool that
// says onRelease Scrub makes the invariant checker watch its scrubs.
func newCycleCase(t *testing.T, prefix string, params map[string]string, onRelease string) *cycleCase {
	t.Helper()
	id := framework.Name(prefix)
	provisioner := prefix + ".reclaimable/" + id
	ns := framework.Namespace(t)
	base := framework.ControllerDir(t, "pool")
	root := filepath.Dir(base)
	all := map[string]string{"baseDir": base, "hostPath": base}
	maps.Copy(all, params)
	class := createDirectoryClass(t, prefix, id, provisioner, all)
	return &cycleCase{
		id: id, ns: ns, class: class, provisioner: provisioner,
		inv: framework.WatchInvariants(t, framework.Scope{ControllerID: id, Classes: []string{class}, Namespaces: []string{ns}, NamespaceScoped: []string{class},
			Scrubbed: classIf(onRelease == wellknown.OnReleaseScrub, class)}),
		args: []string{"all", "--controller-id=" + id, "--provisioner-name=" + provisioner, "--directory-root=" + root,
			"--namespace=" + ns, "--cleanup-interval=5s", "--release-interval=5s"},
	}
}

// createDirectoryClass creates a Retain, Immediate StorageClass of the
// directory backend (source hostPath), annotated for the releaser of
// controller ID id and served by provisioner; params adds to or overrides
// the backend's parameters (baseDir and hostPath at least). It is deleted
// at cleanup.
func createDirectoryClass(t *testing.T, prefix, id, provisioner string, params map[string]string) string {
	t.Helper()
	parameters := map[string]string{"backend": "directory", "source": "hostPath"}
	maps.Copy(parameters, params)
	return createClass(t, prefix, id, provisioner, corev1.PersistentVolumeReclaimRetain, storagev1.VolumeBindingImmediate, parameters)
}

// createClass creates a StorageClass served by provisioner, annotated for
// the releaser of controller ID id, with parameters; it is deleted at
// cleanup.
func createClass(t *testing.T, prefix, id, provisioner string, policy corev1.PersistentVolumeReclaimPolicy, binding storagev1.VolumeBindingMode, parameters map[string]string) string {
	t.Helper()
	return framework.CreateClass(t, objects.NewClass(framework.Name(prefix), provisioner, func(sc *storagev1.StorageClass) {
		sc.Annotations = map[string]string{wellknown.ClassControllerID: id}
		sc.ReclaimPolicy, sc.VolumeBindingMode, sc.Parameters = &policy, &binding, parameters
	}))
}

// retryTransient retries fn while the API server is unreachable or
// overloaded (it restarts once during the soak). A create whose answer was
// lost may have happened: AlreadyExists then means done.
func retryTransient(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		switch {
		case err == nil, apierrors.IsAlreadyExists(err):
			return nil
		case !(utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
			apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
			apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err)):
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(framework.Interval):
		}
	}
}

func soakOwnerAnnotations(volume, class string) map[string]string {
	return map[string]string{
		wellknown.EnabledKey(volume):  "true",
		wellknown.TemplateKey(volume): fmt.Sprintf(`{"apiVersion":"v1","kind":"PersistentVolumeClaim","spec":{"storageClassName":%q,"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}`, class),
	}
}

func soakPodSpec(claimName string, restart corev1.RestartPolicy) corev1.PodSpec {
	return corev1.PodSpec{
		RestartPolicy: restart,
		Containers:    []corev1.Container{{Name: "build", Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}}}},
		Volumes: []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName},
		}}},
	}
}

func createOwner(ctx context.Context, ns, name, claimName, class string, isJob bool) error {
	client := framework.Client()
	if isJob {
		_, err := client.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: soakOwnerAnnotations("cache", class)},
			Spec:       batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: soakPodSpec(claimName, corev1.RestartPolicyNever)}},
		}, metav1.CreateOptions{})
		return err
	}
	_, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: soakOwnerAnnotations("cache", class)},
		Spec:       soakPodSpec(claimName, corev1.RestartPolicyAlways),
	}, metav1.CreateOptions{})
	return err
}

func deleteOwner(ctx context.Context, ns, name string, isJob bool) error {
	client := framework.Client()
	background := metav1.DeletePropagationBackground
	var err error
	if isJob {
		err = client.BatchV1().Jobs(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &background})
	} else {
		err = client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// waitBound waits for the claim to be bound and returns its volume.
func waitBound(ctx context.Context, ns, claimName string) (*corev1.PersistentVolume, error) {
	client := framework.Client()
	for {
		c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
		if err == nil && c.Status.Phase == corev1.ClaimBound && c.Spec.VolumeName != "" {
			return client.CoreV1().PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(framework.Interval):
		}
	}
}

// waitGone waits until no claim of that name exists.
func waitGone(ctx context.Context, ns, claimName string) error {
	client := framework.Client()
	for {
		_, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(framework.Interval):
		}
	}
}

// touchVolumes is a foreign writer: it keeps updating an annotation of the
// pool's volumes, each update read-modify-write like any other client's, so
// that the controllers' own updates of those volumes meet conflicts.
func touchVolumes(ctx context.Context, class string, stats *soakStats) {
	client := framework.Client()
	for n := 0; ctx.Err() == nil; n++ {
		list, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err == nil {
			for i := range list.Items {
				pv := &list.Items[i]
				if pv.Spec.StorageClassName != class {
					continue
				}
				if pv.Annotations == nil {
					pv.Annotations = map[string]string{}
				}
				pv.Annotations["soak.reclaimable/touched"] = fmt.Sprint(n)
				_, err := client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
				stats.touches.Add(1)
				if apierrors.IsConflict(err) {
					stats.touchConflicts.Add(1)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// soakUnsettled says what keeps the end state from being reached ("" once
// it is): every remaining owner has its claim Bound, no claim of ours
// outlives its owner, every volume of the class is Available or Bound.
func soakUnsettled(ctx context.Context, ns, class, id string) string {
	client := framework.Client()
	owners := map[types.UID]string{}
	wanted := map[string]bool{}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		owners[p.UID] = p.Name
		if len(p.OwnerReferences) == 0 && p.DeletionTimestamp == nil {
			wanted[p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName] = true
		}
	}
	jobs, err := client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, j := range jobs.Items {
		owners[j.UID] = j.Name
		finished := false
		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				finished = true
			}
		}
		if j.DeletionTimestamp == nil && !finished {
			wanted[j.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName] = true
		}
	}
	claims, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	bound := map[string]bool{}
	for _, c := range claims.Items {
		if c.Labels[wellknown.ClaimManagedBy] == id {
			if _, ok := owners[types.UID(c.Labels[wellknown.ClaimedBy])]; !ok {
				return "claim " + c.Name + " outlives its owner" // a claim whose owner is gone
			}
		}
		bound[c.Name] = c.Status.Phase == corev1.ClaimBound
	}
	for name := range wanted {
		if !bound[name] {
			return "claim " + name + " of a live owner is not Bound"
		}
	}
	pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, pv := range pvs.Items {
		if pv.Spec.StorageClassName == class && pv.Status.Phase != corev1.VolumeAvailable && pv.Status.Phase != corev1.VolumeBound {
			return fmt.Sprintf("volume %s is %s", pv.Name, pv.Status.Phase)
		}
	}
	return ""
}
