package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// Every JSON document qlmigrate prints carries its schema identifier, and docs/json.md lists it.
func TestEveryJSONDocumentCarriesItsSchema(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	dir := copyMigrations(t)
	doc, err := os.ReadFile("../../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	url := d.URL("")
	cases := []struct {
		args   []string
		schema string
	}{
		{[]string{"grants", "--database-url", url}, schemaGrants},
		{[]string{"grants", "--sql", "--database-url", url}, schemaGrantsSQL},
		{[]string{"roles", "create", "--database-url", url}, schemaRolesCreate},
		{[]string{"hash", "--dir", dir}, schemaHash},
		{[]string{"hash", "--check", "--dir", dir}, schemaHashCheck},
		{[]string{"status", "--database-url", url}, schemaStatus},
		{[]string{"up", "--database-url", url}, schemaUp},
		{[]string{"up", "--dry-run", "--database-url", url}, schemaPlan},
		{[]string{"verify", "--database-url", url}, "qlmigrate.verify/v1"},
		{[]string{"probe", "--database-url", url}, "qlmigrate.verify/v1"},
	}
	for _, c := range cases {
		r := run(t, nil, append(c.args, "--format", "json")...)
		var res struct {
			Schema string `json:"schema"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != 0 {
			t.Errorf("%v: exit %d, %v; want 0 and one JSON document\n%s%s", c.args, r.code, err, r.stdout, r.stderr)
			continue
		}
		if res.Schema != c.schema {
			t.Errorf("%v: schema %q, want %q", c.args, res.Schema, c.schema)
		}
		if !strings.Contains(string(doc), "`"+c.schema+"`") {
			t.Errorf("docs/json.md does not list %s", c.schema)
		}
	}
}
