package readiness

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/sql/migrations"
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

// Every function of the contract is recreated from the statement of the migration that defines
// it, found by the SQL scanner (a StatementBegin block or not), with OR REPLACE added; a later
// CREATE OR REPLACE with the same arguments redefines it; a later statement that alters the
// function, or a second definition of other arguments (an overload), leaves it without one; a
// statement that names another overload's arguments leaves it alone; a later ALTER FUNCTION that
// only sets or resets its settings follows the statement (CREATE OR REPLACE resets them).
func TestRecreateFindsEachFunctionsMigrationStatement(t *testing.T) {
	contract, err := Contract()
	if err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{
		"0001_a.sql": {Data: []byte("-- +goose Up\n-- a comment\nCREATE FUNCTION control_core.f(a int) RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;\n" +
			"-- +goose StatementBegin\nSELECT 1; create or replace function control_core.\"G\"() returns int language sql as 'select 2';\n-- +goose StatementEnd\n" +
			"CREATE FUNCTION control_core.h() RETURNS int LANGUAGE sql AS $$ SELECT 3 $$;\n" +
			"CREATE FUNCTION control_core.k(a int) RETURNS int LANGUAGE sql AS $$ SELECT 4 $$;\n" +
			"CREATE FUNCTION control_core.m(a int) RETURNS int LANGUAGE sql AS $$ SELECT 6 $$;\n" +
			"CREATE FUNCTION control_core.m(a int, b numeric(10, 2)) RETURNS int LANGUAGE sql AS $$ SELECT 7 $$;\n" +
			"CREATE FUNCTION control_core.o(a int, OUT b int, OUT c int) LANGUAGE sql AS $$ SELECT 8, 9 $$;\n" +
			"CREATE FUNCTION control_core.p(a int) RETURNS int LANGUAGE sql SET search_path = pg_catalog AS $$ SELECT 10 $$;\n" +
			"CREATE FUNCTION control_core.q(a int) RETURNS int LANGUAGE sql AS $$ SELECT 11 $$;\n" +
			"CREATE FUNCTION control_core.r(a int) RETURNS int LANGUAGE sql AS $$ SELECT 12 $$;\n" +
			"CREATE FUNCTION control_core.u(a int) RETURNS int LANGUAGE sql AS $$ SELECT 13 $$;\n")},
		"0002_b.sql": {Data: []byte("-- +goose Up\nALTER FUNCTION control_core.h() STABLE;\n" +
			"DROP FUNCTION IF EXISTS control_core.f(int);\nCREATE FUNCTION control_core.f(a int) RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;\n" +
			"CREATE OR REPLACE FUNCTION control_core.\"G\"() RETURNS int LANGUAGE sql AS 'select 3';\n" +
			"CREATE OR REPLACE FUNCTION control_core.k(a text) RETURNS int LANGUAGE sql AS $$ SELECT 5 $$;\n" +
			"DROP FUNCTION control_core.m(int, numeric);\n" +
			"ALTER FUNCTION control_core.p(int)\n    SET plan_cache_mode = force_generic_plan\n    SET jit TO off;\n" +
			"ALTER FUNCTION control_core.p(integer) SET work_mem = '64kB' RESET jit;\n" +
			"ALTER FUNCTION control_core.q(int) SET search_path = pg_catalog, pg_temp SECURITY DEFINER;\n" +
			"ALTER FUNCTION control_core.r(int) SET SCHEMA public;\n" +
			"ALTER FUNCTION control_core.u SET jit = off;\n")},
	}
	stream, err := checksums.Load(fsys)
	if err != nil {
		t.Fatal(err)
	}
	loc := NewLocator(fsys, stream)
	for object, want := range map[string]string{
		"function control_core.f(integer)": "CREATE OR REPLACE FUNCTION control_core.f(a int) RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;",
		`function control_core."G"()`:      `CREATE OR REPLACE FUNCTION control_core."G"() RETURNS int LANGUAGE sql AS 'select 3';`,
		"function control_core.k(integer)": "",
		// overloads by arity are told apart; OUT arguments are not part of the identity
		"function control_core.m(integer)":          "CREATE OR REPLACE FUNCTION control_core.m(a int) RETURNS int LANGUAGE sql AS $$ SELECT 6 $$;",
		"function control_core.m(integer, numeric)": "", // dropped by 0002; m(integer) is not
		"function control_core.o(integer)":          "CREATE OR REPLACE FUNCTION control_core.o(a int, OUT b int, OUT c int) LANGUAGE sql AS $$ SELECT 8, 9 $$;",
		"function control_core.h()":                 "",
		"function control_core.nope()":              "",
		// settings of its own follow the statement, as written; other changes leave it without one
		"function control_core.p(integer)": "CREATE OR REPLACE FUNCTION control_core.p(a int) RETURNS int LANGUAGE sql SET search_path = pg_catalog AS $$ SELECT 10 $$;\n" +
			"ALTER FUNCTION control_core.p(int)\n    SET plan_cache_mode = force_generic_plan\n    SET jit TO off;\n" +
			"ALTER FUNCTION control_core.p(integer) SET work_mem = '64kB' RESET jit;",
		"function control_core.q(integer)": "", // SECURITY DEFINER beside its settings
		"function control_core.r(integer)": "", // moved to another schema
		"function control_core.u(integer)": "", // no argument list: not told from another overload
	} {
		stmts, ok := loc.recreate(object)
		if got := strings.Join(stmts, "\n"); got != want || ok != (want != "") {
			t.Errorf("recreate(%s) = %q, %v; want %q", object, got, ok, want)
		}
	}

	real, err := checksums.Load(migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	loc = NewLocator(migrations.FS, real)
	for _, f := range contract {
		if f.Kind != "function" {
			continue
		}
		name, _ := functionName(f.Object)
		stmts, ok := loc.recreate(f.Object)
		if !ok || !strings.HasPrefix(stmts[0], "CREATE OR REPLACE FUNCTION control_core."+name+"(") || !strings.HasSuffix(stmts[0], "$$;") {
			t.Errorf("recreate(%s) = %q, %v", f.Object, stmts, ok)
			continue
		}
		for _, alter := range stmts[1:] { // pg-0029's settings of claim_due and admit
			if !strings.HasPrefix(alter, "ALTER FUNCTION control_core."+name+"(") || !strings.HasSuffix(alter, ";") {
				t.Errorf("recreate(%s): %q after the CREATE", f.Object, alter)
			}
		}
		if configured := len(stmts) > 1; configured != (name == "claim_due" || name == "admit") {
			t.Errorf("recreate(%s) = %q: want pg-0029's ALTER FUNCTION … SET after the CREATE for claim_due and admit only", f.Object, stmts)
		}
	}
}
