// Package docsyaml finds the YAML examples of the project's Markdown (the
// README files and docs/), so that tests can check that each whole object
// a user may copy parses and is valid: a block is a whole object, or
// several separated by "---", unless its first line is a comment that
// starts with "# fragment", which marks a part of one.
package docsyaml

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// Block is one ```yaml block of a Markdown file.
type Block struct {
	// File is the file's path, relative to the repository; Line the
	// block's first line.
	File string
	Line int
	// Fragment: marked as a part of an object, and not checked as one.
	Fragment bool
	// Objects are the block's documents, decoded; nil for a fragment.
	Objects []map[string]any
}

func (b Block) String() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

// Files lists the Markdown files whose examples are checked, relative to
// root: README.md, docs/*.md, and every README.md one directory down.
func Files(root string) ([]string, error) {
	var out []string
	for _, pattern := range []string{"README.md", "docs/*.md", "*/README.md", "charts/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return nil, err
		}
		for _, f := range m {
			rel, _ := filepath.Rel(root, f)
			out = append(out, rel)
		}
	}
	return out, nil
}

var fence = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// Blocks returns the YAML blocks of the files, relative to root. A block
// that is no fragment and does not decode, or has a document without
// apiVersion and kind, is an error naming its place.
func Blocks(root string, files []string) ([]Block, error) {
	var out []Block
	var errs []string
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		for _, m := range fence.FindAllSubmatchIndex(b, -1) {
			text := string(b[m[2]:m[3]])
			blk := Block{File: f, Line: bytes.Count(b[:m[0]], []byte("\n")) + 1}
			first, _, _ := strings.Cut(text, "\n")
			if strings.HasPrefix(strings.TrimSpace(first), "# fragment") {
				blk.Fragment = true
				out = append(out, blk)
				continue
			}
			for _, doc := range strings.Split(text, "\n---\n") {
				var obj map[string]any
				if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
					errs = append(errs, fmt.Sprintf("%s: %v", blk, err))
					continue
				}
				if obj == nil {
					continue
				}
				if obj["apiVersion"] == nil || obj["kind"] == nil {
					errs = append(errs, fmt.Sprintf("%s: a document without apiVersion and kind: a whole object has them, and a part of one starts with a \"# fragment\" comment", blk))
					continue
				}
				blk.Objects = append(blk.Objects, obj)
			}
			out = append(out, blk)
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return out, nil
}

// Of returns the objects of kind in blocks, each with the block it is in.
func Of(blocks []Block, kind string) (objs []map[string]any, at []Block) {
	for _, b := range blocks {
		for _, o := range b.Objects {
			if o["kind"] == kind {
				objs = append(objs, o)
				at = append(at, b)
			}
		}
	}
	return objs, at
}
