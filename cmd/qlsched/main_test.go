package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func qlsched(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "qlsched-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "qlsched")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

type result struct {
	stdout, stderr string
	code           int
}

func run(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(qlsched(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run qlsched %v: %v", args, err)
	}
	return result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

func TestBadInputExits2BeforeConnecting(t *testing.T) {
	t.Parallel()
	const unreachable = "postgres://u:pw-never-shown@127.0.0.1:1/x"
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
		{[]string{"run", "--http-addr", "nonsense"}, "--http-addr"},
		{[]string{"run", "--owner", "has space"}, "--owner"},
		{[]string{"run", "--log-format", "xml"}, "--log-format"},
		{[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "@every 5s"}, "@every"},
		{[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "61 * * * *"}, "61"},
		{[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "* * * * *", "--timezone", "Mars/Olympus"}, "Mars/Olympus"},
		{[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "* * * * *", "--misfire", "sometimes"}, "sometimes"},
		{[]string{"trigger", "publish", "--project", "P!", "--trigger", "t", "--task", "k", "--cron", "* * * * *"}, `project id "P!"`},
		{[]string{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", "[1,2]"}, "JSON object"},
		{[]string{"project", "create", "--project", ""}, "project id"},
		{[]string{"runs", "list", "--limit", "0"}, "--limit 0"},
		{[]string{"demo", "--replicas", "9"}, "--replicas 9"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			r := run(t, append(c.args, "--database-url", unreachable)...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 mentioning %q", r.code, r.stderr, c.want)
			}
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
	// runtime's exact privileges, so it refuses, and the due trigger stays unclaimed.
	d := testpg.New(t)
	admin := []string{"--database-url", d.URL("ql_admin")}
	for _, args := range [][]string{
		{"project", "create", "--project", "p"},
		{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", `{"image":"x"}`},
		{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "* * * * * *"},
	} {
		if r := run(t, append(args, admin...)...); r.code != 0 {
			t.Fatalf("%v: exit %d %s", args, r.code, r.stderr)
		}
	}
	r = run(t, "run", "--database-url", d.URL(""), "--http-addr", "127.0.0.1:0")
	if r.code != 1 || !strings.Contains(r.stderr, "no INSERT on control_core.trigger_schedules") {
		t.Errorf("as superuser: exit %d, stderr %q; want exit 1 about INSERT on trigger_schedules", r.code, r.stderr)
	}
	conn, err := pgx.Connect(context.Background(), d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var claims int
	if err := conn.QueryRow(context.Background(), "SELECT claim_version FROM control_core.trigger_schedules").Scan(&claims); err != nil || claims != 0 {
		t.Errorf("claim_version %d (%v); want 0: nothing claimed", claims, err)
	}
}

var httpAddrLog = regexp.MustCompile(`http_addr=(\S+)`)

// The whole replica as an SRE runs it: publish as ql_admin, run as ql_runtime, see runs, SIGTERM.
func TestRunAdmitsAndStopsCleanlyOnSIGTERM(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	admin := []string{"--database-url", d.URL("ql_admin")}
	for _, args := range [][]string{
		{"project", "create", "--project", "p"},
		{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", `{"image":"x"}`},
		{"trigger", "publish", "--project", "p", "--trigger", "every-second", "--task", "k", "--cron", "* * * * * *"},
	} {
		if r := run(t, append(args, admin...)...); r.code != 0 {
			t.Fatalf("%v: exit %d %s", args, r.code, r.stderr)
		}
	}
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
	// wait until two occurrences are admitted
	for deadline := time.Now().Add(20 * time.Second); ; {
		r := run(t, "runs", "list", "--format", "json", admin[0], admin[1])
		if strings.Count(r.stdout, `"run_id"`) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 2 runs after 20 s:\n%s", r.stdout)
		}
		time.Sleep(100 * time.Millisecond) // polling the database
	}
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
	for _, args := range [][]string{
		{"project", "create", "--project", "ops"},
		{"task", "publish", "--project", "ops", "--task", "k", "--executor-spec", `{"image":"x"}`},
		{"trigger", "publish", "--project", "ops", "--trigger", "a", "--task", "k", "--cron", "* * * * * *"},
		{"trigger", "publish", "--project", "ops", "--trigger", "b", "--task", "k", "--cron", "*/2 * * * * *"},
	} {
		if r := run(t, append(args, admin...)...); r.code != 0 {
			t.Fatalf("%v: exit %d %s", args, r.code, r.stderr)
		}
	}
	cmd := exec.Command(qlsched(t), "run", "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0",
		"--cadence", "50ms", "--owner", "ops-1", "--withdraw-grace", "1s", "--backlog-interval", "1s", "--log-format", "json")
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
	for addr == "" && lines.Scan() {
		if m := regexp.MustCompile(`"http_addr":"([^"]+)"`).FindStringSubmatch(lines.Text()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatal("no http_addr logged")
	}
	go io.Copy(io.Discard, stderr)
	base := "http://" + addr
	// wait for 4 admits, then read /metrics
	var values map[string]float64
	for deadline := time.Now().Add(20 * time.Second); ; {
		values = scrape(t, base+"/metrics")
		if values["qlsched_admits_total"] >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("admits %v after 20 s", values["qlsched_admits_total"])
		}
		time.Sleep(100 * time.Millisecond) // polling the process's own counters
	}
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
	for deadline := time.Now().Add(10 * time.Second); ; {
		var runs float64
		if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM control_core.runs").Scan(&runs); err != nil {
			t.Fatal(err)
		}
		admits := scrape(t, base+"/metrics")["qlsched_admits_total"]
		if admits == runs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics counts %v admits, the database holds %v runs", admits, runs)
		}
		time.Sleep(50 * time.Millisecond) // polling until the last in-flight admit is visible on both sides
	}
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
	body, _ := io.ReadAll(resp.Body)
	values := map[string]float64{}
	for _, m := range metricLine.FindAllStringSubmatch(string(body), -1) {
		var v float64
		fmt.Sscan(m[2], &v)
		values[m[1]] += v
	}
	return values
}

var removingDir = regexp.MustCompile(`removing (\S+)`)

// The demo runs end to end on its own throwaway PostgreSQL and leaves nothing behind: not when it
// finishes, not when it is interrupted.
func TestDemoCleansUpAfterItselfAlsoOnCtrlC(t *testing.T) {
	t.Parallel()
	for _, interrupt := range []bool{false, true} {
		cmd := exec.Command(qlsched(t), "demo", "--duration", "4s")
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if interrupt {
			for deadline := time.Now().Add(60 * time.Second); !strings.Contains(out.String(), "running 2 replicas"); {
				if time.Now().After(deadline) {
					t.Fatalf("demo never started its replicas:\n%s", out.String())
				}
				time.Sleep(50 * time.Millisecond) // polling the demo's own progress output
			}
			_ = cmd.Process.Signal(os.Interrupt)
		}
		err := cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		switch {
		case !interrupt && (err != nil || !strings.Contains(out.String(), "every occurrence admitted exactly once")):
			t.Fatalf("demo: exit %d\n%s", code, out.String())
		case interrupt && code != 130:
			t.Fatalf("interrupted demo: exit %d, want 130\n%s", code, out.String())
		}
		m := removingDir.FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("the demo did not say what it removed:\n%s", out.String())
		}
		cluster := filepath.Dir(m[1])
		if _, err := os.Stat(cluster); !os.IsNotExist(err) {
			t.Errorf("interrupt=%v: %s still exists (%v)", interrupt, cluster, err)
		}
		if ps, _ := exec.Command("pgrep", "-f", m[1]).Output(); len(bytes.TrimSpace(ps)) > 0 {
			t.Errorf("interrupt=%v: a process still runs on %s: %s", interrupt, m[1], ps)
		}
	}
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
