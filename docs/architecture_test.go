package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// ARCHITECTURE.md names every Go package of the repository, and only
// packages that exist: the map is where a reader starts, and a package it
// does not name, or one it names that is gone, sends them astray. A name
// ending in "/..." covers the packages under it (the generated client).
func TestTheArchitectureNamesEveryPackage(t *testing.T) {
	b, err := os.ReadFile("../ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(string(b), "\n## Packages\n")
	if !ok {
		t.Fatal("ARCHITECTURE.md has no section Packages")
	}
	list, _, _ = strings.Cut(list, "\n## ")
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z0-9_./]+)`").FindAllStringSubmatch(list, -1) {
		named[m[1]] = true
	}

	packages := goPackages(t, "..")
	for _, pkg := range packages {
		if !named[pkg] && !coveredByTree(named, pkg) {
			t.Errorf("ARCHITECTURE.md does not name package %s", pkg)
		}
	}
	for name := range named {
		if tree, ok := strings.CutSuffix(name, "/..."); ok {
			if !slices.ContainsFunc(packages, func(p string) bool { return strings.HasPrefix(p, tree+"/") }) {
				t.Errorf("ARCHITECTURE.md names %s, but no package is under %s", name, tree)
			}
			continue
		}
		// A word without a slash may be a top-level package or any other
		// name in backquotes; a path must be a package.
		if strings.Contains(name, "/") && !slices.Contains(packages, name) {
			t.Errorf("ARCHITECTURE.md names package %s, which does not exist", name)
		}
	}
}

// coveredByTree reports whether a "tree/..." name covers pkg.
func coveredByTree(named map[string]bool, pkg string) bool {
	for name := range named {
		if tree, ok := strings.CutSuffix(name, "/..."); ok && strings.HasPrefix(pkg, tree+"/") {
			return true
		}
	}
	return false
}

// goPackages lists the directories under root that hold Go files, as
// slash-separated paths relative to root: every package, the modules
// nested in e2e/ included.
func goPackages(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "_output" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	delete(seen, ".")
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	if len(out) < 40 {
		t.Fatalf("found only %d packages under %s", len(out), root)
	}
	return out
}
