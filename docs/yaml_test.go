package docs

import (
	"testing"

	"github.com/reclaimable/reclaimable/internal/docsyaml"
)

// Every YAML example of the README files and docs/ is a whole object (or
// several), which parses, or a part of one marked "# fragment".
func TestEveryYAMLExampleIsAWholeObjectOrAMarkedFragment(t *testing.T) {
	files, err := docsyaml.Files(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := docsyaml.Blocks(repoRoot, files)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		t.Fatal("no YAML example found")
	}
}
