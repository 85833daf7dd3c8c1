package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/base/limits"
	"github.com/qlcontrol/controlcore/internal/testkit/dbconntest"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testbin"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

func qlsched(t *testing.T) string { return testbin.Command(t, "qlsched") }

type result struct {
	stdout, stderr string
	code           int
}

func run(t *testing.T, args ...string) result {
	t.Helper()
	return runContext(context.Background(), t, args...)
}

// runContext is run, the process killed when ctx ends (its exit code is then -1).
func runContext(ctx context.Context, t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(ctx, qlsched(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run qlsched %v: %v", args, err)
	}
	return result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

// Each case points at a listener that counts connections: a usage error must leave it untouched.
// A field the admin package refuses is reported with the flag the user gave it with.
func TestBadInputExits2BeforeConnecting(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--budget", "257"}, "--budget 257"},
		{[]string{"run", "--budget", "0"}, "--budget 0"},
		{[]string{"run", "--lease", "0s"}, "--lease 0s"},
		{[]string{"run", "--cadence", "1ms"}, "--cadence 1ms"},
		{[]string{"run", "--cadence", "10s", "--lease", "15s"}, "2 × cadence"},
		{[]string{"run", "--drain-timeout", "11m"}, "--drain-timeout 11m"},
		{[]string{"run", "--budget", "8", "--admit-batch", "9"}, "--admit-batch 9: want 1 … budget (8)"},
		{[]string{"run", "--admit-retries", "21"}, "--admit-retries 21: want 0 … 20"},
		{[]string{"run", "--cadence", "2s", "--backoff-cap", "1s"}, "--backoff-cap 1s: want cadence (2s) … 10m0s"},
		{[]string{"run", "--backoff-cap", "11m"}, "--backoff-cap 11m0s"},
		{[]string{"run", "--not-ready-after", "0"}, "--not-ready-after 0: want 1 … 100 failed rounds in a row"},
		{[]string{"run", "--http-addr", "nonsense"}, "--http-addr"},
		{[]string{"run", "--http-addr", "127.0.0.1:99999"}, "not a number in 0 … 65535"},
		{[]string{"run", "--http-addr", "127.0.0.1:-1"}, "not a number in 0 … 65535"},
		{[]string{"run", "--owner", "has space"}, "--owner"},
		{[]string{"run", "--role-prefix", "Robert'); DROP"}, `--role-prefix "Robert'); DROP": want a lower-case identifier prefix`},
		{[]string{"run", "--log-format", "xml"}, "--log-format"},
		{[]string{"run", "--cpu-profile", "/nonexistent-dir/run.pprof"}, "--cpu-profile /nonexistent-dir/run.pprof: "},
		{[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "@every 5s"}, "--cron: "},
		{[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "61 * * * *"}, "--cron: "},
		{[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "* * * * *", "--timezone", "Mars/Olympus"}, "--timezone: "},
		{[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "* * * * *", "--misfire", "sometimes"}, "--misfire: "},
		{[]string{"trigger", "publish", "--project", "P!", "--trigger", "t", "--task", "k", "--cron", "* * * * *"}, `--project: project id "P!"`},
		{[]string{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", "[1,2]"}, "--executor-spec: "},
		{[]string{"project", "create", "--project", ""}, "--project: project id"},
		{[]string{"runs", "list", "--limit", "0"}, "--limit: 0 is out of range"},
		{[]string{"runs", "list", "--trigger", "T T"}, "--trigger: trigger id"},
		{[]string{"trigger", "list", "--project", "P!"}, "--project: project id"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			r := exits2BeforeConnecting(t, c.args, c.want)
			if strings.Contains(r.stdout+r.stderr, "pw-never-shown") {
				t.Error("the password leaked")
			}
		})
	}
}

func TestRunRefusesAnUnreadyDatabaseAndClaimsNothing(t *testing.T) {
	t.Parallel()
	empty := testpg.NewEmpty(t)
	r := run(t, "run", "--database-url", empty.URL(""), "--http-addr", "127.0.0.1:0")
	if r.code != 1 || !strings.Contains(r.stderr, "qlmigrate up") {
		t.Errorf("un-migrated database: exit %d, stderr %q; want exit 1 pointing at qlmigrate up", r.code, r.stderr)
	}

	// A migrated database, but connected as the superuser, who can INSERT schedules: not the
	// runtime role, whose exact privileges readiness checks, so it refuses, and the due trigger
	// stays unclaimed.
	d := testpg.New(t)
	publishEverySecond(t, d, "t")
	r = run(t, "run", "--database-url", d.URL(""), "--http-addr", "127.0.0.1:0")
	if r.code != 1 || !strings.Contains(r.stderr, "; a replica runs as the runtime role ql_runtime") {
		t.Errorf("as superuser: exit %d, stderr %q; want exit 1 about the connected role", r.code, r.stderr)
	}
	assertNothingClaimed(t, d)
}

// assertNothingClaimed checks that the database's one schedule row was never claimed.
func assertNothingClaimed(t *testing.T, d *testpg.DB) {
	t.Helper()
	var claimVersion int64
	if err := d.Pool(t, "").QueryRow(context.Background(), "SELECT claim_version FROM control_core.trigger_schedules").Scan(&claimVersion); err != nil || claimVersion != 0 {
		t.Errorf("claim_version %d (%v); want 0: nothing claimed", claimVersion, err)
	}
}

var httpAddrLog = regexp.MustCompile(`http_addr=(\S+)`)

var jsonHTTPAddrLog = regexp.MustCompile(`"http_addr":"([^"]+)"`)

// startRunJSON starts `qlsched run` with args and --log-format json (killed when the test ends)
// and returns it with the address its HTTP server logged; it fails the test if none is logged.
func startRunJSON(t *testing.T, args ...string) (*replicaProcess, string) {
	t.Helper()
	r := startProcess(t, qlsched(t), append(append([]string{"run"}, args...), "--log-format", "json")...)
	var addr string
	r.waitFor(t, 30*time.Second, "http_addr logged", func(line string) bool {
		if m := jsonHTTPAddrLog.FindStringSubmatch(line); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	return r, addr
}

// The whole replica as an SRE runs it: publish as ql_admin, run as ql_runtime, see runs, SIGTERM.
func TestRunAdmitsAndStopsCleanlyOnSIGTERM(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	admin := []string{"--database-url", d.URL("ql_admin")}
	publishEverySecond(t, d, "every-second")
	cmd := exec.Command(qlsched(t), "run", "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0",
		"--cadence", "100ms", "--owner", "replica-a")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stderr)
	var addr string
	var logged strings.Builder
	for addr == "" && lines.Scan() {
		logged.WriteString(lines.Text() + "\n")
		if m := httpAddrLog.FindStringSubmatch(lines.Text()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("no http_addr logged:\n%s", logged.String())
	}
	rest := make(chan string)
	go func() { b, _ := io.ReadAll(stderr); rest <- string(b) }()
	if code := get(t, "http://"+addr+"/readyz"); code != 200 {
		t.Errorf("/readyz %d while running, want 200", code)
	}
	if code := get(t, "http://"+addr+"/healthz"); code != 200 {
		t.Errorf("/healthz %d, want 200", code)
	}
	eventually.NoError(t, 20*time.Second, "2 admitted occurrences in runs list", func() error {
		r := run(t, "runs", "list", "--format", "json", admin[0], admin[1])
		if r.code != 0 {
			return fmt.Errorf("runs list: exit %d: %s", r.code, r.stderr)
		}
		if n := strings.Count(r.stdout, `"run_id"`); n < 2 {
			return fmt.Errorf("%d runs:\n%s", n, r.stdout)
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	tail := <-rest
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, tail)
	}
	if !strings.Contains(tail, "admission withdrawn") || !strings.Contains(tail, "stopped") {
		t.Errorf("shutdown log lacks 'admission withdrawn' then 'stopped':\n%s", tail)
	}
	if strings.Contains(logged.String()+tail, testpg.Password) {
		t.Error("the password reached the log")
	}
	list := run(t, "trigger", "list", admin[0], admin[1])
	if list.code != 0 || !strings.Contains(list.stdout, "every-second") {
		t.Errorf("trigger list: exit %d\n%s", list.code, list.stdout)
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

var metricLine = regexp.MustCompile(`(?m)^(qlsched_[a-z_]+)(?:\{[^}]*\})? ([0-9.e+-]+)$`)

// The operator's view over real HTTP: /metrics after a short run carries every metric with
// plausible values (admits equal to the Runs in the database), /readyz fails before the process
// exits on SIGTERM, and qlsched status shows the project.
func TestMetricsReadinessFlipAndStatus(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	admin := []string{"--database-url", d.URL("ql_admin")}
	publish(t, admin,
		[]string{"project", "create", "--project", "ops"},
		[]string{"task", "publish", "--project", "ops", "--task", "k", "--executor-spec", `{"image":"x"}`},
		[]string{"trigger", "publish", "--project", "ops", "--trigger", "a", "--task", "k", "--cron", "* * * * * *"},
		[]string{"trigger", "publish", "--project", "ops", "--trigger", "b", "--task", "k", "--cron", "*/2 * * * * *"})
	replica, addr := startRunJSON(t, "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0",
		"--cadence", "50ms", "--owner", "ops-1", "--withdraw-grace", "1s", "--backlog-interval", "1s")
	cmd := replica.cmd
	base := "http://" + addr
	// wait for 4 admits, then read /metrics
	var values map[string]float64
	eventually.NoError(t, 20*time.Second, "4 admits on /metrics", func() error {
		if values = scrape(t, base+"/metrics"); values["qlsched_admits_total"] < 4 {
			return fmt.Errorf("qlsched_admits_total %v", values["qlsched_admits_total"])
		}
		return nil
	})
	for _, name := range []string{"qlsched_rounds_total", "qlsched_claims_total", "qlsched_admits_total", "qlsched_skips_total",
		"qlsched_releases_total", "qlsched_races_total", "qlsched_serialization_retries_total", "qlsched_errors_total",
		"qlsched_lease_takeovers_total", "qlsched_round_duration_seconds_count", "qlsched_admission_lag_seconds_count",
		"qlsched_admission_lag_seconds_sum", "qlsched_claim_duration_seconds_count", "qlsched_backlog_schedules",
		"qlsched_backlog_oldest_age_seconds", "qlsched_ready"} {
		if _, ok := values[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if values["qlsched_ready"] != 1 || values["qlsched_releases_total"] < 2 || values["qlsched_errors_total"] != 0 ||
		values["qlsched_claims_total"] < values["qlsched_admits_total"]+values["qlsched_releases_total"] {
		t.Errorf("implausible values: %v", values)
	}
	if lagAvg := values["qlsched_admission_lag_seconds_sum"] / values["qlsched_admission_lag_seconds_count"]; lagAvg < 0 || lagAvg > 1 {
		t.Errorf("mean admission lag %.3fs with a 50ms cadence", lagAvg)
	}
	// Quiesce (disable both triggers), then the process's admits must equal the Runs in the database.
	for _, tr := range []string{"a", "b"} {
		if r := run(t, "trigger", "publish", "--project", "ops", "--trigger", tr, "--task", "k", "--cron", "* * * * * *", "--disabled", admin[0], admin[1]); r.code != 0 {
			t.Fatalf("disable %s: %s", tr, r.stderr)
		}
	}
	conn, err := pgx.Connect(context.Background(), d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// polled until the last in-flight admit is visible on both sides
	eventually.NoError(t, 10*time.Second, "/metrics admits equal to the runs in the database", func() error {
		var runs float64
		if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM control_core.runs").Scan(&runs); err != nil {
			t.Fatal(err)
		}
		if admits := scrape(t, base+"/metrics")["qlsched_admits_total"]; admits != runs {
			return fmt.Errorf("/metrics counts %v admits, the database holds %v runs", admits, runs)
		}
		return nil
	})
	// Disabled triggers can never be claimed, so they are no backlog (their republished rows are
	// uninitialised, which once kept the gauge at 2 for ever).
	// the gauge is refreshed every --backlog-interval
	eventually.NoError(t, 10*time.Second, "qlsched_backlog_schedules 0 after every trigger was disabled", func() error {
		if backlog, ok := scrape(t, base+"/metrics")["qlsched_backlog_schedules"]; !ok || backlog != 0 {
			return fmt.Errorf("qlsched_backlog_schedules %v (present: %v)", backlog, ok)
		}
		return nil
	})
	status := run(t, "status", admin[0], admin[1])
	if status.code != 0 || !strings.Contains(status.stdout, "ops") || !strings.Contains(status.stdout, "LIVE CLAIMS") {
		t.Errorf("status: exit %d\n%s", status.code, status.stdout)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sawNotReady := false
	for deadline := time.Now().Add(5 * time.Second); !sawNotReady && time.Now().Before(deadline); {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			break // the server is gone
		}
		resp.Body.Close()
		sawNotReady = resp.StatusCode == http.StatusServiceUnavailable
	}
	if !sawNotReady {
		t.Error("/readyz never failed between SIGTERM and exit")
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	values := map[string]float64{}
	for _, m := range metricLine.FindAllStringSubmatch(string(body), -1) {
		var v float64
		if _, err := fmt.Sscan(m[2], &v); err != nil {
			t.Fatalf("%s: value %q: %v", m[1], m[2], err)
		}
		values[m[1]] += v
	}
	return values
}

// syncBuffer is a bytes.Buffer the test may read while the child process writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// exits2BeforeConnecting runs qlsched with args and --database-url of an unusedDatabase; it fails
// the test unless the exit is 2 with want on stderr and no connection was opened, and returns
// the result for further checks.
func exits2BeforeConnecting(t *testing.T, args []string, want string) result {
	t.Helper()
	url, accepted := unusedDatabase(t)
	r := run(t, append(args, "--database-url", url)...)
	if r.code != 2 || !strings.Contains(r.stderr, want) {
		t.Errorf("exit %d, stderr %q; want exit 2 mentioning %q", r.code, r.stderr, want)
	}
	if n := accepted(); n != 0 {
		t.Errorf("%d connection(s) opened; want none", n)
	}
	return r
}

// unusedDatabase stands in for PostgreSQL where a command must not connect: a TCP listener that
// only counts the connections it was offered. accepted drains its queue once the command is done.
func unusedDatabase(t *testing.T) (url string, accepted func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return "postgres://u:pw-never-shown@" + ln.Addr().String() + "/x?connect_timeout=2", func() int {
		n := 0
		// a connection the command made is already queued: Accept returns it at once; the
		// deadline only ends the wait on an empty queue
		_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(200 * time.Millisecond))
		for {
			c, err := ln.Accept()
			if err != nil {
				return n
			}
			c.Close()
			n++
		}
	}
}

// A --http-addr that cannot be served is configuration: exit 2, found before any database
// connection is opened (it used to surface after the pool, readiness and recovery, as exit 2).
func TestRunHTTPAddrProblemsExit2BeforeConnecting(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() }) // not defer: the parallel sub-tests run after this function returns
	cases := []struct {
		name, addr, want string
	}{
		{"port out of range", "127.0.0.1:99999", "not a number in 0 … 65535"},
		{"port already bound", busy.Addr().String(), "the address is taken (another qlsched on this host?): give each process its own --http-addr: another port, or port 0 for any free port, logged at start (--http-addr 127.0.0.1:0): listen tcp " + busy.Addr().String() + ": bind: address already in use"},
		{"address not on this host", "192.0.2.1:0", "--http-addr 192.0.2.1:0"}, // TEST-NET-1
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url, accepted := unusedDatabase(t)
			r := run(t, "run", "--database-url", url, "--http-addr", c.addr)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "--http-addr") {
				t.Errorf("exit %d, stderr %q; want exit 2 about --http-addr mentioning %q", r.code, r.stderr, c.want)
			}
			if n := accepted(); n != 0 {
				t.Errorf("qlsched opened %d database connection(s) before rejecting --http-addr %s", n, c.addr)
			}
			if strings.Contains(r.stdout+r.stderr, "pw-never-shown") {
				t.Error("the password leaked")
			}
		})
	}
}

// On a half-migrated database the schema exists but objects the readiness check reads do not:
// readiness must say so (exit 1, nothing claimed), not fail with a database error (exit 3).
func TestRunRefusesAHalfMigratedDatabase(t *testing.T) {
	t.Parallel()
	cases := []struct {
		to      int64
		missing []string
	}{
		// the report shows the first findings only: the missing tables (pg-0024's replicas and
		// pg-0025's archived_triggers among them) sort first
		{13, []string{"control-core is v12", "table control_core.trigger_schedules is missing",
			"table control_core.replicas is missing"}},
		{14, []string{"control-core is v13", "table control_core.replicas is missing",
			"table control_core.archived_triggers is missing"}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("up --to %d", c.to), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := testpg.NewEmpty(t)
			m, err := migrate.Open(ctx, d.Config(t, ""), migrate.Options{Names: d.Names, AsOwner: true})
			if err != nil {
				t.Fatal(err)
			}
			_, err = m.Up(ctx, c.to)
			m.Close()
			if err != nil {
				t.Fatalf("up --to %d: %v", c.to, err)
			}
			if c.to >= 14 {
				// a due, unclaimed schedule row that a replica must leave alone (replica mode: the
				// row stands alone, without its trigger)
				d.Exec(t, `SET session_replication_role = replica;
					INSERT INTO control_core.trigger_schedules (project_id, trigger_id, trigger_revision, next_fire_at_ms,
					        state_version, claim_version, updated_at_ms) VALUES ('p', 't', 1, 1000, 1, 0, 1000)`)
			}
			r := run(t, "run", "--database-url", d.URL(""), "--http-addr", "127.0.0.1:0")
			if r.code != 1 || !strings.Contains(r.stderr, "qlmigrate up") {
				t.Errorf("exit %d, stderr %q; want exit 1 pointing at qlmigrate up", r.code, r.stderr)
			}
			for _, want := range c.missing {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr %q does not say %q", r.stderr, want)
				}
			}
			if strings.Contains(r.stderr, "replica running") {
				t.Error("the replica started")
			}
			if c.to >= 14 {
				assertNothingClaimed(t, d)
			}
		})
	}
}

// A v28 database whose schema drifted from the readiness contract under what the hot queries rely
// on: the replica refuses to start (exit 1), names the object, and claims nothing.
func TestRunRefusesADriftedSchema(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, drift, want string }{
		{"claim index dropped", `DROP INDEX control_core.trigger_schedules_claim_idx`, "trigger_schedules_claim_idx"},
		{"cursor CHECK dropped", `ALTER TABLE control_core.trigger_schedules DROP CONSTRAINT trigger_schedules_next_fire_at_ms_check`,
			"trigger_schedules_next_fire_at_ms_check"},
		{"database time edited", `CREATE OR REPLACE FUNCTION control_core.db_now_ms() RETURNS bigint LANGUAGE sql STABLE
			AS $$ SELECT 0::bigint $$`, "db_now_ms"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := testpg.New(t)
			publishEverySecond(t, d, "t")
			d.Exec(t, c.drift)
			r := run(t, "run", "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0")
			if r.code != 1 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want exit 1 naming %s", r.code, r.stderr, c.want)
			}
			if strings.Contains(r.stderr, "replica running") {
				t.Error("the replica started")
			}
			assertNothingClaimed(t, d)
		})
	}
}

// statusJSON is `qlsched status --format json` as a tool reads it.
type statusJSON struct {
	Projects []struct {
		ProjectID         string `json:"project_id"`
		State             string `json:"state"`
		Triggers          int64  `json:"triggers"`
		Enabled           int64  `json:"enabled"`
		Backlog           int64  `json:"backlog"`
		OldestOverdueMs   int64  `json:"oldest_overdue_ms"`
		LiveClaims        int64  `json:"live_claims"`
		LastAdmitMs       int64  `json:"last_admit_ms"`
		LiveClaimsByOwner []struct {
			Owner  string `json:"owner"`
			Claims int64  `json:"claims"`
		} `json:"live_claims_by_owner"`
		LastAdmits []struct {
			TriggerID       string `json:"trigger_id"`
			TriggerRevision int64  `json:"trigger_revision"`
			ScheduledForMs  int64  `json:"scheduled_for_ms"`
			QueuedAtMs      int64  `json:"queued_at_ms"`
			RunID           string `json:"run_id"`
		} `json:"last_admits"`
	} `json:"projects"`
	LiveClaimsByOwner []struct {
		Owner  string `json:"owner"`
		Claims int64  `json:"claims"`
	} `json:"live_claims_by_owner"`
}

// qlsched status --format json reports, per project, exactly the arranged state: triggers and
// enabled ones, the backlog (only what a claim could take), the oldest overdue occurrence, live
// claims by owner and the last admissions.
func TestStatusJSONReportsEachProject(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	admin := []string{"--database-url", d.URL("ql_admin")}
	publish(t, admin,
		[]string{"project", "create", "--project", "ops"},
		[]string{"task", "publish", "--project", "ops", "--task", "k", "--executor-spec", `{"image":"x"}`},
		[]string{"trigger", "publish", "--project", "ops", "--trigger", "overdue", "--task", "k", "--cron", "0 0 1 1 *"},
		[]string{"trigger", "publish", "--project", "ops", "--trigger", "claimed", "--task", "k", "--cron", "0 0 1 1 *"},
		[]string{"trigger", "publish", "--project", "ops", "--trigger", "off", "--task", "k", "--cron", "0 0 1 1 *", "--disabled"},
		[]string{"project", "create", "--project", "old"},
		[]string{"task", "publish", "--project", "old", "--task", "k", "--executor-spec", `{"image":"x"}`},
		[]string{"trigger", "publish", "--project", "old", "--trigger", "o", "--task", "k", "--cron", "0 0 1 1 *"})
	// Arrange (as the superuser) fixed cursors far in the past, a live claim, an archived
	// project, and two admitted Runs of "overdue", the newer one the one to report.
	d.Exec(t, `
		-- last_scheduled_at_ms as the admit of the newer Run below writes it (the last admissions read it)
		UPDATE control_core.trigger_schedules SET next_fire_at_ms = 1000000, last_scheduled_at_ms = 200000 WHERE trigger_id = 'overdue';
		UPDATE control_core.trigger_schedules SET next_fire_at_ms = 500000, claim_owner = 'replica-x', claim_token = gen_random_uuid(),
		       claim_version = claim_version + 1, updated_at_ms = control_core.db_now_ms(),
		       claim_expires_at_ms = control_core.db_now_ms() + 600000 WHERE trigger_id = 'claimed';
		UPDATE control_core.trigger_schedules SET next_fire_at_ms = 400000 WHERE trigger_id IN ('off', 'o');
		UPDATE control_core.projects SET state = 'archived' WHERE project_id = 'old';
		INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
		        trigger_revision, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
		SELECT gen_random_uuid(), 'ops', 'k', 1, kr.execution_revision_id, 'overdue', 1, v.at,
		       'ql3:cron:v1:overdue:1:' || v.at, 'queued', 'runtime', v.at + 50, v.at + 50, v.at + 50
		FROM control_core.task_revisions kr, (VALUES (100000::bigint), (200000::bigint)) v(at)
		WHERE kr.project_id = 'ops' AND kr.task_id = 'k' AND kr.revision = 1`)

	r := run(t, "status", "--format", "json", admin[0], admin[1])
	if r.code != 0 {
		t.Fatalf("status: exit %d %s", r.code, r.stderr)
	}
	var got statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("status --format json: %v\n%s", err, r.stdout)
	}
	if len(got.Projects) != 2 || got.Projects[0].ProjectID != "old" || got.Projects[1].ProjectID != "ops" {
		t.Fatalf("projects %+v, want old and ops", got.Projects)
	}
	old, ops := got.Projects[0], got.Projects[1]
	type counts struct {
		state                                           string
		triggers, enabled, backlog, oldest, live, admit int64
	}
	for _, c := range []struct {
		got, want counts
	}{
		// ops: "off" is disabled and "claimed" held, so only "overdue" is backlog (at 1000000 ms)
		{counts{ops.State, ops.Triggers, ops.Enabled, ops.Backlog, ops.OldestOverdueMs, ops.LiveClaims, ops.LastAdmitMs},
			counts{"active", 3, 2, 1, 1000000, 1, 200050}},
		// old: archived, so nothing is backlog even though "o" is overdue
		{counts{old.State, old.Triggers, old.Enabled, old.Backlog, old.OldestOverdueMs, old.LiveClaims, old.LastAdmitMs},
			counts{"archived", 1, 1, 0, 0, 0, 0}},
	} {
		if c.got != c.want {
			t.Errorf("got %+v, want %+v", c.got, c.want)
		}
	}
	if len(ops.LiveClaimsByOwner) != 1 || ops.LiveClaimsByOwner[0].Owner != "replica-x" || ops.LiveClaimsByOwner[0].Claims != 1 ||
		len(old.LiveClaimsByOwner) != 0 {
		t.Errorf("live claims by owner: ops %+v, old %+v; want ops replica-x: 1, old none", ops.LiveClaimsByOwner, old.LiveClaimsByOwner)
	}
	if len(ops.LastAdmits) != 1 || ops.LastAdmits[0].TriggerID != "overdue" || ops.LastAdmits[0].TriggerRevision != 1 ||
		ops.LastAdmits[0].ScheduledForMs != 200000 || ops.LastAdmits[0].QueuedAtMs != 200050 || ops.LastAdmits[0].RunID == "" ||
		len(old.LastAdmits) != 0 {
		t.Errorf("last admits: ops %+v, old %+v; want ops overdue rev 1 scheduled 200000 admitted 200050, old none", ops.LastAdmits, old.LastAdmits)
	}
	if len(got.LiveClaimsByOwner) != 1 || got.LiveClaimsByOwner[0].Owner != "replica-x" || got.LiveClaimsByOwner[0].Claims != 1 {
		t.Errorf("live claims by owner across projects %+v, want replica-x: 1", got.LiveClaimsByOwner)
	}
	text := run(t, "status", admin[0], admin[1])
	if text.code != 0 || !strings.Contains(text.stdout, "1 (replica-x: 1)") || !strings.Contains(text.stdout, "overdue") {
		t.Errorf("status text: exit %d\n%s", text.code, text.stdout)
	}
}

// qlschedRace is qlsched built with the race detector, which makes the binary report a data race
// on stderr and exit 66.
func qlschedRace(t *testing.T) string { return testbin.Command(t, "qlsched", "-race") }

// replicaProcess is a running `qlsched run` whose stderr lines arrive on lines.
type replicaProcess struct {
	cmd   *exec.Cmd
	lines chan string
	all   *syncBuffer // stdout and stderr, everything so far
}

func startReplica(t *testing.T, bin string, args ...string) *replicaProcess {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"run"}, args...)...)
	r := &replicaProcess{cmd: cmd, lines: make(chan string, 1024), all: &syncBuffer{}}
	cmd.Stdout = r.all
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		defer close(r.lines)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			r.all.Write([]byte(sc.Text() + "\n"))
			r.lines <- sc.Text()
		}
	}()
	return r
}

// waitFor reads lines until until(line) holds; it fails the test after timeout or at EOF.
func (r *replicaProcess) waitFor(t *testing.T, timeout time.Duration, what string, until func(string) bool) string {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-r.lines:
			if !ok {
				t.Fatalf("qlsched exited before %s:\n%s", what, r.all.String())
			}
			if until(line) {
				return line
			}
		case <-timer.C:
			t.Fatalf("no %s after %s:\n%s", what, timeout, r.all.String())
		}
	}
}

// stop sends SIGTERM and waits for the exit; it returns the exit code.
func (r *replicaProcess) stop(t *testing.T) int {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range r.lines { // drain: Wait must not close the pipe under the reader
	}
	_ = r.cmd.Wait()
	return r.cmd.ProcessState.ExitCode()
}

// publishEverySecond publishes project p, task k and an every-second trigger as ql_admin.
func publishEverySecond(t *testing.T, d *testpg.DB, trigger string) {
	t.Helper()
	publish(t, []string{"--database-url", d.URL("ql_admin")},
		[]string{"project", "create", "--project", "p"},
		[]string{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", `{"image":"x"}`},
		[]string{"trigger", "publish", "--project", "p", "--trigger", trigger, "--task", "k", "--cron", "* * * * * *"})
}

func publish(t *testing.T, admin []string, commands ...[]string) {
	t.Helper()
	for _, args := range commands {
		if r := run(t, append(args, admin...)...); r.code != 0 {
			t.Fatalf("%v: exit %d %s", args, r.code, r.stderr)
		}
	}
}

// The coordinator takes the metrics' Observer at construction, and the rounds feed it while
// /metrics is scraped. A race-detector build of the replica, running many rounds while /metrics
// is scraped, reports any race between them (and exits 66).
func TestRunStartsWithoutADataRace(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	publishEverySecond(t, d, "t")
	r := startReplica(t, qlschedRace(t), "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0", "--cadence", "10ms")
	line := r.waitFor(t, 60*time.Second, "replica running", func(l string) bool { return httpAddrLog.MatchString(l) })
	base := "http://" + httpAddrLog.FindStringSubmatch(line)[1]
	eventually.True(t, 20*time.Second, "an admission observed on /metrics", func() bool {
		return scrape(t, base+"/metrics")["qlsched_admission_lag_seconds_count"] >= 1
	})
	if code := r.stop(t); code != 0 || strings.Contains(r.all.String(), "DATA RACE") {
		t.Errorf("exit %d after SIGTERM:\n%s", code, r.all.String())
	}
}

// Every log line about a schedule names it: project, trigger, revision, its scheduled time and
// the owner; and no line of a run, nor of a failing command, carries the password or the
// executor spec.
func TestRunLogsNameTheScheduleAndKeepNoSecrets(t *testing.T) {
	t.Parallel()
	const goodPayload, badPayload = "payload-good-5b1e", "payload-bad-9c2d"
	d := testpg.New(t)
	admin := []string{"--database-url", d.URL("ql_admin")}
	publish(t, admin,
		[]string{"project", "create", "--project", "p"},
		[]string{"task", "publish", "--project", "p", "--task", "good", "--executor-spec", `{"image":"` + goodPayload + `"}`},
		[]string{"task", "publish", "--project", "p", "--task", "bad", "--executor-spec", `{"image":"` + badPayload + `"}`},
		[]string{"trigger", "publish", "--project", "p", "--trigger", "tick", "--task", "good", "--cron", "* * * * * *"},
		[]string{"trigger", "publish", "--project", "p", "--trigger", "broken", "--task", "bad", "--cron", "* * * * * *"})
	// A hand-edited execution spec: its digest no longer matches, so its admit is refused and
	// logged as an error (the error path of a running replica).
	d.Exec(t, `UPDATE control_core.execution_revisions SET spec = spec || '{"edited": true}' WHERE spec->>'image' = '`+badPayload+`'`)

	runtimeURL := d.URL("ql_runtime") // carries testpg.Password
	r := startReplica(t, qlsched(t), "--database-url", runtimeURL, "--http-addr", "127.0.0.1:0", "--cadence", "50ms",
		"--owner", "log-1", "--log-format", "json", "--log-level", "debug")
	var admitted, corrupt bool
	r.waitFor(t, 20*time.Second, "an admitted and a refused occurrence", func(l string) bool {
		admitted = admitted || strings.Contains(l, `"msg":"admitted"`)
		corrupt = corrupt || strings.Contains(l, "digest does not match")
		return admitted && corrupt
	})
	if code := r.stop(t); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	output := r.all.String()

	scheduleLines := 0
	for _, line := range strings.Split(strings.TrimSpace(output), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON log line: %q (%v)", line, err)
			continue
		}
		_, hasProject := rec["project"]
		_, hasTrigger := rec["trigger"]
		if !hasProject && !hasTrigger {
			continue // not about a schedule (start-up, shutdown)
		}
		scheduleLines++
		for _, key := range []string{"project", "trigger", "revision", "owner"} {
			if _, ok := rec[key]; !ok {
				t.Errorf("schedule line lacks %q: %s", key, line)
			}
		}
		_, scheduledFor := rec["scheduled_for_ms"]
		_, cursor := rec["next_fire_at_ms"]
		if !scheduledFor && !cursor {
			t.Errorf("schedule line lacks its scheduled time (scheduled_for_ms or next_fire_at_ms): %s", line)
		}
		if rec["owner"] != nil && rec["owner"] != "log-1" {
			t.Errorf("schedule line names owner %v, want log-1: %s", rec["owner"], line)
		}
	}
	if scheduleLines < 2 {
		t.Errorf("%d schedule lines; want at least the admitted and the refused one:\n%s", scheduleLines, output)
	}

	// Failing commands, each with a password-bearing URL or a payload in its arguments.
	errorRuns := []result{
		// cannot connect
		run(t, "run", "--database-url", "postgres://ql_runtime:"+testpg.Password+"@127.0.0.1:1/x", "--http-addr", "127.0.0.1:0"),
		// connects, but not with the runtime's privileges
		run(t, "run", "--database-url", d.URL("ql_admin"), "--http-addr", "127.0.0.1:0", "--log-format", "json"),
		// the runtime may not publish; a project that does not exist
		run(t, "task", "publish", "--project", "p", "--task", "denied", "--executor-spec", `{"image":"`+badPayload+`"}`, "--database-url", runtimeURL),
		run(t, "task", "publish", "--project", "nope", "--task", "k", "--executor-spec", `{"image":"`+goodPayload+`"}`, admin[0], admin[1]),
	}
	for i, e := range errorRuns {
		if e.code == 0 {
			t.Errorf("error-path run %d exited 0", i)
		}
		output += e.stdout + e.stderr
	}
	for _, secret := range []string{testpg.Password, goodPayload, badPayload} {
		if strings.Contains(output, secret) {
			t.Errorf("%q reached the output:\n%s", secret, output)
		}
	}
}

// Every input the database would refuse is refused before connecting: exit 2, a message naming
// the flag and the rule, zero connections offered to the listener, and neither the URL's
// password nor the executor spec's content in the output.
func TestDatabaseRefusedInputsExit2WithZeroConnections(t *testing.T) {
	t.Parallel()
	const payload = "s3cr3t-payload-xyz"
	long := func(n int) string { return "a" + strings.Repeat("b", n-1) }
	nest := func(n int) string { return `{"a":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + `}` }
	longCron := "0 0 1 1 1" + strings.Repeat(",1", (limits.MaxCronSpec-9)/2+1) // valid cron, 201+ characters
	trigger := func(flags ...string) []string {
		base := map[string]string{"--project": "p", "--trigger": "t", "--task": "k", "--cron": "0 3 * * *"}
		for i := 0; i+1 < len(flags); i += 2 {
			base[flags[i]] = flags[i+1]
		}
		args := []string{"trigger", "publish"}
		for _, k := range []string{"--project", "--trigger", "--task", "--cron"} {
			args = append(args, k, base[k])
		}
		return args
	}
	task := func(project, task, spec string) []string {
		return []string{"task", "publish", "--project", project, "--task", task, "--executor-spec", spec}
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"cron over the column's 200 characters", trigger("--cron", longCron), "--cron"},
		{"cron with a trailing space", trigger("--cron", "0 3 * * * "), "leading or trailing spaces"},
		{"cron with a leading space", trigger("--cron", " 0 3 * * *"), "leading or trailing spaces"},
		{"cron with a tab", trigger("--cron", "0\t3 * * *"), "printable ASCII"},
		{"time zone over 64 characters", append(trigger(), "--timezone", strings.Repeat("A", limits.MaxTimeZone+1)), "--timezone"},
		{"project id over 63 characters", []string{"project", "create", "--project", long(64)}, "project id"},
		{"task id over 63 characters", task("p", long(64), `{}`), "task id"},
		{"trigger id over 63 characters", trigger("--trigger", long(64)), "trigger id"},
		{"spec with \\u0000", task("p", "k", `{"a":"\u0000","token":"`+payload+`"}`), "--executor-spec: invalid at byte 7"},
		{"spec with a lone surrogate", task("p", "k", `{"token":"`+payload+`","a":"\ud800"}`), "unpaired UTF-16 surrogate"},
		{"spec with a lone low surrogate", task("p", "k", `{"a":"\udc00`+payload+`"}`), "unpaired UTF-16 surrogate"},
		{"spec over 64 KiB", task("p", "k", `{"a":"`+payload+strings.Repeat("x", limits.MaxExecutorSpec)+`"}`), "at most 65536"},
		{"spec number beyond numeric", task("p", "k", `{"a":1e200000,"token":"`+payload+`"}`), "numeric's range"},
		{"spec nested too deep", task("p", "k", nest(limits.MaxSpecDepth+1)), "nested deeper than 1000"},
		{"spec not JSON, secret inside", task("p", "k", `{"token":"`+payload+`" oops}`), "invalid at byte 31: unexpected character"},
		{"spec cut short", task("p", "k", `{"token":"`+payload), "unexpected end"},
		{"spec not an object", task("p", "k", `["`+payload+`"]`), "not a JSON object"},
		{"spec with a duplicate key", task("p", "k", `{"token":"`+payload+`", "token":"`+payload+`"}`), "--executor-spec: invalid at byte 32: a duplicate key"},
		{"spec with a duplicate nested key", task("p", "k", `{"env":{"token":"`+payload+`","token":"x"}}`), "a duplicate key"},
		{"lease over 10 minutes", []string{"run", "--lease", "11m"}, "--lease 11m0s: want 1s … 10m0s"},
		{"lease of a year", []string{"run", "--lease", "8760h"}, "--lease 8760h0m0s"},
		{"owner over 128 characters", []string{"run", "--owner", long(limits.MaxOwner + 1)}, "--owner"},
		{"a URL where a command was expected", []string{"status", "postgres://u:pw-never-shown@h/x"}, "not shown"},
		{"a URL as a flag value", []string{"run", "--lease", "postgres://u:pw-never-shown@h/x"}, `for "--lease" flag`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url, accepted := unusedDatabase(t)
			r := run(t, append(c.args, "--database-url", url)...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, stderr %.300q; want exit 2 mentioning %q", r.code, r.stderr, c.want)
			}
			if n := accepted(); n != 0 {
				t.Errorf("%d connection(s) opened; want none", n)
			}
			for _, secret := range []string{"pw-never-shown", payload, "s3cr3t"} {
				if strings.Contains(r.stdout+r.stderr, secret) {
					t.Errorf("%q reached the output: %.300q", secret, r.stdout+r.stderr)
				}
			}
		})
	}
}

// TestNoPieceOfAPasswordInAnyOutput runs both binaries' commands 200 times (seeded) with a
// password drawn from a hostile alphabet, given in every form, against a closed port and a
// server that checks passwords (the right one and a wrong one): no 6-character piece of the
// password, nor of the executor spec that carries it too, appears in any output or log line.
func TestNoPieceOfAPasswordInAnyOutput(t *testing.T) {
	t.Parallel()
	srv := dbconntest.StartPasswordServer(t)
	rng := rand.New(rand.NewPCG(16, 6))
	alphabet := []rune(`@:/%?#&='"\ ` + "abcdefXYZ0123456789-_.,;!$*()[]{}<>|~^+\täöüß✓日本語€🙂")
	password := func() string {
		r := make([]rune, 8+rng.IntN(17))
		for i := range r {
			r[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(r)
	}
	right := password()
	srv.CreateRole(t, "alice", right)
	server := fmt.Sprintf("127.0.0.1:%d", srv.Port)
	qlm := buildQlmigrate(t)

	encodeAll := func(s string) string {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			if c := s[i]; 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		}
		return b.String()
	}
	kvQuote := func(s string) string { return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'" }
	// forms give the password to a command: a --database-url value and extra environment
	forms := []func(hostport, pw string) (string, []string){
		func(hp, pw string) (string, []string) {
			return "postgres://alice:" + encodeAll(pw) + "@" + hp + "/postgres?sslmode=disable", nil
		},
		func(hp, pw string) (string, []string) {
			return "postgres://alice@" + hp + "/postgres?sslmode=disable&password=" + encodeAll(pw), nil
		},
		func(hp, pw string) (string, []string) {
			host, port, _ := net.SplitHostPort(hp)
			return fmt.Sprintf("host=%s port=%s user=alice dbname=postgres sslmode=disable password=%s", host, port, kvQuote(pw)), nil
		},
		func(hp, pw string) (string, []string) {
			return "postgres://alice@" + hp + "/postgres?sslmode=disable", []string{"PGPASSWORD=" + pw}
		},
		func(hp, pw string) (string, []string) {
			return "", []string{"QL_DATABASE_URL=postgres://alice:" + encodeAll(pw) + "@" + hp + "/postgres?sslmode=disable"}
		},
		func(hp, pw string) (string, []string) { return "postgres://alice:" + pw + "@" + hp + "/postgres", nil }, // unencoded
	}
	commands := [][]string{
		{"qlsched", "status"},
		{"qlsched", "trigger", "list"},
		{"qlsched", "runs", "list"},
		{"qlsched", "run", "--http-addr", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug"},
		{"qlsched", "run", "--http-addr", "127.0.0.1:0"},
		{"qlsched", "task", "publish", "--project", "p", "--task", "k", "--executor-spec", "SPEC"},
		{"qlsched", "task", "publish", "--project", "p", "--task", "k", "--executor-spec", "BADSPEC"},
		{"qlmigrate", "status"},
		{"qlmigrate", "verify"},
		{"qlmigrate", "grants", "--sql"},
		{"qlmigrate", "up"},
	}
	for i := 0; i < 200; i++ {
		pw, target, accepted := password(), "127.0.0.1:1", false
		switch rng.IntN(3) {
		case 1:
			target = server // refuses pw
		case 2:
			target, pw, accepted = server, right, true // accepted: the command goes on to fail on an unmigrated database, or reports it
		}
		raw, env := forms[rng.IntN(len(forms))](target, pw)
		command := commands[rng.IntN(len(commands))]
		args := append([]string{}, command[1:]...)
		specJSON, _ := json.Marshal(map[string]string{"token": pw})
		for j, a := range args {
			switch a {
			case "SPEC":
				args[j] = string(specJSON)
			case "BADSPEC":
				args[j] = `{"token":` + strings.TrimPrefix(string(specJSON), `{"token":`) + ` x`
			}
		}
		if raw != "" {
			args = append(args, "--database-url", raw)
		}
		bin := qlsched(t)
		if command[0] == "qlmigrate" {
			bin = qlm
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Fatalf("iteration %d: %v did not finish", i, command)
		}
		// The command must have run and said something: one that did not start, or printed
		// nothing, leaves nothing to check. Without the right password it fails (no server, a
		// refused password, a bad spec); with it, it may also succeed (qlmigrate status on the
		// unmigrated database).
		var exit *exec.ExitError
		code := cli.ExitOK
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("iteration %d, %v: %v", i, command, err)
		}
		failed := code == cli.ExitProblem || code == cli.ExitUsage || code == cli.ExitDatabase
		if len(out) == 0 || !(failed || accepted && code == cli.ExitOK) {
			t.Fatalf("iteration %d, %v (password accepted: %v): exit %d, want 1, 2 or 3 (or 0 with the right password) with a message:\n%s",
				i, command, accepted, code, out)
		}
		for _, p := range pieces6(pw) {
			if strings.Contains(string(out), p) {
				t.Errorf("iteration %d, %v: piece %q of password %q in the output:\n%s", i, command, p, pw, out)
				break
			}
		}
	}
}

// pieces6 returns s and every 6-character piece of it.
func pieces6(s string) []string {
	r := []rune(s)
	out := []string{s}
	for i := 0; i+6 <= len(r); i++ {
		out = append(out, string(r[i:i+6]))
	}
	return out
}

// buildQlmigrate builds the qlmigrate binary once, for tests that run both binaries.
func buildQlmigrate(t *testing.T) string { return testbin.Command(t, "qlmigrate") }
