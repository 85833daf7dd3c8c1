package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/roles"
)

// privateDB is a migrated v22 database whose four roles have a prefix of their own, for a test
// that changes a role (attributes, memberships): roles are cluster-wide, the ql_ roles are shared
// by every other test. It returns the database and the prefix's names; the roles are dropped
// when the test ends.
func privateDB(t *testing.T) (*testpg.DB, roles.Names) {
	t.Helper()
	return privateDBAt(t, 0)
}

// privateDBAt is privateDB migrated up to version to (0: all).
func privateDBAt(t *testing.T, to int64) (*testpg.DB, roles.Names) {
	t.Helper()
	d := testpg.NewPrivateAt(t, to)
	return d, d.Names
}

func TestVerifyCleanV17DatabaseExits0(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	// As the owner role, which is what a CI pipeline uses, and as the superuser.
	for _, role := range []string{"ql_owner", ""} {
		r := run(t, nil, "verify", "--database-url", d.URL(role))
		if r.code != 0 || !strings.Contains(r.stdout, "OK: no drift") {
			t.Fatalf("verify as %q: exit %d\n%s%s", role, r.code, r.stdout, r.stderr)
		}
		for _, check := range []string{"integrity", "ledger", "unknown_versions", "pending", "capability", "readiness", "privileges", "settings"} {
			if !strings.Contains(r.stdout, check) {
				t.Errorf("the report has no %s check:\n%s", check, r.stdout)
			}
		}
	}
	if r := run(t, nil, "grants", "--sql", "--database-url", d.URL("")); r.code != 0 || r.stdout != "" {
		t.Errorf("grants --sql on a clean database: exit %d, stdout %q; want exit 0 and nothing", r.code, r.stdout)
	}
	r := run(t, nil, "grants", "--database-url", d.URL(""))
	if r.code != 0 || !strings.Contains(r.stdout, "OK: the privileges match the model exactly") {
		t.Errorf("grants: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestVerifyJSONReport(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	d.Exec(t, "GRANT DELETE ON control_core.trigger_schedules TO ql_runtime")
	r := run(t, nil, "verify", "--format", "json", "--database-url", d.URL(""))
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	var rep struct {
		Schema   string `json:"schema"`
		OK       bool   `json:"ok"`
		Target   string `json:"target"`
		Expected struct {
			Capability int    `json:"capability"`
			Name       string `json:"name"`
		} `json:"expected"`
		Checks []struct {
			Name     string `json:"name"`
			Status   string `json:"status"`
			Findings []struct {
				Severity, Kind, Object, Message, Fix string
				SQL                                  []string `json:"sql"`
			} `json:"findings"`
		} `json:"checks"`
		Summary struct{ Drift, Notes int } `json:"summary"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	if rep.Schema != "qlmigrate.verify/v1" || rep.OK || rep.Expected.Capability != 28 || rep.Expected.Name != "pooled_plan_settings" ||
		rep.Summary.Drift != 1 || len(rep.Checks) != 8 || strings.Contains(rep.Target, testpg.Password) {
		t.Fatalf("unexpected report: %+v", rep)
	}
	priv := rep.Checks[6]
	priv.Findings = slices.DeleteFunc(priv.Findings, func(f struct {
		Severity, Kind, Object, Message, Fix string
		SQL                                  []string `json:"sql"`
	}) bool {
		return f.Kind == "other_database" // the test cluster's other databases vary
	})
	if priv.Name != "privileges" || priv.Status != "drift" || len(priv.Findings) != 1 ||
		priv.Findings[0].Kind != "extra_privilege" || priv.Findings[0].Object != "control_core.trigger_schedules" ||
		len(priv.Findings[0].SQL) != 1 || priv.Findings[0].SQL[0] != `REVOKE DELETE ON TABLE control_core.trigger_schedules FROM "ql_runtime";` {
		t.Errorf("privileges check: %+v", priv)
	}
}

// One case per kind of drift the stream, capability and readiness checks find: exit 1 and a
// message naming the object.
func TestVerifyFindsSchemaDrift(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, sql string
		check     string // the check that must fail
		want      []string
	}{
		{"edited ledger checksum", "UPDATE control_core.migration_ledger SET sha256 = repeat('0', 64), normalized_sha256 = repeat('0', 64) WHERE version = 14",
			"ledger", []string{"pg-0014-cluster-scheduler-admission: changed (statements)", "the file was edited after it was applied"}},
		{"cosmetic edit of the file", "UPDATE control_core.migration_ledger SET sha256 = repeat('0', 64) WHERE version = 14",
			"ledger", []string{"pg-0014-cluster-scheduler-admission: changed (comments/whitespace only)", "qlmigrate accept --version 14"}},
		{"unknown applied version in goose's table", "INSERT INTO control_core.goose_db_version (version_id, is_applied) VALUES (30, true)",
			"unknown_versions", []string{"version 30: applied (in goose's table)", "does not know it"}},
		{"negative applied version in goose's table", "INSERT INTO control_core.goose_db_version (version_id, is_applied) VALUES (-1, true)",
			"unknown_versions", []string{"version -1: applied (in goose's table)", "does not know it"}},
		{"unknown applied version in the ledger", "INSERT INTO control_core.migration_ledger (version, name, sha256, normalized_sha256, duration_ms) VALUES (30, 'pg-0030-from-the-future', repeat('a', 64), repeat('a', 64), 1)",
			"unknown_versions", []string{"version 30", "pg-0030-from-the-future"}},
		{"capability changed", "UPDATE control_core.capabilities SET version = 16, name = 'exact_grants' WHERE component = 'control-core'",
			"capability", []string{"control-core is v16 / exact_grants", "expects v28 / pooled_plan_settings"}},
		{"dropped column", "ALTER TABLE control_core.runs DROP COLUMN cancel_requested_at_ms",
			"readiness", []string{"control_core.runs.cancel_requested_at_ms", "is missing", "pg-0006-runs"}},
		{"column type changed", "ALTER TABLE control_core.trigger_schedules ALTER COLUMN claim_version TYPE integer",
			"readiness", []string{"control_core.trigger_schedules.claim_version", "bigint not null"}},
		{"nullability changed", "ALTER TABLE control_core.runs ALTER COLUMN idempotency_key DROP NOT NULL",
			"readiness", []string{"control_core.runs.idempotency_key is nullable", "SET NOT NULL"}},
		{"dropped claim index", "DROP INDEX control_core.trigger_schedules_claim_idx",
			"readiness", []string{"control_core.trigger_schedules_claim_idx", "CREATE INDEX trigger_schedules_claim_idx"}},
		{"dropped recovery index", "DROP INDEX control_core.runs_recovery_drift_idx",
			"readiness", []string{"control_core.runs_recovery_drift_idx", "CREATE INDEX runs_recovery_drift_idx"}},
		{"dropped idempotency unique", "ALTER TABLE control_core.runs DROP CONSTRAINT runs_idempotency_key_key",
			"readiness", []string{"runs_idempotency_key_key on control_core.runs", "UNIQUE (project_id, idempotency_key)"}},
		{"dropped CHECK constraint", "ALTER TABLE control_core.trigger_schedules DROP CONSTRAINT trigger_schedules_claim_fence_check",
			"readiness", []string{"trigger_schedules_claim_fence_check on control_core.trigger_schedules", "ADD CONSTRAINT trigger_schedules_claim_fence_check CHECK"}},
		{"dropped function", "DROP FUNCTION control_core.lock_project(text, text)",
			"readiness", []string{"function control_core.lock_project(text, text) is missing", "pg-0018-plugin-packages"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := testpg.New(t)
			d.Exec(t, c.sql)
			r := run(t, nil, "verify", "--database-url", d.URL(""))
			assertDrift(t, r, c.check, c.want)
		})
	}
}

func assertDrift(t *testing.T, r result, check string, want []string) {
	t.Helper()
	if r.code != 1 {
		t.Fatalf("verify: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, fmt.Sprintf("%-17s DRIFT", check)) {
		t.Errorf("check %s does not report drift:\n%s", check, r.stdout)
	}
	for _, w := range want {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("the report does not say %q:\n%s", w, r.stdout)
		}
	}
}

func TestVerifyPendingMigration(t *testing.T) {
	t.Parallel()
	d := testpg.NewEmpty(t)
	if r := run(t, nil, "up", "--to", "17", "--database-url", d.URL("")); r.code != 0 {
		t.Fatalf("up --to 17: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := run(t, nil, "verify", "--database-url", d.URL(""))
	assertDrift(t, r, "pending", []string{"pg-0018-plugin-packages: not applied (0018_plugin_packages.sql)", "qlmigrate up"})
	if !strings.Contains(r.stdout, "readiness         skipped") {
		t.Errorf("readiness should be skipped while a migration is pending:\n%s", r.stdout)
	}
	// A rollout in progress: the binary is ahead of the database, which is consistent at v16.
	r = run(t, nil, "verify", "--allow-pending", "--database-url", d.URL(""))
	if r.code != 0 || !strings.Contains(r.stdout, "note  pg-0018-plugin-packages") {
		t.Errorf("verify --allow-pending: exit %d, want 0 with pg-0018 as a note\n%s%s", r.code, r.stdout, r.stderr)
	}
	// --allow-pending still fails on a capability that does not match what was applied.
	d.Exec(t, "UPDATE control_core.capabilities SET version = 15, name = 'recovery_source', migration = 'pg-0016-recovery-source'")
	r = run(t, nil, "verify", "--allow-pending", "--database-url", d.URL(""))
	assertDrift(t, r, "capability", []string{"control-core is v15", "expects v16 / exact_grants"})
}

// While migrations are pending the object privileges are v22's and not checked, but the roles are
// the same at every version: verify --allow-pending still fails on a privileged role.
func TestVerifyAllowPendingStillChecksTheRoles(t *testing.T) {
	t.Parallel()
	d, names := privateDBAt(t, 17)
	args := []string{"verify", "--allow-pending", "--database-url", d.URL(""), "--role-prefix", names.Prefix}
	if r := run(t, nil, args...); r.code != 0 || !strings.Contains(r.stdout, "attributes and memberships only") {
		t.Fatalf("clean v16: exit %d, want 0 saying what privileges checked\n%s%s", r.code, r.stdout, r.stderr)
	}
	d.Exec(t, fmt.Sprintf("ALTER ROLE %s BYPASSRLS", names.Runtime))
	assertDrift(t, run(t, nil, args...), "privileges", []string{names.Runtime, "BYPASSRLS"})
}

// One case per kind of privilege drift: verify exits 1 naming the object, grants marks it,
// grants --sql prints exactly the statements that remove it (and nothing else), and those, run as
// the superuser, make verify exit 0 again.
func TestVerifyPrivilegeDriftAndTheGrantsFix(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, sql string
		private   bool // changes a role: runs with a role prefix of its own
		want      []string
		fix       string // all that grants --sql prints, one statement a line
	}{
		{name: "extra INSERT on trigger_schedules to runtime", sql: "GRANT INSERT ON control_core.trigger_schedules TO {runtime}",
			want: []string{"{runtime} holds INSERT on table control_core.trigger_schedules"},
			fix:  `REVOKE INSERT ON TABLE control_core.trigger_schedules FROM "{runtime}";`},
		{name: "extra DELETE on trigger_schedules to runtime", sql: "GRANT DELETE ON control_core.trigger_schedules TO {runtime}",
			want: []string{"{runtime} holds DELETE on table control_core.trigger_schedules"},
			fix:  `REVOKE DELETE ON TABLE control_core.trigger_schedules FROM "{runtime}";`},
		{name: "UPDATE revoked from runtime", sql: "REVOKE UPDATE ON control_core.trigger_schedules FROM {runtime}",
			want: []string{"{runtime} lacks UPDATE on table control_core.trigger_schedules"},
			fix:  `GRANT UPDATE ON TABLE control_core.trigger_schedules TO "{runtime}";`},
		{name: "EXECUTE on db_now_ms revoked from runtime", sql: "REVOKE EXECUTE ON FUNCTION control_core.db_now_ms() FROM {runtime}",
			want: []string{"{runtime} lacks EXECUTE on function control_core.db_now_ms()"},
			fix:  `GRANT EXECUTE ON FUNCTION control_core.db_now_ms() TO "{runtime}";`},
		{name: "CONNECT revoked from runtime", sql: "SET ROLE {owner}; REVOKE CONNECT ON DATABASE {db} FROM {runtime}; RESET ROLE",
			want: []string{"{runtime} lacks CONNECT on database"},
			fix:  `SET ROLE "{owner}"; GRANT CONNECT ON DATABASE {db} TO "{runtime}"; RESET ROLE;`},
		{name: "worker ingress gets SELECT on a table", sql: "GRANT SELECT ON control_core.runs TO {worker_ingress}",
			want: []string{"{worker_ingress} holds SELECT on table control_core.runs"},
			fix:  `REVOKE SELECT ON TABLE control_core.runs FROM "{worker_ingress}";`},
		{name: "worker ingress gets CONNECT", sql: "GRANT CONNECT ON DATABASE {db} TO {worker_ingress}",
			want: []string{"{worker_ingress} holds CONNECT on database"},
			fix:  `REVOKE CONNECT ON DATABASE {db} FROM "{worker_ingress}";`},
		{name: "worker ingress gets USAGE on the schema", sql: "GRANT USAGE ON SCHEMA control_core TO {worker_ingress}",
			want: []string{"{worker_ingress} holds USAGE on schema control_core"},
			fix:  `REVOKE USAGE ON SCHEMA control_core FROM "{worker_ingress}";`},
		{name: "worker ingress gets EXECUTE on db_now_ms", sql: "GRANT EXECUTE ON FUNCTION control_core.db_now_ms() TO {worker_ingress}",
			want: []string{"{worker_ingress} holds EXECUTE on function control_core.db_now_ms()"},
			fix:  `REVOKE EXECUTE ON FUNCTION control_core.db_now_ms() FROM "{worker_ingress}";`},
		{name: "worker ingress gets a table outside control_core", sql: "CREATE TABLE public.side (x int); GRANT SELECT ON public.side TO {worker_ingress}",
			want: []string{"{worker_ingress} holds SELECT on table public.side", "nothing outside control_core"},
			fix:  `REVOKE SELECT ON TABLE public.side FROM "{worker_ingress}";`},
		{name: "PUBLIC gets SELECT on a table", sql: "GRANT SELECT ON control_core.projects TO PUBLIC",
			want: []string{"PUBLIC holds SELECT on table control_core.projects"},
			fix:  `REVOKE SELECT ON TABLE control_core.projects FROM PUBLIC;`},
		{name: "PUBLIC gets USAGE on the schema", sql: "GRANT USAGE ON SCHEMA control_core TO PUBLIC",
			want: []string{"PUBLIC holds USAGE on schema control_core"},
			fix:  `REVOKE USAGE ON SCHEMA control_core FROM PUBLIC;`},
		{name: "PUBLIC gets CONNECT on the database", sql: "GRANT CONNECT ON DATABASE {db} TO PUBLIC",
			want: []string{"PUBLIC holds CONNECT on database"},
			fix:  `REVOKE CONNECT ON DATABASE {db} FROM PUBLIC;`},
		{name: "column-level grant", sql: "GRANT UPDATE (state) ON control_core.runs TO {admin}",
			want: []string{"{admin} holds UPDATE on column state of control_core.runs"},
			fix:  `REVOKE UPDATE (state) ON TABLE control_core.runs FROM "{admin}";`},
		{name: "default privilege in the schema", sql: "ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA control_core GRANT SELECT ON TABLES TO {runtime}",
			want: []string{"default privileges for role {owner} in schema control_core on tables", "{runtime} would get SELECT"},
			fix:  `ALTER DEFAULT PRIVILEGES FOR ROLE "{owner}" IN SCHEMA control_core REVOKE SELECT ON TABLES FROM "{runtime}";`},
		{name: "default privilege gives PUBLIC EXECUTE again", sql: "ALTER DEFAULT PRIVILEGES FOR ROLE {owner} GRANT EXECUTE ON FUNCTIONS TO PUBLIC",
			want: []string{"PUBLIC would get EXECUTE on every one of the functions {owner} creates"},
			fix:  `ALTER DEFAULT PRIVILEGES FOR ROLE "{owner}" REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;`},
		{name: "table owner changed", sql: "ALTER TABLE control_core.runs OWNER TO {admin}",
			want: []string{"table control_core.runs is owned by {admin}; the model says {owner}"},
			// The new owner's own grant merged into its owner privileges: moving the table back
			// must give the admin role its SELECT again.
			fix: `ALTER TABLE control_core.runs OWNER TO "{owner}";` + "\n" + `GRANT SELECT ON TABLE control_core.runs TO "{admin}";`},
		{name: "grant option added", sql: "GRANT SELECT ON control_core.runs TO {admin} WITH GRANT OPTION",
			want: []string{"{admin} holds SELECT on table control_core.runs with grant option"},
			fix:  `REVOKE GRANT OPTION FOR SELECT ON TABLE control_core.runs FROM "{admin}";`},
		{name: "USAGE on goose's id sequence to runtime", sql: "GRANT USAGE ON SEQUENCE control_core.goose_db_version_id_seq TO {runtime}",
			want: []string{"{runtime} holds USAGE on sequence control_core.goose_db_version_id_seq"},
			fix:  `REVOKE USAGE ON SEQUENCE control_core.goose_db_version_id_seq FROM "{runtime}";`},
		{name: "PUBLIC gets SELECT on goose's id sequence", sql: "GRANT SELECT ON SEQUENCE control_core.goose_db_version_id_seq TO PUBLIC",
			want: []string{"PUBLIC holds SELECT on sequence control_core.goose_db_version_id_seq"},
			fix:  `REVOKE SELECT ON SEQUENCE control_core.goose_db_version_id_seq FROM PUBLIC;`},
		{name: "EXECUTE on lock_project to runtime", sql: "GRANT EXECUTE ON FUNCTION control_core.lock_project(text, text) TO {runtime}",
			want: []string{"{runtime} holds EXECUTE on function control_core.lock_project(text, text)"},
			fix:  `REVOKE EXECUTE ON FUNCTION control_core.lock_project(text, text) FROM "{runtime}";`},
		{name: "EXECUTE on lock_project to PUBLIC", sql: "GRANT EXECUTE ON FUNCTION control_core.lock_project(text, text) TO PUBLIC",
			want: []string{"PUBLIC holds EXECUTE on function control_core.lock_project(text, text)"},
			fix:  `REVOKE EXECUTE ON FUNCTION control_core.lock_project(text, text) FROM PUBLIC;`},
		{name: "role given SUPERUSER", sql: "ALTER ROLE {runtime} SUPERUSER", private: true,
			want: []string{"role {runtime} is SUPERUSER; the model says NOSUPERUSER"},
			fix:  `ALTER ROLE "{runtime}" NOSUPERUSER;`},
		{name: "role given BYPASSRLS", sql: "ALTER ROLE {admin} BYPASSRLS", private: true,
			want: []string{"role {admin} is BYPASSRLS; the model says NOBYPASSRLS"},
			fix:  `ALTER ROLE "{admin}" NOBYPASSRLS;`},
		{name: "role given CREATEROLE", sql: "ALTER ROLE {owner} CREATEROLE", private: true,
			want: []string{"role {owner} is CREATEROLE; the model says NOCREATEROLE"},
			fix:  `ALTER ROLE "{owner}" NOCREATEROLE;`},
		{name: "role made NOLOGIN", sql: "ALTER ROLE {worker_ingress} NOLOGIN", private: true,
			want: []string{"role {worker_ingress} is NOLOGIN; the model says LOGIN"},
			fix:  `ALTER ROLE "{worker_ingress}" LOGIN;`},
		{name: "runtime made a member of admin", sql: "GRANT {admin} TO {runtime}", private: true,
			want: []string{"{runtime} is a member of {admin}", "must be a member of no role"},
			fix:  `REVOKE "{admin}" FROM "{runtime}"{granted_by};`},
		{name: "runtime made a member of pg_read_all_data", sql: "GRANT pg_read_all_data TO {runtime}", private: true,
			want: []string{"{runtime} is a member of pg_read_all_data"},
			fix:  `REVOKE "pg_read_all_data" FROM "{runtime}"{granted_by};`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var (
				d     *testpg.DB
				names = testpg.Get(t).Names
			)
			if c.private {
				d, names = privateDB(t)
			} else {
				d = testpg.New(t)
			}
			// PostgreSQL 16 keeps one membership per grantor, so the REVOKE names it: a
			// superuser's GRANT of a role is recorded as granted by the bootstrap superuser.
			grantedBy := ""
			if d.Server.VersionNum >= 160000 {
				grantedBy = " GRANTED BY " + pgx.Identifier{bootstrapSuperuser(t, d)}.Sanitize()
			}
			expand := strings.NewReplacer("{owner}", names.Owner, "{admin}", names.Admin, "{runtime}", names.Runtime,
				"{worker_ingress}", names.WorkerIngress, "{db}", d.Name, "{granted_by}", grantedBy).Replace
			args := []string{"--database-url", d.URL(""), "--role-prefix", names.Prefix}
			d.Exec(t, expand(c.sql))

			r := run(t, nil, append([]string{"verify"}, args...)...)
			var want []string
			for _, w := range c.want {
				want = append(want, expand(w))
			}
			assertDrift(t, r, "privileges", want)

			g := run(t, nil, append([]string{"grants"}, args...)...)
			if g.code != 1 || !strings.Contains(g.stdout, "DRIFT") {
				t.Errorf("grants: exit %d, want 1 with the drift marked\n%s%s", g.code, g.stdout, g.stderr)
			}
			fix := run(t, nil, append([]string{"grants", "--sql"}, args...)...)
			if want := expand(c.fix) + "\n"; fix.code != 1 || fix.stdout != want {
				t.Fatalf("grants --sql: exit %d, want 1 printing exactly\n%s(nothing else); got\n%s%s", fix.code, want, fix.stdout, fix.stderr)
			}
			d.Exec(t, fix.stdout)
			if r := run(t, nil, append([]string{"verify"}, args...)...); r.code != 0 {
				t.Fatalf("after applying grants --sql:\n%s\nverify exits %d\n%s%s", fix.stdout, r.code, r.stdout, r.stderr)
			}
			if again := run(t, nil, append([]string{"grants", "--sql"}, args...)...); again.code != 0 || again.stdout != "" {
				t.Errorf("grants --sql after the fix: exit %d, stdout %q; want nothing", again.code, again.stdout)
			}
		})
	}
}

// bootstrapSuperuser is the name of the role that initdb created (oid 10).
func bootstrapSuperuser(t *testing.T, d *testpg.DB) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var name string
	if err := conn.QueryRow(ctx, "SELECT rolname FROM pg_roles WHERE oid = 10").Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

// A membership *in* one of the four roles belongs to its member: a NOLOGIN group's is a note. A
// LOGIN member acts as the role: drift, unless --allow-member names it (a DBA who runs
// migrations); then a note that names the flag. grants --sql revokes a member not allowed.
func TestVerifyMembershipInAModelRole(t *testing.T) {
	t.Parallel()
	d, names := privateDB(t)
	dba, group := names.Prefix+"dba", names.Prefix+"group"
	d.Exec(t, fmt.Sprintf("CREATE ROLE %[1]s LOGIN; GRANT %[2]s TO %[1]s; CREATE ROLE %[3]s NOLOGIN; GRANT %[2]s TO %[3]s", dba, names.Owner, group))
	args := []string{"--database-url", d.URL(""), "--role-prefix", names.Prefix}
	r := run(t, nil, append([]string{"verify"}, args...)...)
	if r.code != 1 || !strings.Contains(r.stdout, dba+" (LOGIN) is a member of "+names.Owner) || !strings.Contains(r.stdout, "--allow-member "+dba) {
		t.Errorf("exit %d, want 1 naming %s's membership and --allow-member\n%s%s", r.code, dba, r.stdout, r.stderr)
	}
	allowed := append([]string{"--allow-member", dba}, args...)
	for _, cmd := range []string{"verify", "grants"} {
		r = run(t, nil, append([]string{cmd}, allowed...)...)
		if r.code != 0 || !strings.Contains(r.stdout, "allowed by --allow-member "+dba) || !strings.Contains(r.stdout, group+" is a member of "+names.Owner) {
			t.Errorf("%s --allow-member %s: exit %d, want 0 with notes on both memberships\n%s%s", cmd, dba, r.code, r.stdout, r.stderr)
		}
	}
	if r = run(t, nil, append([]string{"verify", "--allow-member", ""}, args...)...); r.code != 2 {
		t.Errorf("--allow-member '': exit %d, want 2\n%s", r.code, r.stderr)
	}
	fix := run(t, nil, append([]string{"grants", "--sql"}, args...)...)
	if fix.code != 1 || !strings.HasPrefix(fix.stdout, fmt.Sprintf(`REVOKE "%s" FROM "%s"`, names.Owner, dba)) {
		t.Fatalf("grants --sql: exit %d, want 1 and the REVOKE\n%s%s", fix.code, fix.stdout, fix.stderr)
	}
	d.Exec(t, fix.stdout)
	if r = run(t, nil, append([]string{"verify"}, args...)...); r.code != 0 {
		t.Errorf("after grants --sql, exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// Without the owner's rights, verify cannot read goose's table and the ledger: exit 3 saying
// whom to connect as.
func TestVerifyAsRuntimeSaysWhomToConnectAs(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	r := run(t, nil, "verify", "--database-url", d.URL("ql_runtime"))
	if r.code != 3 || !strings.Contains(r.stderr, "connect as ql_owner") {
		t.Errorf("exit %d, stderr %q; want exit 3 naming ql_owner", r.code, r.stderr)
	}
}

// status as a role that may not read goose's table says so plainly: which role, what it could not
// read, whom to connect as; not a failure of "validate before applying".
func TestStatusAsAnotherRoleSaysWhatItMayNotRead(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	for _, role := range []string{"ql_admin", "ql_runtime"} {
		r := run(t, nil, "status", "--database-url", d.URL(role))
		want := role + " may not read the applied migrations"
		if r.code != 3 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "connect as ql_owner") ||
			strings.Contains(r.stderr, "validate before applying") || strings.Contains(r.stderr, "verify reads") {
			t.Errorf("status as %s: exit %d, stderr %q; want exit 3 saying %q and naming ql_owner", role, r.code, r.stderr, want)
		}
	}
}

// A new owner of schema control_core takes the owner role's own USAGE with it. verify as the
// owner role, the documented one, still reads the catalogs and names the change (exit 1, not a
// permission error, exit 3); its --fix-sql gives the schema back to the owner role (never a
// function to the new schema owner), after which verify as the owner role passes.
func TestVerifyAsTheOwnerRoleNamesAChangedSchemaOwner(t *testing.T) {
	t.Parallel()
	for _, to := range []string{"ql_admin", "ql_worker_ingress"} {
		t.Run(to, func(t *testing.T) {
			t.Parallel()
			d := testpg.New(t)
			d.Exec(t, "ALTER SCHEMA control_core OWNER TO "+to+"; ALTER FUNCTION control_core.db_now_ms() OWNER TO "+to)
			args := []string{"verify", "--database-url", d.URL("ql_owner")}
			r := run(t, nil, args...)
			if r.code != 1 || !strings.Contains(r.stdout, "schema control_core is owned by "+to) ||
				!strings.Contains(r.stdout, `ALTER SCHEMA control_core OWNER TO "ql_owner"`) {
				t.Fatalf("verify as the owner role: exit %d, want 1 naming the schema's owner and its fix\n%s%s", r.code, r.stdout, r.stderr)
			}
			fix := run(t, nil, append(args, "--fix-sql")...)
			if strings.Contains(fix.stdout, "OWNER TO "+to) || strings.Contains(fix.stdout, `OWNER TO "`+to) {
				t.Errorf("the fix follows the new schema owner:\n%s", fix.stdout)
			}
			d.Exec(t, fix.stdout)
			if r := run(t, nil, args...); r.code != 0 {
				t.Fatalf("verify as the owner role after the fix: exit %d, want 0\nfix:\n%s\n%s%s", r.code, fix.stdout, r.stdout, r.stderr)
			}
		})
	}
}
