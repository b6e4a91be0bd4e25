// Package docs holds the project's documentation; its test checks that
// every relative link in it, in README.md and in the package READMEs
// resolves, #anchors included.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the repository, seen from this package's directory.
const repoRoot = ".."

// skipDirs are not documentation: build output, and the Go sources the
// local control plane is built from.
var skipDirs = map[string]bool{".git": true, "_output": true}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan   = regexp.MustCompile("`[^`]*`")
	link       = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// prose returns the lines of a Markdown file outside fenced code blocks,
// with inline code spans removed: a link or heading in code is not one.
func prose(text string) []string {
	var out []string
	inCode := false
	for _, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			inCode = !inCode
			out = append(out, "")
			continue
		}
		if inCode {
			out = append(out, "")
			continue
		}
		out = append(out, l)
	}
	return out
}

// slug is GitHub's anchor for a heading: lower case, punctuation dropped
// (letters, digits, '-', '_' and spaces are kept), spaces made '-'.
func slug(h string) string {
	h = strings.ReplaceAll(h, "`", "")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchors returns the anchors a Markdown text defines: one per heading,
// numbered as GitHub numbers repeated ones, and any <a name> or <a id>.
func anchors(text string) map[string]bool {
	set := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(text) {
		if m := heading.FindStringSubmatch(l); m != nil {
			s := slug(m[1])
			if n := seen[s]; n > 0 {
				set[s+"-"+strconv.Itoa(n)] = true
			} else {
				set[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			set[m[1]] = true
		}
	}
	return set
}

// brokenLinks returns a line per relative link of the Markdown file path
// (under root) whose file or anchor does not exist.
func brokenLinks(root, path string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		return nil, err
	}
	var broken []string
	for i, l := range prose(string(data)) {
		for _, m := range link.FindAllStringSubmatch(codeSpan.ReplaceAllString(l, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				dest = filepath.Join(filepath.Dir(path), file)
			}
			where := path + ":" + strconv.Itoa(i+1) + ": " + target
			destData, err := os.ReadFile(filepath.Join(root, dest))
			if err != nil {
				if st, serr := os.Stat(filepath.Join(root, dest)); serr == nil && st.IsDir() && anchor == "" {
					continue
				}
				broken = append(broken, where+": no file "+dest)
				continue
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				broken = append(broken, where+": an anchor into a file that is not Markdown")
				continue
			}
			if !anchors(string(destData))[anchor] {
				broken = append(broken, where+": no heading of "+dest+" has the anchor #"+anchor)
			}
		}
	}
	return broken, nil
}

// markdownFiles returns the Markdown files under root, relative to it.
func markdownFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (skipDirs[d.Name()] || p == filepath.Join(root, "e2e", "tools")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	return files, err
}

func TestEveryRelativeLinkResolves(t *testing.T) {
	files, err := markdownFiles(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"README.md", "docs/install.md", "podwatcher/README.md"} {
		found := false
		for _, f := range files {
			found = found || filepath.ToSlash(f) == want
		}
		if !found {
			t.Fatalf("%s is not among the Markdown files found: %v", want, files)
		}
	}
	for _, f := range files {
		broken, err := brokenLinks(repoRoot, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range broken {
			t.Error(b)
		}
	}
}

// The check itself: a broken file, a broken anchor and a broken anchor in
// the same file are found; links in code, external links, repeated headings
// and directories are not taken for broken ones.
func TestBrokenLinksAreFound(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sub/target.md", "# Title\n\n## The `reserveFor`: a claim's name\n\n## Again\n\n## Again\n\n<a name=\"custom\"></a>\n")
	write("README.md", strings.Join([]string{
		"# Top",
		"[ok](sub/target.md#the-reservefor-a-claims-name) [ok](sub/target.md#again-1) [ok](sub/target.md#custom)",
		"[ok](sub/) [ok](https://example.com/x#y) [ok](#top) `[code](nowhere.md)`",
		"```",
		"[code](nowhere.md)",
		"```",
		"[bad](missing.md) [bad](sub/target.md#nowhere) [bad](#nowhere) [bad](sub/target.md#again-2)",
	}, "\n"))
	broken, err := brokenLinks(root, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"missing.md", "sub/target.md#nowhere", "#nowhere", "sub/target.md#again-2"}
	if len(broken) != len(want) {
		t.Fatalf("found %d broken links, want %d: %q", len(broken), len(want), broken)
	}
	for i, w := range want {
		if !strings.Contains(broken[i], ": "+w+": ") {
			t.Errorf("broken link %d = %q, want it to name %s", i, broken[i], w)
		}
	}
}
