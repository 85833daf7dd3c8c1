package main

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// runWithin runs qlmigrate like run, but fails the test when it has not exited within limit
// (the process is killed then): a hang is a failure, not a stuck test.
func runWithin(t *testing.T, limit time.Duration, env []string, args ...string) (result, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, qlmigrate(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("qlmigrate %v did not exit within %s\n%s%s", args, limit, stdout.String(), stderr.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run qlmigrate %v: %v", args, err)
	}
	return result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}, took
}

// holdLock holds the migration lock from a session named appName until the test ends and
// returns its pid.
func holdLock(t *testing.T, d *testpg.DB, appName string) int {
	t.Helper()
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, d.URL("")+"&application_name="+appName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close(ctx) })
	var pid int
	if err := holder.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock($1)) l", migrate.LockKey).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// With pool_max_conns=1 the migration transaction waiting for the lock is not the only
// connection: the holder is named, and up exits 1 at its lock timeout instead of hanging.
func TestUpWithOnePoolConnectionNamesTheHolderAtItsTimeout(t *testing.T) {
	t.Parallel()
	d := testpg.NewEmpty(t)
	pid := holdLock(t, d, "one-conn-holder")
	// The first waiting line comes at 1 s and needs a holder query on a second connection: a
	// 4 s timeout leaves it 3 s on a loaded machine (with 2 s, CI once lost the line).
	r, took := runWithin(t, 30*time.Second, nil, "up", "--lock-timeout", "4s", "--database-url", d.URL("")+"&pool_max_conns=1")
	held := `held by pid ` + itoa(pid) + `, application_name "one-conn-holder"`
	if r.code != 1 || took > 15*time.Second || !regexp.MustCompile(`gave up after 4\.\d+s waiting for the migration lock \(lock timeout\), `+regexp.QuoteMeta(held)).MatchString(r.stderr) {
		t.Fatalf("up with pool_max_conns=1 behind a held lock: exit %d after %s, want 1 naming pid %d\n%s%s", r.code, took, pid, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "qlmigrate up: waiting 1s for the migration lock (timeout 4s), "+held) {
		t.Errorf("no waiting line naming the holder:\n%s", r.stderr)
	}
}

// A statement_timeout in the URL shorter than --lock-timeout does not end the wait for the
// lock: up waits the lock timeout and exits 1 naming the holder.
func TestStatementTimeoutInTheURLDoesNotCutTheLockWait(t *testing.T) {
	t.Parallel()
	d := testpg.NewEmpty(t)
	pid := holdLock(t, d, "st-holder")
	// statement_timeout 1s; the client's response bound (1 s + 5 s) is shorter than the wait too
	r, took := runWithin(t, 60*time.Second, nil, "up", "--lock-timeout", "7s", "--database-url", d.URL("")+"&statement_timeout=1s")
	if r.code != 1 || took < 6*time.Second || strings.Contains(r.stderr, "statement timeout") ||
		!regexp.MustCompile(`gave up after 7\.\d+s waiting for the migration lock \(lock timeout\), held by pid `+itoa(pid)+`, application_name "st-holder"`).MatchString(r.stderr) {
		t.Fatalf("up with statement_timeout=1s and --lock-timeout 7s: exit %d after %s, want 1 after 7 s naming pid %d\n%s%s", r.code, took, pid, r.stdout, r.stderr)
	}
	// and the URL's bound still holds for the migrations themselves
	su := d.Pool(t, "")
	if _, err := su.Exec(context.Background(), "SELECT pg_advisory_unlock_all()"); err != nil {
		t.Fatal(err)
	}
}

// Under default_transaction_isolation = 'repeatable read' two concurrent up runs still apply
// every migration once: the migration transactions are read committed, so what each reads after
// the lock is what the other committed.
func TestConcurrentUpUnderRepeatableReadDefault(t *testing.T) {
	t.Parallel()
	d := testpg.NewEmpty(t)
	d.Exec(t, "ALTER DATABASE "+pgx.Identifier{d.Name}.Sanitize()+" SET default_transaction_isolation = 'repeatable read'")
	concurrentUpAppliesOnce(t, d)
}

// standard_conforming_strings=off from PGOPTIONS does not change
// what up applies: the session pins it on, so '\.' keeps its backslash.
func TestUpPinsStandardConformingStrings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.NewEmpty(t)
	env := []string{"PGOPTIONS=-c standard_conforming_strings=off"}
	if r, _ := runWithin(t, 120*time.Second, env, "up", "--database-url", d.URL("")); r.code != 0 {
		t.Fatalf("up with standard_conforming_strings=off: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var def string
	err := d.Pool(t, "").QueryRow(ctx, `SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
		WHERE c.conrelid = 'control_core.plugin_package_versions'::regclass AND c.contype = 'c' AND pg_get_constraintdef(c.oid) LIKE '%version ~%'`).Scan(&def)
	if err != nil || !strings.Contains(def, `'^[0-9]+\.[0-9]+\.[0-9]+`) {
		t.Errorf("plugin_packages.version check is %q (%v), want the pattern with its backslashes", def, err)
	}
	if r, _ := runWithin(t, 120*time.Second, env, "verify", "--database-url", d.URL("")); r.code != 0 {
		t.Errorf("verify after up with standard_conforming_strings=off: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A database name with a newline cannot put a psql meta-command into the dry-run script: every
// comment line stays one line.
func TestDryRunCommentsCannotInjectAMetaCommand(t *testing.T) {
	t.Parallel()
	d := testpg.NewEmpty(t)
	const name = "h\n\\echo INJECTED\nSELECT 1 --"
	d.Exec(t, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	t.Cleanup(func() { d.Exec(t, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)") })
	u, err := url.Parse(d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	r, _ := runWithin(t, 60*time.Second, nil, "up", "--dry-run", "--database-url", u.String())
	if r.code != 0 || !strings.Contains(r.stdout, "-- qlmigrate up --dry-run: 29 pending migration(s) on ") {
		t.Fatalf("up --dry-run on database %q: exit %d\n%s%s", name, r.code, r.stdout, r.stderr)
	}
	for i, line := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(line, `\`) && line != `\set ON_ERROR_STOP on` {
			t.Errorf("line %d of the dry-run script is a psql meta-command: %q", i+1, line)
		}
		if strings.Contains(line, "INJECTED") && !strings.HasPrefix(line, "-- ") {
			t.Errorf("line %d carries the database name outside a comment: %q", i+1, line)
		}
	}
}

// Through a transaction-pooling PgBouncer that ignores qlmigrate's startup parameters (so it is
// not detected), qlmigrate leaves no session state on the pool's server connections: after up,
// status, probe, the dry run and accept through it, fresh clients of the pool act as their own
// login role. The driver's prepared statements do break there; the error then says to add
// ql_pooler=transaction (docs/operations.md), and with it up works.
func TestUndetectedPoolerKeepsNoRoleOnItsServerConnections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.NewEmpty(t)
	bouncer := d.PgBouncer(t, "ignore_startup_parameters = statement_timeout, idle_in_transaction_session_timeout, "+
		"tcp_keepalives_idle, tcp_keepalives_interval, tcp_keepalives_count, tcp_user_timeout, search_path, "+
		"default_transaction_isolation, default_transaction_read_only, default_transaction_deferrable")
	for _, args := range [][]string{{"up", "--to", "3"}, {"status"}, {"probe"}, {"up", "--dry-run"}, {"accept", "--version", "2", "--reason", "pooler test"}, {"up", "--to", "3"}} {
		r, _ := runWithin(t, 120*time.Second, nil, append(args, "--database-url", bouncer)...)
		t.Logf("%v through PgBouncer, not detected: exit %d\n%s", args, r.code, r.stderr)
		if strings.Contains(r.stderr, "stmtcache_") && !strings.Contains(r.stderr, "ql_pooler=transaction") {
			t.Errorf("%v through an undetected pooler: a prepared-statement error that does not name ql_pooler=transaction\n%s", args, r.stderr)
		}
		if r.code != 0 && !strings.Contains(r.stderr, "ql_pooler=transaction") {
			t.Errorf("%v through PgBouncer, not detected: exit %d without naming ql_pooler=transaction\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	// what the message says to do works
	if r, _ := runWithin(t, 120*time.Second, nil, "up", "--to", "3", "--database-url", bouncer+"&ql_pooler=transaction"); r.code != 0 {
		t.Errorf("up --to 3 through PgBouncer with ql_pooler=transaction: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// as many clients at once, each in a transaction, as the pool has server connections: each
	// transaction runs on one of them
	cfg, err := pgx.ParseConfig(bouncer)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	var txs []pgx.Tx
	for i := 0; i < 4; i++ {
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(ctx) })
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
	}
	for i, tx := range txs {
		var current, session string
		if err := tx.QueryRow(ctx, "SELECT current_user::text, session_user::text").Scan(&current, &session); err != nil {
			t.Fatal(err)
		}
		if current != "postgres" || session != "postgres" {
			t.Errorf("fresh client %d of the pool acts as %s (session user %s), want postgres: qlmigrate left a role on a server connection", i, current, session)
		}
	}
	var versions int
	if err := d.Pool(t, "").QueryRow(ctx, "SELECT count(*) FROM control_core.goose_db_version WHERE version_id > 0").Scan(&versions); err != nil || versions != 3 {
		t.Errorf("%d versions applied (%v), want 3", versions, err)
	}
}
