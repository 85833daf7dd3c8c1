package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// The CI gates as a pipeline runs them: status --exit-code while pending, the dry run, up,
// status again, the probe as the runtime role, and up refusing a ledger edit.
func TestCIGates(t *testing.T) {
	t.Parallel()
	d := testpg.NewEmpty(t)
	su := d.URL("")
	if r := run(t, nil, "up", "--to", "14", "--database-url", su); r.code != 0 {
		t.Fatalf("up --to 14: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := run(t, nil, "status", "--exit-code", "--database-url", su); r.code != 1 || !strings.Contains(r.stderr, "15 migration(s) pending") {
		t.Errorf("status --exit-code with 15 pending: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	dry := run(t, nil, "up", "--dry-run", "--database-url", su)
	if dry.code != 0 || strings.Count(dry.stdout, "\n"+migrate.BeginSQL+"\n") != 15 || !strings.Contains(dry.stdout, "-- pg-0015-database-time") {
		t.Errorf("up --dry-run: exit %d, want 15 transactions from pg-0015\n%s%s", dry.code, dry.stdout, dry.stderr)
	}
	if r := run(t, nil, "up", "--database-url", su); r.code != 0 || strings.Count(r.stdout, "applied pg-") != 15 {
		t.Fatalf("up: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	st := run(t, nil, "status", "--exit-code", "--database-url", su)
	if st.code != 0 || !regexp.MustCompile(`(?m)^29\s+pg-0029-pooled-plan-settings\s+\S+\s+postgres\s+\S+\s+ok$`).MatchString(st.stdout) {
		t.Errorf("status --exit-code after up: exit %d, want 0 and pg-0029 applied by postgres\n%s%s", st.code, st.stdout, st.stderr)
	}
	if r := run(t, nil, "status", "--format", "json", "--database-url", su); !strings.Contains(r.stdout, `"schema": "qlmigrate.status/v1"`) || !strings.Contains(r.stdout, `"applied_by": "postgres"`) {
		t.Errorf("status --format json: no schema or applied_by\n%s", r.stdout)
	}
	if r := run(t, nil, "probe", "--database-url", d.URL(d.Names.Runtime)); r.code != 0 || !strings.HasPrefix(r.stdout, "ready:") {
		t.Errorf("probe as the runtime role: exit %d, want 0 and ready\n%s%s", r.code, r.stdout, r.stderr)
	}
	d.Exec(t, "UPDATE control_core.migration_ledger SET sha256 = repeat('0', 64), normalized_sha256 = repeat('0', 64) WHERE version = 3")
	r := run(t, nil, "up", "--database-url", su)
	if r.code != 1 || !strings.Contains(r.stdout, "changed (statements)") || !strings.Contains(r.stderr, "nothing was applied") {
		t.Errorf("up on an edited ledger: exit %d, want 1 with verify's finding\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := run(t, nil, "accept", "--version", "3", "--reason", "tried", "--database-url", su); r.code != 1 || !strings.Contains(r.stderr, "changed (statements)") {
		t.Errorf("accept of a statement change: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	d.Exec(t, "UPDATE control_core.capabilities SET version = 16 WHERE component = 'control-core'")
	if r := run(t, nil, "probe", "--database-url", d.URL(d.Names.Runtime)); r.code != 1 || !strings.Contains(r.stdout, "capability_changed") && !strings.Contains(r.stdout, "expects v28") {
		t.Errorf("probe on capability v16: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A blocked up prints who holds the lock while it waits, and exits 1 naming it at its timeout.
func TestBlockedUpNamesTheHolderAndExits1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.NewEmpty(t)
	holder, err := pgx.Connect(ctx, d.URL("")+"&application_name=nightly-backfill")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	var pid int
	if err := holder.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock($1)) l", migrate.LockKey).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := run(t, nil, "up", "--lock-timeout", "7s", "--database-url", d.URL(""))
	took := time.Since(start)
	if r.code != 1 || took < 6*time.Second {
		t.Fatalf("blocked up: exit %d after %s, want 1 after the 7 s timeout\n%s%s", r.code, took, r.stdout, r.stderr)
	}
	holderText := regexp.QuoteMeta(`application_name "nightly-backfill", user postgres, client `)
	waiting := regexp.MustCompile(`(?m)^qlmigrate up: waiting \d+s for the migration lock \(timeout 7s\), held by pid ` + itoa(pid) + `, ` + holderText + `.*, since .*, state idle$`)
	if n := len(waiting.FindAllString(r.stderr, -1)); n < 2 {
		t.Errorf("want at least 2 waiting lines naming pid %d (after 1 s and 6 s), got %d:\n%s", pid, n, r.stderr)
	}
	if !regexp.MustCompile(`gave up after 7\.\d+s waiting for the migration lock \(lock timeout\), held by pid ` + itoa(pid) + `, ` + holderText).MatchString(r.stderr) {
		t.Errorf("the last line does not name the holder:\n%s", r.stderr)
	}
	t.Logf("blocked up's stderr:\n%s", r.stderr)
}

func itoa(n int) string { return strconv.Itoa(n) }

// Through a real PgBouncer in transaction pooling mode: qlmigrate connects (it detects the pooler
// or is told by ql_pooler=transaction), and two concurrent up runs apply every migration once.
func TestConcurrentUpThroughPgBouncerAppliesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.NewEmpty(t)
	bouncer := d.PgBouncer(t)
	procs := []*process{
		start(t, nil, "up", "--database-url", bouncer),                          // detected
		start(t, nil, "up", "--database-url", bouncer+"&ql_pooler=transaction"), // told
	}
	applied := 0
	for i, p := range procs {
		<-p.done
		if p.res.code != 0 {
			t.Errorf("up #%d through PgBouncer: exit %d\n%s%s", i, p.res.code, p.res.stdout, p.res.stderr)
		}
		applied += strings.Count(p.res.stdout, "applied pg-")
		t.Logf("up #%d through PgBouncer:\n%s%s", i, p.res.stdout, p.res.stderr)
	}
	if applied != 29 {
		t.Errorf("the two runs applied %d migrations between them, want 25", applied)
	}
	conn, err := pgx.Connect(ctx, d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var versions, rows, ledger int
	err = conn.QueryRow(ctx, `SELECT count(DISTINCT version_id), count(*),
		(SELECT count(*) FROM control_core.migration_ledger) FROM control_core.goose_db_version WHERE version_id > 0`).Scan(&versions, &rows, &ledger)
	if err != nil || versions != 29 || rows != 29 || ledger != 29 {
		t.Errorf("goose versions %d, version rows %d, ledger rows %d (%v); want 25 each", versions, rows, ledger, err)
	}
	for _, args := range [][]string{{"status", "--exit-code"}, {"probe"}, {"up", "--dry-run"}} {
		if r := run(t, nil, append(args, "--database-url", bouncer)...); r.code != 0 {
			t.Errorf("%v through PgBouncer: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	var owner string
	if err := conn.QueryRow(ctx, "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'control_core'").Scan(&owner); err != nil || owner != "ql_owner" {
		t.Errorf("control_core owned by %q (%v), want ql_owner (SET LOCAL ROLE through the pooler)", owner, err)
	}
}

// status --exit-code fails on every drift up refuses on, also the kinds no line of its table
// shows, and names it.
func TestStatusExitCodeFailsWhereUpRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, sql, want string }{
		{"unknown applied version", "INSERT INTO control_core.goose_db_version (version_id, is_applied) VALUES (99, true)",
			"version 99: applied (in goose's table) but this binary does not know it"},
		{"changed ledger name", "UPDATE control_core.migration_ledger SET name = 'pg-0003-renamed' WHERE version = 3",
			"version 3 ran as pg-0003-renamed: the file was renamed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := testpg.New(t)
			su := d.URL("")
			if r := run(t, nil, "status", "--exit-code", "--database-url", su); r.code != 0 {
				t.Fatalf("status --exit-code before the edit: exit %d, want 0\n%s%s", r.code, r.stdout, r.stderr)
			}
			d.Exec(t, c.sql)
			up := run(t, nil, "up", "--database-url", su)
			if up.code != 1 || !strings.Contains(up.stdout, c.want) {
				t.Fatalf("up: exit %d, want 1 saying %q\n%s%s", up.code, c.want, up.stdout, up.stderr)
			}
			r := run(t, nil, "status", "--exit-code", "--database-url", su)
			if r.code != 1 || !strings.Contains(r.stdout, c.want) || !strings.Contains(r.stdout, "up refuses to apply anything: 1 drift finding(s)") {
				t.Errorf("status --exit-code: exit %d, want 1 saying %q\n%s%s", r.code, c.want, r.stdout, r.stderr)
			}
			if r := run(t, nil, "status", "--database-url", su); r.code != 0 {
				t.Errorf("status without --exit-code: exit %d, want 0", r.code)
			}
			r = run(t, nil, "status", "--format", "json", "--database-url", su)
			var res struct {
				UpRefuses bool `json:"up_refuses"`
				Drift     []struct {
					Message string `json:"message"`
				} `json:"drift"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || !res.UpRefuses || len(res.Drift) != 1 || !strings.Contains(res.Drift[0].Message, strings.SplitN(c.want, ": ", 2)[1]) {
				t.Errorf("status --format json: %v, want up_refuses and the one finding\n%s", err, r.stdout)
			}
		})
	}
}
