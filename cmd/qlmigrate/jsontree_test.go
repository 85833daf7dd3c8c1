package main

import (
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/jsondoc"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// Every qlmigrate command, taken from the cobra tree (a command added later without a case here
// fails), prints with --format json one JSON document whose schema docs/json.md lists and whose
// keys are all snake_case, or refuses the combination with exit 2 (verify --fix-sql prints a
// script). TestEveryJSONDocumentCarriesItsSchema checks each variant's exact schema.
func TestEveryQlmigrateCommandPrintsASnakeCaseDocument(t *testing.T) {
	t.Parallel()
	docs, err := os.ReadFile("../../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	d := testpg.New(t)
	dir := copyMigrations(t)
	url := d.URL("")
	cases := []struct {
		command string
		args    []string
	}{
		{"roles create", []string{"roles", "create", "--database-url", url}},
		{"up", []string{"up", "--database-url", url}},
		{"up", []string{"up", "--dry-run", "--database-url", url}},
		{"status", []string{"status", "--database-url", url}},
		{"accept", []string{"accept", "--version", "1", "--reason", "json contract", "--database-url", url}},
		{"verify", []string{"verify", "--database-url", url}},
		{"probe", []string{"probe", "--database-url", url}},
		{"grants", []string{"grants", "--database-url", url}},
		{"grants", []string{"grants", "--sql", "--database-url", url}},
		{"hash", []string{"hash", "--dir", dir}},
		{"hash", []string{"hash", "--check", "--dir", dir}},
	}
	refused := [][]string{{"verify", "--fix-sql", "--database-url", url}}

	leaves := jsondoc.Commands(t, (&app{}).rootCmd())
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.command] = true
		if leaves[c.command] == nil {
			t.Errorf("case %q names no command of the tree", c.command)
		}
	}
	var missing []string
	for name := range leaves {
		if !covered[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("commands without a JSON contract case: %v", missing)
	}

	for _, args := range refused {
		r := run(t, nil, append(args, "--format", "json")...)
		if r.code != 2 || r.stdout != "" {
			t.Errorf("%v --format json: exit %d, stdout %q; want 2 and nothing on stdout\n%s", args, r.code, r.stdout, r.stderr)
		}
	}
	for _, c := range cases {
		r := run(t, nil, append(c.args, "--format", "json")...)
		if r.code != 0 {
			t.Errorf("%v --format json: exit %d; want 0\n%s%s", c.args, r.code, r.stdout, r.stderr)
			continue
		}
		var doc map[string]any
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		if err := dec.Decode(&doc); err != nil || dec.More() {
			t.Errorf("%v --format json: want one JSON object (%v)\n%s", c.args, err, r.stdout)
			continue
		}
		schema, _ := doc["schema"].(string)
		if !strings.HasPrefix(schema, "qlmigrate.") || !strings.Contains(string(docs), "`"+schema+"`") {
			t.Errorf("%v --format json: schema %q is not a qlmigrate document docs/json.md lists", c.args, schema)
		}
		if bad := jsondoc.NotSnakeCase("", doc); len(bad) > 0 {
			sort.Strings(bad)
			t.Errorf("%v --format json: keys not snake_case: %v", c.args, bad)
		}
	}
}
