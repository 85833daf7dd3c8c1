package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// Through a real PgBouncer (Debian's 1.18 in CI) in transaction pooling with nothing in the URL
// (`qlsched run` detects the pooler: PgBouncer refuses statement_timeout as a startup
// parameter), and in session pooling told by ql_pooler=session (prepared statements kept), the
// replica passes readiness and recovery and admits every occurrence exactly once; the admin
// commands that publish the trigger go through the same PgBouncer, detected.
func TestRunThroughPgBouncerAdmitsOnce(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"transaction", "session"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			d := testpg.New(t)
			b := d.StartPgBouncer(t, mode)
			admin := []string{"--database-url", b.URL("ql_admin")}
			publish(t, admin,
				[]string{"project", "create", "--project", "p"},
				[]string{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", `{"image":"x"}`},
				[]string{"trigger", "publish", "--project", "p", "--trigger", "every-second", "--task", "k", "--cron", "* * * * * *"})
			// the admits' wake-up reaches a dispatcher listening straight on PostgreSQL (sent while
			// a worker session is active)
			d.WorkerSession(t, "active", 600_000)
			listener, err := pgx.Connect(context.Background(), d.URL("ql_runtime"))
			if err != nil {
				t.Fatal(err)
			}
			defer listener.Close(context.Background())
			if _, err := listener.Exec(context.Background(), "LISTEN qlsched_runs_queued"); err != nil {
				t.Fatal(err)
			}
			runtimeURL := b.URL("ql_runtime")
			if mode == "session" {
				runtimeURL += "&ql_pooler=session"
			}
			rep := startReplica(t, qlsched(t), "--database-url", runtimeURL, "--http-addr", "127.0.0.1:0",
				"--cadence", "100ms", "--owner", "bouncer-"+mode)
			rep.waitFor(t, 30*time.Second, "the replica running", func(l string) bool { return strings.Contains(l, "replica running") })
			go func() {
				for range rep.lines { // keep stderr flowing; stop drains the rest
				}
			}()
			su := d.Pool(t, "")
			eventually.NoError(t, 30*time.Second, "3 admitted occurrences", func() error {
				var n int
				if err := su.QueryRow(context.Background(), "SELECT count(*) FROM control_core.runs").Scan(&n); err != nil {
					return err
				}
				if n < 3 {
					return fmt.Errorf("%d runs", n)
				}
				return nil
			})
			wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := listener.WaitForNotification(wctx); err != nil {
				t.Errorf("no wake-up notification from the admits through PgBouncer (%s pooling): %v", mode, err)
			}
			cancel()
			if code := rep.stop(t); code != 0 {
				t.Errorf("qlsched run through PgBouncer (%s pooling): exit %d after SIGTERM\n%s", mode, code, rep.all.String())
			}
			var runs, dups, misshapen int
			err = su.QueryRow(context.Background(), `SELECT count(*),
				count(*) - count(DISTINCT (project_id, trigger_id, scheduled_for_ms)),
				count(*) FILTER (WHERE (SELECT count(*) FROM control_core.attempts a WHERE a.run_id = r.run_id) <> 1
					OR (SELECT count(*) FROM control_core.run_events e WHERE e.run_id = r.run_id) <> 2)
				FROM control_core.runs r`).Scan(&runs, &dups, &misshapen)
			if err != nil || dups != 0 || misshapen != 0 {
				t.Errorf("runs %d, duplicates %d, runs without 1 Attempt and 2 Events %d (%v); want 0 duplicates and 0 misshapen", runs, dups, misshapen, err)
			}
			if mode == "transaction" && strings.Contains(rep.all.String(), "stmtcache_") {
				t.Errorf("a named prepared statement reached PgBouncer:\n%s", rep.all.String())
			}
			t.Logf("%s pooling: %d runs, 0 duplicates", mode, runs)
		})
	}
}

// Every admin command works through PgBouncer in transaction pooling: each runs its own
// transactions (publisher, apply, readers) with the transaction-local bounds, and none relies on
// session state or a named prepared statement.
func TestAdminCommandsThroughPgBouncer(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	b := d.StartPgBouncer(t, "transaction")
	adminURL, runtimeURL := b.URL("ql_admin"), b.URL("ql_runtime")
	file := filepath.Join(t.TempDir(), "schedules.yaml")
	writeFile(t, file, "schema: qlsched.schedules/v1\nprojects:"+tickProject)
	steps := []struct {
		args []string
		url  string
		want string // in stdout
	}{
		{[]string{"project", "create", "--project", "p"}, adminURL, "p"},
		{[]string{"project", "list"}, adminURL, "p"},
		{[]string{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", `{"image":"x"}`}, adminURL, "k"},
		{[]string{"task", "list", "--project", "p"}, adminURL, "k"},
		{[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "* * * * * *"}, adminURL, "t"},
		{[]string{"trigger", "show", "--project", "p", "--trigger", "t"}, adminURL, "t"},
		{[]string{"trigger", "list", "--project", "p"}, runtimeURL, "t"},
		{[]string{"trigger", "disable", "--project", "p", "--trigger", "t"}, adminURL, "t"},
		{[]string{"trigger", "enable", "--project", "p", "--trigger", "t"}, adminURL, "t"},
		{[]string{"project", "pause", "--project", "p"}, adminURL, "p"},
		{[]string{"project", "resume", "--project", "p"}, adminURL, "p"},
		{[]string{"apply", "-f", file}, adminURL, "tick"},
		{[]string{"apply", "-f", file, "--check"}, runtimeURL, "the database equals the file"},
		{[]string{"status"}, runtimeURL, "p"},
		{[]string{"runs", "list"}, adminURL, ""},
	}
	for _, s := range steps {
		r := run(t, append(s.args, "--database-url", s.url)...)
		if r.code != 0 || !strings.Contains(r.stdout, s.want) {
			t.Errorf("%v through PgBouncer: exit %d, stdout lacks %q\n%s%s", s.args, r.code, s.want, r.stdout, r.stderr)
		}
	}
	// runs show needs a Run: admit one directly, then read it through PgBouncer.
	rep := startReplica(t, qlsched(t), "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0", "--cadence", "100ms", "--owner", "direct")
	go func() {
		for range rep.lines {
		}
	}()
	var runID string
	su := d.Pool(t, "")
	eventually.NoError(t, 30*time.Second, "a Run", func() error {
		return su.QueryRow(context.Background(), "SELECT run_id::text FROM control_core.runs LIMIT 1").Scan(&runID)
	})
	rep.stop(t)
	for _, args := range [][]string{{"runs", "show", runID}, {"runs", "list", "--format", "json"}} {
		if r := run(t, append(args, "--database-url", adminURL)...); r.code != 0 || !strings.Contains(r.stdout, runID) {
			t.Errorf("%v through PgBouncer: exit %d, stdout lacks %s\n%s%s", args, r.code, runID, r.stdout, r.stderr)
		}
	}
	// the console: its readers and its health page, through the pooler
	ui := startUI(t, "--http-addr", "127.0.0.1:0", "--database-url", adminURL)
	m := urlRe.FindStringSubmatch(ui.waitFor(t, 30*time.Second, "the serving line", func(l string) bool { return strings.Contains(l, "console serving") }))
	if m == nil {
		t.Fatalf("qlsched ui through PgBouncer names no url\n%s", ui.all.String())
	}
	for _, page := range []string{"", "projects/p", "projects/p/triggers/t", "projects/p/runs", "health"} {
		res, err := http.Get(m[1] + page)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Errorf("qlsched ui through PgBouncer: GET /%s: %d\n%s\n%s", page, res.StatusCode, body, ui.all.String())
		}
	}
	if code := ui.stop(t); code != 0 {
		t.Errorf("qlsched ui through PgBouncer: exit %d after SIGTERM", code)
	}
}

// A --listen-url that reaches PgBouncer (found at connect: it refuses a startup parameter) is
// refused when the wake-up connects, with no password in the error: LISTEN does not hold in
// transaction pooling, and the dispatcher keeps its probe.
func TestDispatchListenURLThroughPgBouncerIsRefused(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	b := d.StartPgBouncer(t, "transaction")
	listen, err := dbconn.Resolve(b.URL("ql_runtime"))
	if err != nil {
		t.Fatal(err)
	}
	own, err := dbconn.Resolve(d.URL("ql_runtime"))
	if err != nil {
		t.Fatal(err)
	}
	o := dispatchOptions{listenURL: b.URL("ql_runtime"), listenCfg: listen}
	connect := o.wakeConnect(own, slog.New(slog.DiscardHandler))
	if connect == nil {
		t.Fatal("wake-up off with a --listen-url given")
	}
	conn, err := connect(context.Background())
	if err == nil {
		_ = conn.Close(context.Background())
		t.Fatal("LISTEN connection through PgBouncer accepted")
	}
	if !strings.Contains(err.Error(), "pooler") {
		t.Errorf("error %q, want one naming the pooler", err)
	}
}
