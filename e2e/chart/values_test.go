package chart

import (
	"bufio"
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The values table of docs/install.md lists every value values.yaml
// documents (a key after a "# --" comment), with its default where it is
// a scalar or an empty list or map.
func TestTheValuesTableIsValuesYAML(t *testing.T) {
	documented := documentedValues(t, chartDir+"/values.yaml")
	table := valuesTable(t, "../../docs/install.md")
	if got, want := slices.Sorted(maps.Keys(table)), slices.Sorted(maps.Keys(documented)); !slices.Equal(got, want) {
		t.Fatalf("docs/install.md lists values %v, values.yaml documents %v", got, want)
	}
	for key, v := range documented {
		if def, ok := scalarDefault(v); ok && table[key] != def {
			t.Errorf("docs/install.md gives %s the default %s, values.yaml %s", key, table[key], def)
		}
	}
}

// documentedValues maps the dotted path of each key of values.yaml that
// follows a "# --" comment to its value.
func documentedValues(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	var stack []string // the keys of the enclosing maps, by depth
	marked := false
	keyLine := regexp.MustCompile(`^( *)([A-Za-z][A-Za-z0-9]*):`)
	s := bufio.NewScanner(strings.NewReader(string(b)))
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "# --") {
			marked = true
			continue
		}
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		depth := len(m[1]) / 2
		stack = append(stack[:depth], m[2])
		if marked {
			key := strings.Join(stack, ".")
			v, ok := lookup(values, stack)
			if !ok {
				t.Fatalf("values.yaml: no value at %s", key)
			}
			out[key] = v
		}
		marked = false
	}
	return out
}

func lookup(values map[string]any, path []string) (any, bool) {
	var v any = values
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// valuesTable maps each value of the table headed "| value | default |"
// to its default cell.
func valuesTable(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "| value | default | what |\n|---|---|---|\n")
	if !ok {
		t.Fatalf("%s has no values table", path)
	}
	out := map[string]string{}
	for _, row := range strings.Split(rest, "\n") {
		cells := strings.Split(row, " | ")
		if !strings.HasPrefix(row, "| `") || len(cells) < 3 {
			break
		}
		out[strings.Trim(strings.TrimPrefix(cells[0], "| "), "`")] = cells[1]
	}
	return out
}

// scalarDefault is how the table writes v, a scalar or an empty list or
// map: in backquotes, as JSON would.
func scalarDefault(v any) (string, bool) {
	switch v := v.(type) {
	case map[string]any:
		if len(v) > 0 {
			return "", false
		}
	case []any:
		if len(v) > 0 {
			return "", false
		}
	case string:
		if v != "" {
			return "`" + v + "`", true
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", false
	}
	return "`" + string(b) + "`", true
}
