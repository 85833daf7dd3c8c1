package main

import (
	"os"
	"strings"
	"testing"
)

const sample = `# a comment
== a ci
file: sql/queries/x.sql
in:   Two
what: drops the check
test: ./coordinator/ ^TestX$
- AND x = @x
+ AND (x = @x OR true)

== b
file: schedule/decision.go
what: a boundary
test: ./coordinator/ ^TestY$
test: ./roles/ ^TestZ$
- if a < b {
`

const sql = `-- name: One :one
SELECT 1 WHERE true AND x = @x;

-- name: Two :one
SELECT 2 WHERE true AND x = @x;
`

func TestParseAndMutate(t *testing.T) {
	ms, err := Parse(sample)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].ID != "a" || ms[0].Subsets[0] != "ci" || ms[0].In != "Two" || len(ms[1].Tests) != 2 || ms[1].Replace != "" {
		t.Fatalf("parsed %+v", ms)
	}
	if got := Select(ms, "ci", ""); len(got) != 1 || got[0].ID != "a" {
		t.Errorf("subset ci: %+v", got)
	}
	out, err := ms[0].Mutate(sql)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(sql, "SELECT 2 WHERE true AND x = @x", "SELECT 2 WHERE true AND (x = @x OR true)", 1); out != want {
		t.Errorf("mutated only in its region? got\n%s", out)
	}
	// outside a region the text occurs twice: refused, as is a text that does not occur
	whole := ms[0]
	whole.In = ""
	if _, err := whole.Mutate(sql); err == nil {
		t.Error("a search text found twice was applied")
	}
	if _, err := ms[1].Mutate("func f() {}\n"); err == nil {
		t.Error("a search text not found was applied")
	}
}

// Every mutation of the real list applies exactly once to the tree as it is.
func TestTheListMatchesTheCode(t *testing.T) {
	text, err := os.ReadFile("mutations.txt")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := Parse(string(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		src, err := os.ReadFile("../../../" + m.File)
		if err != nil {
			t.Fatalf("%s: %v", m.ID, err)
		}
		if _, err := m.Mutate(string(src)); err != nil {
			t.Error(err)
		}
	}
}

func TestParseRefusesIncompleteBlocks(t *testing.T) {
	for _, bad := range []string{
		"== a\nfile: f\nwhat: w\n- x\n",            // no test
		"== a\nfile: f\nwhat: w\ntest: ./p/ T\n",   // no search text
		"file: f\n",                                // outside a block
		"== a\nfile: f\nwhat: w\ntest: p T\n- x\n", // package not ./…
		"== a\nfile: f\nwhat: w\ntest: ./p/ T\n- x\n== a\nfile: f\nwhat: w\ntest: ./p/ T\n- x\n", // id twice
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse accepted %q", bad)
		}
	}
}
