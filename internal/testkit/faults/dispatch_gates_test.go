//go:build faults

package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/loopaudit"
	"github.com/qlcontrol/controlcore/internal/testkit/testbin"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// The process gates of the closed loop (issue 32, design §6): real `qlsched run`, `qlsched
// dispatch` and `qlworker` processes, the job internal/testkit/cmd/qltestjob, one fault each.
// Every gate ends with loopaudit's SQL invariants and the execution audit of the job's log.

// gateLease is the dispatchers' lease (the minimum): a lost worker costs seconds, not minutes.
const gateLease = 5 * time.Second

var (
	jobOnce sync.Once
	jobPath string
	jobErr  error
)

// qltestjob builds internal/testkit/cmd/qltestjob once per test binary (testbin builds ./cmd/ only).
func qltestjob(t *testing.T) string {
	t.Helper()
	jobOnce.Do(func() {
		gomod, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			jobErr = fmt.Errorf("go env GOMOD: %w", err)
			return
		}
		dir, err := os.MkdirTemp("", "qltestjob-bin-")
		if err != nil {
			jobErr = err
			return
		}
		jobPath = filepath.Join(dir, "qltestjob")
		cmd := exec.Command("go", "build", "-o", jobPath, "./internal/testkit/cmd/qltestjob")
		cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
		if out, err := cmd.CombinedOutput(); err != nil {
			jobErr = fmt.Errorf("go build qltestjob: %v\n%s", err, out)
		}
	})
	if jobErr != nil {
		t.Fatal(jobErr)
	}
	return jobPath
}

// syncBuffer is a process's output, written by its pipes and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is one process of a gate, in a process group of its own (SIGSTOP reaches the group).
type proc struct {
	name   string
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
}

func (g *gate) start(name, bin string, args ...string) *proc {
	g.t.Helper()
	cmd := exec.Command(bin, args...)
	p := &proc{name: name, cmd: cmd, out: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		g.t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	g.t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
		if g.t.Failed() || os.Getenv("QL_TEST_LOG") != "" {
			g.t.Logf("%s:\n%s", name, p.out.String())
		}
	})
	return p
}

// waitFor waits until a line of the process's output matches re and returns its submatches.
func (p *proc) waitFor(t *testing.T, re *regexp.Regexp, what string) []string {
	t.Helper()
	var m []string
	var exited bool
	eventually.True(t, 60*time.Second, p.name+": "+what, func() bool {
		select {
		case <-p.exited:
			exited = true
		default:
		}
		sc := bufio.NewScanner(strings.NewReader(p.out.String()))
		for sc.Scan() {
			if m = re.FindStringSubmatch(sc.Text()); m != nil {
				return true
			}
		}
		return exited // its output is final: fail below rather than wait out the timeout
	})
	if m == nil {
		t.Fatalf("%s exited before %s", p.name, what)
	}
	return m
}

// kill sends sig to the process's group.
func (p *proc) kill(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		t.Fatalf("%s to %s: %v", sig, p.name, err)
	}
}

// gate is one closed loop on a database of its own: project p, a worker token, and the
// processes the gate starts.
type gate struct {
	t         *testing.T
	d         *testpg.DB
	su        *pgxpool.Pool
	admin     []string
	dir       string
	execLog   string
	tokens    map[string]string // token name → token file
	urls      []string
	runtime   string
	qlsched   string
	qlworker  string
	job       string
	processes []*proc
}

func newGate(t *testing.T) *gate {
	t.Helper()
	d := testpg.New(t)
	g := &gate{t: t, d: d, su: d.Pool(t, ""), admin: []string{"--database-url", d.URL("ql_admin")}, dir: t.TempDir(),
		tokens: map[string]string{}, runtime: d.URL("ql_runtime"), qlsched: testbin.Command(t, "qlsched"),
		qlworker: testbin.Command(t, "qlworker"), job: qltestjob(t)}
	g.execLog = filepath.Join(g.dir, "executions.log")
	g.cli("project", "create", "--project", "p")
	t.Cleanup(g.killOrphanJobs)
	return g
}

// cli runs qlsched as the admin and fails the gate on a nonzero exit; it returns stdout.
func (g *gate) cli(args ...string) string {
	g.t.Helper()
	r := testbin.Run(g.t, exec.Command(g.qlsched, append(args, g.admin...)...))
	if r.Code != 0 {
		g.t.Fatalf("qlsched %s: exit %d\n%s", strings.Join(args[:2], " "), r.Code, r.Stderr)
	}
	return r.Stdout
}

// token creates a worker token named name and returns the file holding it.
func (g *gate) token(name string) string {
	g.t.Helper()
	var created struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal([]byte(g.cli("worker", "token", "create", "--name", name, "--format", "json")), &created); err != nil || created.Token == "" {
		g.t.Fatalf("worker token create: %v", err)
	}
	file := filepath.Join(g.dir, "token-"+name)
	if err := os.WriteFile(file, []byte(created.Token+"\n"), 0o600); err != nil {
		g.t.Fatal(err)
	}
	g.tokens[name] = file
	return file
}

// task publishes task name running qltestjob with jobArgs, at most maxAttempts Attempts, no backoff.
func (g *gate) task(name string, maxAttempts int, jobArgs ...string) {
	g.t.Helper()
	spec, _ := json.Marshal(map[string]any{"command": append([]string{g.job, "--log", g.execLog}, jobArgs...), "timeout": "5m"})
	g.cli("task", "publish", "--project", "p", "--task", name, "--executor-spec", string(spec),
		"--max-attempts", strconv.Itoa(maxAttempts), "--retry-backoff", "0s")
}

// scheduler starts `qlsched run`.
func (g *gate) scheduler() {
	g.t.Helper()
	p := g.start("qlsched run", g.qlsched, "run", "--database-url", g.runtime, "--http-addr", "127.0.0.1:0",
		"--cadence", "100ms", "--owner", "gate-run")
	p.waitFor(g.t, regexp.MustCompile(`replica running`), "replica running")
}

var listenLine = regexp.MustCompile(`listen=(https?://\S+)`)

// dispatcher starts `qlsched dispatch` with the minimum lease and short sweeps; its worker URL
// joins g.urls.
func (g *gate) dispatcher(owner string) *proc {
	g.t.Helper()
	return g.dispatcherOn(owner, g.runtime)
}

// dispatcherOn is dispatcher with databaseURL (through a fault proxy or PgBouncer).
func (g *gate) dispatcherOn(owner, databaseURL string) *proc {
	g.t.Helper()
	p := g.start(owner, g.qlsched, "dispatch", "--database-url", databaseURL, "--owner", owner, "--listen", "127.0.0.1:0",
		"--http-addr", "127.0.0.1:0", "--lease", gateLease.String(), "--sweep-interval", "200ms", "--offer-ttl", "2s",
		"--poll-max-wait", "2s")
	g.urls = append(g.urls, p.waitFor(g.t, listenLine, "listening")[1])
	return p
}

// worker starts qlworker name with the token file and every dispatcher URL known so far.
func (g *gate) worker(name, tokenFile string, capacity int) *proc {
	g.t.Helper()
	return g.workerAt(name, tokenFile, capacity, g.urls...)
}

// workerAt is worker with the dispatcher URLs given (through a fault proxy).
func (g *gate) workerAt(name, tokenFile string, capacity int, urls ...string) *proc {
	g.t.Helper()
	return g.start(name, g.qlworker, "--dispatcher", strings.Join(urls, ","), "--token-file", tokenFile,
		"--name", name, "--capacity", strconv.Itoa(capacity), "--log-level", "debug")
}

// admit makes n Runs of task due now (n yearly triggers whose cursor is one second in the past),
// waits until the scheduler admitted them and returns their ids.
func (g *gate) admit(task string, n int) []string {
	g.t.Helper()
	for i := range n {
		trigger := fmt.Sprintf("%s-%d", task, i)
		g.cli("trigger", "publish", "--project", "p", "--trigger", trigger, "--task", task, "--cron", yearly)
		if _, err := g.su.Exec(context.Background(), `UPDATE control_core.trigger_schedules
			SET next_fire_at_ms = control_core.db_now_ms() - 1000, state_version = state_version + 1
			WHERE project_id = 'p' AND trigger_id = $1`, trigger); err != nil {
			g.t.Fatal(err)
		}
	}
	var ids []string
	eventually.NoError(g.t, 60*time.Second, fmt.Sprintf("%d Runs of %s admitted", n, task), func() error {
		rows, err := g.su.Query(context.Background(), `SELECT run_id::text FROM control_core.runs WHERE task_id = $1 ORDER BY run_id`, task)
		if err != nil {
			return err
		}
		ids, err = pgxCollectStrings(rows)
		if err != nil {
			return err
		}
		if len(ids) < n {
			return fmt.Errorf("%d admitted", len(ids))
		}
		return nil
	})
	if len(ids) != n {
		g.t.Fatalf("%d Runs of %s admitted; want %d", len(ids), task, n)
	}
	return ids
}

func (g *gate) scalar(sql string, args ...any) int64 {
	g.t.Helper()
	var n int64
	if err := g.su.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		g.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (g *gate) text(sql string, args ...any) string {
	g.t.Helper()
	var s string
	if err := g.su.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		g.t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// settled waits until no Run is queued, dispatching or running.
func (g *gate) settled(timeout time.Duration) {
	g.t.Helper()
	eventually.NoError(g.t, timeout, "every Run terminal", func() error {
		var live int64
		if err := g.su.QueryRow(context.Background(), `SELECT count(*) FROM control_core.runs
			WHERE state IN ('queued', 'dispatching', 'running')`).Scan(&live); err != nil {
			return err
		}
		if live > 0 {
			return fmt.Errorf("%d Runs live", live)
		}
		return nil
	})
}

// execution is one line of the execution log.
type execution struct {
	run, attempt string
	pid          int
	what         string // start or end
}

func (g *gate) executions() []execution {
	g.t.Helper()
	b, err := os.ReadFile(g.execLog)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		g.t.Fatal(err)
	}
	var out []execution
	// Only whole lines: a job may be writing the last one right now.
	whole := string(b[:strings.LastIndexByte(string(b), '\n')+1])
	for _, line := range strings.Split(whole, "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			g.t.Fatalf("execution log line %q", line)
		}
		pid, _ := strconv.Atoi(f[2])
		out = append(out, execution{f[0], f[1], pid, f[3]})
	}
	return out
}

// count counts the log's lines of run (attempt "" = any) with what.
func count(log []execution, run, attempt, what string) int {
	n := 0
	for _, e := range log {
		if e.run == run && (attempt == "" || e.attempt == attempt) && e.what == what {
			n++
		}
	}
	return n
}

// waitStarts waits until the execution log holds n start lines and returns the log.
func (g *gate) waitStarts(n int) []execution {
	g.t.Helper()
	var log []execution
	eventually.NoError(g.t, 60*time.Second, fmt.Sprintf("%d job starts", n), func() error {
		log = g.executions()
		if s := countAll(log, "start"); s < n {
			return fmt.Errorf("%d starts", s)
		}
		return nil
	})
	return log
}

// countAll counts the log's lines with what, over every Run.
func countAll(log []execution, what string) int {
	n := 0
	for _, e := range log {
		if e.what == what {
			n++
		}
	}
	return n
}

// killOrphanJobs kills jobs a gate left running (a killed worker's job is reparented to init).
func (g *gate) killOrphanJobs() {
	started := map[int]bool{}
	for _, e := range g.executions() {
		started[e.pid] = e.what == "start"
	}
	for pid, running := range started {
		if running {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

// audit is the end of every gate: loopaudit's invariants, every Run terminal or queued, and per
// Run at least one execution; exactlyOnce Runs exactly one.
func (g *gate) audit(runs []string, exactlyOnce bool) {
	g.t.Helper()
	loopaudit.Assert(g.t, g.su)
	if n := g.scalar(`SELECT count(*) FROM control_core.runs WHERE state NOT IN ('queued', 'succeeded', 'failed', 'cancelled')`); n != 0 {
		g.t.Errorf("%d Runs neither terminal nor queued", n)
	}
	log := g.executions()
	for _, run := range runs {
		starts := count(log, run, "", "start")
		if starts < 1 {
			g.t.Errorf("Run %s: no execution", run)
		}
		if exactlyOnce && starts != 1 {
			g.t.Errorf("Run %s: %d executions; want exactly 1", run, starts)
		}
	}
}

func pgxCollectStrings(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close()
}) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// leases lists a Run's leases as "attempt_no:state", oldest first.
func (g *gate) leases(run string) string {
	g.t.Helper()
	return g.text(`SELECT coalesce(string_agg(a.attempt_no || ':' || l.state, ' ' ORDER BY l.granted_at_ms), '')
		FROM control_core.run_leases l JOIN control_core.attempts a ON a.attempt_id = l.attempt_id WHERE l.run_id = $1`, run)
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// worker-sigkill: SIGKILL a worker mid-job; its job dies with it (the job supervisor). Its lease expires, the
// Run's attempt 2 runs on the other worker and succeeds; the log shows attempt 1's start without end.
func TestGateDispatchWorkerSigkill(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	g.task("k", 2, "--first-sleep", "10m", "--sleep", "100ms")
	tok := g.token("fleet")
	g.scheduler()
	g.dispatcher("gate-dispatch")
	a := g.worker("worker-a", tok, 1)
	run := g.admit("k", 1)[0]
	first := g.waitStarts(1)[0]
	if first.run != run || first.attempt != "1" {
		t.Fatalf("first execution %+v; want Run %s attempt 1", first, run)
	}
	a.kill(t, syscall.SIGKILL)
	<-a.exited
	// qlworker's job supervisor kills the job when qlworker dies: nothing of attempt 1 runs on.
	eventually.True(t, 10*time.Second, "attempt 1's job to die with its worker", func() bool { return !alive(first.pid) })
	killedAt := time.Now()
	g.worker("worker-b", tok, 1)
	g.settled(60 * time.Second)
	t.Logf("Run settled %s after the kill", time.Since(killedAt).Round(time.Millisecond))

	if s := g.text(`SELECT state FROM control_core.runs WHERE run_id = $1`, run); s != "succeeded" {
		t.Errorf("Run %s; want succeeded", s)
	}
	if s := g.text(`SELECT string_agg(attempt_no || ':' || state || ':' || coalesce(worker_id, '-'), ' ' ORDER BY attempt_no)
		FROM control_core.attempts WHERE run_id = $1`, run); !regexp.MustCompile(`^1:\w+:worker-a 2:succeeded:worker-b$`).MatchString(s) || strings.HasPrefix(s, "1:succeeded") {
		t.Errorf("attempts %q; want attempt 1 on worker-a not succeeded, attempt 2 succeeded on worker-b", s)
	}
	if n := g.scalar(`SELECT count(*) FROM control_core.run_leases WHERE run_id = $1 AND state = 'active'`, run); n != 0 {
		t.Errorf("%d leases still active", n)
	}
	log := g.executions()
	if count(log, run, "1", "start") != 1 || count(log, run, "1", "end") != 0 || count(log, run, "2", "start") != 1 || count(log, run, "2", "end") != 1 {
		t.Errorf("execution log %+v; want attempt 1 started and never ended, attempt 2 started and ended", log)
	}
	if s := g.leases(run); s != "1:expired 2:released" {
		t.Errorf("leases %q; want attempt 1's expired (the sweep), attempt 2's released (its report)", s)
	}
	g.audit([]string{run}, false)
}

// cancel-running: `qlsched runs cancel` while the job sleeps. The worker learns it at its next
// heartbeat and kills the job's process group; the Attempt and the Run end cancelled; no end line.
func TestGateDispatchCancelRunning(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	g.task("k", 2, "--sleep", "10m")
	tok := g.token("fleet")
	g.scheduler()
	g.dispatcher("gate-dispatch")
	g.worker("worker-a", tok, 1)
	run := g.admit("k", 1)[0]
	job := g.waitStarts(1)[0]
	eventually.True(t, 30*time.Second, "the Run running", func() bool {
		return g.text(`SELECT state FROM control_core.runs WHERE run_id = $1`, run) == "running"
	})
	g.cli("runs", "cancel", run, "--reason", "gate")
	cancelled := time.Now()
	eventually.True(t, 2*gateLease, "the job's process gone", func() bool { return !alive(job.pid) })
	t.Logf("job killed %s after the cancel", time.Since(cancelled).Round(time.Millisecond))
	eventually.NoError(t, 2*gateLease, "Run and Attempt cancelled", func() error {
		s := g.text(`SELECT r.state || ' ' || string_agg(a.attempt_no || ':' || a.state, ' ' ORDER BY a.attempt_no)
			FROM control_core.runs r JOIN control_core.attempts a USING (run_id) WHERE r.run_id = $1 GROUP BY r.state`, run)
		if s != "cancelled 1:cancelled" {
			return fmt.Errorf("run and attempts %q", s)
		}
		return nil
	})
	if n := g.scalar(`SELECT count(*) FROM control_core.run_leases WHERE run_id = $1 AND state = 'active'`, run); n != 0 {
		t.Errorf("%d leases still active", n)
	}
	log := g.executions()
	if count(log, run, "", "start") != 1 || count(log, run, "", "end") != 0 {
		t.Errorf("execution log %+v; want one start and no end", log)
	}
	g.audit([]string{run}, true)
}

// dispatcher-sigkill: two dispatchers, workers given both URLs; SIGKILL one with work in flight.
// The other carries on: every Run ends with exactly one succeeded Attempt and one execution.
func TestGateDispatchDispatcherSigkill(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	g.task("k", 1, "--sleep", "1500ms")
	tok := g.token("fleet")
	g.scheduler()
	d1 := g.dispatcher("gate-dispatch-a")
	g.dispatcher("gate-dispatch-b")
	g.worker("worker-a", tok, 2)
	g.worker("worker-b", tok, 2)
	runs := g.admit("k", 6)
	g.waitStarts(2)
	d1.kill(t, syscall.SIGKILL)
	g.settled(60 * time.Second)

	if n := g.scalar(`SELECT count(*) FROM control_core.runs r WHERE r.state <> 'succeeded'
		OR (SELECT count(*) FROM control_core.attempts a WHERE a.run_id = r.run_id AND a.state = 'succeeded') <> 1`); n != 0 {
		t.Errorf("%d Runs without exactly one succeeded Attempt: %s", n,
			g.text(`SELECT string_agg(run_id || ':' || state, ' ') FROM control_core.runs`))
	}
	g.audit(runs, true)
}

// worker-sigstop: SIGSTOP a worker's process group for longer than its lease, then SIGCONT. The
// lease expires meanwhile and attempt 2 succeeds on the other worker; the stopped worker's late
// report is refused (409 lease_lost on its complete, or lease_lost on its heartbeat first, after
// which it reports nothing). The Run executed at least once: attempt 1's job (a process group of
// its own) ran to its end while its worker was stopped, so this gate states at-least-once.
func TestGateDispatchWorkerSigstop(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	g.task("k", 2, "--first-sleep", "2s", "--sleep", "100ms")
	tok := g.token("fleet")
	g.scheduler()
	g.dispatcher("gate-dispatch")
	a := g.worker("worker-a", tok, 1)
	run := g.admit("k", 1)[0]
	first := g.waitStarts(1)[0]
	if first.run != run || first.attempt != "1" {
		t.Fatalf("first execution %+v; want Run %s attempt 1", first, run)
	}
	a.kill(t, syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGCONT)
		}
	}()
	g.worker("worker-b", tok, 1)
	g.settled(60 * time.Second)
	// attempt 1's job ended while its worker was stopped; the worker learns only now.
	if log := g.executions(); count(log, run, "1", "end") != 1 {
		t.Fatalf("attempt 1's job did not run to its end while its worker was stopped: %+v", log)
	}
	a.kill(t, syscall.SIGCONT)
	stopped = false
	refused := a.waitFor(t, regexp.MustCompile(`complete failed.*lease_lost|lease lost: stopping the job|job stopped: lease lost`), "the late report refused")
	t.Logf("the resumed worker: %s", refused[0])

	if s := g.text(`SELECT state FROM control_core.runs WHERE run_id = $1`, run); s != "succeeded" {
		t.Errorf("Run %s; want succeeded", s)
	}
	if s := g.text(`SELECT string_agg(attempt_no || ':' || state || ':' || coalesce(worker_id, '-'), ' ' ORDER BY attempt_no)
		FROM control_core.attempts WHERE run_id = $1`, run); !regexp.MustCompile(`^1:\w+:worker-a 2:succeeded:worker-b$`).MatchString(s) || strings.HasPrefix(s, "1:succeeded") {
		t.Errorf("attempts %q; want attempt 1 on worker-a not succeeded, attempt 2 succeeded on worker-b", s)
	}
	if n := count(g.executions(), run, "", "start"); n != 2 {
		t.Errorf("%d executions; want 2 (at least once: the stopped worker's job and the retry)", n)
	}
	if s := g.leases(run); s != "1:expired 2:released" {
		t.Errorf("leases %q; want attempt 1's expired (the sweep), attempt 2's released (its report)", s)
	}
	g.audit([]string{run}, false)
}

// token revoke mid-run: the running worker's token is revoked; its heartbeats get 401, its
// watchdog kills the job before the lease expires, and the retry runs on a worker holding a
// live token.
func TestGateDispatchTokenRevoke(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	g.task("k", 2, "--first-sleep", "10m", "--sleep", "100ms")
	tokA, tokB := g.token("fleet-a"), g.token("fleet-b")
	g.scheduler()
	g.dispatcher("gate-dispatch")
	a := g.worker("worker-a", tokA, 1)
	run := g.admit("k", 1)[0]
	first := g.waitStarts(1)[0]
	eventually.True(t, 30*time.Second, "the Run running", func() bool {
		return g.text(`SELECT state FROM control_core.runs WHERE run_id = $1`, run) == "running"
	})
	g.cli("worker", "token", "revoke", "--name", "fleet-a")
	// Poll the job's process and read the database clock and the lease the moment it is gone.
	var now, expires int64
	var state string
	eventually.True(t, 3*gateLease, "the job killed", func() bool {
		if alive(first.pid) {
			return false
		}
		if err := g.su.QueryRow(context.Background(), `SELECT control_core.db_now_ms(), l.expires_at_ms, l.state
			FROM control_core.attempts a JOIN control_core.run_leases l USING (run_lease_id)
			WHERE a.run_id = $1 AND a.attempt_no = 1`, run).Scan(&now, &expires, &state); err != nil {
			t.Fatal(err)
		}
		return true
	})
	t.Logf("job gone %d ms before its lease's expiry (lease %s)", expires-now, state)
	if now > expires {
		t.Errorf("the job outlived its lease: gone at %d, the lease expired at %d", now, expires)
	}
	a.waitFor(t, regexp.MustCompile(`heartbeat failed.*401 unauthorized`), "401 on a heartbeat")
	// Refused, the worker drains and exits 1 (qlworker's "the dispatcher refused the worker").
	eventually.True(t, 3*gateLease, "worker-a exited", func() bool {
		select {
		case <-a.exited:
			return true
		default:
			return false
		}
	})
	if code := a.cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("worker-a exited %d after its token was revoked; want 1", code)
	}
	g.worker("worker-b", tokB, 1)
	g.settled(60 * time.Second)

	if s := g.text(`SELECT string_agg(attempt_no || ':' || state || ':' || coalesce(worker_id, '-'), ' ' ORDER BY attempt_no)
		FROM control_core.attempts WHERE run_id = $1`, run); !regexp.MustCompile(`^1:\w+:worker-a 2:succeeded:worker-b$`).MatchString(s) || strings.HasPrefix(s, "1:succeeded") {
		t.Errorf("attempts %q; want attempt 1 on worker-a not succeeded, attempt 2 succeeded on worker-b", s)
	}
	log := g.executions()
	if count(log, run, "1", "end") != 0 || count(log, run, "2", "end") != 1 {
		t.Errorf("execution log %+v; want attempt 1 killed (no end), attempt 2 ended", log)
	}
	if s := g.leases(run); s != "1:expired 2:released" {
		t.Errorf("leases %q; want attempt 1's expired (the sweep), attempt 2's released (its report)", s)
	}
	g.audit([]string{run}, false)
}
