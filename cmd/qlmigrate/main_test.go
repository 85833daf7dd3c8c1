package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3/lock"
	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testbin"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/roles"
	"github.com/qlcontrol/controlcore/sql/migrations"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// qlmigrate builds the real binary once, so tests see exactly what users run: processes, exit
// codes, stdout and stderr.
func qlmigrate(t *testing.T) string { return testbin.Command(t, "qlmigrate") }

type result struct {
	stdout, stderr string
	code           int
}

func run(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(qlmigrate(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run qlmigrate %v: %v", args, err)
	}
	return result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

func TestUsageErrorsExit2WithoutConnecting(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1: had any of these connected, it would exit 3, not 2.
	const unreachable = "postgres://u:hunter2@127.0.0.1:1/x"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"no sub-command", []string{"roles"}, "needs a sub-command"},
		{"unknown flag", []string{"up", "--frobnicate"}, "unknown flag: --frobnicate"},
		{"bad format", []string{"status", "--format", "yaml"}, `invalid argument "yaml" for "--format" flag: want text or json`},
		{"negative --to", []string{"up", "--to", "-3"}, "--to -3"},
		{"--to beyond the last migration", []string{"up", "--to", "30"}, "--to 30: the stream has versions 1 … 29"},
		{"--to beyond the last migration, dry run", []string{"up", "--dry-run", "--to", "30"}, "--to 30: the stream has versions 1 … 29"},
		{"--lock-timeout too short", []string{"up", "--lock-timeout", "10ms"}, "--lock-timeout 10ms: want 100ms … 24h0m0s"},
		{"accept --version 0", []string{"accept", "--version", "0", "--reason", "x"}, "--version 0: want a migration version, 1 or more"},
		{"accept --version beyond the last migration", []string{"accept", "--version", "30", "--reason", "x"}, "--version 30: the stream has versions 1 … 29"},
		{"bad role prefix", []string{"up", "--role-prefix", "Robert'); DROP"}, `--role-prefix "Robert'); DROP": want a lower-case identifier prefix`},
		{"extra argument", []string{"status", "now"}, "unknown command"},
		{"unparseable URL", []string{"status", "--database-url", "postgres://u:hunter2@127.0.0.1:1/x%zz"}, "cannot parse"},
		{"verify: bad format", []string{"verify", "--format", "yaml"}, `invalid argument "yaml" for "--format" flag: want text or json`},
		{"verify: unknown flag", []string{"verify", "--allow-everything"}, "unknown flag: --allow-everything"},
		{"verify: extra argument", []string{"verify", "now"}, "unknown command"},
		{"grants: bad format", []string{"grants", "--sql", "--format", "yaml"}, `invalid argument "yaml" for "--format" flag: want text or json`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"--database-url", unreachable}, c.args...)
			r := run(t, nil, args...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 mentioning %q", r.code, r.stderr, c.want)
			}
			if strings.Contains(r.stdout+r.stderr, "hunter2") {
				t.Errorf("the password leaked: %q", r.stdout+r.stderr)
			}
		})
	}
}

func TestConnectionFailureExits3AndRedactsThePassword(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		env  []string
		args []string
	}{
		{"flag", nil, []string{"--database-url", "postgres://u:secret@127.0.0.1:1/x", "status"}},
		{"flag after the command", nil, []string{"status", "--database-url", "postgres://u:secret@127.0.0.1:1/x"}},
		{"QL_DATABASE_URL", []string{"QL_DATABASE_URL=postgres://u:secret@127.0.0.1:1/x"}, []string{"up"}},
		{"PG variables", []string{"PGHOST=127.0.0.1", "PGPORT=1", "PGUSER=u", "PGPASSWORD=secret", "PGDATABASE=x"}, []string{"status"}},
		{"verify", nil, []string{"verify", "--database-url", "postgres://u:secret@127.0.0.1:1/x"}},
		{"verify --format json", nil, []string{"verify", "--format", "json", "--database-url", "postgres://u:secret@127.0.0.1:1/x"}},
		{"grants", nil, []string{"grants", "--database-url", "postgres://u:secret@127.0.0.1:1/x"}},
		{"grants --sql", []string{"QL_DATABASE_URL=postgres://u:secret@127.0.0.1:1/x"}, []string{"grants", "--sql"}},
		{"roles create", nil, []string{"roles", "create", "--database-url", "postgres://u:secret@127.0.0.1:1/x"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, c.env, c.args...)
			if r.code != 3 || !strings.Contains(r.stderr, "cannot connect") {
				t.Errorf("exit %d, stderr %q; want exit 3 'cannot connect'", r.code, r.stderr)
			}
			if strings.Contains(r.stdout+r.stderr, "secret") {
				t.Errorf("the password leaked: %q", r.stdout+r.stderr)
			}
		})
	}
}

func TestHelpOnEveryCommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"up", "--help"}, {"status", "--help"}, {"roles", "--help"}, {"roles", "create", "--help"},
		{"verify", "--help"}, {"grants", "--help"}, {"hash", "--help"}} {
		r := run(t, nil, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage:") {
			t.Errorf("%v: exit %d, stdout %q; want exit 0 with usage", args, r.code, r.stdout)
		}
	}
}

// The whole bootstrap a DBA runs on a fresh cluster: roles create as a superuser, up as the owner
// role, status, verify; then again, changing nothing. testpg already created the shared ql_
// roles, so the test uses a prefix of its own whose roles do not exist yet.
func TestRolesCreateUpStatusEndToEnd(t *testing.T) {
	t.Parallel()
	d := testpg.NewEmpty(t)
	names, err := roles.NewNames(d.PrivatePrefix(t, "e"))
	if err != nil {
		t.Fatal(err)
	}
	// NewEmpty let ql_owner create here; this database is the prefix's alone.
	d.Exec(t, fmt.Sprintf("REVOKE ALL ON DATABASE %s FROM ql_owner", pgx.Identifier{d.Name}.Sanitize()))
	su, owner := d.URL(""), d.URL(names.Owner)
	prefix := []string{"--role-prefix", names.Prefix}

	r := run(t, nil, append([]string{"roles", "create", "--database-url", su}, prefix...)...)
	if r.code != 0 {
		t.Fatalf("roles create: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, role := range names.All() {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(role) + `\s+created$`).MatchString(r.stdout) {
			t.Errorf("roles create did not create %s:\n%s", role, r.stdout)
		}
	}
	if n := strings.Count(r.stdout, " created\n"); n != 4 {
		t.Fatalf("roles create: %d roles created, want 4\n%s", n, r.stdout)
	}
	// roles create sets no password; the test server may not trust loopback connections.
	for _, role := range names.All() {
		d.Exec(t, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", pgx.Identifier{role}.Sanitize(), testpg.Password))
	}

	r = run(t, nil, append([]string{"--database-url", owner, "up"}, prefix...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "29 applied; control-core is at v28") || strings.Count(r.stdout, "applied pg-") != 29 {
		t.Fatalf("up as %s: exit %d\n%s%s", names.Owner, r.code, r.stdout, r.stderr)
	}

	r = run(t, nil, append([]string{"--database-url", owner, "status"}, prefix...)...)
	if r.code != 0 {
		t.Fatalf("status: exit %d\n%s", r.code, r.stderr)
	}
	stream, err := checksums.Load(migrations.FS)
	if err != nil || len(stream) != 29 {
		t.Fatalf("embedded stream: %d migrations, %v; want 25", len(stream), err)
	}
	for _, m := range stream {
		// VERSION NAME APPLIED-AT APPLIED-BY DURATION CHECKSUM, the time in RFC 3339.
		line := regexp.MustCompile(fmt.Sprintf(`(?m)^%d\s+%s\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s+\S+\s+\S+\s+ok$`, m.Version, regexp.QuoteMeta(m.Name)))
		if !line.MatchString(r.stdout) {
			t.Errorf("status has no line for %s with an applied time and checksum ok:\n%s", m.Name, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "capability v28") || !strings.Contains(r.stdout, "29 of 29 applied") || strings.Contains(r.stdout, "pending") {
		t.Errorf("status does not show all 29 applied at v28:\n%s", r.stdout)
	}

	if r = run(t, nil, append([]string{"--database-url", owner, "verify"}, prefix...)...); r.code != 0 || !strings.Contains(r.stdout, "OK: no drift") {
		t.Errorf("verify: exit %d, want 0\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = run(t, nil, append([]string{"--database-url", su, "up"}, prefix...)...); r.code != 0 || !strings.Contains(r.stdout, "nothing to apply") {
		t.Errorf("second up: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = run(t, nil, append([]string{"roles", "create", "--database-url", su}, prefix...)...)
	if r.code != 0 || strings.Contains(r.stdout, "created") || strings.Count(r.stdout, " exists\n") != 4 {
		t.Errorf("second roles create: exit %d, want 0 with all 4 existing and nothing created\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestUpWithoutRolesExplainsWhatToRun(t *testing.T) {
	t.Parallel()
	d := testpg.NewEmpty(t)
	r := run(t, nil, "--database-url", d.URL(""), "up", "--role-prefix", "nobody_here_")
	if r.code != 3 || !strings.Contains(r.stderr, "SET ROLE nobody_here_owner") || !strings.Contains(r.stderr, "roles create") {
		t.Errorf("exit %d, stderr %q; want exit 3 explaining SET ROLE and roles create", r.code, r.stderr)
	}
}

// An existing role with a privileged attribute is reported and left as it is.
func TestRolesCreateNeverAltersAPrivilegedRole(t *testing.T) {
	t.Parallel()
	d := testpg.NewEmpty(t)
	prefix := d.PrivatePrefix(t, "rc") // roles are cluster-wide: a prefix of this test's own, dropped after
	args := []string{"roles", "create", "--database-url", d.URL(""), "--role-prefix", prefix}
	if r := run(t, nil, args...); r.code != 0 || strings.Count(r.stdout, "created") != 4 {
		t.Fatalf("first roles create: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	d.Exec(t, fmt.Sprintf("ALTER ROLE %sadmin CREATEDB BYPASSRLS", prefix))
	r := run(t, nil, args...)
	if r.code != 1 || !strings.Contains(r.stdout, prefix+"admin") || !strings.Contains(r.stdout, "privileged: CREATEDB BYPASSRLS") {
		t.Fatalf("exit %d, stdout %q; want exit 1 naming %sadmin CREATEDB BYPASSRLS", r.code, r.stdout, prefix)
	}
	conn, err := pgx.Connect(context.Background(), d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var createdb, bypass bool
	if err := conn.QueryRow(context.Background(), "SELECT rolcreatedb, rolbypassrls FROM pg_roles WHERE rolname = $1", prefix+"admin").Scan(&createdb, &bypass); err != nil {
		t.Fatal(err)
	}
	if !createdb || !bypass {
		t.Errorf("roles create altered %sadmin: createdb=%v bypassrls=%v", prefix, createdb, bypass)
	}
}

// process is a qlmigrate started in the background; done is closed when it has exited, and res
// is then valid.
type process struct {
	done chan struct{}
	res  result
}

func start(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(qlmigrate(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start qlmigrate %v: %v", args, err)
	}
	p := &process{done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // the exit code is in ProcessState
		p.res = result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default: // the test failed before it finished: leave no process behind
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Two `up` processes on an empty database that provably overlap: the test holds goose's
// migration lock while both start, sees both wait for it, then lets go. Both exit 0 and every
// migration is applied exactly once.
func TestConcurrentUpProcessesApplyOnce(t *testing.T) {
	t.Parallel()
	concurrentUpAppliesOnce(t, testpg.NewEmpty(t))
}

// concurrentUpAppliesOnce runs the two provably overlapping up processes on d and checks both
// exit 0 and every migration is applied once.
func concurrentUpAppliesOnce(t *testing.T, d *testpg.DB) {
	t.Helper()
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	// goose's session lock key; migrate.Runner takes the same key before goose does.
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", lock.DefaultLockID); err != nil {
		t.Fatalf("take the migration lock: %v", err)
	}
	procs := []*process{
		start(t, nil, "--database-url", d.URL(""), "up"),
		start(t, nil, "--database-url", d.URL(""), "up"),
	}

	// Until the catalogs show both sessions queued behind the lock in this database.
	eventually.NoError(t, 60*time.Second, "both up processes to wait on the migration lock", func() error {
		for i, p := range procs {
			if p.exited() {
				t.Fatalf("up #%d exited while the test held the migration lock: exit %d\n%s%s", i, p.res.code, p.res.stdout, p.res.stderr)
			}
		}
		var waiting int
		err := holder.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_database db ON db.oid = l.database
			WHERE l.locktype = 'advisory' AND NOT l.granted AND db.datname = $1
			  AND ((l.classid::bigint << 32) | l.objid::bigint) = $2`, d.Name, lock.DefaultLockID).Scan(&waiting)
		if err != nil {
			t.Fatalf("read pg_locks: %v", err)
		}
		if waiting != len(procs) {
			return fmt.Errorf("%d of the %d up processes wait", waiting, len(procs))
		}
		return nil
	})
	var schemas int
	if err := holder.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = 'control_core'").Scan(&schemas); err != nil || schemas != 0 {
		t.Fatalf("control_core exists (%d, %v) while the test holds the lock: an up did not wait", schemas, err)
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", lock.DefaultLockID); err != nil {
		t.Fatalf("release the migration lock: %v", err)
	}

	applied := 0
	for i, p := range procs {
		<-p.done
		if p.res.code != 0 {
			t.Errorf("up #%d: exit %d\n%s%s", i, p.res.code, p.res.stdout, p.res.stderr)
		}
		applied += strings.Count(p.res.stdout, "applied pg-")
	}
	if applied != 29 {
		t.Errorf("the two runs applied %d migrations between them, want 25", applied)
	}
	var versions, rows, ledger int
	err = holder.QueryRow(ctx, `SELECT count(DISTINCT version_id), count(*),
		(SELECT count(*) FROM control_core.migration_ledger) FROM control_core.goose_db_version WHERE version_id > 0`).Scan(&versions, &rows, &ledger)
	if err != nil {
		t.Fatal(err)
	}
	if versions != 29 || rows != 29 || ledger != 29 {
		t.Errorf("goose versions %d, version rows %d, ledger rows %d; want 25 each", versions, rows, ledger)
	}
}

// hash is offline: it reads no connection settings, so garbage in every one of them (which
// would be exit 2 for a command that connects) changes nothing.
// No command that does not connect (hash, help, cobra's completion requests) reads the
// connection settings.
func TestHashReadsNoConnectionSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files, err := filepath.Glob("../../sql/migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations found: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	garbage := []string{"QL_DATABASE_URL=postgres://u:hunter2@h:notaport/x%zz", "PGPORT=nope", "PGSERVICE=no-such-service", "PGSSLMODE=bogus"}
	for _, args := range [][]string{{"hash", "--dir", dir}, {"hash", "--check", "--dir", dir}, {"hash", "--check", "--dir", dir, "--database-url", "host='unterminated"},
		{"help"}, {"help", "up"}, {"up", "--help"}, {"roles", "--help"}, {"__complete", "up", "--"}} {
		r := run(t, garbage, args...)
		if r.code != 0 {
			t.Errorf("%v with garbage connection settings: exit %d, stderr %q; want 0", args, r.code, r.stderr)
		}
		if strings.Contains(r.stdout+r.stderr, "hunter2") {
			t.Errorf("%v: the password leaked", args)
		}
	}
	// the same settings do break a command that connects, before connecting
	if r := run(t, garbage, "status"); r.code != 2 || strings.Contains(r.stderr, "hunter2") {
		t.Errorf("status with garbage settings: exit %d, stderr %q; want exit 2 without the password", r.code, r.stderr)
	}
}

// Every command that runs, hash aside, connects and so is marked: the root's hook resolves the
// connection settings for marked commands only (an unmarked one would find none).
func TestEveryCommandButHashIsMarkedAsConnecting(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.HasParent() {
			marked := c.Annotations[connectsAnnotation] != ""
			if offline := c.Name() == "hash"; marked == offline {
				t.Errorf("%s: marked as connecting %v, want %v", c.CommandPath(), marked, !offline)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk((&app{}).rootCmd())
}
