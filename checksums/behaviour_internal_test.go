package checksums

import (
	"slices"
	"testing"
)

// A column's rendering reads back into the same parts, so the fix of a changed column is built
// from the contract's text exactly as from the catalogs.
func TestColumnDefRoundTrips(t *testing.T) {
	for _, c := range []columnDef{
		{typ: "text", notNull: true},
		{typ: "bigint", notNull: true, def: "control_core.db_now_ms()"},
		{typ: "character varying(64)", collation: `pg_catalog."C"`, def: "'a null default'::character varying"},
		{typ: "bigint", notNull: true, identity: "a"},
		{typ: "bigint", identity: "d", notNull: true},
		{typ: "bigint", def: "(scheduled_for_ms / 1000)", generated: "s"},
		{typ: "timestamp with time zone", def: "now()", generated: "v"},
	} {
		got, ok := parseColumn(c.String())
		if !ok || got != c {
			t.Errorf("parseColumn(%q) = %+v, %v; want %+v", c.String(), got, ok, c)
		}
	}
	for _, bad := range []string{"", "text", "text not null garbage"} {
		if _, ok := parseColumn(bad); ok {
			t.Errorf("parseColumn(%q) succeeded", bad)
		}
	}
}

// A function's settings come back as the contract lists them; search_path values hold ", ".
func TestConfigSQL(t *testing.T) {
	fn := "control_core.f()"
	for _, c := range []struct {
		want string
		sql  []string
	}{
		{"", []string{"ALTER FUNCTION control_core.f() RESET ALL;"}},
		{"search_path=pg_catalog", []string{"ALTER FUNCTION control_core.f() RESET ALL;",
			"ALTER FUNCTION control_core.f() SET search_path TO pg_catalog;"}},
		{`search_path=pg_catalog, "$user", pg_temp`, []string{"ALTER FUNCTION control_core.f() RESET ALL;",
			`ALTER FUNCTION control_core.f() SET search_path TO pg_catalog, "$user", pg_temp;`}},
		{"search_path=pg_catalog, work_mem=64kB", nil}, // only search_path is set back
	} {
		if got := configSQL(fn, c.want); !slices.Equal(got, c.sql) {
			t.Errorf("configSQL(%q) = %q, want %q", c.want, got, c.sql)
		}
	}
}

// Names in fix statements come from the catalogs: anything but a plain lower-case name that is
// no keyword is quoted, so a hostile name stays one identifier.
func TestIdentQuotesWhatNeedsIt(t *testing.T) {
	for name, want := range map[string]string{
		"runs_pkey":                 "runs_pkey",
		"state":                     "state", // an unreserved keyword
		"user":                      `"user"`,
		"select":                    `"select"`,
		"Runs":                      `"Runs"`,
		"9lives":                    `"9lives"`,
		`x"; DROP TABLE y; --`:      `"x""; DROP TABLE y; --"`,
		"a\nDROP SCHEMA s CASCADE;": "\"a\nDROP SCHEMA s CASCADE;\"",
	} {
		if got := ident(name); got != want {
			t.Errorf("ident(%q) = %s, want %s", name, got, want)
		}
	}
}
