//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/client/clientset/versioned"
	reclaimablev1alpha1 "github.com/reclaimable/reclaimable/client/clientset/versioned/typed/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/process"
	"github.com/reclaimable/reclaimable/internal/docsyaml"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// volumePools is an administrator's client of VolumePools.
func volumePools(t *testing.T) reclaimablev1alpha1.VolumePoolInterface {
	t.Helper()
	client, err := versioned.NewForConfig(framework.Config())
	if err != nil {
		t.Fatal(err)
	}
	return client.ReclaimableV1alpha1().VolumePools()
}

// createPool creates a VolumePool of spec, deleted at cleanup, and returns
// its name.
func createPool(t *testing.T, spec v1alpha1.VolumePoolSpec) string {
	t.Helper()
	pools := volumePools(t)
	pool, err := pools.Create(context.Background(), &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: framework.Name("pool")}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pools.Delete(context.Background(), pool.Name, metav1.DeleteOptions{}) })
	return pool.Name
}

// The VolumePool API as the API server serves it from the generated CRD,
// through the generated client: a valid pool is stored; each kind of
// invalid one is refused at admission with a message that says what to
// fix; kubectl lists pools with the printer columns, under the short name
// too.
func TestVolumePoolAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, _, err := kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(process.RepoRoot(), "manifests", "base", "crd")); err != nil {
		t.Fatal(err)
	}
	pools := volumePools(t)
	name := framework.Name("pool")
	pool := &v1alpha1.VolumePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.VolumePoolSpec{StorageClassName: "build-cache", MaxVolumes: ptr.To[int32](50),
			ReserveFor: &metav1.Duration{Duration: 10 * time.Minute}, ReuseScope: "namespace"},
	}
	// The API server serves a new CRD within moments of its creation.
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := pools.Create(ctx, pool, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, nil
	}, "the VolumePool API to be served")
	if _, err := pools.Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pools.Delete(context.Background(), name, metav1.DeleteOptions{}) })

	dyn, err := dynamic.NewForConfig(framework.Config())
	if err != nil {
		t.Fatal(err)
	}
	gvr := v1alpha1.SchemeGroupVersion.WithResource("volumepools")
	for _, tt := range []struct {
		name string
		spec map[string]any
		want string
	}{
		{"no class", map[string]any{"maxVolumes": int64(3)}, "spec.storageClassName: Required value"},
		{"no volumes", map[string]any{"storageClassName": "c", "maxVolumes": int64(0)}, "spec.maxVolumes: Invalid value: 0: spec.maxVolumes in body should be greater than or equal to 1"},
		{"a reservation of nine days", map[string]any{"storageClassName": "c", "reserveFor": "216h"}, "reserveFor must be 0 or a duration up to 168h, such as 10m"},
		{"a reservation that is no duration", map[string]any{"storageClassName": "c", "reserveFor": "soon"}, "reserveFor must be 0 or a duration up to 168h, such as 10m"},
		{"an unknown scope", map[string]any{"storageClassName": "c", "reuseScope": "everyone"}, `supported values: "namespace", "cluster"`},
		{"members made ahead without a maximum", map[string]any{"storageClassName": "c", "minAvailable": int64(3)}, "minAvailable needs maxVolumes, at least as large"},
		{"an eviction at once", map[string]any{"storageClassName": "c", "evictAfter": "0s"}, "evictAfter must be a duration from 1s to 8760h"},
		{"one watermark", map[string]any{"storageClassName": "c", "evictAboveBytes": "100Mi"}, "evictAboveBytes and evictDownToBytes go together"},
		{"more made ahead than the maximum", map[string]any{"storageClassName": "c", "minAvailable": int64(3), "maxVolumes": int64(2)}, "minAvailable needs maxVolumes, at least as large"},
		{"a key label that is no label key", map[string]any{"storageClassName": "c", "keyLabel": "my key"}, "keyLabel must be a label key"},
		{"an unknown key policy", map[string]any{"storageClassName": "c", "keyLabel": "ci", "keyPolicy": "Always"}, `supported values: "Prefer", "Require"`},
		{"a key required under cluster scope", map[string]any{"storageClassName": "c", "keyLabel": "ci", "keyPolicy": "Require", "reuseScope": "cluster"}, "keyPolicy Require needs keyLabel and reuseScope namespace set in the pool"},
		{"a key required, the scope left to the class", map[string]any{"storageClassName": "c", "keyLabel": "ci", "keyPolicy": "Require"}, "keyPolicy Require needs keyLabel and reuseScope namespace set in the pool"},
		{"a key required without a key label", map[string]any{"storageClassName": "c", "keyPolicy": "Require", "reuseScope": "namespace"}, "keyPolicy Require needs keyLabel and reuseScope namespace set in the pool"},
		{"no volumes per namespace", map[string]any{"storageClassName": "c", "maxVolumesPerNamespace": int64(0), "reuseScope": "namespace"}, "spec.maxVolumesPerNamespace in body should be greater than or equal to 1"},
		{"a share per namespace under cluster scope", map[string]any{"storageClassName": "c", "maxVolumesPerNamespace": int64(2), "reuseScope": "cluster"}, "maxVolumesPerNamespace needs reuseScope namespace set in the pool"},
		{"a share per namespace, the scope left to the class", map[string]any{"storageClassName": "c", "maxVolumesPerNamespace": int64(2)}, "maxVolumesPerNamespace needs reuseScope namespace set in the pool"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "VolumePool",
				"metadata": map[string]any{"name": framework.Name("bad")}, "spec": tt.spec,
			}}
			_, err := dyn.Resource(gvr).Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("create: %v, want it refused as invalid with %q", err, tt.want)
			}
		})
	}
	// 0, as the class parameter takes it, is no reservation.
	zero := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "VolumePool",
		"metadata": map[string]any{"name": framework.Name("zero")}, "spec": map[string]any{"storageClassName": "c", "reserveFor": "0"},
	}}
	if _, err := dyn.Resource(gvr).Create(ctx, zero, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("reserveFor 0 refused: %v", err)
	}
	got, err := pools.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Spec.StorageClassName = "another"
	if _, err := pools.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "storageClassName cannot be changed") {
		t.Fatalf("changing the class: %v, want it refused", err)
	}

	// The status a pool manager writes: the maximum in force (here the
	// pool's), Ready, not Exhausted.
	got, err = pools.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	got.Status = v1alpha1.VolumePoolStatus{ObservedGeneration: got.Generation, Free: 2, Total: 3, MaxVolumes: ptr.To[int32](50), Conditions: []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionTrue, Reason: "SettingsInForce", LastTransitionTime: now},
		{Type: "Exhausted", Status: metav1.ConditionFalse, Reason: "NoClaimWaiting", LastTransitionTime: now},
	}}
	if _, err := pools.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, resource := range []string{"volumepools", "vpool"} {
		out, _, err := kubectl(ctx, "get", resource, name)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		const columns = "NAME CLASS FREE HELD BOUND TOTAL MAX READY EXHAUSTED AGE"
		if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != columns {
			t.Fatalf("kubectl get %s:\n%s\nwant the columns %s and one row", resource, out, columns)
		}
		row := strings.Fields(lines[1])
		if want := []string{name, "build-cache", "2", "0", "0", "3", "50", "True", "False"}; len(row) != len(want)+1 || !slices.Equal(row[:len(want)], want) {
			t.Errorf("kubectl get %s row %q, want %v and an age", resource, lines[1], want)
		}
	}
}

// A VolumePool's settings act on its class as the class's parameters would,
// and unlike them can be changed: a pool of at most one volume refuses the
// second claim, the class's own parameters cannot be edited, and raising
// the pool's maxVolumes serves the waiting claim at once. Deleting the pool
// leaves every volume.
func TestVolumePoolSettingsOverrideTheClass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := framework.Namespace(t)
	r := newPoolCase(t, nil, ns)
	pools := volumePools(t)
	pool, err := pools.Create(ctx, &v1alpha1.VolumePool{
		ObjectMeta: metav1.ObjectMeta{Name: framework.Name("pool")},
		Spec:       v1alpha1.VolumePoolSpec{StorageClassName: r.class, MaxVolumes: ptr.To[int32](1)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pools.Delete(context.Background(), pool.Name, metav1.DeleteOptions{}) })

	r.create(ns, "first")
	first := r.boundTo(ns, "first")
	r.create(ns, "second")
	t.Logf("event: %s", waitEventMessage(t, ns, "second", "PoolExhausted", "of at most 1 volumes"))

	// What the pool replaces: a class's parameters are fixed.
	class, err := framework.Client().StorageV1().StorageClasses().Get(ctx, r.class, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	class.Parameters["maxVolumes"] = "2"
	if _, err := framework.Client().StorageV1().StorageClasses().Update(ctx, class, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "parameters: Forbidden") {
		t.Fatalf("editing the class's parameters: %v, want the API server to refuse it", err)
	}

	pool.Spec.MaxVolumes = ptr.To[int32](2)
	if _, err := pools.Update(ctx, pool, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	second := r.boundTo(ns, "second")
	if second == first {
		t.Fatalf("both claims got volume %s", first)
	}

	if err := pools.Delete(ctx, pool.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := pools.Get(ctx, pool.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}, "the pool to be gone")
	for _, v := range []string{first, second} {
		if _, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, v, metav1.GetOptions{}); err != nil {
			t.Errorf("volume %s after the pool was deleted: %v", v, err)
		}
	}
	r.inv.Check(t, 5*time.Second)
}

// poolCounts is a VolumePool's counts, in the order of its status.
type poolCounts struct{ free, held, reserved, bound, released, total int32 }

func countsOf(s v1alpha1.VolumePoolStatus) poolCounts {
	return poolCounts{s.Free, s.Held, s.Reserved, s.Bound, s.Released, s.Total}
}

// waitPoolStatus waits until the status of r's pool counts want, and
// counts what the class's volumes show: want must be the truth, and the
// status must say it.
func (r *poolCase) waitPoolStatus(step string, want poolCounts) *v1alpha1.VolumePool {
	r.t.Helper()
	client := volumePools(r.t)
	var pool *v1alpha1.VolumePool
	var live poolCounts
	framework.Eventually(r.t, 30*time.Second, func(ctx context.Context) (bool, error) {
		var err error
		if pool, err = client.Get(ctx, r.pool, metav1.GetOptions{}); err != nil {
			return false, err
		}
		pvs, err := framework.Client().CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		live = poolCounts{}
		for i := range pvs.Items {
			if pvs.Items[i].Spec.StorageClassName != r.class {
				continue
			}
			live.total++
			switch pools.StateOf(&pvs.Items[i]) {
			case pools.StateFree:
				live.free++
			case pools.StateHeld:
				live.held++
			case pools.StateReserved:
				live.reserved++
			case pools.StateBound:
				live.bound++
			case pools.StateReleased:
				live.released++
			}
		}
		return live == want && countsOf(pool.Status) == want && pool.Status.ObservedGeneration == pool.Generation, nil
	}, fmt.Sprintf("%s: the pool's status and its volumes to count %+v", step, want))
	r.t.Logf("%s: status %+v", step, countsOf(pool.Status))
	return pool
}

// A VolumePool's status counts its members through a whole cycle, step by
// step, as the volumes show them: bound, reserved for their last claim on
// release (reserveFor), bound again; capacity and the last issue and
// release times follow; a claim waiting at maxVolumes sets Exhausted, with
// an event on the pool, and its end clears it. kubectl shows the counts.
// The pool's events say where it overrides its class, and warn when
// reuseScope widens to cluster.
func TestVolumePoolStatusFollowsTheCycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := framework.Namespace(t)
	r := newVolumePoolCase(t, map[string]string{wellknown.ReserveFor: "10m", wellknown.ReuseScope: wellknown.ReuseScopeNamespace}, ns)
	pools := volumePools(t)

	pool := r.waitPoolStatus("a new pool", poolCounts{})
	if !meta.IsStatusConditionTrue(pool.Status.Conditions, "Ready") || pool.Status.ReuseScope != wellknown.ReuseScopeNamespace {
		t.Fatalf("a new pool: conditions %+v, reuseScope %q; want Ready and namespace", pool.Status.Conditions, pool.Status.ReuseScope)
	}

	r.create(ns, "a")
	r.create(ns, "b")
	a, b := r.boundTo(ns, "a"), r.boundTo(ns, "b")
	pool = r.waitPoolStatus("two claims bound", poolCounts{bound: 2, total: 2})
	if pool.Status.Capacity == nil || pool.Status.Capacity.Cmp(resource.MustParse("2Gi")) != 0 || pool.Status.LastIssued == nil {
		t.Errorf("two claims bound: capacity %v, lastIssued %v; want 2Gi and a time", pool.Status.Capacity, pool.Status.LastIssued)
	}

	r.deleteGone(ns, "a")
	r.reservedFor(a, ns, "a")
	pool = r.waitPoolStatus("one released and reserved", poolCounts{reserved: 1, bound: 1, total: 2})
	if pool.Status.LastReleased == nil {
		t.Error("one released: no lastReleased")
	}

	// At most two volumes, both bound: a third claim waits.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := pools.Get(ctx, r.pool, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Spec.MaxVolumes = ptr.To[int32](2)
		_, err = pools.Update(ctx, p, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	r.create(ns, "c")
	if got := r.boundTo(ns, "c"); got != a {
		t.Fatalf("claim c got %s, want the reservation %s: the pool is full", got, a)
	}
	r.waitPoolStatus("every member bound", poolCounts{bound: 2, total: 2})
	r.create(ns, "d")
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		p, err := pools.Get(ctx, r.pool, metav1.GetOptions{})
		return err == nil && meta.IsStatusConditionTrue(p.Status.Conditions, "Exhausted"), err
	}, "the pool to be Exhausted")
	framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: "default", Kind: "VolumePool", Name: r.pool, Reason: "PoolExhausted", Message: "1 claims"})

	out, _, err := kubectl(ctx, "get", "vpool", r.pool, "--no-headers")
	if err != nil {
		t.Fatal(err)
	}
	if row := strings.Fields(out); len(row) < 7 || strings.Join(row[1:7], " ") != r.class+" 0 0 2 2 2" {
		t.Errorf("kubectl get vpool: %q, want CLASS %s FREE 0 HELD 0 BOUND 2 TOTAL 2 MAX 2", out, r.class)
	}

	// b's release serves d (a reservation for another name is taken when
	// nothing else fits): nobody waits.
	r.deleteGone(ns, "b")
	if got := r.boundTo(ns, "d"); got != b {
		t.Fatalf("claim d got %s, want %s", got, b)
	}
	pool = r.waitPoolStatus("d served", poolCounts{bound: 2, total: 2})
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		p, err := pools.Get(ctx, r.pool, metav1.GetOptions{})
		return err == nil && meta.IsStatusConditionFalse(p.Status.Conditions, "Exhausted"), err
	}, "the pool to be no longer Exhausted")

	r.deleteGone(ns, "c")
	r.deleteGone(ns, "d")
	r.waitPoolStatus("all released", poolCounts{reserved: 2, total: 2})

	// The class says otherwise on both settings (newVolumePoolCase): the
	// pool said so when it was made. Widening the scope is a warning.
	framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: "default", Kind: "VolumePool", Name: r.pool, Reason: "SettingsOverrideClass", Message: "reuseScope namespace (class: cluster)"})
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := pools.Get(ctx, r.pool, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Spec.ReuseScope = wellknown.ReuseScopeCluster
		_, err = pools.Update(ctx, p, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: "default", Kind: "VolumePool", Name: r.pool, Type: "Warning", Reason: "ReuseScopeWidened", Message: "any namespace, data included"})
	r.inv.Check(t, 10*time.Second)
}

// Every VolumePool in the README files and docs/ passes the API server's
// validation of the CRD (its schema and rules), as a user copying it would
// find: each is created in a dry run.
func TestVolumePoolExamplesOfTheDocsAreValid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, _, err := kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(process.RepoRoot(), "manifests", "base", "crd")); err != nil {
		t.Fatal(err)
	}
	files, err := docsyaml.Files(process.RepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := docsyaml.Blocks(process.RepoRoot(), files)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(framework.Config())
	if err != nil {
		t.Fatal(err)
	}
	gvr := v1alpha1.SchemeGroupVersion.WithResource("volumepools")
	objs, at := docsyaml.Of(blocks, "VolumePool")
	if len(objs) == 0 {
		t.Fatal("no VolumePool found in the docs")
	}
	for i, o := range objs {
		obj := &unstructured.Unstructured{Object: o}
		obj.SetName(framework.Name("docs"))
		// The API server serves a new CRD within moments of its creation.
		framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
			_, err := dyn.Resource(gvr).Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, fmt.Errorf("%s: the VolumePool is refused: %w", at[i], err)
			}
			return true, nil
		}, at[i].String()+"'s VolumePool to be admitted")
	}
}
