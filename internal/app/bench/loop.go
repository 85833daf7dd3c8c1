package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/schedule"
)

// Loop: the closed loop end to end (issue 33). Every-second triggers admitted by one `qlsched
// run` process, handed out by --dispatchers `qlsched dispatch` processes to --workers `qlworker`
// processes running a no-op command; admitted → running and completions from the database, then
// the loop's own ceiling: --ceiling-runs Runs admitted beforehand, drained by the same
// dispatchers and workers as fast as they go.
const Loop = "loop"

// Loop defaults and targets (docs/performance.md, The loop).
const (
	DefaultLoopTriggers    = 20
	DefaultLoopDispatchers = 2
	DefaultLoopWorkers     = 4
	DefaultLoopCapacity    = 4
	DefaultLoopCeilingRuns = 1000
	// LoopTargetP99Ms is admitted → running p99 below capacity; LoopTargetRatio the completions
	// per second against the loop's own ceiling.
	LoopTargetP99Ms = 50
	LoopTargetRatio = 0.8
	// loopWarmup passes between the scheduler's start and the measured window: the triggers'
	// cursors initialise, the first seconds' admissions settle.
	loopWarmup = 5 * time.Second
)

// loopCommand is the Runs' command: a no-op process, so the loop, not the job, is measured.
var loopCommand = []string{"true"}

// LoopReport is what the loop scenario measured. JSON field names are a stable interface
// (bench/river reads them for its side-by-side table).
type LoopReport struct {
	Server        string   `json:"server"`
	Triggers      int      `json:"triggers"`
	Dispatchers   int      `json:"dispatchers"`
	Workers       int      `json:"workers"`
	Capacity      int      `json:"capacity"` // per worker
	Command       []string `json:"command"`
	WindowSeconds float64  `json:"window_seconds"`
	// Runs admitted in the window, and of them the ones that did not end succeeded
	Runs         int64 `json:"runs"`
	NotSucceeded int64 `json:"not_succeeded"`
	// admitted → running: the first Attempt's started_at_ms minus the Run's queued_at_ms
	RunningP50Ms float64 `json:"running_p50_ms"`
	RunningP99Ms float64 `json:"running_p99_ms"`
	RunningMaxMs int64   `json:"running_max_ms"`
	// Runs that succeeded in the window, per second
	Completions          int64   `json:"completions"`
	CompletionsPerSecond float64 `json:"completions_per_second"`
	// the ceiling: CeilingRuns pre-admitted Runs from the first start to the last finish
	CeilingRuns         int64   `json:"ceiling_runs"`
	CeilingSeconds      float64 `json:"ceiling_seconds"`
	CeilingPerSecond    float64 `json:"ceiling_per_second"`
	CeilingNotSucceeded int64   `json:"ceiling_not_succeeded"`
	CeilingRunningP99Ms float64 `json:"ceiling_running_p99_ms"`
	Ratio               float64 `json:"ratio"` // completions_per_second ÷ ceiling_per_second
	// where the time goes, of the window's Runs and of the ceiling's: placement (admitted →
	// offered), the worker's acknowledgement (offered → running), the Attempt (running → finished)
	Phases        LoopPhases `json:"phases"`
	CeilingPhases LoopPhases `json:"ceiling_phases"`
	// the wake-up on admission over the window, per dispatcher (from its /metrics): whether the
	// Runs were placed by the pass an admission's notification started
	Wake []LoopWake `json:"wake"`
	// admitted → running of the window's Runs cut into segments at the notification's arrival,
	// the placement pass's start, the offer, the poll's answer and the ACK (segments.go)
	Segments             []LoopSegment  `json:"segments"`
	SegmentSummary       SegmentSummary `json:"segment_summary"`
	TargetP99Ms          float64        `json:"target_p99_ms"`
	TargetRatio          float64        `json:"target_ratio"`
	RunningP99WithinGoal bool           `json:"running_p99_within_target"`
	RatioWithinGoal      bool           `json:"ratio_within_target"`
}

// LoopWake is one dispatcher's wake-up on admission over the loop's window: Listening at its end,
// the notifications it received and the passes they started that delivered offers (the
// qlsched_dispatch_wake_* counters' increase).
type LoopWake struct {
	Listening       bool  `json:"listening"`
	Notifications   int64 `json:"notifications"`
	WokenPlacements int64 `json:"woken_placements"`
}

func (w LoopWake) sub(o LoopWake) LoopWake {
	return LoopWake{Listening: w.Listening, Notifications: w.Notifications - o.Notifications, WokenPlacements: w.WokenPlacements - o.WokenPlacements}
}

// scrapeWake reads a dispatcher's wake-up counters from its /metrics at addr (host:port).
func scrapeWake(addr string) (LoopWake, error) {
	if addr == "" {
		return LoopWake{}, errors.New("a dispatcher without an HTTP address: no /metrics to read")
	}
	families, err := scrapeMetrics("http://" + addr + "/metrics")
	if err != nil {
		return LoopWake{}, fmt.Errorf("dispatcher /metrics: %w", err)
	}
	value := func(name string) (float64, error) {
		f, ok := families[name]
		if !ok || len(f.Metric) == 0 {
			return 0, fmt.Errorf("dispatcher /metrics at %s: %s not exposed", addr, name)
		}
		m := f.Metric[0]
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), nil
		case m.Gauge != nil:
			return m.Gauge.GetValue(), nil
		}
		return 0, fmt.Errorf("dispatcher /metrics at %s: %s is neither counter nor gauge", addr, name)
	}
	var w LoopWake
	l, err := value("qlsched_dispatch_wake_listening")
	if err != nil {
		return w, err
	}
	n, err := value("qlsched_dispatch_wake_notifications_total")
	if err != nil {
		return w, err
	}
	p, err := value("qlsched_dispatch_woken_placements_total")
	if err != nil {
		return w, err
	}
	return LoopWake{Listening: l == 1, Notifications: int64(n), WokenPlacements: int64(p)}, nil
}

// scrapeWakes reads every dispatcher's wake-up counters.
func scrapeWakes(addrs []string) ([]LoopWake, error) {
	ws := make([]LoopWake, len(addrs))
	for i, a := range addrs {
		var err error
		if ws[i], err = scrapeWake(a); err != nil {
			return nil, err
		}
	}
	return ws, nil
}

// LoopPhases are medians and p99s of admitted → finished, split at the offer and the start.
type LoopPhases struct {
	PlacedP50Ms float64 `json:"placed_p50_ms"`
	PlacedP99Ms float64 `json:"placed_p99_ms"`
	AckedP50Ms  float64 `json:"acked_p50_ms"`
	AckedP99Ms  float64 `json:"acked_p99_ms"`
	RanP50Ms    float64 `json:"ran_p50_ms"`
	RanP99Ms    float64 `json:"ran_p99_ms"`
}

func loopPhases(ctx context.Context, q *db.Queries, project string, from, to int64) (LoopPhases, error) {
	r, err := q.BenchLoopPhases(ctx, db.BenchLoopPhasesParams{ProjectID: project, FromMs: from, ToMs: to})
	return LoopPhases(r), err
}

func (p LoopPhases) text() string {
	return fmt.Sprintf("placement p50 %.0fms p99 %.0fms · acknowledgement p50 %.0fms p99 %.0fms · attempt p50 %.0fms p99 %.0fms",
		p.PlacedP50Ms, p.PlacedP99Ms, p.AckedP50Ms, p.AckedP99Ms, p.RanP50Ms, p.RanP99Ms)
}

func (c Config) validateLoop() error {
	switch {
	case c.Triggers < 1 || c.Triggers > 100_000:
		return fmt.Errorf("--triggers %d: want 1 … 100000", c.Triggers)
	case c.Dispatchers < 1 || c.Dispatchers > 16:
		return fmt.Errorf("--dispatchers %d: want 1 … 16", c.Dispatchers)
	case c.Workers < 1 || c.Workers > 64:
		return fmt.Errorf("--workers %d: want 1 … 64", c.Workers)
	case c.Capacity < 1 || c.Capacity > 256:
		return fmt.Errorf("--capacity %d: want 1 … 256", c.Capacity)
	case c.CeilingRuns < 0 || c.CeilingRuns > 100_000:
		return fmt.Errorf("--ceiling-runs %d: want 0 … 100000", c.CeilingRuns)
	case c.Duration < 5*time.Second || c.Duration > time.Hour:
		return fmt.Errorf("--duration %s: want 5s … 1h", c.Duration)
	case c.URL != "" && c.RuntimeURL == "":
		return fmt.Errorf("--scenario loop with --database-url needs --runtime-url: the processes connect as the runtime role")
	case c.Exe == "" || c.WorkerExe == "":
		return fmt.Errorf("--scenario loop runs qlsched and qlworker: give --qlsched and --qlworker")
	}
	return nil
}

// runLoop runs the loop phase, then the ceiling phase, on su (a superuser pool).
func runLoop(ctx context.Context, cfg Config, conn *dbconn.Config, su *dbconn.DB, rep *LoopReport, say func(string, ...any)) error {
	rep.Triggers, rep.Dispatchers, rep.Workers, rep.Capacity, rep.Command = cfg.Triggers, cfg.Dispatchers, cfg.Workers, cfg.Capacity, loopCommand
	rep.TargetP99Ms, rep.TargetRatio = LoopTargetP99Ms, LoopTargetRatio
	q := db.New(su.Pool())
	pub := admin.NewPublisher(su)
	stamp := fmt.Sprintf("%x", time.Now().UnixMilli())
	loopProject, ceilProject := "loop-"+stamp, "ceil-"+stamp
	say("publishing %d every-second triggers in project %s, task command %q", cfg.Triggers, loopProject, loopCommand)
	if err := publishLoop(ctx, pub, loopProject, cfg.Triggers, "* * * * * *", schedule.MisfireSkip); err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "qlbench-loop-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tok, err := pub.CreateWorkerToken(ctx, "bench-"+stamp)
	if err != nil {
		return err
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(tok.Token+"\n"), 0o600); err != nil {
		return err
	}
	env := append(os.Environ(), "QL_DATABASE_URL="+cfg.RuntimeURL)

	var children []*loopChild
	defer func() { // on an error path: never leave a loopChild behind
		for _, c := range children {
			c.kill()
		}
	}()
	say("starting %d `qlsched dispatch` processes", cfg.Dispatchers)
	var urls, healths []string
	// Debug: each notification's arrival and each delivery (segments.go), a few lines per second
	trace := newSegTrace(cfg.Dispatchers)
	for i := range cfg.Dispatchers {
		c, err := startLoopChildWith(fmt.Sprintf("dispatch-%d", i), cfg.Exe, env, trace.collect(i), "dispatch", "--owner", fmt.Sprintf("bench-dispatch-%d", i),
			"--listen", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug")
		if err != nil {
			return err
		}
		children = append(children, c)
	}
	for _, c := range children {
		l, err := c.waitFor(ctx, time.Minute, func(l map[string]any) bool { return l["msg"] == "dispatcher running" })
		if err != nil {
			return err
		}
		u, _ := l["listen"].(string)
		h, _ := l["http_addr"].(string)
		urls, healths = append(urls, u), append(healths, h)
	}
	startWorkers := func() ([]*loopChild, error) {
		var ws []*loopChild
		for i := range cfg.Workers {
			c, err := startLoopChild(fmt.Sprintf("qlworker-%d", i), cfg.WorkerExe, os.Environ(), "--dispatcher", strings.Join(urls, ","),
				"--token-file", tokenFile, "--name", fmt.Sprintf("bench-%d", i), "--capacity", fmt.Sprint(cfg.Capacity),
				"--drain-grace", "5s", "--log-format", "json", "--log-level", "warn")
			if err != nil {
				return ws, err
			}
			ws = append(ws, c)
		}
		return ws, nil
	}
	say("starting %d `qlworker` processes, capacity %d each", cfg.Workers, cfg.Capacity)
	workers, err := startWorkers()
	children = append(children, workers...)
	if err != nil {
		return err
	}
	if err := waitUntil(ctx, time.Minute, "every worker's session active", func() (bool, error) {
		n, err := q.BenchLoopSessions(ctx)
		return n >= int64(cfg.Workers), err
	}); err != nil {
		return err
	}
	say("starting one `qlsched run` process; warm-up %s, then a %s window", loopWarmup, cfg.Duration)
	// Debug: each Run's "admitted" line with its admit's commit (segments.go)
	sched, err := startLoopChildWith("run", cfg.Exe, env, trace.collectAdmits, "run", "--owner", "bench-loop-run", "--http-addr", "127.0.0.1:0", "--budget", "256", "--cadence", "100ms", "--admit-batch", "128",
		"--log-format", "json", "--log-level", "debug")
	if err != nil {
		return err
	}
	children = append(children, sched)
	if _, err := sched.waitFor(ctx, time.Minute, func(l map[string]any) bool { return l["msg"] == "replica running" }); err != nil {
		return err
	}
	if err := sleep(ctx, loopWarmup); err != nil {
		return err
	}
	wakeFrom, err := scrapeWakes(healths)
	if err != nil {
		return err
	}
	from := dbNow(ctx, su)
	if err := sleep(ctx, cfg.Duration); err != nil {
		return err
	}
	to := dbNow(ctx, su)
	wakeTo, err := scrapeWakes(healths)
	if err != nil {
		return err
	}
	for i := range wakeTo {
		rep.Wake = append(rep.Wake, wakeTo[i].sub(wakeFrom[i]))
	}
	if err := sched.stop(30 * time.Second); err != nil {
		return err
	}
	say("scheduler stopped; waiting for the Runs in flight to finish")
	if err := waitUntil(ctx, time.Minute, "every Run of the loop terminal", func() (bool, error) {
		n, err := q.BenchLoopLive(ctx, loopProject)
		return n == 0, err
	}); err != nil {
		return err
	}
	rep.WindowSeconds = float64(to-from) / 1000
	lat, err := q.BenchLoopLatency(ctx, db.BenchLoopLatencyParams{ProjectID: loopProject, FromMs: from, ToMs: to})
	if err != nil {
		return err
	}
	rep.Runs, rep.NotSucceeded = lat.Runs, lat.NotSucceeded
	rep.RunningP50Ms, rep.RunningP99Ms, rep.RunningMaxMs = lat.P50Ms, lat.P99Ms, lat.MaxMs
	if rep.Completions, err = q.BenchLoopCompletions(ctx, db.BenchLoopCompletionsParams{ProjectID: loopProject, FromMs: from, ToMs: to}); err != nil {
		return err
	}
	rep.CompletionsPerSecond = float64(rep.Completions) / rep.WindowSeconds
	if rep.Phases, err = loopPhases(ctx, q, loopProject, from, to); err != nil {
		return err
	}
	times, err := q.BenchLoopRunTimes(ctx, db.BenchLoopRunTimesParams{ProjectID: loopProject, FromMs: from, ToMs: to})
	if err != nil {
		return err
	}
	var runs io.Writer // nil unless --segments-file (a nil *bytes.Buffer in it would not be nil)
	var file bytes.Buffer
	if cfg.SegmentsFile != "" {
		file.WriteString(segRunsHeader)
		runs = &file
	}
	rep.Segments, rep.SegmentSummary = trace.segments(times, runs)
	if runs != nil {
		if err := os.WriteFile(cfg.SegmentsFile, file.Bytes(), 0o644); err != nil {
			return fmt.Errorf("--segments-file: %w", err)
		}
	}
	say("loop: %d Runs admitted in %.1fs, admitted → running p50 %.0fms p99 %.0fms max %dms, %.1f completions/s",
		rep.Runs, rep.WindowSeconds, rep.RunningP50Ms, rep.RunningP99Ms, rep.RunningMaxMs, rep.CompletionsPerSecond)

	if cfg.CeilingRuns > 0 {
		if err := loopCeiling(ctx, cfg, conn, su, pub, ceilProject, startWorkers, &workers, &children, rep, say); err != nil {
			return err
		}
	}
	rep.RunningP99WithinGoal = rep.RunningP99Ms <= rep.TargetP99Ms
	rep.RatioWithinGoal = rep.Ratio >= rep.TargetRatio

	var firstErr error
	for _, c := range append(workers, children[:cfg.Dispatchers]...) {
		if err := c.stop(30 * time.Second); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// loopCeiling stops the workers, admits cfg.CeilingRuns Runs in project (in-process replicas,
// batch admission), starts as many workers again and measures the drain: Runs over the time from
// the first Attempt's start to the last Run's finish, database time.
func loopCeiling(ctx context.Context, cfg Config, conn *dbconn.Config, su *dbconn.DB, pub *admin.Publisher, project string,
	startWorkers func() ([]*loopChild, error), workers *[]*loopChild, children *[]*loopChild, rep *LoopReport, say func(string, ...any)) error {
	say("ceiling: stopping the workers; admitting %d Runs in project %s", cfg.CeilingRuns, project)
	for _, w := range *workers {
		if err := w.stop(30 * time.Second); err != nil {
			return err
		}
	}
	*workers = nil
	// fire_once: setDue puts every row at the current minute's start, which skip would count as
	// missed once the misfire grace has passed since it
	if err := publishLoop(ctx, pub, project, cfg.CeilingRuns, "* * * * *", schedule.MisfireFireOnce); err != nil {
		return err
	}
	if err := setDue(ctx, su, project, time.Minute, say); err != nil {
		return err
	}
	pc := conn.For(conn.Pool.ConnConfig.Database, "")
	pc.Pool.MaxConns = 4
	pool, err := pc.Open(ctx)
	if err != nil {
		return err
	}
	admitCfg := cfg
	admitCfg.Budget, admitCfg.Cadence, admitCfg.Batch, admitCfg.Duration = 256, 10*time.Millisecond, 128, 2*time.Minute
	admitCfg.Log = slog.New(slog.DiscardHandler) // saturated by design: the backlog is the point
	q := db.New(su.Pool())
	var queued int64
	var polled time.Time
	_, err = runReplicas(ctx, []*dbconn.DB{pool}, admitCfg, func(s coordinator.Snapshot) bool {
		// the database is asked once the admits could be complete, and at most every 50 ms
		if s.Admits < int64(cfg.CeilingRuns) || time.Since(polled) < 50*time.Millisecond {
			return false
		}
		polled = time.Now()
		n, err := q.BenchLoopLive(ctx, project) // no worker runs: every Run is queued
		queued = n
		return err == nil && n >= int64(cfg.CeilingRuns)
	})
	pool.Close()
	if err != nil {
		return err
	}
	if queued < int64(cfg.CeilingRuns) {
		return fmt.Errorf("ceiling: %d of %d Runs admitted within 2 minutes", queued, cfg.CeilingRuns)
	}
	if err := settle(ctx, su); err != nil {
		say("the ceiling starts unsettled: %v", err)
	}
	say("ceiling: %d Runs queued; starting %d workers, draining", queued, cfg.Workers)
	ws, err := startWorkers()
	*workers = ws
	*children = append(*children, ws...)
	if err != nil {
		return err
	}
	if err := waitUntil(ctx, 10*time.Minute, "every ceiling Run terminal", func() (bool, error) {
		n, err := q.BenchLoopLive(ctx, project)
		return n == 0, err
	}); err != nil {
		return err
	}
	lat, err := q.BenchLoopLatency(ctx, db.BenchLoopLatencyParams{ProjectID: project, FromMs: 0, ToMs: 1 << 62})
	if err != nil {
		return err
	}
	rep.CeilingRuns, rep.CeilingNotSucceeded, rep.CeilingRunningP99Ms = lat.Runs, lat.NotSucceeded, lat.P99Ms
	if rep.CeilingPhases, err = loopPhases(ctx, q, project, 0, 1<<62); err != nil {
		return err
	}
	if span := lat.LastFinishMs - lat.FirstStartMs; span > 0 {
		rep.CeilingSeconds = float64(span) / 1000
		rep.CeilingPerSecond = float64(lat.Runs-lat.NotSucceeded) / rep.CeilingSeconds
	}
	if rep.CeilingPerSecond > 0 {
		rep.Ratio = rep.CompletionsPerSecond / rep.CeilingPerSecond
	}
	say("ceiling: %d Runs drained in %.1fs = %.0f/s", rep.CeilingRuns, rep.CeilingSeconds, rep.CeilingPerSecond)
	return nil
}

// publishLoop creates project with a task running loopCommand and n enabled triggers of spec.
func publishLoop(ctx context.Context, pub *admin.Publisher, project string, n int, spec string, misfire schedule.MisfirePolicy) error {
	if _, err := pub.CreateProject(ctx, project); err != nil {
		return err
	}
	exec, _ := json.Marshal(map[string]any{"command": loopCommand, "timeout": "30s"})
	if _, err := pub.PublishTask(ctx, admin.TaskSpec{Project: project, Task: "noop", ExecutorSpec: exec}); err != nil {
		return err
	}
	const chunk = 1000
	for from := 0; from < n; from += chunk {
		var specs []admin.TriggerSpec
		for i := from; i < min(from+chunk, n); i++ {
			specs = append(specs, admin.TriggerSpec{Project: project, Trigger: fmt.Sprintf("t%07d", i), Task: "noop",
				Cron: spec, TimeZone: "UTC", Misfire: misfire, Enabled: true})
		}
		if _, err := pub.PublishTriggers(ctx, specs); err != nil {
			return err
		}
	}
	return nil
}

// Text renders the loop report for a terminal.
func (r *LoopReport) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "scenario loop, PostgreSQL %s: %d every-second triggers, 1 qlsched run, %d qlsched dispatch, %d qlworker × capacity %d, command %q, %.1fs window\n",
		r.Server, r.Triggers, r.Dispatchers, r.Workers, r.Capacity, r.Command, r.WindowSeconds)
	fmt.Fprintf(&b, "  runs                 %d admitted in the window, %d not succeeded\n", r.Runs, r.NotSucceeded)
	fmt.Fprintf(&b, "  admitted → running   p50 %.0fms  p99 %.0fms  max %dms  (target p99 ≤ %.0fms: %s)\n",
		r.RunningP50Ms, r.RunningP99Ms, r.RunningMaxMs, r.TargetP99Ms, pass(r.RunningP99WithinGoal))
	fmt.Fprintf(&b, "  phases               %s\n", r.Phases.text())
	if len(r.Segments) > 0 {
		fmt.Fprintf(&b, "  segments\n%s", segmentsText(r.Segments, r.SegmentSummary))
	}
	fmt.Fprintf(&b, "  completions          %d  (%.1f/s)\n", r.Completions, r.CompletionsPerSecond)
	for i, w := range r.Wake {
		fmt.Fprintf(&b, "  wake-up, dispatch-%d  listening %t, %d notifications, %d woken passes delivered offers\n",
			i, w.Listening, w.Notifications, w.WokenPlacements)
	}
	if r.CeilingRuns > 0 {
		fmt.Fprintf(&b, "  ceiling              %.1f/s  (%d pre-admitted Runs drained in %.1fs by the same dispatchers and workers; %d not succeeded)\n",
			r.CeilingPerSecond, r.CeilingRuns, r.CeilingSeconds, r.CeilingNotSucceeded)
		fmt.Fprintf(&b, "  ceiling phases       %s\n", r.CeilingPhases.text())
		fmt.Fprintf(&b, "  ratio                %.2f  (target ≥ %.2f: %s; at %d every-second triggers the demand is %d/s)\n",
			r.Ratio, r.TargetRatio, pass(r.RatioWithinGoal), r.Triggers, r.Triggers)
	}
	return b.String()
}

func pass(ok bool) string {
	if ok {
		return "pass"
	}
	return "FAIL"
}

// loopChild is one process the loop bench started: qlsched dispatch, qlsched run or qlworker. Its
// JSON log lines go to lines (dropped when nobody reads them), the last few to tail.
type loopChild struct {
	name    string
	cmd     *exec.Cmd
	lines   chan map[string]any
	exited  chan error
	done    bool
	tail    []string
	tailMu  chan struct{}
	collect func(map[string]any)
}

func startLoopChild(name, exe string, env []string, args ...string) (*loopChild, error) {
	return startLoopChildWith(name, exe, env, nil, args...)
}

// startLoopChildWith starts a loopChild whose every JSON log line is also given to collect (nil:
// none), in the order logged, before lines may drop it.
func startLoopChildWith(name, exe string, env []string, collect func(map[string]any), args ...string) (*loopChild, error) {
	c := &loopChild{name: name, cmd: exec.Command(exe, args...), lines: make(chan map[string]any, 256),
		exited: make(chan error, 1), tailMu: make(chan struct{}, 1), collect: collect}
	c.cmd.Env = env
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // the bench dies, its children too
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go c.read(stderr)
	return c, nil
}

func (c *loopChild) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		c.tailMu <- struct{}{}
		c.tail = append(c.tail, line)
		if len(c.tail) > 5 {
			c.tail = c.tail[1:]
		}
		<-c.tailMu
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil {
			if c.collect != nil {
				c.collect(l)
			}
			select {
			case c.lines <- l:
			default:
			}
		}
	}
	c.exited <- c.cmd.Wait()
}

func (c *loopChild) lastLines() string {
	c.tailMu <- struct{}{}
	defer func() { <-c.tailMu }()
	return strings.Join(c.tail, "\n")
}

// waitFor returns the first log line match accepts.
func (c *loopChild) waitFor(ctx context.Context, timeout time.Duration, match func(map[string]any) bool) (map[string]any, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case l := <-c.lines:
			if match(l) {
				return l, nil
			}
		case err := <-c.exited:
			c.done = true
			return nil, fmt.Errorf("%s exited before it ran (%v): %s", c.name, err, c.lastLines())
		case <-t.C:
			return nil, fmt.Errorf("%s did not start within %s: %s", c.name, timeout, c.lastLines())
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// stop sends SIGTERM and waits for the exit, which must be 0; SIGKILL after timeout.
func (c *loopChild) stop(timeout time.Duration) error {
	if c.done {
		return nil
	}
	c.done = true
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.exited:
		if err != nil {
			return fmt.Errorf("%s: %v: %s", c.name, err, c.lastLines())
		}
		return nil
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.exited
		return fmt.Errorf("%s did not stop within %s after SIGTERM", c.name, timeout)
	}
}

func (c *loopChild) kill() {
	if c.done {
		return
	}
	c.done = true
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// waitUntil polls cond every 100 ms until it holds, fails, or timeout passes.
func waitUntil(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New(what + ": not within " + timeout.String())
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// sleep waits d or until ctx ends. A bench's measured window is wall time by design.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
