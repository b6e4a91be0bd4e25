package provisioner

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
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
	for _, p := range commonParams {
		code[p] = sets.New("all")
	}
	for name, b := range all {
		for _, p := range b.parameters() {
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
