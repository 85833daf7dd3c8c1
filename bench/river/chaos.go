package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/app/pgcluster"
	"github.com/qlcontrol/controlcore/internal/testkit/chaos"
	"github.com/qlcontrol/controlcore/schedule"
)

type chaosConfig struct {
	jobs, replicas   int
	duration, warmup time.Duration
	faultEvery       time.Duration
	maxStop          time.Duration
	seed             uint64
	qlsched          string
	systems          []string
	settle           time.Duration
	// the whole loop (river-exec, qlsched-loop)
	qlworker             string
	dispatchers, workers int
	capacity             int
	late                 time.Duration
}

func (c chaosConfig) validate() error {
	switch {
	case c.jobs < 1 || c.jobs > 5000:
		return fmt.Errorf("--jobs %d: want 1 … 5000", c.jobs)
	case c.replicas < 3 || c.replicas > 8:
		return fmt.Errorf("--replicas %d: want 3 … 8", c.replicas)
	case c.duration%time.Second != 0:
		return fmt.Errorf("--duration %s: want whole seconds", c.duration)
	case c.warmup < 0 || c.settle < 10*time.Second:
		return fmt.Errorf("--warmup ≥ 0, --settle ≥ 10s")
	}
	for _, s := range c.systems {
		switch s {
		case "river", "river-plain", "river-exec":
		case "qlsched", "qlsched-grace", "qlsched-default":
			if c.qlsched == "" {
				return errors.New("--qlsched: the qlsched binary is required for system qlsched")
			}
		case "qlsched-loop":
			if c.qlsched == "" || c.qlworker == "" {
				return errors.New("--qlsched, --qlworker: both binaries are required for system qlsched-loop")
			}
			if c.dispatchers < 1 || c.dispatchers > 8 || c.workers < 1 || c.workers > 8 {
				return fmt.Errorf("--dispatchers %d, --workers %d: want 1 … 8 each", c.dispatchers, c.workers)
			}
		default:
			return fmt.Errorf("--systems %q: want river, river-plain, river-exec, qlsched, qlsched-grace, qlsched-default and/or qlsched-loop", s)
		}
	}
	if c.capacity < 1 || c.capacity > 256 || c.late < time.Second {
		return fmt.Errorf("--capacity %d: want 1 … 256; --late %s: want ≥ 1s", c.capacity, c.late)
	}
	p := chaos.DefaultPlanConfig(c.seed, c.duration)
	p.FaultEvery, p.MaxStop = c.faultEvery, c.maxStop
	return p.Validate()
}

// subject is one system under the soak, as the driver sees it.
type subject struct {
	name     string
	prefix   string
	process  chaos.Process
	keys     []string
	leader   func(ctx context.Context) string
	settled  func(ctx context.Context, fromMs int64) (bool, error) // every key admitted for a second ≥ fromMs
	admitted func(ctx context.Context) ([]chaos.Admission, error)
	sample   func(ctx context.Context, sup *chaos.Supervisor) // while faults run; nil for none
	notes    func() []string
	// the whole loop: more groups of processes under the same plan (qlsched's dispatchers and
	// workers) and the executions the job logged; nil for admission only
	groups     []group
	executions func(ctx context.Context) ([]chaos.Execution, error)
	procs      string // the processes, for the table
	// tieLease, if set, ties each miss to the fault that stranded its claim (chaos.Tie; the
	// process's Holding records the claims at each fault); 0 for a system without claims.
	tieLease time.Duration
	// refused counts the duplicate attempts the system refused over the whole soak, by its fence
	// and by its unique key (-1: none, or not counted); nil for neither. adm are its admissions.
	refused func(ctx context.Context, adm []chaos.Admission) (fence, unique int64, err error)
}

// group is one more tier of processes of a subject, with its own supervisor.
type group struct {
	prefix  string
	slots   int
	process chaos.Process
	holder  func(ctx context.Context) string // the process holding work now, "" if none
}

// peerChaos is `river chaos`: the same seeded fault plan applied to R River clients and to R
// `qlsched run` processes, one after the other on one throwaway server, and one audit.
func peerChaos(args []string) error {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	var cfg chaosConfig
	var systems string
	fs.IntVar(&cfg.jobs, "jobs", 50, "N: periodic jobs (River) and triggers (qlsched), each every second (1 … 5000)")
	fs.IntVar(&cfg.replicas, "replicas", 3, "R: processes of each system (3 … 8)")
	fs.DurationVar(&cfg.duration, "duration", 45*time.Second, "D: the fault phase and the audited window, whole seconds (5s … 1h)")
	fs.DurationVar(&cfg.warmup, "warmup", 5*time.Second, "time after every process is live and every key admitted, before the faults")
	fs.DurationVar(&cfg.faultEvery, "fault-every", 2*time.Second, "mean time between faults")
	fs.DurationVar(&cfg.maxStop, "max-stop", 6*time.Second, "longest SIGSTOP of one process (River's leader TTL is 15 s)")
	fs.DurationVar(&cfg.settle, "settle", 60*time.Second, "after the faults, how long every key may take to be admitted again")
	seed := fs.Uint64("seed", 0, "the fault plan's seed (0: from the clock, printed)")
	fs.StringVar(&cfg.qlsched, "qlsched", "", "the qlsched binary (go build -o bin/ ./cmd/qlsched)")
	fs.StringVar(&systems, "systems", "river,qlsched", "which systems, in order: river (unique jobs by period + RunOnStart), river-plain (River's defaults), "+
		"qlsched (tuned: lease 3s, cadence 500ms, misfire grace 1s), qlsched-grace (the same at the default grace, 60s), "+
		"qlsched-default (default lease 30s, cadence 1s and grace 60s; budget sized for the load: 2 × ⌈N ÷ (R − 1)⌉, at most 256); "+
		"the whole loop, audited by execution: river-exec (river, its clients working the jobs), qlsched-loop (qlsched run + dispatch + qlworker)")
	fs.StringVar(&cfg.qlworker, "qlworker", "", "the qlworker binary (qlsched-loop)")
	fs.IntVar(&cfg.dispatchers, "dispatchers", 2, "qlsched-loop: `qlsched dispatch` processes")
	fs.IntVar(&cfg.workers, "workers", 3, "qlsched-loop: qlworker processes")
	fs.IntVar(&cfg.capacity, "capacity", 16, "whole loop: jobs each qlworker (--capacity) or River client (MaxWorkers) runs at once")
	fs.DurationVar(&cfg.late, "late", 6*time.Second, "whole loop: an occurrence first executed more than this after its scheduled second is late")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.seed = *seed
	if cfg.seed == 0 {
		cfg.seed = uint64(time.Now().UnixNano()) % 1_000_000
	}
	cfg.systems = strings.Split(systems, ",")
	if err := cfg.validate(); err != nil {
		return err
	}
	planCfg := chaos.DefaultPlanConfig(cfg.seed, cfg.duration)
	planCfg.FaultEvery, planCfg.MaxStop = cfg.faultEvery, cfg.maxStop
	plan := chaos.NewPlan(planCfg)
	kinds := map[chaos.Kind]int{}
	for _, f := range plan {
		kinds[f.Kind]++
	}
	say("seed %d: %d faults planned over %s (kill %d, stop %d, restart %d, stop-all %d); N = %d, R = %d",
		cfg.seed, len(plan), cfg.duration, kinds[chaos.Kill], kinds[chaos.Stop], kinds[chaos.Restart], kinds[chaos.StopAll], cfg.jobs, cfg.replicas)

	// Ctrl-C ends the faults early and still stops every process and the server.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	say("starting a throwaway PostgreSQL (fsync on)")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Durable: true, Settings: map[string]string{"max_connections": "200"}})
	if err != nil {
		return err
	}
	defer cluster.Stop() //nolint:errcheck // best effort on the way out
	logDir, err := os.MkdirTemp("", "peer-chaos-")
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var rows []chaos.Row
	var execRows []chaos.ExecRow
	var notes []string
	failed := false
	for _, name := range cfg.systems {
		var s *subject
		var closeFn func()
		switch name {
		case "river", "river-plain":
			s, closeFn, err = riverSubject(ctx, cluster, self, cfg.jobs, name == "river-plain", "", 0)
		case "river-exec":
			s, closeFn, err = riverSubject(ctx, cluster, self, cfg.jobs, false, logDir, cfg.capacity)
		case "qlsched", "qlsched-grace", "qlsched-default":
			s, closeFn, err = qlschedSubject(ctx, cluster, cfg.qlsched, name, cfg.jobs, cfg.replicas)
		case "qlsched-loop":
			s, closeFn, err = qlschedLoopSubject(ctx, cluster, cfg, self, logDir)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		row, execRow, more, err := soak(ctx, s, cfg, plan, logDir)
		if execRow != nil {
			execRows = append(execRows, *execRow)
		}
		closeFn()
		if err != nil {
			failed = true
			notes = append(notes, fmt.Sprintf("%s: %v", name, err))
		}
		if strings.HasPrefix(name, "qlsched") && row.Result.Duplicated > 0 {
			failed = true
			notes = append(notes, fmt.Sprintf("qlsched: %d duplicated admissions; want 0 (the ADR's exactly-once)", row.Result.Duplicated))
		}
		rows = append(rows, row)
		notes = append(notes, more...)
	}
	fmt.Println()
	fmt.Printf("peer chaos, seed %d, N = %d, R = %d, D = %s, a fault every ~%s, stops up to %s, %s, River %s\n\n", cfg.seed, cfg.jobs, cfg.replicas,
		cfg.duration, cfg.faultEvery, cfg.maxStop, serverVersion(ctx, cluster), riverVersion())
	fmt.Print(chaos.Table(rows))
	fmt.Println()
	if len(execRows) > 0 {
		fmt.Printf("the whole loop, by execution (late: first executed more than %s after the scheduled second; missed: not executed by the end of the settle wait)\n\n", cfg.late)
		fmt.Print(chaos.ExecTable(execRows))
		fmt.Println()
	}
	for _, n := range notes {
		fmt.Println("- " + n)
	}
	if failed {
		return fmt.Errorf("a soak failed; logs kept in %s", logDir)
	}
	return os.RemoveAll(logDir)
}

func say(format string, args ...any) { fmt.Fprintf(os.Stderr, "peer-chaos: "+format+"\n", args...) }

func serverVersion(ctx context.Context, c *pgcluster.Cluster) string {
	conn, err := pgx.Connect(ctx, c.URL("postgres", "postgres"))
	if err != nil {
		return "PostgreSQL (version unknown)"
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "PostgreSQL (version unknown)"
	}
	return "PostgreSQL " + v
}

// soak runs one system through the plan: start R processes, wait until each is live and every
// key admitted, warm up, apply the plan from a whole second T0, bring every process back, wait
// until every key is admitted again after T0 + D, stop them, and audit [T0, T0 + D).
//
// A whole-loop subject has more groups of processes (qlsched's dispatchers and workers): the
// plan's faults take turns among the groups (fault i hits group i mod groups), a stop-all stops
// every process of every group, and the soak also waits until every key was executed after
// T0 + D and audits the executions (the ExecRow, nil otherwise).
func soak(ctx context.Context, s *subject, cfg chaosConfig, plan []chaos.Fault, logDir string) (chaos.Row, *chaos.ExecRow, []string, error) {
	row := chaos.Row{System: s.name, Jobs: cfg.jobs, Procs: cfg.replicas}
	groups := append([]group{{prefix: s.prefix, slots: cfg.replicas, process: s.process, holder: s.leader}}, s.groups...)
	sups := make([]*chaos.Supervisor, len(groups))
	for i, g := range groups {
		sups[i] = &chaos.Supervisor{Process: g.process, Slots: g.slots, Prefix: g.prefix, LogDir: logDir}
		defer sups[i].KillAll()
	}
	sup := sups[0]
	say("%s: starting %d processes", s.name, cfg.replicas)
	for i, sp := range sups {
		sp.StartAll()
		if err := sp.WaitLive(ctx, 2*time.Minute); err != nil {
			return row, nil, nil, fmt.Errorf("%s processes: %w", groups[i].prefix, err)
		}
	}
	if err := waitSettled(ctx, s, time.Now().UnixMilli(), time.Minute); err != nil {
		return row, nil, nil, fmt.Errorf("before the faults: %w", err)
	}
	if s.executions != nil {
		if err := waitExecuted(ctx, s, time.Now().UnixMilli(), time.Minute); err != nil {
			return row, nil, nil, fmt.Errorf("before the faults: %w", err)
		}
	}
	// A sleep on purpose: the soak measures a span of wall-clock time, and the first seconds are
	// left out of the audited window.
	time.Sleep(cfg.warmup)
	t0 := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(t0))
	w := chaos.Window{FromMs: t0.UnixMilli(), ToMs: t0.Add(cfg.duration).UnixMilli()}
	say("%s: faults from %s for %s", s.name, t0.UTC().Format("15:04:05"), cfg.duration)
	sampleCtx, stopSample := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if s.sample != nil {
		wg.Go(func() { s.sample(sampleCtx, sup) })
	}
	plans := make([][]chaos.Fault, len(groups))
	for i, f := range plan {
		for g := range groups {
			if f.Kind == chaos.StopAll || i%len(groups) == g {
				plans[g] = append(plans[g], f)
			}
		}
	}
	var runs sync.WaitGroup
	for i, sp := range sups {
		runs.Go(func() { sp.Run(ctx, t0, plans[i], func() string { return groups[i].holder(ctx) }) })
	}
	runs.Wait()
	stopSample()
	wg.Wait()
	var errs []error
	var notes []string
	for _, sp := range sups {
		if err := sp.WaitLive(ctx, 2*time.Minute); err != nil {
			errs = append(errs, err)
		}
	}
	settleFrom := max(w.ToMs, time.Now().UnixMilli()) + 1000
	if err := waitSettled(ctx, s, settleFrom, cfg.settle); err != nil {
		errs = append(errs, fmt.Errorf("after the faults: %w", err))
	}
	if s.executions != nil {
		if err := waitExecuted(ctx, s, settleFrom, cfg.settle); err != nil {
			errs = append(errs, fmt.Errorf("after the faults: %w", err))
		}
	}
	for i := len(sups) - 1; i >= 0; i-- { // workers first, the admission last
		sups[i].StopAll(30 * time.Second)
	}
	adm, err := s.admitted(ctx)
	if err != nil {
		return row, nil, nil, err
	}
	row.Window, row.Result = w, chaos.Audit(s.keys, w, adm)
	if s.tieLease > 0 {
		ties := chaos.Tie(chaos.Gaps(s.keys, w, adm), sup.Applied(), s.tieLease)
		row.Ties = &ties
		if len(ties.Unknown) > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d missed occurrences tied to no fault, in gaps %v", s.name, ties.Untied, ties.Unknown))
		}
	}
	row.RefusedFence, row.RefusedUnique = -1, -1
	if s.refused != nil {
		f, u, err := s.refused(ctx, adm)
		if err != nil {
			errs = append(errs, err)
		}
		row.RefusedFence, row.RefusedUnique = f, u
	}
	row.Injected, row.Aimed, row.Started = map[chaos.Kind]int{}, 0, 0
	skipped := 0
	for i, sp := range sups {
		for k, n := range sp.Injected {
			if k != chaos.StopAll || i == 0 { // a stop-all is one fault, whatever the groups
				row.Injected[k] += n
			}
		}
		row.Aimed += sp.Aimed
		row.Started += sp.Started()
		skipped += sp.Skipped
	}
	notes = append(notes, fmt.Sprintf("%s: %d processes started (restarts included); %d planned faults skipped because a process was already down",
		s.name, row.Started, skipped))
	if row.Result.Gaps > 0 {
		notes = append(notes, fmt.Sprintf("%s: %d gaps, %d of them followed by an admission of the same key", s.name, row.Result.Gaps, row.Result.GapsResumed))
	}
	var execRow *chaos.ExecRow
	if s.executions != nil {
		execs, err := s.executions(ctx)
		if err != nil {
			errs = append(errs, err)
		} else {
			execRow = &chaos.ExecRow{System: s.name, Jobs: cfg.jobs, Procs: s.procs, Window: w, Late: cfg.late,
				Result: chaos.AuditExec(s.keys, w, adm, execs, cfg.late), Injected: row.Injected, Aimed: row.Aimed}
			if len(groups) > 1 {
				per := make([]string, len(sups))
				for i, sp := range sups {
					per[i] = fmt.Sprintf("%s %v (%d aimed, %d skipped)", groups[i].prefix, sp.Injected, sp.Aimed, sp.Skipped)
				}
				notes = append(notes, fmt.Sprintf("%s: faults by group: %s", s.name, strings.Join(per, "; ")))
			}
		}
	}
	if s.notes != nil {
		notes = append(notes, s.notes()...)
	}
	for _, sp := range sups {
		if err := sp.Err(); err != nil {
			errs = append(errs, err)
		}
	}
	return row, execRow, notes, errors.Join(errs...)
}

// waitExecuted polls until every key of s was executed for a second ≥ fromMs.
func waitExecuted(ctx context.Context, s *subject, fromMs int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		execs, err := s.executions(ctx)
		if err == nil {
			done := map[string]bool{}
			for _, e := range execs {
				if e.SecondMs >= fromMs {
					done[e.Key] = true
				}
			}
			if len(done) >= len(s.keys) {
				return nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every key executed for a second from %s within %s (last error %v)",
				time.UnixMilli(fromMs).UTC().Format("15:04:05"), timeout, err)
		}
		time.Sleep(500 * time.Millisecond) // polling the execution log
	}
}

// waitSettled polls until every key of s was admitted for a second ≥ fromMs.
func waitSettled(ctx context.Context, s *subject, fromMs int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := s.settled(ctx, fromMs)
		if err == nil && ok {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every key admitted for a second from %s within %s (last error %v)",
				time.UnixMilli(fromMs).UTC().Format("15:04:05"), timeout, err)
		}
		time.Sleep(200 * time.Millisecond) // polling the database
	}
}

// riverSubject migrates River into its own database and describes its clients: this binary's
// chaos-client mode. The leader is River's river_leader row.
//
// plain runs River's defaults instead of its best configuration (chaos_client.go). A logDir
// makes it the whole loop (river-exec): the clients work the jobs, capacity at once each, and
// every execution appends a line to an execution log in logDir.
func riverSubject(ctx context.Context, c *pgcluster.Cluster, self string, n int, plain bool, logDir string, capacity int) (*subject, func(), error) {
	database, name, extra := "river_chaos", "River "+riverVersion(), []string(nil)
	if plain {
		database, name, extra = "river_plain_chaos", "River "+riverVersion()+", defaults", []string{"--plain"}
	}
	execLog := ""
	if logDir != "" {
		execLog = filepath.Join(logDir, "river-executions.log")
		database, name, extra = "river_exec_chaos", "River "+riverVersion()+", worked", []string{"--exec-log", execLog, "--max-workers", strconv.Itoa(capacity)}
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres", "postgres"))
	if err != nil {
		return nil, nil, err
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+database)
	conn.Close(ctx)
	if err != nil {
		return nil, nil, err
	}
	url := c.URL("postgres", database)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("river migrations: %w", err)
	}
	// Every periodic job the leaders propose is logged (a BEFORE INSERT trigger, which fires
	// before River's ON CONFLICT (unique_key) check): attempts − rows is what the unique key
	// refused, River's late or second insert of an occurrence it already had.
	if err := chaos.InstallInsertLog(ctx, pool, "river_job", "NEW.kind = 'peer_nop'"); err != nil {
		pool.Close()
		return nil, nil, err
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
	}
	leader := func(ctx context.Context) string {
		var id string
		_ = pool.QueryRow(ctx, "SELECT leader_id FROM river_leader WHERE expires_at > now()").Scan(&id)
		return id
	}
	var mu sync.Mutex
	var leaderless time.Duration
	elections := map[time.Time]bool{}
	s := &subject{name: name, prefix: "river", keys: keys, leader: leader,
		// River has no fence; its unique key (UniqueOpts ByArgs + ByPeriod; none on its defaults)
		// refuses a second insert of an occurrence: attempts logged − rows.
		refused: func(ctx context.Context, adm []chaos.Admission) (int64, int64, error) {
			attempts, err := chaos.InsertAttempts(ctx, pool)
			if err != nil || plain {
				return -1, -1, err
			}
			return -1, attempts - int64(len(adm)), nil
		},
		process: chaos.Process{
			Command: func(owner string) *exec.Cmd {
				return exec.Command(self, append([]string{"chaos-client", "--database-url", url, "--id", owner, "--jobs", strconv.Itoa(n)}, extra...)...)
			},
			Ready: func(line []byte) bool { return chaos.JSONMsg(line) == "river client started" },
		},
		settled: func(ctx context.Context, fromMs int64) (bool, error) {
			var k int
			err := pool.QueryRow(ctx, `SELECT count(DISTINCT args->>'job') FROM river_job
				WHERE kind = 'peer_nop' AND scheduled_at >= to_timestamp($1::float8 / 1000)`, fromMs).Scan(&k)
			return k == n, err
		},
		// scheduled_at is the enqueuer's in-memory next run time, from everySecond: a whole second,
		// exactly. A RunOnStart job is scheduled at the instant its leader started enqueuing; it is
		// that second's occurrence (its unique key is the second it falls in), so the scheduled
		// second is scheduled_at truncated to the second. created_at is the inserting transaction's
		// now(), on the same host's clock.
		admitted: func(ctx context.Context) ([]chaos.Admission, error) {
			rows, err := pool.Query(ctx, `SELECT args->>'job',
				(floor(extract(epoch FROM scheduled_at)) * 1000)::bigint,
				floor(extract(epoch FROM created_at) * 1000)::bigint
				FROM river_job WHERE kind = 'peer_nop'`)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, func(row pgx.CollectableRow) (chaos.Admission, error) {
				var a chaos.Admission
				err := row.Scan(&a.Key, &a.SecondMs, &a.AdmittedMs)
				return a, err
			})
		},
		// Every 100 ms: the time with no live leader (no unexpired river_leader row, or its
		// client killed, stopped or exiting) and the elections seen.
		sample: func(ctx context.Context, sup *chaos.Supervisor) {
			last := time.Now()
			for ctx.Err() == nil {
				time.Sleep(100 * time.Millisecond) // the sampler's tick
				var id string
				var elected time.Time
				err := pool.QueryRow(ctx, "SELECT leader_id, elected_at FROM river_leader WHERE expires_at > now()").Scan(&id, &elected)
				now := time.Now()
				mu.Lock()
				if err == nil {
					elections[elected] = true
				}
				if (err != nil && errors.Is(err, pgx.ErrNoRows)) || (err == nil && !sup.IsLive(id)) {
					leaderless += now.Sub(last)
				}
				mu.Unlock()
				last = now
			}
		},
	}
	if execLog != "" {
		s.procs = "clients (leader + workers)"
		s.executions = func(context.Context) ([]chaos.Execution, error) { return riverExecutions(execLog) }
	}
	s.notes = func() []string {
		mu.Lock()
		defer mu.Unlock()
		var onStart int64
		_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE kind = 'peer_nop' AND scheduled_at <> date_trunc('second', scheduled_at)`).Scan(&onStart)
		return []string{fmt.Sprintf("%s: %d leader terms seen during the faults; %.1f s with no live leader (no unexpired river_leader row, or its client down); %d jobs inserted by RunOnStart (scheduled_at off a whole second)",
			name, len(elections), leaderless.Seconds(), onStart)}
	}
	return s, pool.Close, nil
}

// qlschedSubject prepares qlsched's database and describes its replicas. qlsched has no leader;
// a fault "at the leader" hits a replica holding a live claim, as in the faults soak. variant is
// the system's name: qlsched (tuned: the faults soak's lease 3 s and cadence 500 ms, misfire grace
// 1 s), qlsched-grace (the same at the default grace, 60 s) or qlsched-default (the default lease,
// cadence and grace, with a budget sized for N triggers every second on the R − 1 replicas left
// when one is down, twice over).
func qlschedSubject(ctx context.Context, c *pgcluster.Cluster, bin, variant string, n, replicas int) (*subject, func(), error) {
	run := chaos.QlschedRun{Lease: 3 * time.Second, Cadence: 500 * time.Millisecond, Batch: 16}
	grace, name := schedule.MinMisfireGrace, "qlsched, tuned: "
	switch variant {
	case "qlsched-grace":
		grace, name = schedule.DefaultMisfireGrace, "qlsched, tuned lease and cadence, default grace: "
	case "qlsched-default":
		run = chaos.QlschedRun{Lease: coordinator.DefaultLease, Cadence: coordinator.DefaultCadence, Batch: 16,
			Budget: min(coordinator.MaxBudget, 2*((n+replicas-2)/(replicas-1)))}
		grace, name = schedule.DefaultMisfireGrace, "qlsched, default lease, cadence and grace, budget sized: "
	}
	name += fmt.Sprintf("`%s`, misfire grace %s", run.Flags(), grace)
	q, err := chaos.PrepareQlsched(ctx, c, strings.ReplaceAll(variant, "-", "_")+"_chaos", n, grace)
	if err != nil {
		return nil, nil, err
	}
	s := &subject{name: name, prefix: "r", keys: q.Triggers, leader: q.Holder,
		process: q.Process(bin, run),
		settled: func(ctx context.Context, fromMs int64) (bool, error) {
			var k int
			err := q.Su.QueryRow(ctx, "SELECT count(DISTINCT trigger_id) FROM control_core.runs WHERE scheduled_for_ms >= $1", fromMs).Scan(&k)
			return k == n, err
		},
		admitted: q.Admissions,
		tieLease: run.Lease,
		// The fence refusals and unique-key refusals the replicas logged (chaos.Qlsched.Refused).
		refused: func(context.Context, []chaos.Admission) (int64, int64, error) {
			f, u := q.Refused()
			return f, u, nil
		},
		notes: func() []string {
			var missed int64
			_ = q.Su.QueryRow(context.Background(), "SELECT coalesce(sum(missed_total), 0) FROM control_core.trigger_schedules").Scan(&missed)
			return []string{fmt.Sprintf("%s: misfire fire_once: a missed occurrence is a skip the policy decides, and a gap ends in a catch-up of the latest due occurrence; the schedules' missed_total (whole soak): %d",
				variant, missed)}
		},
	}
	return s, q.Su.Close, nil
}

// riverExecutions reads river-exec's execution log, lines "job scheduled_second_ms unix_ms client".
func riverExecutions(path string) ([]chaos.Execution, error) {
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var out []chaos.Execution
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) != 4 {
			return nil, fmt.Errorf("execution log: %q: want job second_ms unix_ms client", line)
		}
		sec, err1 := strconv.ParseInt(f[1], 10, 64)
		at, err2 := strconv.ParseInt(f[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("execution log: %q: %w", line, err)
		}
		out = append(out, chaos.Execution{Key: f[0], SecondMs: sec, AtMs: at})
	}
	return out, nil
}

// qlschedLoopSubject is qlsched's whole loop: R `qlsched run`, D `qlsched dispatch` on fixed
// loopback ports and W qlworker processes running this binary's chaos-job, which logs each
// execution. A fault "at the leader" of the workers hits one running an Attempt; the dispatchers
// hold no work of their own (leases are rows any dispatcher serves), so theirs falls on a pick.
func qlschedLoopSubject(ctx context.Context, c *pgcluster.Cluster, cfg chaosConfig, self, logDir string) (*subject, func(), error) {
	execLog := filepath.Join(logDir, "qlsched-executions.log")
	l, err := chaos.PrepareQlschedLoop(ctx, c, "qlsched_loop_chaos", cfg.jobs, cfg.dispatchers, []string{self, "chaos-job", "--log", execLog}, logDir)
	if err != nil {
		return nil, nil, err
	}
	run := chaos.QlschedRun{Lease: 3 * time.Second, Cadence: 500 * time.Millisecond, Batch: 16}
	s := &subject{name: "qlsched, whole loop", prefix: "r", keys: l.Triggers, leader: l.Holder,
		process: l.Process(cfg.qlsched, run),
		settled: func(ctx context.Context, fromMs int64) (bool, error) {
			var k int
			err := l.Su.QueryRow(ctx, "SELECT count(DISTINCT trigger_id) FROM control_core.runs WHERE scheduled_for_ms >= $1", fromMs).Scan(&k)
			return k == cfg.jobs, err
		},
		admitted: l.Admissions,
		groups: []group{
			{prefix: "d", slots: cfg.dispatchers, process: l.DispatcherProcess(cfg.qlsched, "d"), holder: func(context.Context) string { return "" }},
			{prefix: "w", slots: cfg.workers, process: l.WorkerProcess(cfg.qlworker, cfg.capacity), holder: l.WorkerHolder},
		},
		executions: func(ctx context.Context) ([]chaos.Execution, error) { return l.Executions(ctx, execLog) },
		procs:      fmt.Sprintf("%d run + %d dispatch + %d qlworker", cfg.replicas, cfg.dispatchers, cfg.workers),
		notes: func() []string {
			var states string
			_ = l.Su.QueryRow(context.Background(), `SELECT coalesce(string_agg(state || ' ' || n, ', ' ORDER BY state), '')
				FROM (SELECT state, count(*) AS n FROM control_core.attempts GROUP BY state) x`).Scan(&states)
			return []string{fmt.Sprintf("qlsched, whole loop: `qlsched run --lease %s --cadence %s --admit-batch %d`, `qlsched dispatch --lease %s --sweep-interval 500ms --offer-ttl 2s`, `qlworker --capacity %d`, the task at most 3 Attempts, no backoff; Attempts by state at the end: %s",
				run.Lease, run.Cadence, run.Batch, l.DispatchLease, cfg.capacity, states)}
		},
	}
	return s, l.Su.Close, nil
}
