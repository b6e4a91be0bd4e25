package controller

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Every loop of the product has one shape, Loop: no package outside this
// one builds a workqueue or registers an event handler of its own. The
// one exception is the provisioner's wrapper of the claim informer it hands
// the provisioning library, which keeps the handler the library registers
// (the only way into the library's queue).
func TestEveryLoopIsALoop(t *testing.T) {
	root := filepath.Join("..", "..")
	allowed := map[string]bool{
		"provisioner/controller.go (*claimInformer).AddEventHandlerWithResyncPeriod": true,
	}
	handlers := map[string]bool{"AddEventHandler": true, "AddEventHandlerWithResyncPeriod": true, "AddEventHandlerWithOptions": true}
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel == "internal/controller", rel == "e2e", rel == "client", rel == "hack", rel == "_output",
				strings.HasPrefix(d.Name(), ".") && rel != ".":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "k8s.io/client-go/util/workqueue" {
				t.Errorf("%s imports the workqueue: a loop is a controller.Loop", rel)
			}
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || !handlers[sel.Sel.Name] {
					return true
				}
				if where := rel + " " + funcName(fn); !allowed[where] {
					t.Errorf("%s: %s registers an event handler: a loop watches through controller.Loop, anything else through controller.Handle",
						fset.Position(call.Pos()), where)
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d Go files under %s", checked, root)
	}
}

// funcName names fn as "(*T).Name" for a method, "Name" for a function.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	recv := fn.Recv.List[0].Type
	star := ""
	if s, ok := recv.(*ast.StarExpr); ok {
		recv, star = s.X, "*"
	}
	if idx, ok := recv.(*ast.IndexExpr); ok {
		recv = idx.X
	}
	if id, ok := recv.(*ast.Ident); ok {
		return "(" + star + id.Name + ")." + fn.Name.Name
	}
	return fn.Name.Name
}
