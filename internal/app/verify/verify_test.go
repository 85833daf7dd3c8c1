package verify_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/sql/migrations"
)

func TestMain(m *testing.M) { testpg.Main(m) }

func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestRunOnACleanV17DatabaseFindsNothing(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	rep, err := verify.Run(context.Background(), connect(t, d.URL("ql_owner")), verify.Options{Names: d.Names})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Summary.Drift != 0 || len(rep.Checks) != 8 {
		t.Fatalf("report: %+v", rep)
	}
	// The only notes of a clean database: what the roles may do in the cluster's other databases,
	// and the test server's own synchronous_commit = off (its command line: the operator's choice).
	for _, c := range rep.Checks {
		for _, f := range c.Findings {
			if f.Kind != "other_database" && (f.Kind != "effective_setting" || f.Object != "synchronous_commit") {
				t.Errorf("%s: a note on a clean database: %+v", c.Name, f)
			}
		}
	}
	for i, want := range []string{verify.CheckIntegrity, verify.CheckLedger, verify.CheckUnknown, verify.CheckPending,
		verify.CheckCapability, verify.CheckReadiness, verify.CheckPrivileges, verify.CheckSettings} {
		if rep.Checks[i].Name != want || rep.Checks[i].Status != verify.StatusOK {
			t.Errorf("check %d: %+v, want %s ok", i, rep.Checks[i], want)
		}
	}
	var b bytes.Buffer
	if err := verify.WriteText(&b, rep); err != nil || !strings.Contains(b.String(), "OK: no drift") {
		t.Errorf("text report: %v\n%s", err, b.String())
	}
}

// The integrity check covers the stream the binary carries: a stream whose files do not match
// its migrations.sum is drift naming the file, before anything else is read.
func TestRunReportsAnEditedEmbeddedFile(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	fsys := fstest.MapFS{}
	entries, err := migrations.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := migrations.FS.ReadFile(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		fsys[e.Name()] = &fstest.MapFile{Data: b}
	}
	fsys["0012_admin_audit_log.sql"].Data = append(fsys["0012_admin_audit_log.sql"].Data, []byte("-- edited\n")...)
	rep, err := verify.Run(context.Background(), connect(t, d.URL("")), verify.Options{Names: d.Names, FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || rep.Checks[0].Status != verify.StatusDrift || rep.Checks[0].Findings[0].Object != "0012_admin_audit_log.sql" {
		t.Fatalf("integrity: %+v", rep.Checks[0])
	}
	// The same edit is, against a database that applied the original, an edited ledger checksum.
	if rep.Checks[1].Status != verify.StatusDrift || rep.Checks[1].Findings[0].Object != "pg-0012-admin-audit-log" {
		t.Errorf("ledger: %+v", rep.Checks[1])
	}
}

// BenchmarkVerify measures one complete verify (all seven checks, one read-only transaction) on
// a clean v22 database over an open connection, as `qlmigrate verify` runs it.
func BenchmarkVerify(b *testing.B) {
	d := testpg.New(b)
	conn := connect(b, d.URL("ql_owner"))
	ctx := context.Background()
	opts := verify.Options{Names: d.Names}
	for b.Loop() {
		rep, err := verify.Run(ctx, conn, opts)
		if err != nil || !rep.OK {
			b.Fatalf("verify: %v %+v", err, rep)
		}
	}
}

// Readiness runs verify's code in ScopeRuntime on the runtime role's own connection: a clean
// database is ready; another role is not the runtime role; drift of the runtime is reported.
func TestReadinessIsVerifyForTheRuntime(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	ctx := context.Background()
	if err := verify.Readiness(ctx, connect(t, d.URL("ql_runtime")), d.Names); err != nil {
		t.Fatalf("clean database as the runtime role: %v", err)
	}
	var notReady *verify.NotReadyError
	err := verify.Readiness(ctx, connect(t, d.URL("ql_admin")), d.Names)
	if !errors.As(err, &notReady) || notReady.Findings[0].Kind != "connected_role" {
		t.Fatalf("as the admin role: %v, want a connected_role finding", err)
	}
	d.Exec(t, "GRANT TRUNCATE ON control_core.runs TO ql_runtime")
	err = verify.Readiness(ctx, connect(t, d.URL("ql_runtime")), d.Names)
	if !errors.As(err, &notReady) || !strings.Contains(err.Error(), "control_core.runs") || !strings.Contains(err.Error(), "TRUNCATE") {
		t.Fatalf("TRUNCATE on runs: %v, want it named", err)
	}
}

// Object names come from the catalogs, and a hostile one must not turn a comment of the fix
// script into a statement: a trigger named with a newline and a statement after it.
func TestFixSQLKeepsHostileNamesInsideComments(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	d.Exec(t, `CREATE FUNCTION public.noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
		CREATE TRIGGER "x
DROP SCHEMA control_core CASCADE; --" BEFORE INSERT ON control_core.runs FOR EACH ROW EXECUTE FUNCTION public.noop()`)
	ctx := context.Background()
	rep, err := verify.Run(ctx, connect(t, d.URL("")), verify.Options{Names: d.Names})
	if err != nil || rep.OK {
		t.Fatalf("verify: %v, ok %v; want the trigger as drift", err, rep.OK)
	}
	var text, script bytes.Buffer
	if err := verify.WriteText(&text, rep); err != nil || strings.Contains(text.String(), "\nDROP SCHEMA") {
		t.Errorf("the text report printed the name's newline: %v\n%s", err, text.String())
	}
	if err := verify.WriteFixSQL(&script, rep); err != nil {
		t.Fatal(err)
	}
	// In the comment the newline is a space; inside the quoted identifier of DROP TRIGGER it
	// stays, which is harmless: running the script must leave the schema in place.
	if !strings.Contains(script.String(), "-- extra_trigger: x DROP SCHEMA control_core CASCADE; -- on control_core.runs\n") {
		t.Fatalf("the name's comment line:\n%s", script.String())
	}
	conn := connect(t, d.URL(""))
	if _, err := conn.Exec(ctx, script.String(), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("run the fix: %v\n%s", err, script.String())
	}
	rep, err = verify.Run(ctx, conn, verify.Options{Names: d.Names})
	if err != nil || !rep.OK {
		t.Fatalf("after the fix: %v %+v", err, rep)
	}
}

// A built-in that the other checks' catalog queries compare with (btree text_ops' equality made
// <>) is reported alone: those checks are skipped, not run into 78 findings that are not there
// and fixes that rebuild every foreign key.
func TestRunReportsChangedBuiltinsAloneAndSkipsTheChecksThatUseThem(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	d.Exec(t, `UPDATE pg_catalog.pg_amop SET amopopr = 'pg_catalog.<>(text,text)'::pg_catalog.regoperator
		WHERE amopfamily = (SELECT f.oid FROM pg_catalog.pg_opfamily f WHERE f.opfname = 'text_ops'
		                    AND f.opfmethod = (SELECT a.oid FROM pg_catalog.pg_am a WHERE a.amname = 'btree'))
		  AND amopstrategy = 3 AND amoplefttype = 'pg_catalog.text'::pg_catalog.regtype AND amoprighttype = 'pg_catalog.text'::pg_catalog.regtype`)
	rep, err := verify.Run(context.Background(), connect(t, d.URL("ql_owner")), verify.Options{Names: d.Names})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || rep.Summary.Drift != 1 || len(rep.Checks) != 8 {
		t.Fatalf("report: %+v", rep)
	}
	for i, want := range []string{verify.CheckIntegrity, verify.CheckLedger, verify.CheckUnknown, verify.CheckPending,
		verify.CheckCapability, verify.CheckReadiness, verify.CheckPrivileges, verify.CheckSettings} {
		status := verify.StatusSkipped
		switch want {
		case verify.CheckIntegrity:
			status = verify.StatusOK
		case verify.CheckReadiness:
			status = verify.StatusDrift
		}
		if c := rep.Checks[i]; c.Name != want || c.Status != status {
			t.Errorf("check %d: %+v, want %s %s", i, c, want, status)
		}
	}
	f := rep.Checks[5].Findings
	if len(f) != 1 || f[0].Kind != "changed_builtin" || f[0].Object != "pg_catalog.text_ops USING btree: OPERATOR 3 (text,text)" || len(f[0].SQL) != 1 {
		t.Errorf("readiness: %+v, want the one changed operator family member and its UPDATE", f)
	}
}
