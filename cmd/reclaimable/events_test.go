package main

import (
	"fmt"
	"go/ast"
	gobuild "go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// recordedReasons reads the Go sources of one package (tests left out) and
// returns every event reason it can record. A reason reaches a recorder's
// Event, Eventf or AnnotatedEventf, directly or through a function of the
// package with a parameter named reason; at each such call it must be a
// string literal or constant, a variable named reason, or a field .Reason.
// Those two carry values set elsewhere: the literals and constants
// assigned to a variable named reason or set as Reason in a composite
// literal of the package's own types, and the package-level string
// constants named reason... or Reason..., which are all taken for recorded
// reasons. Any other expression is a problem: the check could not tell
// what it records.
func recordedReasons(dir string) (reasons, problems []string, err error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("no Go files in %s", dir)
	}

	consts := map[string]string{}
	found := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						consts[n.Name] = v
						if isReasonName(n.Name) {
							found[v] = true
						}
					}
				}
			}
		}
	}

	// reasonArg: the functions a reason is passed to, and its position.
	reasonArg := map[string]int{"Event": 2, "Eventf": 2, "AnnotatedEventf": 3}
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if i := paramIndex(fn.Type, "reason"); i >= 0 {
				reasonArg[fn.Name.Name] = i
			}
		}
	}

	resolve := func(e ast.Expr) (string, bool, bool) {
		switch x := e.(type) {
		case *ast.BasicLit:
			if x.Kind == token.STRING {
				v, _ := strconv.Unquote(x.Value)
				return v, true, true
			}
		case *ast.Ident:
			if v, ok := consts[x.Name]; ok {
				return v, true, true
			}
			if x.Name == "reason" {
				return "", false, true // passed on: counted where it is set
			}
		case *ast.SelectorExpr:
			if x.Sel.Name == "Reason" {
				return "", false, true // a field: counted where it is set
			}
		}
		return "", false, false
	}

	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CompositeLit:
				// Reason fields of another package's types (an error's
				// Reason, a condition's) are not events of this one.
				if _, foreign := x.Type.(*ast.SelectorExpr); foreign {
					return false
				}
			case *ast.CallExpr:
				name := ""
				switch fun := x.Fun.(type) {
				case *ast.Ident:
					name = fun.Name
				case *ast.SelectorExpr:
					name = fun.Sel.Name
				}
				i, ok := reasonArg[name]
				if !ok || i >= len(x.Args) {
					return true
				}
				v, isValue, ok := resolve(x.Args[i])
				switch {
				case !ok:
					problems = append(problems, fmt.Sprintf("%s: the reason given to %s is neither a constant nor a variable named reason", fset.Position(x.Pos()), name))
				case isValue:
					found[v] = true
				}
			case *ast.KeyValueExpr:
				if k, ok := x.Key.(*ast.Ident); ok && k.Name == "Reason" {
					v, isValue, ok := resolve(x.Value)
					switch {
					case !ok:
						problems = append(problems, fmt.Sprintf("%s: Reason is set to neither a constant nor a literal", fset.Position(x.Pos())))
					case isValue:
						found[v] = true
					}
				}
			case *ast.AssignStmt:
				for i, lhs := range x.Lhs {
					if id, ok := lhs.(*ast.Ident); ok && id.Name == "reason" && len(x.Rhs) == len(x.Lhs) {
						if v, isValue, _ := resolve(x.Rhs[i]); isValue {
							found[v] = true
						}
					}
				}
			}
			return true
		})
	}
	for r := range found {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	return reasons, problems, nil
}

func isReasonName(name string) bool {
	for _, p := range []string{"reason", "Reason"} {
		if rest, ok := strings.CutPrefix(name, p); ok && rest != "" && rest[0] >= 'A' && rest[0] <= 'Z' {
			return true
		}
	}
	return false
}

// paramIndex returns the position of the parameter called name, or -1.
func paramIndex(ft *ast.FuncType, name string) int {
	i := 0
	for _, field := range ft.Params.List {
		if len(field.Names) == 0 {
			i++
			continue
		}
		for _, n := range field.Names {
			if n.Name == name {
				return i
			}
			i++
		}
	}
	return -1
}

// libraryDir is the source of the provisioning library's controller, as
// the module graph resolves it.
func libraryDir(t *testing.T) string {
	t.Helper()
	pkg, err := gobuild.Import("sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller", ".", gobuild.FindOnly)
	if err != nil {
		t.Fatalf("finding the provisioning library: %v", err)
	}
	return pkg.Dir
}

// The scanner finds reasons given directly, through a helper, through a
// constant and through a struct field, and names what it cannot tell.
func TestRecordedReasonsScansCalls(t *testing.T) {
	dir := t.TempDir()
	src := `package x

const reasonFromConst = "FromConst"
const ReasonOnlyDeclared = "OnlyDeclared"

type rejection struct{ Reason, Message string }

func (c *C) warn(obj any, reason, msg string) { c.recorder.Event(obj, "Warning", reason, msg) }

func (c *C) sync(obj any, r rejection, dynamic string) {
	c.recorder.Eventf(obj, "Normal", "Literal", "%s", "x")
	c.warn(obj, reasonFromConst, "x")
	c.recorder.Event(obj, "Warning", r.Reason, r.Message)
	_ = []rejection{{Reason: "FromField"}}
	reason := "FromVariable"
	c.recorder.Event(obj, "Warning", reason, "x")
	_ = &lib.IgnoredError{Reason: "not an event"}
	c.recorder.Event(obj, "Warning", dynamic, "x")
}
`
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x_test.go"), []byte("package x\nfunc f() { c.recorder.Event(nil, \"\", \"InATest\", \"\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reasons, problems, err := recordedReasons(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"FromConst", "FromField", "FromVariable", "Literal", "OnlyDeclared"}; strings.Join(reasons, ",") != strings.Join(want, ",") {
		t.Errorf("reasons = %v, want %v", reasons, want)
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "x.go:18") {
		t.Errorf("problems = %q, want one at x.go:18 (the dynamic reason)", problems)
	}
}
