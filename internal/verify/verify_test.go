package verify_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/testpg"
	"github.com/qlcontrol/controlcore/internal/verify"
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
	if !rep.OK || rep.Summary.Drift != 0 || rep.Summary.Notes != 0 || len(rep.Checks) != 7 {
		t.Fatalf("report: %+v", rep)
	}
	for i, want := range []string{verify.CheckIntegrity, verify.CheckLedger, verify.CheckUnknown, verify.CheckPending,
		verify.CheckCapability, verify.CheckReadiness, verify.CheckPrivileges} {
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
// a clean v17 database over an open connection, as `qlmigrate verify` runs it.
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
