package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

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
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
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

// THE closed loop, with real processes only: qlmigrate up on an empty database, the admin
// commands, one `qlsched run` admitting, two `qlsched dispatch` replicas, two `qlworker`
// processes with a token from `qlsched worker token create`. Every admitted Run ends succeeded
// with exactly one succeeded Attempt; a task with --max-attempts 2 whose command fails once
// ends succeeded on attempt 2; a wrong token gets 401 and opens no session.
func TestClosedLoopWithRealProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.NewEmpty(t)
	if r := testbin.Run(t, exec.Command(buildQlmigrate(t), "up", "--database-url", d.URL(""))); r.Code != 0 {
		t.Fatalf("qlmigrate up: exit %d\n%s", r.Code, r.Stderr)
	}
	admin := []string{"--database-url", d.URL("ql_admin")}
	runtime := d.URL("ql_runtime")
	dir := t.TempDir()
	marker := filepath.Join(dir, "flaky-failed-once")
	// argv, not a shell string: the worker never runs a shell itself; the task asks for one.
	okSpec := `{"command":["sh","-c","echo hi"],"timeout":"30s"}`
	flakySpec := fmt.Sprintf(`{"command":["sh","-c","if [ -e \"$1\" ]; then echo second; else : > \"$1\"; echo first >&2; exit 3; fi","flaky","%s"],"timeout":"30s"}`, marker)
	publish(t, admin,
		[]string{"project", "create", "--project", "p"},
		[]string{"task", "publish", "--project", "p", "--task", "ok", "--executor-spec", okSpec},
		[]string{"task", "publish", "--project", "p", "--task", "flaky", "--executor-spec", flakySpec, "--max-attempts", "2", "--retry-backoff", "1s"},
		[]string{"trigger", "publish", "--project", "p", "--trigger", "every-second", "--task", "ok", "--cron", "* * * * * *"},
		[]string{"trigger", "publish", "--project", "p", "--trigger", "flaky", "--task", "flaky", "--cron", "* * * * * *"})

	tok := run(t, append([]string{"worker", "token", "create", "--name", "e2e", "--format", "json"}, admin...)...)
	var created struct {
		Token string `json:"token"`
	}
	if tok.code != 0 || json.Unmarshal([]byte(tok.stdout), &created) != nil || !strings.HasPrefix(created.Token, "qlw_") {
		t.Fatalf("worker token create: exit %d\n%s\n%s", tok.code, tok.stdout, tok.stderr)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(created.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	sched := startProcess(t, qlsched(t), "run", "--database-url", runtime, "--http-addr", "127.0.0.1:0", "--cadence", "100ms", "--owner", "e2e-run")
	sched.waitFor(t, 60*time.Second, "replica running", func(l string) bool { return strings.Contains(l, "replica running") })
	var urls []string
	var dispatchers []*replicaProcess
	for _, owner := range []string{"e2e-dispatch-a", "e2e-dispatch-b"} {
		p := startProcess(t, qlsched(t), "dispatch", "--database-url", runtime, "--owner", owner, "--listen", "127.0.0.1:0",
			"--http-addr", "127.0.0.1:0", "--lease", "6s", "--sweep-interval", "200ms", "--offer-ttl", "5s", "--poll-max-wait", "5s")
		line := p.waitFor(t, 60*time.Second, "dispatcher running", func(l string) bool { return listenLog.MatchString(l) })
		urls = append(urls, listenLog.FindStringSubmatch(line)[1])
		dispatchers = append(dispatchers, p)
	}
	qlworker := testbin.Command(t, "qlworker")
	var workers []*replicaProcess
	for _, name := range []string{"worker-a", "worker-b"} {
		workers = append(workers, startProcess(t, qlworker, "--dispatcher", strings.Join(urls, ","), "--token-file", tokenFile,
			"--name", name, "--capacity", "2"))
	}

	// A wrong token: 401 with the challenge, and no session for it.
	wrong, _ := http.NewRequest("POST", urls[0]+"/v1/sessions", strings.NewReader(`{"name":"intruder","capacity":1,"protocol":1}`))
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

	// Let both triggers admit a few Runs, then stop admitting: the set of Runs is then fixed.
	su := d.Pool(t, "")
	q := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := su.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	eventually.True(t, 60*time.Second, "5 Runs of ok and 1 of flaky admitted", func() bool {
		return q(`SELECT count(*) FROM control_core.runs WHERE task_id = 'ok'`) >= 5 && q(`SELECT count(*) FROM control_core.runs WHERE task_id = 'flaky'`) >= 1
	})
	publish(t, admin, []string{"trigger", "disable", "--project", "p", "--trigger", "every-second"},
		[]string{"trigger", "disable", "--project", "p", "--trigger", "flaky"})
	var admitted int
	eventually.NoError(t, 90*time.Second, "every admitted Run terminal", func() error {
		admitted = q(`SELECT count(*) FROM control_core.runs`)
		if live := q(`SELECT count(*) FROM control_core.runs WHERE state IN ('queued', 'dispatching', 'running')`); live > 0 {
			return fmt.Errorf("%d of %d Runs still live", live, admitted)
		}
		return nil
	})

	// Every Run succeeded, with exactly one succeeded Attempt and no live one.
	if n := q(`SELECT count(*) FROM control_core.runs WHERE state <> 'succeeded' OR finished_at_ms IS NULL`); n != 0 {
		t.Errorf("%d of %d Runs did not succeed", n, admitted)
	}
	if n := q(`SELECT count(*) FROM control_core.runs r WHERE (SELECT count(*) FROM control_core.attempts a
		WHERE a.run_id = r.run_id AND a.state = 'succeeded') <> 1`); n != 0 {
		t.Errorf("%d Runs without exactly one succeeded Attempt", n)
	}
	if n := q(`SELECT count(*) FROM control_core.attempts a JOIN control_core.runs r USING (run_id) WHERE r.task_id = 'ok' AND a.attempt_no <> 1`); n != 0 {
		t.Errorf("%d retries of task ok, which never fails", n)
	}
	// The flaky task failed exactly once overall (the marker), and that Run ended succeeded on
	// its attempt 2; its other Runs (if the trigger admitted more) found the marker and succeeded at once.
	if n := q(`SELECT count(*) FROM control_core.attempts a JOIN control_core.runs r USING (run_id)
		WHERE r.task_id = 'flaky' AND a.attempt_no = 1 AND a.state = 'failed'`); n != 1 {
		t.Errorf("%d failed first Attempts of flaky; want 1", n)
	}
	if n := q(`SELECT count(*) FROM control_core.attempts a JOIN control_core.runs r USING (run_id)
		WHERE r.task_id = 'flaky' AND a.attempt_no = 2 AND a.state = 'succeeded'
		  AND EXISTS (SELECT 1 FROM control_core.attempts f WHERE f.run_id = r.run_id AND f.attempt_no = 1 AND f.state = 'failed')`); n != 1 {
		t.Errorf("%d flaky Runs succeeded on attempt 2 after a failed attempt 1; want 1", n)
	}
	// No lease left active, at most one lease ever per Attempt, and every Run's events numbered 1…n.
	if n := q(`SELECT count(*) FROM control_core.run_leases WHERE state = 'active'`); n != 0 {
		t.Errorf("%d leases still active", n)
	}
	if n := q(`SELECT count(*) FROM (SELECT run_id FROM control_core.run_events GROUP BY run_id HAVING max(seq) <> count(*) OR min(seq) <> 1) x`); n != 0 {
		t.Errorf("%d Runs whose event sequence has a gap", n)
	}
	if n := q(`SELECT count(*) FROM control_core.worker_sessions WHERE worker_id = 'intruder'`); n != 0 {
		t.Error("the wrong token opened a session")
	}
	t.Logf("%d Runs admitted and executed", admitted)

	// SIGTERM everything: each exits 0, and no process printed the token.
	for _, p := range append(append(workers, dispatchers...), sched) {
		if code := stopProcess(t, p); code != 0 {
			t.Errorf("%s exited %d after SIGTERM:\n%s", filepath.Base(p.cmd.Path), code, p.all.String())
		}
		if strings.Contains(p.all.String(), created.Token) || strings.Contains(p.all.String(), testpg.Password) {
			t.Errorf("%s printed a secret", filepath.Base(p.cmd.Path))
		}
	}
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
