package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// docs/configuration.md's table of labels and annotations lists every name
// internal/wellknown defines, and no other: they are the product's
// interface, and users write some of them by hand.
func TestTheNamesTableIsInternalWellknown(t *testing.T) {
	defined := nameConstants(t, "../internal/wellknown/wellknown.go")
	b, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "| name | kind, on | written by |")
	if !ok {
		t.Fatal("configuration.md has no table of labels and annotations")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	quoted := regexp.MustCompile("`([^`]+)`")
	var documented []string
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		// "`a.io/x`, `/y`": /y is a.io/y.
		domain := ""
		for _, m := range quoted.FindAllStringSubmatch(cells[1], -1) {
			key := m[1]
			if strings.Contains(key, "<") {
				continue // a pattern of keys per volume, made by a function
			}
			if strings.HasPrefix(key, "/") {
				key = domain + key
			} else if d, _, ok := strings.Cut(key, "/"); ok {
				domain = d
			}
			documented = append(documented, key)
		}
	}
	slices.Sort(documented)
	if !slices.Equal(documented, defined) {
		for _, k := range defined {
			if !slices.Contains(documented, k) {
				t.Errorf("internal/wellknown defines %s; the table does not list it", k)
			}
		}
		for _, k := range documented {
			if !slices.Contains(defined, k) {
				t.Errorf("the table lists %s; internal/wellknown does not define it", k)
			}
		}
	}
}

// keyConstants returns the string constants of the Go file at path that are
// keys: a prefix, a slash and a name.
func nameConstants(t *testing.T, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]string{}
	var eval func(ast.Expr) (string, bool)
	eval = func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.STRING {
				return "", false
			}
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		case *ast.Ident:
			v, ok := values[e.Name]
			return v, ok
		case *ast.BinaryExpr:
			a, ok1 := eval(e.X)
			b, ok2 := eval(e.Y)
			return a + b, ok1 && ok2 && e.Op == token.ADD
		case *ast.ParenExpr:
			return eval(e.X)
		}
		return "", false
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if v, ok := eval(vs.Values[i]); ok {
						values[name.Name] = v
					}
				}
			}
		}
	}
	var out []string
	for _, v := range values {
		if prefix, name, ok := strings.Cut(v, "/"); ok && prefix != "" && name != "" && !strings.Contains(v, " ") {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}
