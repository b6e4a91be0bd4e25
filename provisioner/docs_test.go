package provisioner

import (
	"os"
	"regexp"
	"strings"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/docsyaml"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/provisioner/backend"
)

// docs/pools.md's table of StorageClass parameters lists every parameter a
// backend accepts, with the backends that accept it ("all" for every one),
// and no other.
func TestTheParameterTableIsTheBackendsParameters(t *testing.T) {
	b, err := os.ReadFile("../docs/pools.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "| parameter | backend | required | meaning |")
	if !ok {
		t.Fatal("docs/pools.md has no parameter table")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	row := regexp.MustCompile("^\\| `([A-Za-z]+)` \\| ([^|]+) \\|")
	documented := map[string]sets.Set[string]{}
	for _, line := range strings.Split(table, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		backends := sets.New[string]()
		for _, f := range strings.Split(m[2], ",") {
			// "directory, `source: nfs`": only the backend's name counts.
			if name := strings.TrimSpace(f); !strings.Contains(name, "`") {
				backends.Insert(name)
			}
		}
		documented[m[1]] = backends
	}

	all := newBackends(testProvisioner, nil, nil, Config{}, nil, nil)
	names := sets.KeySet(all)
	code := map[string]sets.Set[string]{}
	for _, p := range backend.CommonParams {
		code[p] = sets.New("all")
	}
	for name, b := range all {
		for _, p := range b.Parameters() {
			if code[p] == nil {
				code[p] = sets.New[string]()
			}
			code[p].Insert(name)
		}
	}
	for p, backends := range code {
		if backends.Equal(names) {
			code[p] = sets.New("all")
		}
	}
	for _, p := range sets.List(sets.KeySet(code)) {
		if got, want := documented[p], code[p]; !got.Equal(want) {
			t.Errorf("parameter %s: documented for %v, accepted by %v", p, sets.List(got), sets.List(want))
		}
	}
	for p := range documented {
		if code[p] == nil {
			t.Errorf("parameter %s is documented, and no backend accepts it", p)
		}
	}
}

// docsObjects decodes the objects of kind in the README files and docs/,
// each into a new T, with the blocks they stand in.
func docsObjects[T any](t *testing.T, kind string) ([]*T, []docsyaml.Block) {
	t.Helper()
	files, err := docsyaml.Files("..")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := docsyaml.Blocks("..", files)
	if err != nil {
		t.Fatal(err)
	}
	objs, at := docsyaml.Of(blocks, kind)
	out := make([]*T, len(objs))
	for i, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = new(T)
		if err := yaml.UnmarshalStrict(b, out[i]); err != nil {
			t.Errorf("%s: %v", at[i], err)
		}
	}
	return out, at
}

// docsBackends are the backends of a provisioner whose classes are those
// the docs show, and the backing classes a class pool of theirs names, as
// a driver would make them.
func docsBackends(classes []*storagev1.StorageClass) map[string]backend.Backend {
	known := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, c := range classes {
		if c.Provisioner != testProvisioner {
			_ = known.Add(c)
		}
	}
	for _, c := range classes {
		if name := c.Parameters["backingClass"]; name != "" {
			if _, ok, _ := known.GetByKey(name); !ok {
				_ = known.Add(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "ebs.csi.aws.com", VolumeBindingMode: c.VolumeBindingMode})
			}
		}
	}
	return newBackends(testProvisioner, nil, storagelisters.NewStorageClassLister(known), Config{DirectoryRoot: "/var/lib/reclaimable"}, nil, nil)
}

// Every StorageClass of this provisioner in the README files and docs/ is
// one the provisioner accepts: its parameters as backend.ParseParameters reads them.
func TestTheDocsStorageClassesAreValid(t *testing.T) {
	classes, at := docsObjects[storagev1.StorageClass](t, "StorageClass")
	backends := docsBackends(classes)
	checked := 0
	for i, class := range classes {
		if class.Provisioner != testProvisioner {
			continue
		}
		checked++
		if _, err := backend.ParseParameters(class, backends); err != nil {
			t.Errorf("%s: StorageClass %s is refused: %v", at[i], class.Name, err)
		}
	}
	if checked == 0 {
		t.Error("no StorageClass of this provisioner found in the docs")
	}
}

// Every VolumePool in the README files and docs/ makes of its class one the
// provisioner accepts: the class of its storageClassName the same file
// shows last before it (else anywhere in the docs; else the installation's
// example class, manifests/examples/storageclass.yaml, under that name),
// with the pool's settings over its parameters (pools.EffectiveClass), as
// the provisioner reads it for each claim.
func TestTheDocsVolumePoolsMakeValidClasses(t *testing.T) {
	classes, classAt := docsObjects[storagev1.StorageClass](t, "StorageClass")
	vps, at := docsObjects[v1alpha1.VolumePool](t, "VolumePool")
	backends := docsBackends(classes)
	b, err := os.ReadFile("../manifests/examples/storageclass.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var example storagev1.StorageClass
	if err := yaml.UnmarshalStrict(b, &example); err != nil {
		t.Fatal(err)
	}
	if len(vps) == 0 {
		t.Fatal("no VolumePool found in the docs")
	}
	for i, vp := range vps {
		var class *storagev1.StorageClass
		for j, c := range classes {
			if c.Name != vp.Spec.StorageClassName || c.Provisioner != testProvisioner {
				continue
			}
			sameFileBefore := classAt[j].File == at[i].File && classAt[j].Line < at[i].Line
			if class == nil || sameFileBefore {
				class = c
			}
		}
		if class == nil {
			class = example.DeepCopy()
			class.Name = vp.Spec.StorageClassName
		}
		if _, err := backend.ParseParameters(pools.EffectiveClass(class, vp), backends); err != nil {
			t.Errorf("%s: VolumePool %s over StorageClass %s makes a class the provisioner refuses: %v", at[i], vp.Name, class.Name, err)
		}
	}
}
