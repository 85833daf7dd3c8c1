package roles_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
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
	a := testpg.ReadAudit(t, d.URL(""), d.Names, roles.AuditOptions{})
	if notes := notesExcept(a, "other_database"); !a.OK() || len(notes) != 0 {
		t.Fatalf("a fresh v28 database drifts from the model: %+v\nnotes: %+v", a.Drift, notes)
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
