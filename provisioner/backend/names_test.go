package backend

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// No code outside a backend's files names it: the flow asks the backend
// (Backend, Class) what it can do. A backend's files are those whose
// name starts with its name (class.go, say); what they declare
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
				if id, isIdent := callName(call); ok && isIdent && id == "Register" && len(call.Args) == 2 {
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
					t.Errorf("%s: %s names %s, of the %s backend: ask the backend instead (Backend, Class)", fset.Position(id.Pos()), name, id.Name, b)
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
