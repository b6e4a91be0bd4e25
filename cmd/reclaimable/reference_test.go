package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The Flags section of docs/configuration.md documents every flag of every
// subcommand, so that an administrator can trust it. Its flag tables are
// read from the "### " subsections of "## Flags": the subsection
// whose heading names a subcommand (`podwatcher`, `provisioner`, `releaser`)
// lists that controller's flags, any other subsection lists flags that every
// subcommand has. `all` has the common flags and those of the three
// controllers. Only the first cell of each table row counts, so a flag
// mentioned in a description is not taken for a row of its own.

const referencePath = "../../docs/configuration.md"

var controllerSubcommands = []string{"podwatcher", "provisioner", "releaser"}

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

// referenceFlagTables returns, per subsection of the reference's Flags
// section, the flags named in the first cell of its table rows. The key is
// the subcommand the heading names, or "" for flags common to all.
func referenceFlagTables(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	flagName := regexp.MustCompile("`--([A-Za-z0-9][A-Za-z0-9_.-]*)")
	tables := map[string][]string{}
	inSection, found := false, false
	current := ""
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(l, "## "):
			inSection = strings.TrimSpace(strings.TrimPrefix(l, "## ")) == "Flags"
			found = found || inSection
			current = ""
			continue
		case !inSection:
			continue
		case strings.HasPrefix(l, "### "):
			current = ""
			for _, sub := range controllerSubcommands {
				if strings.Contains(l, "`"+sub+"`") {
					current = sub
				}
			}
			continue
		case !strings.HasPrefix(l, "|"):
			continue
		}
		cells := strings.Split(l, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range flagName.FindAllStringSubmatch(cells[1], -1) {
			tables[current] = append(tables[current], m[1])
		}
	}
	if !found {
		t.Fatalf("%s has no \"## Flags\" section", referencePath)
	}
	return tables
}

func TestReferenceFlagTablesMatchTheBinary(t *testing.T) {
	tables := referenceFlagTables(t)
	if len(tables[""]) == 0 {
		t.Fatalf("the Flags section of %s has no table of common flags", referencePath)
	}
	for _, sub := range controllerSubcommands {
		if len(tables[sub]) == 0 {
			t.Fatalf("the Flags section of %s has no flags table for `%s`", referencePath, sub)
		}
	}
	for _, sub := range append(slices.Clone(controllerSubcommands), "all") {
		t.Run(sub, func(t *testing.T) {
			documented := map[string]bool{}
			for _, name := range tables[""] {
				documented[name] = true
			}
			for _, c := range controllerSubcommands {
				if sub == "all" || sub == c {
					for _, name := range tables[c] {
						documented[name] = true
					}
				}
			}
			actual := map[string]bool{}
			for _, name := range helpFlags(t, sub) {
				actual[name] = true
				if !documented[name] {
					t.Errorf("reclaimable %s has the flag --%s, which the Flags tables of docs/configuration.md do not list for it", sub, name)
				}
			}
			for name := range documented {
				if !actual[name] {
					t.Errorf("the Flags tables of docs/configuration.md list --%s for `%s`, which the binary does not have", name, sub)
				}
			}
		})
	}
}
