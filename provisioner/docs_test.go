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

	"github.com/reclaimable/reclaimable/internal/docsyaml"
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

// Every StorageClass of this provisioner in the README files and docs/ is
// one the provisioner accepts: its parameters as backend.ParseParameters reads them.
func TestTheDocsStorageClassesAreValid(t *testing.T) {
	files, err := docsyaml.Files("..")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := docsyaml.Blocks("..", files)
	if err != nil {
		t.Fatal(err)
	}
	objs, at := docsyaml.Of(blocks, "StorageClass")
	classes := make([]*storagev1.StorageClass, len(objs))
	for i, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		classes[i] = &storagev1.StorageClass{}
		if err := yaml.UnmarshalStrict(b, classes[i]); err != nil {
			t.Errorf("%s: %v", at[i], err)
		}
	}
	// The backing classes a class pool names exist, as a driver's: those
	// the docs show, and the others as a driver would make them.
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
	backends := newBackends(testProvisioner, nil, storagelisters.NewStorageClassLister(known), Config{DirectoryRoot: "/var/lib/reclaimable"}, nil, nil)
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
