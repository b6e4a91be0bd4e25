package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// docs/configuration.md is the reference an administrator trusts: its
// tables list every flag, event reason and metric, and nothing else. These
// tests hold the tables against the binary and the code. A table is read
// from a "### " subsection of a "## " section (Flags, Events, Metrics); only
// the first cell of each row counts, so a name mentioned in a description is
// not taken for a row of its own.

const referencePath = "../../docs/configuration.md"

var controllerSubcommands = []string{"podwatcher", "provisioner", "releaser"}

// referenceTables returns, per "### " heading of the "## section" of the
// reference text, the first submatch of name in the first cell of each table
// row.
func referenceTables(text, section string, name *regexp.Regexp) (map[string][]string, bool) {
	tables := map[string][]string{}
	inSection, found := false, false
	current := ""
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(l, "## "):
			inSection = strings.TrimSpace(strings.TrimPrefix(l, "## ")) == section
			found = found || inSection
			current = ""
			continue
		case !inSection:
			continue
		case strings.HasPrefix(l, "### "):
			current = strings.TrimSpace(strings.TrimPrefix(l, "### "))
			continue
		case !strings.HasPrefix(l, "|"):
			continue
		}
		cells := strings.Split(l, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			tables[current] = append(tables[current], m[1])
		}
	}
	return tables, found
}

func readReference(t *testing.T, section string, name *regexp.Regexp) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	tables, found := referenceTables(string(data), section, name)
	if !found {
		t.Fatalf("%s has no \"## %s\" section", referencePath, section)
	}
	return tables
}

// controllerOf returns the controller a "### " heading names ("" for none).
func controllerOf(heading string) string {
	for _, c := range controllerSubcommands {
		if strings.Contains(strings.ToLower(heading), c) {
			return c
		}
	}
	return ""
}

// difference returns what want lacks of have and what have lacks of want,
// by match (equality for plain names).
func difference(documented, actual []string, match func(doc, act string) bool) (undocumented, absent []string) {
	for _, a := range actual {
		if !slices.ContainsFunc(documented, func(d string) bool { return match(d, a) }) {
			undocumented = append(undocumented, a)
		}
	}
	for _, d := range documented {
		if !slices.ContainsFunc(actual, func(a string) bool { return match(d, a) }) {
			absent = append(absent, d)
		}
	}
	return undocumented, absent
}

func equal(a, b string) bool { return a == b }

// Flags.

var flagName = regexp.MustCompile("`--([A-Za-z0-9][A-Za-z0-9_.-]*)")

// helpFlags runs the binary's run function with "<subcommand> --help" and
// returns the flag names it prints.
func helpFlags(t *testing.T, subcommand string) []string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{subcommand, "--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("reclaimable %s --help exited %d; stderr:\n%s", subcommand, code, stderr.String())
	}
	// pflag's usage lists "      --name type   usage", or "  -v, --v Level"
	// for a flag with a shorthand.
	line := regexp.MustCompile(`^\s+(?:-[A-Za-z0-9], )?--([A-Za-z0-9][A-Za-z0-9_.-]*)(?:[ \t]|$)`)
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(append(stdout.Bytes(), stderr.Bytes()...)))
	for sc.Scan() {
		if m := line.FindStringSubmatch(sc.Text()); m != nil {
			names = append(names, m[1])
		}
	}
	if len(names) == 0 {
		t.Fatalf("reclaimable %s --help printed no flags; output:\n%s%s", subcommand, stdout.String(), stderr.String())
	}
	sort.Strings(names)
	return names
}

// documentedFlags returns the flags the reference lists for a subcommand:
// the subsection whose heading names a controller lists its flags, any
// other subsection flags every subcommand has; `all` has them all.
func documentedFlags(tables map[string][]string, subcommand string) []string {
	var names []string
	for heading, flags := range tables {
		if c := controllerOf(heading); c == "" || subcommand == "all" || c == subcommand {
			names = append(names, flags...)
		}
	}
	return names
}

func TestReferenceFlagTablesMatchTheBinary(t *testing.T) {
	tables := readReference(t, "Flags", flagName)
	for _, sub := range controllerSubcommands {
		if len(documentedFlags(tables, sub)) == len(documentedFlags(tables, "")) {
			t.Fatalf("the Flags section of %s has no table for `%s`", referencePath, sub)
		}
	}
	for _, sub := range append(slices.Clone(controllerSubcommands), "all") {
		t.Run(sub, func(t *testing.T) {
			undocumented, absent := difference(documentedFlags(tables, sub), helpFlags(t, sub), equal)
			for _, name := range undocumented {
				t.Errorf("reclaimable %s has the flag --%s, which the Flags tables of %s do not list for it", sub, name, referencePath)
			}
			for _, name := range absent {
				t.Errorf("the Flags tables of %s list --%s for `%s`, which the binary does not have", referencePath, name, sub)
			}
		})
	}
}

// Metrics.

var metricName = regexp.MustCompile("`([a-z_][a-z0-9_]*\\*?)")

// metricMatches reports whether a documented name, which may end in "*",
// names a registered metric.
func metricMatches(doc, name string) bool {
	ok, err := path.Match(doc, name)
	return err == nil && ok
}

// registeredMetrics builds the environment and controllers of `reclaimable
// all` as the binary does, without starting them, and returns the names of
// every metric registered.
func registeredMetrics(t *testing.T) []string {
	t.Helper()
	var cfg configs
	fs := pflag.NewFlagSet("reclaimable all", pflag.ContinueOnError)
	cfg.common.AddFlags(fs)
	cfg.addFlags("all", fs)
	if err := fs.Parse([]string{"--kubeconfig=" + writeKubeconfig(t)}); err != nil {
		t.Fatal(err)
	}
	env, _, err := build("all", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return env.Registry.Names()
}

// writeKubeconfig writes a kubeconfig naming an API server that nothing
// asks: the controllers are built, never run.
func writeKubeconfig(t *testing.T) string {
	t.Helper()
	p := t.TempDir() + "/kubeconfig"
	const kc = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReferenceMetricTablesMatchTheRegistry(t *testing.T) {
	var documented []string
	for _, names := range readReference(t, "Metrics", metricName) {
		documented = append(documented, names...)
	}
	registered := registeredMetrics(t)
	for _, want := range []string{"reclaimable_podwatcher_claims_created_total", "reclaimable_provisioner_pool_members", "reclaimable_releaser_releases_total", "reclaimable_workqueue_depth", "reclaimable_api_requests_total"} {
		if !slices.Contains(registered, want) {
			t.Fatalf("the registry of `reclaimable all` lacks %s; it has %v", want, registered)
		}
	}
	undocumented, absent := difference(documented, registered, metricMatches)
	for _, name := range undocumented {
		t.Errorf("the controllers register the metric %s, which the Metrics tables of %s do not list", name, referencePath)
	}
	for _, name := range absent {
		t.Errorf("the Metrics tables of %s list %s, which no controller registers", referencePath, name)
	}
}

// Events.

var eventReason = regexp.MustCompile("`([A-Z][A-Za-z]+)`")

func TestReferenceEventTablesMatchTheCode(t *testing.T) {
	tables := readReference(t, "Events", eventReason)
	recorded := map[string][]string{}
	for _, c := range controllerSubcommands {
		reasons, problems, err := recordedReasons("../../" + c)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s", c, p)
		}
		recorded[c] = reasons
	}
	// The provisioning library records events of its own on our claims
	// and volumes.
	lib, problems, err := recordedReasons(libraryDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Fatalf("cannot tell the reasons the provisioning library records: %v", problems)
	}
	// Its Provisioning notice is never written (provisioner/libevents.go).
	lib = slices.DeleteFunc(lib, func(r string) bool { return r == "Provisioning" })
	recorded["provisioner"] = append(recorded["provisioner"], lib...)
	// The pool manager runs in the provisioner's process, and the
	// provisioner's loops live in packages below it.
	loops, err := filepath.Glob("../../provisioner/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range append([]string{"../../poolmanager"}, loops...) {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || !hasGoFiles(t, dir) {
			continue
		}
		reasons, problems, err := recordedReasons(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s", dir, p)
		}
		recorded["provisioner"] = append(recorded["provisioner"], reasons...)
	}

	documented := map[string][]string{}
	for heading, reasons := range tables {
		c := controllerOf(heading)
		if c == "" {
			t.Errorf("the Events section of %s has a table under %q, which names no controller", referencePath, heading)
		}
		documented[c] = append(documented[c], reasons...)
	}
	for _, c := range controllerSubcommands {
		if len(recorded[c]) == 0 {
			t.Fatalf("found no event reason in the code of the %s", c)
		}
		undocumented, absent := difference(documented[c], recorded[c], equal)
		for _, r := range undocumented {
			t.Errorf("the %s records events with the reason %s, which the %s events table of %s does not list", c, r, c, referencePath)
		}
		for _, r := range absent {
			t.Errorf("the %s events table of %s lists %s, which the %s never records", c, referencePath, r, c)
		}
	}
}

// hasGoFiles reports whether dir holds Go files other than tests.
func hasGoFiles(t *testing.T, dir string) bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(entries, func(e os.DirEntry) bool {
		return strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go")
	})
}

// Each check fails on a table that lacks a name or lists one too many.
func TestReferenceChecksFail(t *testing.T) {
	text := strings.Join([]string{
		"## Flags", "### Every subcommand", "| flag | d |", "|---|---|", "| `--kubeconfig` | x |",
		"### `podwatcher`", "| `--namespace`, `--gone` | `--in-a-description` |",
		"## Metrics", "### All", "| `reclaimable_workqueue_depth` | |", "| `go_*`, `process_*` | |",
		"## Events", "### Releaser events", "| `Released` | Normal |",
	}, "\n")
	flags, _ := referenceTables(text, "Flags", flagName)
	undocumented, absent := difference(documentedFlags(flags, "podwatcher"), []string{"kubeconfig", "namespace", "cleanup-interval"}, equal)
	if !slices.Equal(undocumented, []string{"cleanup-interval"}) || !slices.Equal(absent, []string{"gone"}) {
		t.Errorf("flags: undocumented %v, absent %v; want [cleanup-interval] and [gone]", undocumented, absent)
	}
	metrics, _ := referenceTables(text, "Metrics", metricName)
	undocumented, absent = difference(metrics["All"], []string{"reclaimable_workqueue_adds_total", "go_goroutines"}, metricMatches)
	if !slices.Equal(undocumented, []string{"reclaimable_workqueue_adds_total"}) || !slices.Equal(absent, []string{"reclaimable_workqueue_depth", "process_*"}) {
		t.Errorf("metrics: undocumented %v, absent %v", undocumented, absent)
	}
	events, _ := referenceTables(text, "Events", eventReason)
	undocumented, absent = difference(events["Releaser events"], []string{"Associated"}, equal)
	if !slices.Equal(undocumented, []string{"Associated"}) || !slices.Equal(absent, []string{"Released"}) {
		t.Errorf("events: undocumented %v, absent %v", undocumented, absent)
	}
}
