package ahead

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/backend/backendtest"
	"github.com/reclaimable/reclaimable/provisioner/provisionertest"
)

// newMembers builds the members made ahead on c, with backends built on
// deps, the class pools of c and nodes (nil: no node cache). A class pool
// holds its places itself (classpool.Provisioner.Reserve): Reserve is for
// the classes that grow through a maker, which these tests make none of.
func newMembers(t *testing.T, c *provisionertest.Cluster, deps backend.Deps, nodes corelisters.NodeLister) *Members {
	classes, flow := c.ClassPools(clock.RealClock{})
	return New(Config{
		Name: provisionertest.Provisioner, ControllerID: provisionertest.ControllerID, Client: c.Client, Volumes: c.Volumes, Nodes: nodes,
		Backends: backend.New(deps), Classes: classes, Pending: flow.Pending, Clock: clock.RealClock{},
		Reserve: func(class, name, _ string, _, _ int) (int, int, bool) {
			t.Errorf("a place for %s of class %s was held outside the class pools", name, class)
			return 0, 0, false
		},
		Made: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "made"}, []string{"class"}),
	})
}

func aheadPool(mutate ...func(*v1alpha1.VolumePool)) *v1alpha1.VolumePool {
	p := &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: "warm"},
		Spec: v1alpha1.VolumePoolSpec{StorageClassName: "pool", MaxVolumes: ptr.To[int32](3), MinAvailable: ptr.To[int32](2)}}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// A pool keeps members ready only where they can be made, kept and fit.
func TestCheckAhead(t *testing.T) {
	root := t.TempDir()
	m := newMembers(t, provisionertest.NewCluster(t, nil), backendtest.Deps(t, root), nil)
	directory := func() *storagev1.StorageClass { return provisionertest.DirectoryClass(root, nil) }
	static := directory()
	static.Parameters = map[string]string{"backend": "static"}
	local := directory()
	local.Parameters = map[string]string{"backend": "local", "nodePath": "/mnt/disk"}
	local.VolumeBindingMode = ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)
	deleting := directory()
	deleting.ReclaimPolicy = ptr.To(corev1.PersistentVolumeReclaimDelete)
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"directory", m.Check(directory(), aheadPool()), ""},
		{"a static pool", m.Check(static, aheadPool()), "makes no volumes"},
		{"reclaim policy Delete", m.Check(deleting, aheadPool()), "reclaimPolicy is Delete"},
		{"a local class without a node to make members on", m.Check(local, aheadPool()), "no Ready, schedulable node"},
		{"a template above maxCapacity", m.Check(provisionertest.DirectoryClass(root, map[string]string{"maxCapacity": "1Gi"}), aheadPool(func(p *v1alpha1.VolumePool) {
			p.Spec.Template = &v1alpha1.VolumePoolTemplate{Capacity: ptr.To(resource.MustParse("5Gi"))}
		})), "above the class's maxCapacity"},
	} {
		if tt.want == "" && tt.err != nil || tt.want != "" && (tt.err == nil || !strings.Contains(tt.err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, tt.err, tt.want)
		}
	}
}

// The members made ahead for a class pool that binds at once are asked of
// its backing class, each through a backing claim of the pool's template
// made ahead for the pool, counted in flight from the moment it is asked.
func TestMakeAheadAsksAClassPoolsBackingClass(t *testing.T) {
	c := provisionertest.NewCluster(t, nil)
	m := newMembers(t, c, backendtest.Deps(t, t.TempDir()), nil)
	class := backendtest.Classes("")["class"]
	pool := &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Spec: v1alpha1.VolumePoolSpec{StorageClassName: class.Name, MinAvailable: ptr.To[int32](1)}}
	if err := m.Check(class, pool); err != nil {
		t.Fatalf("Check = %v", err)
	}
	if made, err := m.Make(context.Background(), class, pool, 1); made != 1 || err != nil {
		t.Fatalf("Make = %d, %v", made, err)
	}
	claims, err := c.Client.CoreV1().PersistentVolumeClaims(provisionertest.BackingNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(claims.Items) != 1 {
		t.Fatalf("backing claims = %v, %v; want one", claims, err)
	}
	backing := &claims.Items[0]
	if backing.Annotations[wellknown.MadeAhead] != "pool" || ptr.Deref(backing.Spec.StorageClassName, "") != "backing" ||
		!backing.Spec.Resources.Requests.Storage().Equal(DefaultCapacity) {
		t.Fatalf("backing claim = %+v, want one of class backing, of the pool's template, made ahead", backing)
	}
	if n := m.InFlight(class.Name); n != 1 {
		t.Errorf("InFlight = %d, want the one asked for", n)
	}
}
