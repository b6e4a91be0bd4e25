// Command funclen fails when a function of the product or of its test bed
// (e2e/ and the modules nested in it), tests and generated code aside, is
// longer than -max lines: a function a reader cannot hold in view is split
// into named steps. The test bed is read as closely as the product when a
// run fails, so it is held to the same rule.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	maxLines := flag.Int("max", 80, "the most lines a function may have")
	flag.Parse()
	roots := flag.Args()
	if len(roots) == 0 {
		roots = []string{"."}
	}
	var long []string
	fset := token.NewFileSet()
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				switch d.Name() {
				case "client", "_output", "hack", "testdata":
					return filepath.SkipDir
				}
				if strings.HasPrefix(d.Name(), ".") && path != root {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasPrefix(d.Name(), "zz_generated") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > *maxLines {
					long = append(long, fmt.Sprintf("%s: %s is %d lines", fset.Position(fn.Pos()), fn.Name.Name, n))
				}
			}
			return nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	if len(long) > 0 {
		fmt.Fprintf(os.Stderr, "functions over %d lines; split each into named steps:\n%s\n", *maxLines, strings.Join(long, "\n"))
		os.Exit(1)
	}
}
