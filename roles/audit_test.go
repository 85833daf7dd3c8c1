package roles_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/readiness"
	"github.com/qlcontrol/controlcore/roles"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// privateNames returns role names under a prefix of the test's own (roles are cluster-wide):
// when the test ends the database and every role whose name starts with the prefix are dropped
// (testpg.DB.PrivatePrefix), so a role a test creates is named with the prefix.
func privateNames(t *testing.T, d *testpg.DB) roles.Names {
	t.Helper()
	names, err := roles.NewNames(d.PrivatePrefix(t, "r"))
	if err != nil {
		t.Fatal(err)
	}
	// testpg.NewEmpty bootstrapped the shared ql_ roles here; this database is the prefix's alone.
	d.Exec(t, fmt.Sprintf("REVOKE ALL ON DATABASE %s FROM ql_owner", pgx.Identifier{d.Name}.Sanitize()))
	return names
}

func up(t *testing.T, d *testpg.DB, names roles.Names, to int64) error {
	t.Helper()
	r, err := migrate.Open(context.Background(), d.Config(t, ""), migrate.Options{Names: names, AsOwner: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Up(context.Background(), to)
	return err
}

func TestFreshV17DatabaseMatchesTheModelExactly(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	a := testpg.ReadAudit(t, d.URL(""), d.Names, roles.Options{})
	if notes := notesExcept(a, "other_database"); !a.OK() || len(notes) != 0 {
		t.Fatalf("a fresh v20 database drifts from the model: %+v\nnotes: %+v", a.Drift, notes)
	}
	if len(a.SQL()) != 0 {
		t.Errorf("SQL() on no drift = %v", a.SQL())
	}
	want := map[string]string{ // object/grantee → expected and actual privileges
		"control_core.trigger_schedules/ql_runtime":        "SELECT,UPDATE",
		"control_core.trigger_schedules/ql_admin":          "SELECT",
		"control_core.trigger_schedules/ql_worker_ingress": "",
		"control_core.trigger_schedules/PUBLIC":            "",
		"control_core.trigger_schedules/ql_owner":          "ALL",
		"control_core.lock_project(text, text)/ql_admin":   "EXECUTE",
		"control_core.lock_project(text, text)/ql_runtime": "",
		"control_core.db_now_ms()/ql_runtime":              "EXECUTE",
		"control_core/ql_runtime":                          "USAGE",
		d.Name + "/ql_owner":                               "CONNECT*,CREATE*",
		d.Name + "/ql_runtime":                             "CONNECT (by ql_owner)",
		d.Name + "/ql_worker_ingress":                      "",
		d.Name + "/PUBLIC":                                 "",
	}
	for _, r := range a.Rows {
		w, ok := want[r.Object+"/"+r.Grantee]
		if !ok || r.Section != "object" {
			continue
		}
		delete(want, r.Object+"/"+r.Grantee)
		exp, act := strings.Join(r.Expected, ","), strings.Join(r.Actual, ",")
		if r.Drift || exp != act || !samePrivileges(exp, w) {
			t.Errorf("%s %s: expected %q, actual %q, drift %v; want %q", r.Object, r.Grantee, exp, act, r.Drift, w)
		}
	}
	for k := range want {
		t.Errorf("the matrix has no row %s", k)
	}
}

// notesExcept are a's notes but those of kind: the other databases of the cluster are shared with
// parallel tests, so their notes vary.
func notesExcept(a *roles.Audit, kind string) []roles.Drift {
	var out []roles.Drift
	for _, n := range a.Notes {
		if n.Kind != kind {
			out = append(out, n)
		}
	}
	return out
}

func samePrivileges(a, b string) bool {
	split := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, p := range strings.Split(s, ",") {
			m[p] = true
		}
		return m
	}
	x, y := split(a), split(b)
	if len(x) != len(y) {
		return false
	}
	for k := range x {
		if !y[k] {
			return false
		}
	}
	return true
}

// The model names every table of the readiness contract (plus goose's), and nothing else.
func TestModelNamesEveryTableOfTheContract(t *testing.T) {
	t.Parallel()
	contract, err := readiness.Contract()
	if err != nil {
		t.Fatal(err)
	}
	inContract := map[string]bool{"goose_db_version": true}
	for _, f := range contract {
		if f.Kind == "table" {
			inContract[strings.TrimPrefix(f.Def, "control_core.")] = true
		}
	}
	inModel := map[string]bool{}
	for _, tg := range roles.Tables {
		if inModel[tg.Table] {
			t.Errorf("roles.Tables lists %s twice", tg.Table)
		}
		inModel[tg.Table] = true
		if !inContract[tg.Table] {
			t.Errorf("roles.Tables lists %s, which the readiness contract does not have", tg.Table)
		}
	}
	for table := range inContract {
		if !inModel[table] {
			t.Errorf("table %s of the readiness contract is not in roles.Tables", table)
		}
	}
	for _, f := range roles.Functions {
		found := false
		for _, c := range contract {
			found = found || (c.Kind == "function" && c.Def == f.Function)
		}
		if !found {
			t.Errorf("roles.Functions names %s, which the readiness contract does not have", f.Function)
		}
	}
}

// pg-0017 re-verifies the four roles inside the migration and aborts, naming the role, when one
// is missing or privileged; nothing of pg-0017 is applied then.
func TestMigration0017AbortsOnAMissingOrPrivilegedRole(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		alter func(n roles.Names) string
		want  func(n roles.Names) string
	}{
		{"missing", func(n roles.Names) string { return "DROP ROLE " + n.WorkerIngress },
			func(n roles.Names) string {
				return fmt.Sprintf("pg-0017-exact-grants: role %s is missing; run \"qlmigrate roles create\" first", n.WorkerIngress)
			}},
		{"superuser", func(n roles.Names) string { return "ALTER ROLE " + n.Runtime + " SUPERUSER" },
			func(n roles.Names) string {
				return fmt.Sprintf("pg-0017-exact-grants: role %s must be NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS", n.Runtime)
			}},
		{"createrole", func(n roles.Names) string { return "ALTER ROLE " + n.Admin + " CREATEROLE" },
			func(n roles.Names) string { return fmt.Sprintf("role %s must be NOSUPERUSER", n.Admin) }},
		{"bypassrls", func(n roles.Names) string { return "ALTER ROLE " + n.Owner + " BYPASSRLS" },
			func(n roles.Names) string { return fmt.Sprintf("role %s must be NOSUPERUSER", n.Owner) }},
		{"nologin", func(n roles.Names) string { return "ALTER ROLE " + n.Admin + " NOLOGIN" },
			func(n roles.Names) string {
				return fmt.Sprintf("pg-0017-exact-grants: role %s must be a LOGIN role", n.Admin)
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := testpg.NewEmpty(t)
			names := privateNames(t, d)
			if err := d.Server.BootstrapNames(context.Background(), d.Name, names); err != nil {
				t.Fatal(err)
			}
			if err := up(t, d, names, 16); err != nil {
				t.Fatalf("up to 16: %v", err)
			}
			d.Exec(t, c.alter(names))
			err := up(t, d, names, 0)
			if err == nil || !strings.Contains(err.Error(), c.want(names)) {
				t.Fatalf("up: %v; want an abort saying %q", err, c.want(names))
			}
			var version int
			pool := d.Pool(t, "")
			if err := pool.QueryRow(context.Background(), "SELECT version FROM control_core.capabilities").Scan(&version); err != nil || version != 15 {
				t.Errorf("capability after the abort: v%d (%v); want v15, nothing of pg-0017 applied", version, err)
			}
		})
	}
}

// Since PostgreSQL 16 a non-superuser CREATEROLE role that creates a role is granted membership
// in it (grantor: the bootstrap superuser). Those memberships are the creator's: the four roles
// stay exactly as modelled, and the audit lists the memberships as notes, not drift. On older
// servers there is no such membership and the audit is simply clean.
func TestRolesCreatedByANonSuperuserCreateRoleRoleAreNotDrift(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.NewEmpty(t)
	names := privateNames(t, d)
	dba := names.Prefix + "dba"
	other := dba + "_other"
	d.Exec(t, fmt.Sprintf("CREATE ROLE %s LOGIN CREATEROLE PASSWORD '%s'; ALTER DATABASE %s OWNER TO %s",
		dba, testpg.Password, pgx.Identifier{d.Name}.Sanitize(), dba))
	conn, err := pgx.Connect(ctx, d.Server.URL(dba, d.Name))
	if err != nil {
		t.Fatal(err)
	}
	report, err := roles.Create(ctx, conn, names)
	conn.Close(ctx)
	if err != nil || !report.OK() {
		t.Fatalf("roles create as %s: %+v, %v", dba, report, err)
	}
	d.Exec(t, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", names.Owner, testpg.Password))
	if err := up(t, d, names, 0); err != nil {
		t.Fatalf("up: %v", err)
	}
	a := testpg.ReadAudit(t, d.URL(""), names, roles.Options{})
	if !a.OK() {
		t.Fatalf("drift on a database whose roles a CREATEROLE role created: %+v", a.Drift)
	}
	var version int
	if err := d.Pool(t, "").QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version >= 160000 {
		notes := notesExcept(a, "other_database")
		if len(notes) != 4 {
			t.Fatalf("PostgreSQL %d: want 4 notes (%s's membership in each role), got %+v", version, dba, notes)
		}
		for _, n := range notes {
			if n.Grantee != dba || n.Kind != "member_of_model_role" {
				t.Errorf("note %+v: want %s's membership", n, dba)
			}
		}
	}
	// A membership that makes one of the four roles a member of another role is drift.
	d.Exec(t, fmt.Sprintf("CREATE ROLE %s NOLOGIN; GRANT %s TO %s", other, other, names.Admin))
	a = testpg.ReadAudit(t, d.URL(""), names, roles.Options{})
	if len(a.Drift) != 1 || a.Drift[0].Kind != "membership" || a.Drift[0].Grantee != names.Admin {
		t.Fatalf("want one membership drift for %s, got %+v", names.Admin, a.Drift)
	}
	d.Exec(t, strings.Join(a.SQL(), "\n"))
	if a = testpg.ReadAudit(t, d.URL(""), names, roles.Options{}); !a.OK() {
		t.Errorf("after the fix %v: %+v", a.SQL(), a.Drift)
	}
}
