package migrate_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/sql/migrations"
)

// stream copies the embedded migrations, applies edit to each file's body, and writes a
// matching integrity file (a binary built from that tree).
func stream(t *testing.T, edit func(file string, body []byte) []byte) fstest.MapFS {
	t.Helper()
	out := fstest.MapFS{}
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		body, err := fs.ReadFile(migrations.FS, f)
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			body = edit(f, body)
		}
		out[f] = &fstest.MapFile{Data: body}
	}
	withSum(t, out)
	return out
}

type snapshot struct{ versions, ledger, capability, acceptances int }

func snap(t *testing.T, d *testpg.DB) snapshot {
	t.Helper()
	su := d.Pool(t, "")
	return snapshot{
		versions:    count(t, su, "SELECT count(*) FROM control_core.goose_db_version"),
		ledger:      count(t, su, "SELECT count(*) FROM control_core.migration_ledger"),
		capability:  count(t, su, "SELECT version FROM control_core.capabilities WHERE component = 'control-core'"),
		acceptances: count(t, su, "SELECT count(*) FROM control_core.migration_acceptances"),
	}
}

// up refuses, before taking the lock, on every kind of ledger drift, prints verify's finding
// and applies nothing of the four pending migrations.
func TestUpRefusesOnEveryKindOfLedgerDriftWithNothingApplied(t *testing.T) {
	t.Parallel()
	cases := []struct {
		kind  string
		drift string // SQL run as the superuser after up --to 14
		fsys  func(t *testing.T) fs.FS
	}{
		{kind: "changed_checksum", drift: "UPDATE control_core.migration_ledger SET sha256 = repeat('a', 64), normalized_sha256 = repeat('a', 64) WHERE version = 5"},
		{kind: "changed_cosmetic", drift: "UPDATE control_core.migration_ledger SET sha256 = repeat('a', 64) WHERE version = 5"},
		{kind: "changed_name", drift: "UPDATE control_core.migration_ledger SET name = 'pg-0005-renamed' WHERE version = 5"},
		{kind: "missing_checksum", drift: "DELETE FROM control_core.migration_ledger WHERE version = 5"},
		{kind: "ledger_without_version", drift: "DELETE FROM control_core.goose_db_version WHERE version_id = 14"},
		{kind: "unknown_version", drift: "INSERT INTO control_core.goose_db_version (version_id, is_applied) VALUES (99, true)"},
		{kind: "file_edited", fsys: func(t *testing.T) fs.FS {
			s := stream(t, nil)
			s["0016_recovery_source.sql"].Data = append(s["0016_recovery_source.sql"].Data, []byte("-- edited after hashing\n")...)
			return s
		}},
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := testpg.NewEmpty(t)
			if _, err := open(t, d, "ql_owner", nil).Up(ctx, 14); err != nil {
				t.Fatal(err)
			}
			if c.drift != "" {
				d.Exec(t, c.drift)
			}
			var fsys fs.FS
			if c.fsys != nil {
				fsys = c.fsys(t)
			}
			before := snap(t, d)
			applied, err := open(t, d, "ql_owner", fsys).Up(ctx, 0)
			var drift *migrate.DriftError
			if !errors.As(err, &drift) || len(applied) != 0 {
				t.Fatalf("up: applied %d, err %v; want a DriftError and nothing applied", len(applied), err)
			}
			found := false
			for _, ch := range drift.Report.Checks {
				for _, f := range ch.Findings {
					found = found || f.Kind == c.kind && f.Severity == verify.SeverityDrift
				}
			}
			if !found {
				var buf bytes.Buffer
				_ = verify.WriteText(&buf, drift.Report)
				t.Errorf("report has no %s drift:\n%s", c.kind, buf.String())
			}
			if after := snap(t, d); after != before {
				t.Errorf("database changed by a refused up: before %+v, after %+v", before, after)
			}
		})
	}
}

// A whitespace/comment edit of an applied migration is accepted with its audit row; a
// statement edit cannot be, and leaves the ledger as it was.
func TestAcceptTakesACosmeticEditButNeverAStatementEdit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.New(t)
	cosmetic := stream(t, func(f string, body []byte) []byte {
		if f != "0005_triggers.sql" {
			return body
		}
		b := bytes.Replace(body, []byte("\n"), []byte("   \n"), 5)
		return append([]byte("-- reflowed for the review of PR 42\n/* a block comment */\n"), b...)
	})
	r := open(t, d, "ql_owner", cosmetic)
	st, err := r.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Migrations[4].Checksum != migrate.ChecksumCosmetic {
		t.Fatalf("status of the edited pg-0005: %s, want %s", st.Migrations[4].Checksum, migrate.ChecksumCosmetic)
	}
	var drift *migrate.DriftError
	if _, err := r.Up(ctx, 0); !errors.As(err, &drift) {
		t.Fatalf("up before accept: %v, want a DriftError", err)
	}
	var oldSum string
	if err := d.Pool(t, "").QueryRow(ctx, "SELECT sha256 FROM control_core.migration_ledger WHERE version = 5").Scan(&oldSum); err != nil {
		t.Fatal(err)
	}
	acc, err := r.Accept(ctx, 5, "reflowed comments")
	if err != nil || acc.Unchanged || acc.OldSHA256 != oldSum || acc.NewSHA256 != r.Migrations[4].SHA256 || acc.AcceptedBy != "ql_owner" {
		t.Fatalf("accept: %+v, %v; want the move from %s to %s by ql_owner", acc, err, oldSum, r.Migrations[4].SHA256)
	}
	su := d.Pool(t, "")
	if n := count(t, su, `SELECT count(*) FROM control_core.migration_acceptances
		WHERE version = 5 AND old_sha256 = $1 AND new_sha256 = $2 AND reason = 'reflowed comments' AND accepted_by = 'ql_owner'`, oldSum, acc.NewSHA256); n != 1 {
		t.Errorf("audit rows for the acceptance: %d, want 1", n)
	}
	if applied, err := r.Up(ctx, 0); err != nil || len(applied) != 0 {
		t.Errorf("up after accept: applied %d, %v; want nothing to do and no error", len(applied), err)
	}
	if again, err := r.Accept(ctx, 5, "twice"); err != nil || !again.Unchanged {
		t.Errorf("second accept: %+v, %v; want nothing to accept", again, err)
	}

	statement := stream(t, func(f string, body []byte) []byte {
		if f != "0006_runs.sql" {
			return body
		}
		return bytes.Replace(body, []byte("CREATE TABLE"), []byte("CREATE UNLOGGED TABLE"), 1)
	})
	before := snap(t, d)
	var refused *migrate.AcceptError
	_, err = open(t, d, "ql_owner", statement).Accept(ctx, 6, "it is only a small change")
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "changed (statements)") {
		t.Fatalf("accept of a statement edit: %v, want an AcceptError saying changed (statements)", err)
	}
	if after := snap(t, d); after != before {
		t.Errorf("a refused accept changed the database: before %+v, after %+v", before, after)
	}
}

// tracer records every statement a connection sends.
type tracer struct {
	mu  sync.Mutex
	sql []string
}

func (tr *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.sql = append(tr.sql, data.SQL)
	return ctx
}
func (tr *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// The dry run opens only read-only transactions, takes no lock (it finishes while another
// session holds the migration lock, and pg_locks shows no lock of its own), writes nothing, and
// prints SQL that, run as it is, applies exactly what up would.
func TestDryRunReadsOnlyTakesNoLockWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.NewEmpty(t)
	if _, err := open(t, d, "ql_owner", nil).Up(ctx, 10); err != nil {
		t.Fatal(err)
	}
	holder, err := pgx.Connect(ctx, d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", migrate.LockKey); err != nil {
		t.Fatal(err)
	}
	before := snap(t, d)

	cfg := d.Config(t, "ql_owner")
	tr := &tracer{}
	cfg.Pool.ConnConfig.Tracer = tr
	r, err := migrate.Open(ctx, cfg, migrate.Options{Names: d.Names, AsOwner: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dryCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	plan, err := r.DryRun(dryCtx, 0)
	if err != nil {
		t.Fatalf("dry run while another session holds the migration lock: %v", err)
	}
	if len(plan.Pending) != 19 || len(plan.Txs) != 19 {
		t.Fatalf("plan: %d pending, %d transactions; want 19 and 19", len(plan.Pending), len(plan.Txs))
	}
	var locks int
	if err := holder.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_database db ON db.oid = l.database
		WHERE l.locktype = 'advisory' AND db.datname = $1 AND l.pid <> pg_backend_pid()`, d.Name).Scan(&locks); err != nil || locks != 0 {
		t.Errorf("advisory locks of other sessions after the dry run: %d, %v; want 0", locks, err)
	}
	tr.mu.Lock()
	sent := append([]string(nil), tr.sql...)
	tr.mu.Unlock()
	begins := 0
	for _, s := range sent {
		low := strings.ToLower(s)
		if strings.HasPrefix(low, "begin") {
			begins++
			if !strings.Contains(low, "read only") {
				t.Errorf("the dry run opened a transaction that is not read-only: %q", s)
			}
		}
		for _, w := range []string{"pg_advisory", "insert ", "update ", "delete ", "create ", "alter ", "set role"} {
			if strings.Contains(low, w) {
				t.Errorf("the dry run sent %q, which holds %q", s, w)
			}
		}
	}
	if begins == 0 {
		t.Errorf("the dry run sent no BEGIN (read only): %q", sent)
	}
	if after := snap(t, d); after != before {
		t.Errorf("the dry run changed the database: before %+v, after %+v", before, after)
	}

	// The printed script applies the plan as it stands (run by pgx as psql would, without the
	// \set line) once the lock is free.
	var buf bytes.Buffer
	if err := plan.WriteSQL(&buf, time.Now()); err != nil {
		t.Fatal(err)
	}
	script := strings.Replace(buf.String(), "\\set ON_ERROR_STOP on\n", "", 1)
	for _, w := range []string{"SET LOCAL ROLE \"ql_owner\";", "SELECT pg_advisory_xact_lock(", "INSERT INTO control_core.goose_db_version (version_id, is_applied) VALUES (11, true);", "-- pg-0018-plugin-packages"} {
		if !strings.Contains(script, w) {
			t.Errorf("the dry-run script lacks %q", w)
		}
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", migrate.LockKey); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool(t, "").Exec(ctx, script); err != nil {
		t.Fatalf("run the dry-run script: %v", err)
	}
	st, err := r.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Migrations {
		if !s.Applied || s.Checksum != migrate.ChecksumOK {
			t.Errorf("after the script: %s applied=%v checksum=%s", s.Migration.Name, s.Applied, s.Checksum)
		}
	}
}

// A blocked up names the session that holds the lock while it waits and when it gives up.
func TestBlockedUpNamesTheHolderAndGivesUpAtItsTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.NewEmpty(t)
	holder, err := pgx.Connect(ctx, d.URL("")+"&application_name=holding-the-lock")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	var pid int32
	if err := holder.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock($1)) l", migrate.LockKey).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reports [][]migrate.LockHolder
	r, err := migrate.Open(ctx, d.Config(t, ""), migrate.Options{Names: d.Names, AsOwner: true, LockTimeout: 2500 * time.Millisecond,
		Waiting: func(_ time.Duration, h []migrate.LockHolder) { mu.Lock(); reports = append(reports, h); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	start := time.Now()
	applied, err := r.Up(ctx, 0)
	var timeout *migrate.LockTimeoutError
	if !errors.As(err, &timeout) || len(applied) != 0 {
		t.Fatalf("up: applied %d, err %v; want a LockTimeoutError", len(applied), err)
	}
	if took := time.Since(start); took < 2*time.Second || took > 20*time.Second {
		t.Errorf("up gave up after %s, want about the 2.5 s lock timeout", took)
	}
	if len(timeout.Holders) != 1 || timeout.Holders[0].PID != pid || timeout.Holders[0].ApplicationName != "holding-the-lock" || timeout.Holders[0].User != "postgres" {
		t.Errorf("holders named: %+v; want pid %d, holding-the-lock, postgres", timeout.Holders, pid)
	}
	if !strings.Contains(err.Error(), "holding-the-lock") {
		t.Errorf("error %q does not name the holder", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) == 0 || reports[0][0].PID != pid {
		t.Errorf("reports while waiting: %+v; want at least one naming pid %d", reports, pid)
	}
	if n := count(t, d.Pool(t, ""), "SELECT count(*) FROM pg_namespace WHERE nspname = 'control_core'"); n != 0 {
		t.Errorf("control_core exists after a timed-out up")
	}
}
