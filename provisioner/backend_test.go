package provisioner

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/backend/backendtest"
)

// The flow takes every registered backend's valid class, the fake one of
// fakebackend_test.go included, and refuses a parameter none knows.
func TestEveryBackendsClassParses(t *testing.T) {
	withFakeBackend(t)
	root := t.TempDir()
	samples := backendtest.Classes(root)
	samples[fakeBackendName] = fakeClassOf()
	backends := backend.New(backendtest.Deps(t, root))
	for name, b := range backends {
		t.Run(name, func(t *testing.T) {
			class, ok := samples[name]
			if !ok {
				t.Fatalf("backend %q has no valid class in backendtest.Classes", name)
			}
			for _, p := range b.Parameters() {
				if slices.Contains(backend.CommonParams, p) {
					t.Errorf("Parameters() lists %q, which every class may set", p)
				}
			}
			if _, err := backend.ParseParameters(class, backends); err != nil {
				t.Fatalf("its valid class is refused: %v", err)
			}
			withUnknown := class.DeepCopy()
			withUnknown.Parameters["notAParameter"] = "x"
			if _, err := backend.ParseParameters(withUnknown, backends); err == nil || !strings.Contains(err.Error(), "notAParameter") {
				t.Errorf("an unknown parameter: %v, want it named in an error", err)
			}
		})
	}
}

// The flow never branches on a backend's name: no comparison or case
// against one, in any file of the package or of the rooms beside it. It
// asks the backend (Backend, Class) what it can do.
func TestTheFlowBranchesOnNoBackendName(t *testing.T) {
	names := map[string]bool{}
	for name := range backend.New(backend.Deps{}) {
		names[name] = true
	}
	// The flow's package and every room beside it; the backends' own files
	// are TestBackendsAreNamedOnlyInTheirFiles'.
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path == "backend":
			return filepath.SkipDir
		case !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go"):
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	named := func(e ast.Expr) (string, bool) {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return "", false
		}
		v, _ := strconv.Unquote(lit.Value)
		return v, names[v]
	}
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var exprs []ast.Expr
			switch x := n.(type) {
			case *ast.BinaryExpr:
				if x.Op == token.EQL || x.Op == token.NEQ {
					exprs = []ast.Expr{x.X, x.Y}
				}
			case *ast.CaseClause:
				exprs = x.List
			case *ast.IndexExpr:
				exprs = []ast.Expr{x.Index}
			}
			for _, e := range exprs {
				if v, ok := named(e); ok {
					t.Errorf("%s: the flow branches on the backend name %q: ask the backend instead", fset.Position(e.Pos()), v)
				}
			}
			return true
		})
	}
}
