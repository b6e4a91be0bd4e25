package backend_test

import (
	"testing"

	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/backend/backendtest"
)

// Every registered backend keeps the contract, and has a valid class in
// backendtest.Classes, so that each new backend is held to it.
func TestBackendContract(t *testing.T) {
	root := t.TempDir()
	samples := backendtest.Classes(root)
	backends := backend.New(backendtest.Deps(t, root))
	for name, b := range backends {
		t.Run(name, func(t *testing.T) {
			class, ok := samples[name]
			if !ok {
				t.Fatalf("backend %q has no valid class in backendtest.Classes", name)
			}
			backendtest.Contract(t, b, class)
		})
	}
	for name := range samples {
		if _, ok := backends[name]; !ok {
			t.Errorf("backendtest.Classes has a class of %q, which is not registered", name)
		}
	}
}
