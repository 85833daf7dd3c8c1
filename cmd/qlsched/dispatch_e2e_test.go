package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testbin"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// startProcess starts bin with args, its output on the returned process's lines (stderr) and
// all (both); it is killed when the test ends if still running.
func startProcess(t *testing.T, bin string, args ...string) *replicaProcess {
	t.Helper()
	cmd := exec.Command(bin, args...)
	r := &replicaProcess{cmd: cmd, lines: make(chan string, 4096), all: &syncBuffer{}}
	cmd.Stdout = r.all
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s %s:\n%s", filepath.Base(bin), strings.Join(args[:min(len(args), 1)], " "), r.all.String())
		}
	})
	go func() {
		defer close(r.lines)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			r.all.Write([]byte(sc.Text() + "\n"))
			select {
			case r.lines <- sc.Text():
			default: // nobody waits for lines any more: the log is in all
			}
		}
	}()
	return r
}

var listenLog = regexp.MustCompile(`listen=(https?://\S+)`)

// loop is a running closed loop: a database migrated by qlmigrate up, project p, one
// `qlsched run`, two `qlsched dispatch` replicas and two `qlworker` processes holding a token
// from `qlsched worker token create`.
type loop struct {
	d           *testpg.DB
	su          *pgxpool.Pool // the test's own reads, as the superuser
	admin       []string
	dir         string
	urls        []string // the dispatchers' worker protocol
	health      []string // the dispatchers' /healthz, /readyz, /metrics
	token       string
	sched       *replicaProcess
	dispatchers []*replicaProcess
	workers     []*replicaProcess
}

// startLoop runs `qlmigrate up` on an empty database, publishes project p and, per task of
// tasks (each a task publish argument list after --task), the task and an every-second trigger
// of the same name, and starts the processes.
func startLoop(t *testing.T, tasks ...[]string) *loop {
	t.Helper()
	l := &loop{d: testpg.NewEmpty(t), dir: t.TempDir()}
	l.su = l.d.Pool(t, "")
	if r := testbin.Run(t, exec.Command(buildQlmigrate(t), "up", "--database-url", l.d.URL(""))); r.Code != 0 {
		t.Fatalf("qlmigrate up: exit %d\n%s", r.Code, r.Stderr)
	}
	l.admin = []string{"--database-url", l.d.URL("ql_admin")}
	cmds := [][]string{{"project", "create", "--project", "p"}}
	for _, task := range tasks {
		cmds = append(cmds, append([]string{"task", "publish", "--project", "p", "--task"}, task...),
			[]string{"trigger", "publish", "--project", "p", "--trigger", task[0], "--task", task[0], "--cron", "* * * * * *"})
	}
	publish(t, l.admin, cmds...)

	tok := run(t, append([]string{"worker", "token", "create", "--name", "e2e", "--format", "json"}, l.admin...)...)
	var created struct {
		Token string `json:"token"`
	}
	if tok.code != 0 || json.Unmarshal([]byte(tok.stdout), &created) != nil || !strings.HasPrefix(created.Token, "qlw_") {
		t.Fatalf("worker token create: exit %d\n%s", tok.code, tok.stderr)
	}
	l.token = created.Token
	tokenFile := filepath.Join(l.dir, "token")
	if err := os.WriteFile(tokenFile, []byte(l.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runtime := l.d.URL("ql_runtime")
	l.sched = startProcess(t, qlsched(t), "run", "--database-url", runtime, "--http-addr", "127.0.0.1:0", "--cadence", "100ms", "--owner", "e2e-run")
	l.sched.waitFor(t, 60*time.Second, "replica running", func(line string) bool { return strings.Contains(line, "replica running") })
	for _, owner := range []string{"e2e-dispatch-a", "e2e-dispatch-b"} {
		p := startProcess(t, qlsched(t), "dispatch", "--database-url", runtime, "--owner", owner, "--listen", "127.0.0.1:0",
			"--http-addr", "127.0.0.1:0", "--lease", "6s", "--sweep-interval", "200ms", "--offer-ttl", "5s", "--poll-max-wait", "5s")
		line := p.waitFor(t, 60*time.Second, "dispatcher running", func(line string) bool { return listenLog.MatchString(line) })
		l.urls = append(l.urls, listenLog.FindStringSubmatch(line)[1])
		l.health = append(l.health, "http://"+httpAddrLog.FindStringSubmatch(line)[1])
		l.dispatchers = append(l.dispatchers, p)
	}
	qlworker := testbin.Command(t, "qlworker")
	for _, name := range []string{"worker-a", "worker-b"} {
		l.workers = append(l.workers, startProcess(t, qlworker, "--dispatcher", strings.Join(l.urls, ","), "--token-file", tokenFile,
			"--name", name, "--capacity", "2"))
	}
	return l
}

// count runs a count query as the superuser.
func (l *loop) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := l.su.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// settle waits until the triggers of tasks admitted at least min Runs each, disables them (the
// set of Runs is then fixed), and waits until no Run is live.
func (l *loop) settle(t *testing.T, min int, tasks ...string) int {
	t.Helper()
	eventually.NoError(t, 60*time.Second, fmt.Sprintf("%d Runs of each task admitted", min), func() error {
		for _, task := range tasks {
			if n := l.count(t, `SELECT count(*) FROM control_core.runs WHERE task_id = $1`, task); n < min {
				return fmt.Errorf("%d Runs of %s", n, task)
			}
		}
		return nil
	})
	for _, task := range tasks {
		publish(t, l.admin, []string{"trigger", "disable", "--project", "p", "--trigger", task})
	}
	var admitted int
	eventually.NoError(t, 90*time.Second, "every admitted Run terminal", func() error {
		admitted = l.count(t, `SELECT count(*) FROM control_core.runs`)
		if live := l.count(t, `SELECT count(*) FROM control_core.runs WHERE state IN ('queued', 'dispatching', 'running')`); live > 0 {
			return fmt.Errorf("%d of %d Runs still live", live, admitted)
		}
		return nil
	})
	return admitted
}

// audit checks what holds for every Run of every loop: succeeded with its finish time, exactly
// one succeeded Attempt, no lease left active, events numbered 1…n.
func (l *loop) audit(t *testing.T) {
	t.Helper()
	if n := l.count(t, `SELECT count(*) FROM control_core.runs WHERE state <> 'succeeded' OR finished_at_ms IS NULL`); n != 0 {
		t.Errorf("%d Runs did not succeed", n)
	}
	if n := l.count(t, `SELECT count(*) FROM control_core.runs r WHERE (SELECT count(*) FROM control_core.attempts a
		WHERE a.run_id = r.run_id AND a.state = 'succeeded') <> 1`); n != 0 {
		t.Errorf("%d Runs without exactly one succeeded Attempt", n)
	}
	if n := l.count(t, `SELECT count(*) FROM control_core.run_leases WHERE state = 'active'`); n != 0 {
		t.Errorf("%d leases still active", n)
	}
	if n := l.count(t, `SELECT count(*) FROM (SELECT run_id FROM control_core.run_events GROUP BY run_id
		HAVING max(seq) <> count(*) OR min(seq) <> 1) x`); n != 0 {
		t.Errorf("%d Runs whose event sequence has a gap", n)
	}
}

// stop sends SIGTERM to every process, workers first: each exits 0, none printed a secret.
func (l *loop) stop(t *testing.T) {
	t.Helper()
	for _, p := range append(append(l.workers, l.dispatchers...), l.sched) {
		if code := stopProcess(t, p); code != 0 {
			t.Errorf("%s exited %d after SIGTERM:\n%s", filepath.Base(p.cmd.Path), code, p.all.String())
		}
		if strings.Contains(p.all.String(), l.token) || strings.Contains(p.all.String(), testpg.Password) {
			t.Errorf("%s printed a secret", filepath.Base(p.cmd.Path))
		}
	}
}

// THE closed loop, with real processes only (startLoop): every admitted Run ends succeeded with
// exactly one Attempt, which succeeded; a wrong token gets 401 and opens no session; every
// process stops cleanly on SIGTERM.
func TestClosedLoopWithRealProcesses(t *testing.T) {
	t.Parallel()
	// argv, not a shell string: the worker never runs a shell itself; this task asks for one.
	l := startLoop(t, []string{"ok", "--executor-spec", `{"command":["sh","-c","echo hi"],"timeout":"30s"}`})

	wrong, _ := http.NewRequest("POST", l.urls[0]+"/v1/sessions", strings.NewReader(`{"name":"intruder","capacity":1,"protocol":1}`))
	wrong.Header.Set("Authorization", "Bearer qlw_"+strings.Repeat("A", 43))
	wrong.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(wrong)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("wrong token: %d, WWW-Authenticate %q; want 401 with the challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}

	for _, h := range l.health {
		if code := get(t, h+"/readyz"); code != http.StatusOK {
			t.Errorf("%s/readyz: %d; want 200", h, code)
		}
	}
	admitted := l.settle(t, 5, "ok")
	var requests float64
	for _, h := range l.health {
		requests += scrape(t, h+"/metrics")["qlsched_dispatch_requests_total"]
	}
	if requests == 0 {
		t.Error("no qlsched_dispatch_requests_total on the dispatchers' /metrics")
	}
	// The loop's counters are per replica: summed over the dispatchers, each Attempt was started
	// by one ACK and ended by one report (a replica counts after its statement commits).
	attempts := l.count(t, `SELECT count(*) FROM control_core.attempts`)
	eventually.NoError(t, 10*time.Second, "the loop's counters summed over the dispatchers", func() error {
		var started, finished float64
		for _, h := range l.health {
			m := scrape(t, h+"/metrics")
			started += m["qlsched_dispatch_start_latency_seconds_count"]
			finished += m["qlsched_dispatch_attempts_finished_total"]
		}
		if started != float64(attempts) || finished != float64(attempts) {
			return fmt.Errorf("%v started and %v finished; want %d Attempts each", started, finished, attempts)
		}
		return nil
	})
	l.audit(t)
	if n := l.count(t, `SELECT count(*) FROM control_core.attempts WHERE attempt_no <> 1 OR state <> 'succeeded'`); n != 0 {
		t.Errorf("%d Attempts other than one succeeded first Attempt per Run (task ok never fails)", n)
	}
	if n := l.count(t, `SELECT count(*) FROM control_core.worker_sessions WHERE worker_id = 'intruder'`); n != 0 {
		t.Error("the wrong token opened a session")
	}
	if n := l.count(t, `SELECT count(DISTINCT worker_id) FROM control_core.attempts`); n != 2 {
		t.Logf("the Attempts ran on %d worker(s)", n) // both usually, but placement owes no balance
	}
	t.Logf("%d Runs admitted and executed", admitted)
	l.stop(t)
}

// A task with --max-attempts 2 whose command fails the first time (a marker file) ends
// succeeded on attempt 2, after attempt 1 failed with its exit status.
func TestClosedLoopRetriesAFailedAttempt(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "flaky-failed-once")
	spec := fmt.Sprintf(`{"command":["sh","-c","if mkdir \"$1\" 2>/dev/null; then echo first >&2; exit 3; else echo second; fi","flaky","%s"],"timeout":"30s"}`, marker)
	l := startLoop(t, []string{"flaky", "--executor-spec", spec, "--max-attempts", "2", "--retry-backoff", "1s"})
	l.settle(t, 1, "flaky")
	l.audit(t)
	// The marker (mkdir: atomic, so two first Attempts started together cannot both fail) makes
	// exactly one Attempt of all fail; its Run succeeded on attempt 2. Other Runs
	// (the trigger may admit more than one before it is disabled) found the marker: one Attempt.
	if n := l.count(t, `SELECT count(*) FROM control_core.attempts WHERE attempt_no = 1 AND state = 'failed'
		AND error->>'kind' = 'exit_status'`); n != 1 {
		t.Errorf("%d failed first Attempts (exit_status); want 1", n)
	}
	if n := l.count(t, `SELECT count(*) FROM control_core.attempts a WHERE a.attempt_no = 2 AND a.state = 'succeeded'
		AND EXISTS (SELECT 1 FROM control_core.attempts f WHERE f.run_id = a.run_id AND f.attempt_no = 1 AND f.state = 'failed')`); n != 1 {
		t.Errorf("%d Runs succeeded on attempt 2 after a failed attempt 1; want 1", n)
	}
	if n := l.count(t, `SELECT count(*) FROM control_core.attempts WHERE attempt_no > 2`); n != 0 {
		t.Errorf("%d Attempts beyond --max-attempts 2", n)
	}
	// Summed over the dispatchers: one retry, and the Attempts' outcomes as the database has them.
	succeeded := l.count(t, `SELECT count(*) FROM control_core.attempts WHERE state = 'succeeded'`)
	eventually.NoError(t, 10*time.Second, "the retry and the outcomes on the dispatchers' /metrics", func() error {
		var retries, finished float64
		for _, h := range l.health {
			m := scrape(t, h+"/metrics")
			retries += m["qlsched_dispatch_retries_total"]
			finished += m["qlsched_dispatch_attempts_finished_total"]
		}
		if retries != 1 || finished != float64(succeeded+1) {
			return fmt.Errorf("%v retries, %v Attempts finished; want 1 and %d (the succeeded ones and the failed one)", retries, finished, succeeded+1)
		}
		return nil
	})
	l.stop(t)
}

// stopProcess sends SIGTERM and waits (at most a minute) for the exit.
func stopProcess(t *testing.T, p *replicaProcess) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		for range p.lines {
		}
		_ = p.cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-exited
	}
	return p.cmd.ProcessState.ExitCode()
}

// The curl walk-through of docs/dispatch.md, run as it is written (bash, curl, jq, psql) against
// a real dispatcher and an admitted Run, so the document stays true: the Run succeeds, the
// replayed report says replay:true, a wrong token gets 401 with the challenge.
func TestCurlWalkThroughOfTheDocs(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "jq", "psql"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the walk-through needs %s: %v", tool, err)
		}
	}
	doc, err := os.ReadFile("../../docs/dispatch.md")
	if err != nil {
		t.Fatal(err)
	}
	_, walk, ok := strings.Cut(string(doc), "## curl walk-through")
	_, script, ok2 := strings.Cut(walk, "```sh\n")
	script, _, ok3 := strings.Cut(script, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/dispatch.md has no ```sh block under '## curl walk-through'")
	}

	d := testpg.New(t)
	admin := []string{"--database-url", d.URL("ql_admin")}
	publish(t, admin, []string{"project", "create", "--project", "p"},
		[]string{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", `{"command":["sh","-c","echo hi"]}`},
		[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "* * * * * *"})
	sched := startProcess(t, qlsched(t), "run", "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0", "--cadence", "100ms")
	su := d.Pool(t, "")
	eventually.True(t, 60*time.Second, "a Run admitted", func() bool {
		var n int
		return su.QueryRow(context.Background(), `SELECT count(*) FROM control_core.runs`).Scan(&n) == nil && n > 0
	})
	publish(t, admin, []string{"trigger", "disable", "--project", "p", "--trigger", "t"})
	disp := startProcess(t, qlsched(t), "dispatch", "--database-url", d.URL("ql_runtime"), "--listen", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	line := disp.waitFor(t, 60*time.Second, "dispatcher running", func(l string) bool { return listenLog.MatchString(l) })

	// qlsched and psql both read the standard PG* variables: the admin role.
	u, err := url.Parse(d.URL("ql_admin"))
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "D="+listenLog.FindStringSubmatch(line)[1],
		"PATH="+filepath.Dir(qlsched(t))+string(os.PathListSeparator)+os.Getenv("PATH"),
		"PGHOST="+u.Hostname(), "PGPORT="+u.Port(), "PGUSER="+u.User.Username(), "PGPASSWORD="+pw,
		"PGDATABASE="+strings.TrimPrefix(u.Path, "/"), "PGSSLMODE=disable", "QL_DATABASE_URL=")
	r := testbin.Run(t, cmd)
	out := r.Stdout + r.Stderr
	t.Logf("the walk-through printed:\n%s", out)
	if r.Code != 0 {
		t.Fatalf("the walk-through exited %d:\n%s", r.Code, out)
	}
	for _, want := range []string{`{"lease_version":1,`, `{"run_state":"succeeded","replay":false}`, `{"run_state":"succeeded","replay":true}`,
		"HTTP/1.1 401", `Www-Authenticate: Bearer realm="qlsched"`, `{"error":{"code":"unauthorized"}}`,
		"run.dispatching", "run.running", "run.succeeded", `"echo hi"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the walk-through's output lacks %q:\n%s", want, out)
		}
	}
	for _, p := range []*replicaProcess{disp, sched} {
		if code := stopProcess(t, p); code != 0 {
			t.Errorf("exit %d after SIGTERM:\n%s", code, p.all.String())
		}
	}
}
