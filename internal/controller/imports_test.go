package controller

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The plumbing knows no pool: the rules of pools (internal/pools) and the
// VolumePool API and its generated client build on it, never the other way
// round.
func TestPlumbingImportsNoDomain(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{
		"github.com/reclaimable/reclaimable/apis",
		"github.com/reclaimable/reclaimable/client",
		"github.com/reclaimable/reclaimable/internal/pools",
	}
	fset := token.NewFileSet()
	checked := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if path == bad || strings.HasPrefix(path, bad+"/") {
					t.Errorf("%s imports %s: the plumbing must not know the pools' API or rules", e.Name(), path)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no Go file to check")
	}
}
