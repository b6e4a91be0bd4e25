package provisioner

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/internal/keys"
)

// contractClasses has a valid class of each registered backend: a backend
// without one fails TestBackendContract, so each new backend is held to it.
func contractClasses(root string) map[string]*storagev1.StorageClass {
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	class := func(params map[string]string, mods ...func(*storagev1.StorageClass)) *storagev1.StorageClass {
		c := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Provisioner: testProvisioner, Parameters: params,
			ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimRetain)}
		for _, m := range mods {
			m(c)
		}
		return c
	}
	return map[string]*storagev1.StorageClass{
		backendDirectory: class(map[string]string{"backend": "directory", "baseDir": root, "source": "hostPath", "hostPath": "/mnt/pool"}),
		backendLocal:     class(map[string]string{"backend": "local", "nodePath": "/var/lib/pool"}, func(c *storagev1.StorageClass) { c.VolumeBindingMode = &wffc }),
		backendStatic:    class(map[string]string{"backend": "static"}),
		backendClass:     class(map[string]string{"backend": "class", "backingClass": "backing"}),
		fakeBackendName:  class(map[string]string{"backend": fakeBackendName}),
	}
}

// Every backend keeps the promises the flow relies on, the fake one of
// fakebackend_test.go included: the flow asks them instead of naming a
// backend.
func TestBackendContract(t *testing.T) {
	withFakeBackend(t)
	root := t.TempDir()
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := classes.Add(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "backing"}, Provisioner: "csi.example.com",
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete)}); err != nil {
		t.Fatal(err)
	}
	backends := newBackends(testProvisioner, nil, storagelisters.NewStorageClassLister(classes),
		Config{DirectoryRoot: root, LifecycleImage: "reclaimable:test"}, nil, nil)
	samples := contractClasses(root)
	foreign := volume("foreign", "1Gi", func(pv *corev1.PersistentVolume) { pv.Annotations[keys.ProvisionedBy] = "other/provisioner" })
	for name, b := range backends {
		t.Run(name, func(t *testing.T) {
			class, ok := samples[name]
			if !ok {
				t.Fatalf("backend %q has no valid class in contractClasses", name)
			}
			for _, p := range b.parameters() {
				if slices.Contains(commonParams, p) {
					t.Errorf("parameters() lists %q, which every class may set", p)
				}
			}
			params, err := parseParameters(class, backends)
			if err != nil {
				t.Fatalf("its sample class is refused: %v", err)
			}
			withUnknown := class.DeepCopy()
			withUnknown.Parameters["notAParameter"] = "x"
			if _, err := parseParameters(withUnknown, backends); err == nil || !strings.Contains(err.Error(), "notAParameter") {
				t.Errorf("an unknown parameter: %v, want it named in an error", err)
			}
			if params.pool.isMember(foreign) {
				t.Error("isMember takes a volume of another provisioner")
			}
			maker, advice := params.pool.maker()
			if maker == nil && params.pool.backingClass() == nil && advice == "" {
				t.Error("a pool that cannot grow must say what an administrator can do (maker's advice)")
			}
			if maker != nil && params.pool.backingClass() != nil {
				t.Error("a pool grows either through a maker or through a backing class, not both")
			}
			switch how, err := b.evicts(); {
			case how == evictNever && err == nil:
				t.Error("evicts() says never without saying why")
			case how != evictNever && err != nil:
				t.Errorf("evicts() can evict, yet gives an error: %v", err)
			}
			if !b.measures() {
				if _, _, err := b.usage(volume("pv", "1Gi"), time.Now().Add(time.Minute)); !errors.Is(err, errNotMeasured) {
					t.Errorf("measures() is false, yet usage gives %v, want errNotMeasured", err)
				}
			}
		})
	}
	for name := range samples {
		if _, ok := backends[name]; !ok {
			t.Errorf("contractClasses has a class of %q, which is not registered", name)
		}
	}
}

// No code outside a backend's files names it: the flow asks the backend
// (backend, classBackend) what it can do. A backend's files are those whose
// name starts with its name (class.go, classahead.go); what they declare
// (its name's constant, its types) appears in no other file.
func TestBackendsAreNamedOnlyInTheirFiles(t *testing.T) {
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(".", e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = f
	}
	// The backends, by the constant each registers under.
	owner := map[string]string{} // declared name -> backend
	for name, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Name.Name != "init" || fn.Recv != nil {
				continue
			}
			ast.Inspect(fn, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if id, isIdent := callName(call); ok && isIdent && id == "register" && len(call.Args) == 2 {
					if c, ok := call.Args[0].(*ast.Ident); ok {
						backend := constValue(files, c.Name)
						if !strings.HasPrefix(name, backend) {
							t.Errorf("%s registers backend %q: a backend registers in a file named after it", name, backend)
						}
						owner[c.Name] = backend
					}
				}
				return true
			})
		}
	}
	if len(owner) < 4 {
		t.Fatalf("found %d registered backends, want the four at least: %v", len(owner), owner)
	}
	backends := map[string]bool{}
	for _, b := range owner {
		backends[b] = true
	}
	// The types each backend's files declare are its own.
	for name, f := range files {
		b := backendOfFile(name, backends)
		if b == "" {
			continue
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					owner[s.(*ast.TypeSpec).Name.Name] = b
				}
			}
		}
	}
	for name, f := range files {
		own := backendOfFile(name, backends)
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				if b, named := owner[id.Name]; named && b != own {
					t.Errorf("%s: %s names %s, of the %s backend: ask the backend instead (backend, classBackend)", fset.Position(id.Pos()), name, id.Name, b)
				}
			}
			return true
		})
	}
}

func callName(call *ast.CallExpr) (string, bool) {
	if call == nil {
		return "", false
	}
	id, ok := call.Fun.(*ast.Ident)
	if !ok {
		return "", false
	}
	return id.Name, true
}

// constValue is the string value of the package constant called name.
func constValue(files map[string]*ast.File, name string) string {
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if n.Name == name && i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
							v, _ := strconv.Unquote(lit.Value)
							return v
						}
					}
				}
			}
		}
	}
	return ""
}

// backendOfFile is the backend whose files include name, or "".
func backendOfFile(name string, backends map[string]bool) string {
	best := ""
	for b := range backends {
		if strings.HasPrefix(name, b) && len(b) > len(best) {
			best = b
		}
	}
	return best
}
