package roles_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/roles"
)

// privateV17 is a database of the test's own, migrated to v28 under role names of its own
// (role settings, memberships and attributes are cluster-wide). The database and every role
// named with the prefix (the four, and those a case creates as {p}name) are dropped when the
// test ends.
func privateV17(t *testing.T) (*testpg.DB, roles.Names) {
	t.Helper()
	d := testpg.NewEmpty(t)
	names := privateNames(t, d)
	if err := d.Server.BootstrapNames(context.Background(), d.Name, names); err != nil {
		t.Fatal(err)
	}
	if err := up(t, d, names, 0); err != nil {
		t.Fatalf("up: %v", err)
	}
	return d, names
}

// databaseOwner is the owner of database name on d's server.
func databaseOwner(t *testing.T, d *testpg.DB, name string) string {
	t.Helper()
	var owner string
	err := d.Pool(t, "").QueryRow(context.Background(), "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1", name).Scan(&owner)
	if err != nil {
		t.Fatal(err)
	}
	return owner
}

// superuserName is the role d's superuser connections use.
func superuserName(t *testing.T, d *testpg.DB) string {
	t.Helper()
	var name string
	if err := d.Pool(t, "").QueryRow(context.Background(), "SELECT current_user").Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

// execAs runs sql on d connected as role ("" the superuser), in one transaction.
func execAs(t *testing.T, d *testpg.DB, role, sql string) error {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.URL(role))
	if err != nil {
		t.Fatalf("connect as %q: %v", role, err)
	}
	defer conn.Close(ctx)
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, sql)
		return err
	})
}

// Every class of role and database drift beyond privileges: the audit names it (kind, object,
// role) and Audit.SQL(), run as a superuser in one transaction, leaves the audit clean.
func TestRoleAndDatabaseDriftIsFoundAndFixed(t *testing.T) {
	t.Parallel()
	const hostile = `m"; DROP ROLE x; --`
	cases := []struct {
		name  string
		as    string // "runtime": the set-up runs connected as the runtime role
		sql   string
		allow []string // AuditOptions.AllowedMembers, without the prefix
		kind  string   // the one drift; "" none
		// object and role of the drift; message holds, notMessage does not; fix starts the
		// drift's SQL; note is a note's kind and message.
		object, role, message, notMessage, fix, note string
	}{
		{name: "role setting", sql: "ALTER ROLE {runtime} SET statement_timeout = '1s'",
			kind: "role_setting", object: "role {runtime}: statement_timeout", role: "{runtime}",
			message: `role {runtime} has statement_timeout = "1s"`, fix: `ALTER ROLE "{runtime}" RESET "statement_timeout";`},
		{name: "session_replication_role replica, set by a superuser", sql: "ALTER ROLE {runtime} SET session_replication_role = replica",
			kind: "role_setting", object: "role {runtime}: session_replication_role", role: "{runtime}",
			message: `session_replication_role = "replica"`, fix: `ALTER ROLE "{runtime}" RESET "session_replication_role";`},
		{name: "the runtime role changes its own setting", as: "runtime", sql: "ALTER ROLE CURRENT_USER SET work_mem = '1MB'",
			kind: "role_setting", object: "role {runtime}: work_mem", role: "{runtime}",
			message: `work_mem = "1MB"`, fix: `ALTER ROLE "{runtime}" RESET "work_mem";`},
		{name: "custom setting: value withheld, name quoted", sql: `ALTER ROLE {admin} SET "Qx.Api_Key" = 'sekrit-value'`,
			kind: "role_setting", object: "role {admin}: Qx.Api_Key", role: "{admin}",
			message: "value not shown", notMessage: "sekrit", fix: `ALTER ROLE "{admin}" RESET "Qx"."Api_Key";`},
		{name: "role setting in this database", sql: "ALTER ROLE {runtime} IN DATABASE {db} SET lock_timeout = '1ms'",
			kind: "role_setting", object: "role {runtime} in database {db}: lock_timeout", role: "{runtime}",
			message: "in database {db}", fix: `ALTER ROLE "{runtime}" IN DATABASE "{db}" RESET "lock_timeout";`},
		{name: "database setting", sql: "ALTER DATABASE {db} SET default_transaction_read_only = on",
			kind: "database_setting", object: "database {db}: default_transaction_read_only", role: "",
			message: "every session in it", fix: "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE;"},
		{name: "valid until", sql: "ALTER ROLE {runtime} VALID UNTIL '2020-01-01'",
			kind: "role_attribute", object: "{runtime}", role: "{runtime}",
			message: "role {runtime} is VALID UNTIL 2020-01-01", fix: `ALTER ROLE "{runtime}" VALID UNTIL 'infinity';`},
		{name: "connection limit", sql: "ALTER ROLE {owner} CONNECTION LIMIT 0",
			kind: "role_attribute", object: "{owner}", role: "{owner}",
			message: "CONNECTION LIMIT 0", fix: `ALTER ROLE "{owner}" CONNECTION LIMIT -1;`},
		{name: "a LOGIN member", sql: "CREATE ROLE {p}m LOGIN; GRANT {runtime} TO {p}m",
			kind: "login_member", object: "{runtime}", role: "{runtime}",
			message: "{p}m (LOGIN) is a member of {runtime} (directly)", fix: `REVOKE "{runtime}" FROM "{p}m"`},
		{name: "an allowed LOGIN member", sql: "CREATE ROLE {p}m LOGIN; GRANT {runtime} TO {p}m", allow: []string{"m"},
			note: "allowed_member: {p}m (LOGIN) is a member of {runtime} (directly); allowed by --allow-member {p}m"},
		{name: "a LOGIN member through a NOLOGIN role",
			sql:  "CREATE ROLE {p}grp NOLOGIN; GRANT {owner} TO {p}grp; CREATE ROLE {p}m LOGIN; GRANT {p}grp TO {p}m",
			kind: "login_member", object: "{owner}", role: "{owner}",
			message: "{p}m (LOGIN) is a member of {owner} (through {p}grp)", fix: `REVOKE "{p}grp" FROM "{p}m"`},
		{name: "an allowed member's group gains a member", allow: []string{"m"},
			sql:  "CREATE ROLE {p}grp NOLOGIN; GRANT {owner} TO {p}grp; CREATE ROLE {p}m LOGIN; GRANT {p}grp TO {p}m; CREATE ROLE {p}n LOGIN; GRANT {p}m TO {p}n",
			kind: "login_member", object: "{owner}", role: "{owner}",
			message: "{p}n (LOGIN) is a member of {owner} (through {p}m → {p}grp)", fix: `REVOKE "{p}m" FROM "{p}n"`,
			note: "allowed_member: {p}m (LOGIN) is a member of {owner} (through {p}grp); allowed by --allow-member {p}m"},
		{name: "a LOGIN member with a hostile name",
			sql:  `CREATE ROLE "{p}` + strings.ReplaceAll(hostile, `"`, `""`) + `" LOGIN; GRANT {admin} TO "{p}` + strings.ReplaceAll(hostile, `"`, `""`) + `"`,
			kind: "login_member", object: "{admin}", role: "{admin}",
			fix: `REVOKE "{admin}" FROM "{p}m""; DROP ROLE x; --"`},
		{name: "a large object owned by the runtime role", sql: "SELECT lo_create(424242); ALTER LARGE OBJECT 424242 OWNER TO {runtime}",
			kind: "large_object_owner", object: "large object 424242", role: "{runtime}",
			message: "owned by {runtime}", fix: `ALTER LARGE OBJECT 424242 OWNER TO {dbowner};`},
		{name: "a large object granted to the admin role", sql: "SELECT lo_create(424243); GRANT SELECT, UPDATE ON LARGE OBJECT 424243 TO {admin}",
			kind: "large_object_privilege", object: "large object 424243", role: "{admin}",
			message: "{admin} holds SELECT, UPDATE on large object 424243", fix: `REVOKE SELECT, UPDATE ON LARGE OBJECT 424243 FROM "{admin}";`},
		{name: "a large object granted to PUBLIC", sql: "SELECT lo_create(424244); GRANT SELECT, UPDATE ON LARGE OBJECT 424244 TO PUBLIC",
			kind: "large_object_privilege", object: "large object 424244", role: "PUBLIC",
			message: "PUBLIC holds SELECT, UPDATE on large object 424244", fix: `REVOKE ALL ON LARGE OBJECT 424244 FROM PUBLIC;`},
		{name: "the database's CONNECTION LIMIT 0", sql: "ALTER DATABASE {db} CONNECTION LIMIT 0",
			kind: "database_connections", object: "database {db}: CONNECTION LIMIT", role: "",
			message: "no role but a superuser may connect", fix: `ALTER DATABASE "{db}" CONNECTION LIMIT -1;`},
		{name: "the database's CONNECTION LIMIT 50 is a note", sql: "ALTER DATABASE {db} CONNECTION LIMIT 50",
			note: "database_connections: database {db} has CONNECTION LIMIT 50: at most 50 sessions of roles other than superusers at once, the replicas' pools included; an operator's capacity choice, not drift"},
		{name: "a SECURITY DEFINER function PUBLIC may execute, owned by a superuser",
			sql:  "CREATE FUNCTION public.evil() RETURNS void SECURITY DEFINER LANGUAGE sql AS 'DELETE FROM control_core.attempts; DELETE FROM control_core.run_events; DELETE FROM control_core.runs'",
			kind: "definer_function", object: "public.evil()", role: "PUBLIC",
			message: "is SECURITY DEFINER and owned by {su} (a superuser); PUBLIC may execute it, so {admin}, {owner}, {runtime}, {worker} may", fix: `REVOKE EXECUTE ON FUNCTION public.evil() FROM PUBLIC;`},
		{name: "a SECURITY DEFINER procedure with a hostile name",
			sql:  `CREATE PROCEDURE public."e""v il"(text) SECURITY DEFINER LANGUAGE sql AS 'SELECT 1'`,
			kind: "definer_function", object: `public."e""v il"(text)`, role: "PUBLIC",
			message: "procedure", fix: `REVOKE EXECUTE ON PROCEDURE public."e""v il"(text) FROM PUBLIC;`},
		{name: "a SECURITY DEFINER function of a role that may do nothing is not drift",
			sql: "CREATE ROLE {p}nobody NOLOGIN; CREATE FUNCTION public.harmless() RETURNS int SECURITY DEFINER LANGUAGE sql AS 'SELECT 1'; ALTER FUNCTION public.harmless() OWNER TO {p}nobody"},
		{name: "a SECURITY DEFINER function nobody of the four may execute is not drift",
			sql: "CREATE FUNCTION public.locked() RETURNS int SECURITY DEFINER LANGUAGE sql AS 'SELECT 1'; REVOKE EXECUTE ON FUNCTION public.locked() FROM PUBLIC"},
		{name: "a SECURITY INVOKER function of a superuser is not drift",
			sql: "CREATE FUNCTION public.invoker() RETURNS int LANGUAGE sql AS 'SELECT 1'"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d, names := privateV17(t)
			expand := strings.NewReplacer("{owner}", names.Owner, "{admin}", names.Admin, "{runtime}", names.Runtime,
				"{worker}", names.WorkerIngress, "{su}", superuserName(t, d),
				"{db}", d.Name, "{p}", names.Prefix, "{dbowner}", pgx.Identifier{databaseOwner(t, d, d.Name)}.Sanitize()).Replace
			as := ""
			if c.as == "runtime" {
				as = names.Runtime
			}
			// PostgreSQL allows a role to change its own user-settable settings: no privilege needed.
			if err := execAs(t, d, as, expand(c.sql)); err != nil {
				t.Fatalf("set-up as %q: %v", as, err)
			}
			var opts roles.AuditOptions
			for _, m := range c.allow {
				opts.AllowedMembers = append(opts.AllowedMembers, names.Prefix+m)
			}
			a := testpg.ReadAudit(t, d.URL(""), names, opts)
			if c.note != "" {
				found := false
				for _, n := range a.Notes {
					found = found || n.Kind+": "+n.Message == expand(c.note)
				}
				if !found {
					t.Errorf("no note %q among %+v", expand(c.note), a.Notes)
				}
			}
			if c.kind == "" {
				if !a.OK() {
					t.Fatalf("want no drift, got %+v", a.Drift)
				}
				return
			}
			if len(a.Drift) != 1 {
				t.Fatalf("want one %s drift, got %d: %+v", c.kind, len(a.Drift), a.Drift)
			}
			got := a.Drift[0]
			if got.Kind != c.kind || got.Object != expand(c.object) || got.Role != expand(c.role) ||
				!strings.Contains(got.Message, expand(c.message)) || (c.notMessage != "" && strings.Contains(got.Message, c.notMessage)) ||
				len(got.SQL) == 0 || !strings.HasPrefix(got.SQL[0], expand(c.fix)) {
				t.Fatalf("drift %+v\nwant kind %s, object %q, role %q, a message with %q, SQL starting %q",
					got, c.kind, expand(c.object), expand(c.role), expand(c.message), expand(c.fix))
			}
			t.Logf("%s %s (role %q): %s\n  fix: %s", got.Kind, got.Object, got.Role, got.Message, strings.Join(a.SQL(), " "))
			if err := execAs(t, d, "", strings.Join(a.SQL(), "\n")); err != nil {
				t.Fatalf("the fix %q: %v", a.SQL(), err)
			}
			if after := testpg.ReadAudit(t, d.URL(""), names, opts); !after.OK() || len(after.SQL()) != 0 {
				t.Fatalf("after the fix %q: %+v", a.SQL(), after.Drift)
			}
		})
	}
}

// The catalogs the audit reads are readable by any role: connected as the runtime or the owner
// role, a clean v28 database has no drift, and drift is seen exactly as a superuser sees it.
func TestAuditAsRuntimeAndOwnerRole(t *testing.T) {
	t.Parallel()
	clean := testpg.New(t)
	for _, role := range []string{clean.Names.Runtime, clean.Names.Owner} {
		a := testpg.ReadAudit(t, clean.URL(role), clean.Names, roles.AuditOptions{})
		if notes := notesExcept(a, "other_database"); !a.OK() || len(notes) != 0 {
			t.Errorf("connected as %s, a clean v28 database: drift %+v, notes %+v", role, a.Drift, notes)
		}
	}

	d, names := privateV17(t)
	d.Exec(t, fmt.Sprintf(`ALTER ROLE %[1]s SET work_mem = '1MB'; ALTER ROLE %[1]s IN DATABASE %[2]s SET lock_timeout = '1s';
		ALTER DATABASE %[2]s SET statement_timeout = '1min'; ALTER ROLE %[1]s CONNECTION LIMIT 5 VALID UNTIL '2999-01-01';
		CREATE ROLE %[3]sm LOGIN; GRANT %[1]s TO %[3]sm; SELECT lo_create(515151); ALTER LARGE OBJECT 515151 OWNER TO %[4]s`,
		names.Runtime, d.Name, names.Prefix, names.Admin))
	kinds := func(a *roles.Audit) string {
		var out []string
		for _, dr := range a.Drift {
			out = append(out, dr.Kind+" "+dr.Object)
		}
		return strings.Join(out, "\n")
	}
	want := kinds(testpg.ReadAudit(t, d.URL(""), names, roles.AuditOptions{}))
	if strings.Count(want, "\n") != 6 {
		t.Fatalf("as the superuser: want 7 findings, got\n%s", want)
	}
	for _, role := range []string{names.Runtime, names.Owner} {
		if got := kinds(testpg.ReadAudit(t, d.URL(role), names, roles.AuditOptions{})); got != want {
			t.Errorf("connected as %s:\n%s\nwant what the superuser sees:\n%s", role, got, want)
		}
	}
}

// What the four roles may do in the cluster's other databases is a note with its fix: not drift.
// Templates and databases that refuse connections are left out.
func TestOtherDatabasesAreNotes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, names := privateV17(t)
	other := names.Prefix + "other"
	t.Cleanup(func() { // before the roles' clean-up: the roles hold privileges on it
		conn, err := pgx.Connect(ctx, d.Server.URL("", "postgres"))
		if err != nil {
			t.Errorf("clean-up: connect to drop %s: %v", other, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{other}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("clean-up: drop database %s: %v", other, err)
		}
	})
	d.Exec(t, "CREATE DATABASE "+other)
	d.Exec(t, fmt.Sprintf("REVOKE ALL ON DATABASE %[1]s FROM PUBLIC; GRANT CONNECT, TEMPORARY ON DATABASE %[1]s TO %[2]s; GRANT TEMPORARY ON DATABASE %[1]s TO %[3]s",
		other, names.Runtime, names.Admin))
	a := testpg.ReadAudit(t, d.URL(""), names, roles.AuditOptions{})
	if !a.OK() {
		t.Fatalf("privileges elsewhere are not drift: %+v", a.Drift)
	}
	notes := map[string]roles.Drift{}
	for _, n := range a.Notes {
		if n.Kind == "other_database" {
			notes[n.Role+" "+n.Object] = n
		}
		if strings.Contains(n.Object, "template") {
			t.Errorf("a note on a template: %+v", n)
		}
	}
	runtime := notes[names.Runtime+" database "+other]
	if runtime.Message != fmt.Sprintf("%s may CONNECT to and create TEMPORARY tables in database %s (granted by %s)", names.Runtime, other, databaseOwner(t, d, other)) ||
		strings.Join(runtime.SQL, " ") != fmt.Sprintf(`REVOKE CONNECT, TEMPORARY ON DATABASE "%s" FROM "%s";`, other, names.Runtime) {
		t.Errorf("the runtime role's note on %s: %+v", other, runtime)
	}
	admin := notes[names.Admin+" database "+other]
	if !strings.HasPrefix(admin.Message, names.Admin+" may create TEMPORARY tables (but not CONNECT) in database "+other) ||
		strings.Join(admin.SQL, " ") != fmt.Sprintf(`REVOKE TEMPORARY ON DATABASE "%s" FROM "%s";`, other, names.Admin) {
		t.Errorf("the admin role's note on %s: %+v", other, admin)
	}
	if n, ok := notes[names.WorkerIngress+" database "+other]; ok {
		t.Errorf("worker ingress holds nothing on %s, noted %+v", other, n)
	}
	var publicConnect bool
	if err := d.Pool(t, "").QueryRow(ctx, "SELECT has_database_privilege('public', 'postgres', 'CONNECT')").Scan(&publicConnect); err != nil {
		t.Fatal(err)
	}
	if publicConnect { // initdb's default; a shared server may have revoked it
		n := notes["PUBLIC database postgres"]
		if !strings.HasPrefix(n.Message, strings.Join([]string{names.Admin, names.Owner, names.Runtime, names.WorkerIngress}, ", ")+" may CONNECT") ||
			!strings.Contains(n.Message, "through PUBLIC") || !strings.Contains(strings.Join(n.SQL, " "), `ON DATABASE "postgres" FROM PUBLIC;`) {
			t.Errorf("the four roles on database postgres: %+v; want CONNECT through PUBLIC with its REVOKE", n)
		}
	}
	for _, n := range []roles.Drift{runtime, admin, notes["PUBLIC database postgres"]} {
		t.Logf("%s %s (role %q): %s\n  fix: %s", n.Kind, n.Object, n.Role, n.Message, strings.Join(n.SQL, " "))
	}
	d.Exec(t, strings.Join(append(runtime.SQL, admin.SQL...), "\n"))
	for _, n := range testpg.ReadAudit(t, d.URL(""), names, roles.AuditOptions{}).Notes {
		if n.Object == "database "+other {
			t.Errorf("after the REVOKEs: %+v", n)
		}
	}
}

// Findings that come with others (a grant that is extra_privilege too, a membership): each case
// lists every kind and role it must produce ("kind role object"), and Audit.SQL(), run as a
// superuser in one transaction, leaves the audit clean.
func TestDefinerFunctionsAndPublicLargeObjectsWithOtherDrift(t *testing.T) {
	t.Parallel()
	const evil = "CREATE FUNCTION public.evil() RETURNS void SECURITY DEFINER LANGUAGE sql AS " +
		"'DELETE FROM control_core.attempts; DELETE FROM control_core.run_events; DELETE FROM control_core.runs'; "
	cases := []struct {
		name string
		sql  string
		want []string // "kind role object", every finding, in any order
		// message: a definer_function finding's message holds it.
		message string
	}{
		{name: "EXECUTE granted to the runtime role only", sql: evil + "REVOKE EXECUTE ON FUNCTION public.evil() FROM PUBLIC; GRANT EXECUTE ON FUNCTION public.evil() TO {runtime}",
			want:    []string{"definer_function {runtime} public.evil()", "extra_privilege {runtime} public.evil()"},
			message: "{runtime} may execute it (granted to it)"},
		{name: "EXECUTE through membership in another role",
			sql: evil + "REVOKE EXECUTE ON FUNCTION public.evil() FROM PUBLIC; CREATE ROLE {p}grp NOLOGIN; " +
				"GRANT EXECUTE ON FUNCTION public.evil() TO {p}grp; GRANT {p}grp TO {runtime}",
			want:    []string{"definer_function {runtime} public.evil()", "membership {runtime} {p}grp"},
			message: "{runtime} may execute it (through membership in {p}grp"},
		{name: "EXECUTE granted by another grantor to PUBLIC",
			sql: evil + "REVOKE EXECUTE ON FUNCTION public.evil() FROM PUBLIC; CREATE ROLE {p}grantor NOLOGIN; " +
				"GRANT EXECUTE ON FUNCTION public.evil() TO {p}grantor WITH GRANT OPTION; " +
				"SET ROLE {p}grantor; GRANT EXECUTE ON FUNCTION public.evil() TO PUBLIC; RESET ROLE",
			want:    []string{"definer_function PUBLIC public.evil()"},
			message: "PUBLIC may execute it"},
		{name: "an owner that may delete Runs, not a superuser",
			sql: "CREATE ROLE {p}writer NOLOGIN; GRANT USAGE ON SCHEMA control_core TO {p}writer; GRANT DELETE ON control_core.runs TO {p}writer; " +
				evil + "ALTER FUNCTION public.evil() OWNER TO {p}writer",
			want: []string{"definer_function PUBLIC public.evil()", "extra_privilege {p}writer control_core.runs",
				"extra_privilege {p}writer control_core"},
			message: "owned by {p}writer (who may write control_core's tables)"},
		{name: "a function of the runtime role", sql: "CREATE FUNCTION public.mine() RETURNS int SECURITY DEFINER LANGUAGE sql AS 'SELECT 1'; ALTER FUNCTION public.mine() OWNER TO {runtime}",
			want:    []string{"definer_function PUBLIC public.mine()"},
			message: "owned by {runtime} (one of the four roles)"},
		{name: "a large object of the runtime role granted to PUBLIC",
			sql:  "SELECT lo_create(424245); ALTER LARGE OBJECT 424245 OWNER TO {runtime}; SET ROLE {runtime}; GRANT SELECT ON LARGE OBJECT 424245 TO PUBLIC; RESET ROLE",
			want: []string{"large_object_owner {runtime} large object 424245", "large_object_privilege PUBLIC large object 424245"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d, names := privateV17(t)
			expand := strings.NewReplacer("{owner}", names.Owner, "{admin}", names.Admin, "{runtime}", names.Runtime,
				"{worker}", names.WorkerIngress, "{db}", d.Name, "{p}", names.Prefix).Replace
			if err := execAs(t, d, "", expand(c.sql)); err != nil {
				t.Fatalf("set-up: %v", err)
			}
			a := testpg.ReadAudit(t, d.URL(""), names, roles.AuditOptions{})
			var got, want []string
			for _, dr := range a.Drift {
				got = append(got, dr.Kind+" "+dr.Role+" "+dr.Object)
				if dr.Kind == "definer_function" && !strings.Contains(dr.Message, expand(c.message)) {
					t.Errorf("message %q, want it to hold %q", dr.Message, expand(c.message))
				}
				t.Logf("%s %s (role %q): %s\n  fix: %s", dr.Kind, dr.Object, dr.Role, dr.Message, strings.Join(dr.SQL, " "))
			}
			for _, w := range c.want {
				want = append(want, expand(w))
			}
			sort.Strings(got)
			sort.Strings(want)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("findings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if err := execAs(t, d, "", strings.Join(a.SQL(), "\n")); err != nil {
				t.Fatalf("the fix %q: %v", a.SQL(), err)
			}
			if after := testpg.ReadAudit(t, d.URL(""), names, roles.AuditOptions{}); !after.OK() {
				t.Fatalf("after the fix %q: %+v", a.SQL(), after.Drift)
			}
			if strings.Contains(c.name, "runtime role only") || strings.Contains(c.name, "membership") {
				err := execAs(t, d, names.Runtime, "SELECT public.evil()")
				if err == nil || !strings.Contains(err.Error(), "permission denied") {
					t.Errorf("the runtime role calls public.evil() after the fix: %v, want permission denied", err)
				}
			}
		})
	}
}

// ALLOW_CONNECTIONS false shuts every role out, superusers included, so only a session opened
// before can see it: the audit names it as drift of the database and its fix lets roles in again.
func TestDatabaseNotAllowingConnectionsIsDrift(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, names := privateV17(t)
	conn, err := pgx.Connect(ctx, d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	other, err := pgx.Connect(ctx, d.Server.URL("", "postgres")) // the current database may not be the one altered
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close(ctx) }) // after the clean-up below, which uses it
	if _, err := other.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{d.Name}.Sanitize()+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := other.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{d.Name}.Sanitize()+" ALLOW_CONNECTIONS true"); err != nil {
			t.Errorf("clean-up: let connections into %s again: %v", d.Name, err)
		}
	})
	var a *roles.Audit
	read := func() {
		a, err = roles.ReadAudit(ctx, conn, names, roles.AuditOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	read()
	if len(a.Drift) != 1 || a.Drift[0].Kind != "database_connections" || a.Drift[0].Role != "" ||
		a.Drift[0].Object != "database "+d.Name+": ALLOW_CONNECTIONS" ||
		strings.Join(a.SQL(), " ") != fmt.Sprintf(`ALTER DATABASE "%s" ALLOW_CONNECTIONS true;`, d.Name) {
		t.Fatalf("drift %+v, SQL %q", a.Drift, a.SQL())
	}
	t.Logf("%s: %s\n  fix: %s", a.Drift[0].Object, a.Drift[0].Message, strings.Join(a.SQL(), " "))
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, strings.Join(a.SQL(), "\n"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	read()
	if !a.OK() {
		t.Fatalf("after the fix: %+v", a.Drift)
	}
	if after := testpg.ReadAudit(t, d.URL(names.Runtime), names, roles.AuditOptions{}); !after.OK() {
		t.Fatalf("the runtime role connects again and sees %+v", after.Drift)
	}
}
