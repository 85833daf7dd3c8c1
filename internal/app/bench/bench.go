// Package bench measures the scheduler on a real PostgreSQL: admissions per second against the
// ceiling of the same write set without fences (same server, same run, same concurrency),
// claim/admit latency, admission lag, serialization retries, races and duplicates.
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/app/pgcluster"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/roles"
	"github.com/qlcontrol/controlcore/schedule"
)

// Scenarios.
const (
	// Backlog: every trigger is due at once; replicas admit as fast as they can. The ceiling runs
	// the same write set first.
	Backlog = "backlog"
	// Steady: triggers fire once a minute at seconds spread over the minute; the measure is the
	// admission lag below capacity.
	Steady = "steady"
	// Burst: every trigger shares one minute-aligned spec, so all of them fall due at each minute
	// boundary; the measure is how fast each minute's burst drains against the batch ceiling of
	// the same write set.
	Burst = "burst"
	// Scale: see scale.go.
)

// Config of one bench run.
type Config struct {
	URL      string // empty: start a throwaway durable cluster
	Scenario string
	Triggers int
	Every    string // backlog: "minute" (each row once) or "second" (continuous demand)
	Replicas int
	Duration time.Duration
	Budget   int
	Cadence  time.Duration
	Batch    int          // rows per claim and admit transaction; 1: the ADR's single mode
	Bursts   int          // burst: how many minute boundaries to measure (1 … 10)
	Log      *slog.Logger // the replicas' diagnostics; nil discards them
	// Processes runs the replicas as real `qlsched run` processes (the binary Exe, qlbench's
	// --qlsched), connected as the runtime role: RuntimeURL, or the throwaway cluster's ql_runtime.
	Processes  bool
	Exe        string
	RuntimeURL string
	// CPUProfileDir, when set, receives Go CPU profiles of the replicas' measured phase (backlog
	// and steady): in-process.pprof (this process, the replicas' phase only) or, with Processes,
	// one <owner>.pprof per `qlsched run` process (its --cpu-profile, its whole life). Diagnosis.
	CPUProfileDir string
	// Scale only (scale.go): the data set's projects and Runs of history, the operator reads'
	// role (AdminURL; empty: URL's), samples per read, the mass publish and its wait.
	Projects    int
	HistoryRuns int64
	AdminURL    string
	Samples     int
	MassPublish int
	InitWait    time.Duration
	// Loop only (loop.go): dispatcher and worker processes, slots per worker, the ceiling's
	// pre-admitted Runs, and the qlworker binary.
	Dispatchers int
	Workers     int
	Capacity    int
	CeilingRuns int
	WorkerExe   string
	// SegmentsFile, when set (loop only), receives each window Run's times, a line each
	// (segRunsHeader): what the segments' percentiles are computed from.
	SegmentsFile string
}

// Validate checks the bounds before anything starts.
func (c Config) Validate() error {
	if c.SegmentsFile != "" {
		if c.Scenario != Loop {
			return fmt.Errorf("--segments-file with --scenario %s: the loop scenario only", c.Scenario)
		}
		if st, err := os.Stat(filepath.Dir(c.SegmentsFile)); err != nil || !st.IsDir() {
			return fmt.Errorf("--segments-file %s: its directory does not exist", c.SegmentsFile)
		}
	}
	if c.CPUProfileDir != "" && c.Scenario != Backlog && c.Scenario != Steady {
		return fmt.Errorf("--cpu-profile with --scenario %s: the backlog and steady scenarios only", c.Scenario)
	}
	switch {
	case c.Scenario == Scale:
		return c.validateScale()
	case c.Scenario == Loop:
		return c.validateLoop()
	case c.Scenario != Backlog && c.Scenario != Steady && c.Scenario != Burst:
		return fmt.Errorf("--scenario %q: want backlog, steady, burst, scale or loop", c.Scenario)
	case c.Scenario == Burst && (c.Bursts < 1 || c.Bursts > 10):
		return fmt.Errorf("--bursts %d: want 1 … 10", c.Bursts)
	case c.Scenario == Burst && c.Processes:
		return fmt.Errorf("--scenario burst runs in-process replicas: drop --processes")
	case c.Scenario == Burst && c.Every != "minute":
		return fmt.Errorf("--scenario burst --every %s: a burst is every trigger due at a minute boundary (--every minute)", c.Every)
	case c.Triggers < 1 || c.Triggers > 1_000_000:
		return fmt.Errorf("--triggers %d: want 1 … 1000000", c.Triggers)
	case c.Every != "second" && c.Every != "minute":
		return fmt.Errorf("--every %q: want second or minute", c.Every)
	case c.Replicas < 1 || c.Replicas > 64:
		return fmt.Errorf("--replicas %d: want 1 … 64", c.Replicas)
	case c.Duration < time.Second || c.Duration > time.Hour:
		return fmt.Errorf("--duration %s: want 1s … 1h", c.Duration)
	case c.Processes && c.URL != "" && c.RuntimeURL == "":
		return fmt.Errorf("--processes with --database-url needs --runtime-url: the replicas connect as the runtime role")
	case c.CPUProfileDir != "":
		if st, err := os.Stat(c.CPUProfileDir); err != nil || !st.IsDir() {
			return fmt.Errorf("--cpu-profile %s: want an existing directory", c.CPUProfileDir)
		}
	}
	cfg := coordinator.DefaultConfig("bench")
	cfg.Budget, cfg.Cadence, cfg.AdmitBatch = c.Budget, c.Cadence, c.Batch
	cfg.Lease = max(cfg.Lease, 2*c.Cadence)
	return cfg.Validate()
}

// Report is what a run measured. JSON field names are a stable interface.
type Report struct {
	Mode             string  `json:"mode"`
	Replica          string  `json:"replica"` // in-process or process
	Scenario         string  `json:"scenario"`
	Server           string  `json:"server"`
	Triggers         int     `json:"triggers"`
	Replicas         int     `json:"replicas"`
	Budget           int     `json:"budget"`
	Batch            int     `json:"admit_batch"`
	CadenceMs        float64 `json:"cadence_ms"`
	Seconds          float64 `json:"seconds"`
	Admits           int64   `json:"admits"`
	AdmitsPerSecond  float64 `json:"admits_per_second"`
	CeilingPerSecond float64 `json:"ceiling_per_second"`
	Ratio            float64 `json:"ratio"`
	// the single-row ceiling's phases; in single mode ceiling_per_second is their mean
	CeilingBeforePerSecond float64 `json:"ceiling_before_per_second,omitempty"`
	CeilingAfterPerSecond  float64 `json:"ceiling_after_per_second,omitempty"`
	// batch mode only: the ceiling's write set claimed and written in batches of Batch rows
	BatchCeilingPerSecond float64 `json:"batch_ceiling_per_second,omitempty"`
	BatchRatio            float64 `json:"batch_ratio,omitempty"`
	// burst only: the batch ceiling's phases; batch_ceiling_per_second is then their mean
	BatchCeilingBeforePerSecond float64 `json:"batch_ceiling_before_per_second,omitempty"`
	BatchCeilingAfterPerSecond  float64 `json:"batch_ceiling_after_per_second,omitempty"`
	// burst only: the batch ceiling's rows per batch (--admit-batch, or 128 in single mode) and
	// each minute's burst; admits_per_second is then the bursts' admissions over their drain times
	CeilingBatch int            `json:"ceiling_batch,omitempty"`
	Bursts       []BurstFigures `json:"bursts,omitempty"`
	// rounds that claimed their whole budget, of all rounds (in-process replicas)
	Rounds          int64   `json:"rounds"`
	SaturatedRounds int64   `json:"saturated_rounds"`
	RetryRate       float64 `json:"retry_rate"`
	Retries         int64   `json:"retries"`
	Races           int64   `json:"races"`
	Releases        int64   `json:"releases"`
	Skips           int64   `json:"skips"`
	Errors          int64   `json:"errors"`
	Duplicates      int64   `json:"duplicates"`
	LagP50Ms        float64 `json:"lag_p50_ms"`
	LagP99Ms        float64 `json:"lag_p99_ms"`
	ClaimP50Ms      float64 `json:"claim_p50_ms"`
	ClaimP99Ms      float64 `json:"claim_p99_ms"`
	AdmitP50Ms      float64 `json:"admit_p50_ms"`
	AdmitP99Ms      float64 `json:"admit_p99_ms"`
	CPUPercent      float64 `json:"cpu_percent"`
	RSSMiB          float64 `json:"rss_mib"`
	PeakRSSMiB      float64 `json:"peak_rss_mib"`
	AnonRSSMiB      float64 `json:"anon_rss_mib"` // of RSSMiB: heap and stacks, not the binary's pages
	// scale only: the data set, the reads' timings, the mass publish
	Scale *ScaleReport `json:"scale,omitempty"`
	// loop only: the closed loop's figures
	Loop *LoopReport `json:"loop,omitempty"`
}

// Run sets up, measures and reports. progress gets one line per phase.
func Run(ctx context.Context, cfg Config, progress io.Writer) (Report, error) {
	mode := "single"
	if cfg.Batch > 1 {
		mode = "batch"
	}
	kind := "in-process"
	if cfg.Processes {
		kind = "process"
	}
	rep := Report{Mode: mode, Replica: kind, Batch: cfg.Batch, Scenario: cfg.Scenario, Triggers: cfg.Triggers, Replicas: cfg.Replicas,
		Budget: cfg.Budget, CadenceMs: float64(cfg.Cadence.Microseconds()) / 1000}
	say := func(format string, args ...any) { fmt.Fprintf(progress, "bench: "+format+"\n", args...) }

	url := cfg.URL
	if url == "" {
		say("starting a throwaway PostgreSQL (fsync on)")
		// PostgreSQL's own max_pred_locks_per_transaction (64), not the test servers' 256: the
		// setting an operator runs, and the cheaper one for the SERIALIZABLE admit (fewer
		// predicate lock entries; docs/operations.md, Sizing).
		cluster, err := pgcluster.Start(ctx, pgcluster.Options{Durable: true,
			Settings: pgcluster.BenchSettings(map[string]string{"max_pred_locks_per_transaction": "64"})})
		if err != nil {
			return rep, err
		}
		defer cluster.Stop()
		if url, err = prepare(ctx, cluster); err != nil {
			return rep, err
		}
		cfg.RuntimeURL = cluster.URL("ql_runtime", "bench")
		cfg.AdminURL = cluster.URL("ql_admin", "bench")
	}
	conn, err := dbconn.Resolve(url)
	if err != nil {
		return rep, err
	}
	if cfg.Scenario == Scale {
		// the data set's statements (a chunk of history, the vacuum) run for minutes: no statement
		// or response bound on the bench's own pool (the timed reads keep theirs)
		t := conn.Timeouts()
		t.Statement, t.Response, t.IdleInTransaction = 0, 0, 0
		conn.SetTimeouts(t)
	}
	admin, err := conn.Open(ctx)
	if err != nil {
		return rep, err
	}
	defer admin.Close()
	if err := admin.Pool().QueryRow(ctx, "SELECT current_setting('server_version')").Scan(&rep.Server); err != nil {
		return rep, err
	}

	if cfg.Scenario == Scale {
		adminURL := cfg.AdminURL
		if adminURL == "" {
			say("the reads connect with --database-url (no --admin-url)")
			adminURL = url
		}
		rep.Scale = &ScaleReport{Server: rep.Server}
		return rep, runScale(ctx, cfg, adminURL, cfg.RuntimeURL, admin, rep.Scale, say)
	}
	if cfg.Scenario == Loop {
		rep.Loop = &LoopReport{Server: rep.Server}
		return rep, runLoop(ctx, cfg, conn, admin, rep.Loop, say)
	}

	project := "bench-" + strconv.FormatInt(time.Now().UnixMilli(), 36)
	say("publishing %d triggers in project %s", cfg.Triggers, project)
	period, err := publish(ctx, admin, project, cfg)
	if err != nil {
		return rep, err
	}

	// One pool per replica, and one per ceiling worker. The ceiling's sessions plan like the
	// replicas' hot statements (coordinator.HotSettings, which the replicas set per transaction):
	// with the default custom plans, CeilingAdmit was planned at every call, a third of its time.
	var opened []*dbconn.DB
	defer func() {
		for _, p := range opened {
			p.Close()
		}
	}()
	openPools := func(params map[string]string) ([]*dbconn.DB, error) {
		for range cfg.Replicas {
			pc := conn.For(conn.Pool.ConnConfig.Database, "")
			pc.Pool.MaxConns = 4
			maps.Copy(pc.Pool.ConnConfig.RuntimeParams, params)
			p, err := pc.Open(ctx)
			if err != nil {
				return nil, err
			}
			opened = append(opened, p)
		}
		return opened[len(opened)-cfg.Replicas:], nil
	}
	pools, err := openPools(nil)
	if err != nil {
		return rep, err
	}
	ceilingPools, err := openPools(coordinator.HotSettings())
	if err != nil {
		return rep, err
	}

	// measure runs one ceiling phase on a fresh backlog and returns its rate.
	measure := func(name string, phase int64, batch int) (float64, error) {
		if err := setDue(ctx, admin, project, period, say); err != nil {
			return 0, err
		}
		rows := "one row"
		if batch > 1 {
			rows = fmt.Sprintf("up to %d rows", batch)
		}
		say("%s: the same write set, %s per claim, READ COMMITTED, no fence, one worker per replica, claiming as a replica does", name, rows)
		var upTo int64 // once-a-minute triggers: each phase writes each occurrence once, like the replicas
		if cfg.Every == "minute" || cfg.Scenario == Burst {
			upTo = int64(cfg.Triggers)
		}
		n, secs, err := ceiling(ctx, ceilingPools, project, period, cfg.Duration, batch, phase*ceilingEpochMs, upTo)
		if err != nil {
			return 0, err
		}
		say("%s: %d in %.1fs = %.0f/s", name, n, secs, float64(n)/secs)
		return float64(n) / secs, nil
	}
	if cfg.Scenario == Burst {
		err := runBurst(ctx, cfg, &rep, admin, pools, project, measure, say)
		return rep, err
	}
	if cfg.Scenario == Backlog {
		if rep.CeilingBeforePerSecond, err = measure("ceiling", 1, 1); err != nil {
			return rep, err
		}
		rep.CeilingPerSecond = rep.CeilingBeforePerSecond
		if cfg.Batch > 1 {
			if rep.BatchCeilingBeforePerSecond, err = measure("batch ceiling", 2, cfg.Batch); err != nil {
				return rep, err
			}
			rep.BatchCeilingPerSecond = rep.BatchCeilingBeforePerSecond
		}
		if err := setDue(ctx, admin, project, period, say); err != nil {
			return rep, err
		}
	} else {
		// Initialise every cursor first (a claim each), so the measured phase sees only on-time
		// occurrences, not the one-off initialisation backlog.
		say("initialising every trigger's cursor")
		init := cfg
		init.Budget, init.Cadence, init.Batch = coordinator.MaxBudget, coordinator.MinCadence, coordinator.MaxBudget
		if _, err := runReplicas(ctx, pools, init, func(s coordinator.Snapshot) bool { return s.Releases >= int64(cfg.Triggers) }); err != nil {
			return rep, err
		}
	}

	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	say("scheduler: %d %s replicas, budget %d, cadence %s, for up to %s", cfg.Replicas, kind, cfg.Budget, cfg.Cadence, cfg.Duration)
	startMs := dbNow(ctx, admin)
	// A minute backlog is done when every trigger has admitted a Run, not when the admits reach
	// the trigger count: a claim left to expire (an admit that failed) holds its trigger back for
	// a lease while the others may go on to the next minute's occurrence.
	allAdmitted := func(triggers int64) bool {
		return cfg.Scenario == Backlog && cfg.Every == "minute" && triggers >= int64(cfg.Triggers)
	}
	q := db.New(admin.Pool())
	admittedTriggers := func() (int64, error) {
		lag, err := q.BenchLag(ctx, db.BenchLagParams{ProjectID: project, SinceMs: startMs, CeilingFromMs: ceilingEpochMs})
		return lag.Triggers, err
	}
	var res replicaResult
	var procs []*replicaProcess
	if cfg.Processes {
		var done func(int64) bool // every-second demand runs the duration: nothing to ask
		if cfg.Scenario == Backlog && cfg.Every == "minute" {
			done = allAdmitted
		}
		res, procs, err = runProcesses(ctx, cfg, cfg.RuntimeURL, admittedTriggers, done)
	} else {
		stopProfile, perr := startProfile(cfg.CPUProfileDir)
		if perr != nil {
			return rep, perr
		}
		var polled time.Time
		res, err = runReplicas(ctx, pools, cfg, func(s coordinator.Snapshot) bool {
			// the database is asked only once the admits could be complete, and at most every 50 ms
			if !allAdmitted(s.Admits) || time.Since(polled) < 50*time.Millisecond {
				return false
			}
			polled = time.Now()
			n, err := admittedTriggers()
			return err == nil && allAdmitted(n)
		})
		stopProfile()
	}
	if err != nil {
		return rep, err
	}
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	lag, err := q.BenchLag(ctx, db.BenchLagParams{ProjectID: project, SinceMs: startMs, CeilingFromMs: ceilingEpochMs})
	if err != nil {
		return rep, err
	}
	rep.LagP50Ms, rep.LagP99Ms = lag.P50Ms, lag.P99Ms
	rep.Seconds = res.seconds
	if cfg.Processes && cfg.Scenario == Backlog && lag.SpanMs > 0 {
		// processes start one by one and admit as soon as each is ready: the window is the
		// admissions' own, first to last, in database time
		rep.Seconds = float64(lag.SpanMs) / 1000
	}
	rep.Admits, rep.Retries, rep.Races, rep.Releases, rep.Skips, rep.Errors = res.stats.Admits, res.stats.Retries,
		res.stats.Races, res.stats.Releases, res.stats.Skips, res.stats.Errors
	rep.SaturatedRounds, rep.Rounds = res.stats.Saturated, res.stats.Rounds
	rep.AdmitsPerSecond = float64(rep.Admits) / rep.Seconds
	if rep.Admits > 0 {
		rep.RetryRate = float64(rep.Retries) / float64(rep.Admits)
	}
	if cfg.Processes {
		// per replica process: claim latency from its histogram (bucket bounds), the largest RSS
		var hs []*dto.Histogram
		for _, p := range procs {
			hs = append(hs, p.claims)
			if p.mem.RSS > rep.RSSMiB {
				rep.RSSMiB, rep.AnonRSSMiB = p.mem.RSS, p.mem.Anon
			}
			rep.PeakRSSMiB = max(rep.PeakRSSMiB, p.mem.Peak)
		}
		rep.ClaimP50Ms, rep.ClaimP99Ms = histogramQuantile(hs, 0.5), histogramQuantile(hs, 0.99)
		rep.CPUPercent = 100 * res.cpuSeconds / res.seconds
	} else {
		rep.ClaimP50Ms, rep.ClaimP99Ms = res.claims.percentiles()
		rep.AdmitP50Ms, rep.AdmitP99Ms = res.admits.percentiles()
		cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
		rep.CPUPercent = 100 * cpu.Seconds() / res.seconds
		m := rss()
		rep.RSSMiB, rep.PeakRSSMiB, rep.AnonRSSMiB = m.RSS, m.Peak, m.Anon
	}

	if rep.Duplicates, err = q.BenchDuplicates(ctx, db.BenchDuplicatesParams{ProjectID: project, CeilingFromMs: ceilingEpochMs}); err != nil {
		return rep, err
	}

	if cfg.Scenario == Backlog && cfg.Batch <= 1 {
		// The single-row ceiling is commit-bound, and this machine's flush latency drifts by tens
		// of percent within minutes: measured once before and once after the replicas, its mean
		// brackets the replicas' phase instead of preceding it.
		if rep.CeilingAfterPerSecond, err = measure("ceiling again", 3, 1); err != nil {
			return rep, err
		}
		rep.CeilingPerSecond = (rep.CeilingBeforePerSecond + rep.CeilingAfterPerSecond) / 2
	}
	if cfg.Scenario == Backlog && cfg.Batch > 1 {
		// So is the batch ceiling: the tables the replicas wrote into are larger than the ones the
		// first measure wrote into, and the server's pace drifts (one sitting's runs: 9,521/s and
		// 10,726/s): measured again after the replicas, the mean brackets their phase.
		if rep.BatchCeilingAfterPerSecond, err = measure("batch ceiling again", 4, cfg.Batch); err != nil {
			return rep, err
		}
		rep.BatchCeilingPerSecond = (rep.BatchCeilingBeforePerSecond + rep.BatchCeilingAfterPerSecond) / 2
	}
	if rep.CeilingPerSecond > 0 {
		rep.Ratio = rep.AdmitsPerSecond / rep.CeilingPerSecond
	}
	if rep.BatchCeilingPerSecond > 0 {
		rep.BatchRatio = rep.AdmitsPerSecond / rep.BatchCeilingPerSecond
	}
	return rep, nil
}

// startProfile profiles this process's CPU into dir/in-process.pprof until the returned stop;
// with dir empty it does nothing.
func startProfile(dir string) (stop func(), err error) {
	if dir == "" {
		return func() {}, nil
	}
	f, err := os.Create(filepath.Join(dir, "in-process.pprof"))
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}

// prepare creates the database, the roles and the schema on a throwaway cluster and returns a
// superuser URL of it (the bench publishes and claims; readiness is not its subject).
func prepare(ctx context.Context, c *pgcluster.Cluster) (string, error) {
	server, err := dbconn.Resolve(c.URL("postgres", "postgres"))
	if err != nil {
		return "", err
	}
	su, err := server.Connect(ctx)
	if err != nil {
		return "", err
	}
	_, err = su.Exec(ctx, "CREATE DATABASE bench")
	su.Close(ctx)
	if err != nil {
		return "", err
	}
	names, _ := roles.NewNames(roles.DefaultPrefix)
	cfg := server.For("bench", "")
	conn, err := cfg.Connect(ctx)
	if err != nil {
		return "", err
	}
	_, err = roles.Create(ctx, conn, names)
	conn.Close(ctx)
	if err != nil {
		return "", err
	}
	r, err := migrate.Open(ctx, cfg, migrate.Options{Names: names, AsOwner: true})
	if err != nil {
		return "", err
	}
	defer r.Close()
	if _, err := r.Up(ctx, 0); err != nil {
		return "", err
	}
	return c.URL("postgres", "bench"), nil
}

// publish creates the project, a task and the triggers and returns the period of the triggers.
func publish(ctx context.Context, pool *dbconn.DB, project string, cfg Config) (time.Duration, error) {
	pub := admin.NewPublisher(pool)
	if _, err := pub.CreateProject(ctx, project); err != nil {
		return 0, err
	}
	if _, err := pub.PublishTask(ctx, admin.TaskSpec{Project: project, Task: "job", ExecutorSpec: []byte(`{"image":"bench/job:1"}`)}); err != nil {
		return 0, err
	}
	period := time.Minute
	spec := func(i int) string { return "* * * * *" }
	switch {
	case cfg.Scenario == Steady:
		spec = func(i int) string { return fmt.Sprintf("%d * * * * *", i%60) }
	case cfg.Every == "second":
		period, spec = time.Second, func(int) string { return "* * * * * *" }
	}
	// in transactions of publishChunk triggers: one per trigger waits for a commit each, and they
	// queue on the project's lock anyway (10,000 triggers took 31 s that way)
	const publishChunk = 1000
	for from := 0; from < cfg.Triggers; from += publishChunk {
		var specs []admin.TriggerSpec
		for i := from; i < min(from+publishChunk, cfg.Triggers); i++ {
			specs = append(specs, admin.TriggerSpec{Project: project, Trigger: fmt.Sprintf("t%07d", i),
				Task: "job", Cron: spec(i), TimeZone: "UTC", Misfire: schedule.MisfireFireOnce, Enabled: true})
		}
		if _, err := pub.PublishTriggers(ctx, specs); err != nil {
			return 0, err
		}
	}
	return period, nil
}

// setDue puts every row at the current period's occurrence: all due, none missed, then settles.
func setDue(ctx context.Context, pool *dbconn.DB, project string, period time.Duration, say func(string, ...any)) error {
	now := dbNow(ctx, pool)
	p := period.Milliseconds()
	if _, err := db.New(pool.Pool()).BenchSetDue(ctx, db.BenchSetDueParams{ProjectID: project, DueMs: now / p * p}); err != nil {
		return err
	}
	if err := settle(ctx, pool); err != nil {
		say("the phase starts unsettled: %v", err)
	}
	return nil
}

// settle vacuums and analyses the tables a measured phase reads and writes, and checkpoints, so that each phase
// (a ceiling, a burst) starts without the dead row versions, unset hint bits and vacuum debt of
// the phases and the publish before it. Otherwise autovacuum pays that debt inside whichever
// phase its launcher's next wake-up falls in: once a minute at a fixed second, so with bursts at
// minute boundaries it landed in every burst of one run and in none of the next, a systematic
// error of up to a tenth either way (server log, autovacuum of runs, attempts, run_events and
// trigger_schedules at :03 of each burst minute). Best effort: the role may not own the tables,
// and its callers say why a phase starts unsettled and go on.
//
// The Run tables are left alone while they are empty: analysed empty, they are known to be
// empty, and the plans made on them then (the foreign-key checks', cached per connection) read
// them sequentially for as long as the connection lives or no ANALYZE invalidates them. The
// first ceiling phase, whose connections were new, ran at 1,282/s that way, against 9,259/s
// for the same connections once the tables held Runs.
func settle(ctx context.Context, pool *dbconn.DB) error {
	tables := "control_core.triggers, control_core.trigger_revisions, control_core.trigger_schedules"
	var runs bool
	if err := pool.Pool().QueryRow(ctx, "SELECT EXISTS (SELECT FROM control_core.runs)").Scan(&runs); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	if runs {
		tables += ", control_core.runs, control_core.attempts, control_core.run_events"
	}
	if _, err := pool.Pool().Exec(ctx, "VACUUM (ANALYZE) "+tables); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	// The phase before's dirty buffers written now, and its WAL no longer counted towards the
	// next checkpoint: a ceiling phase writes hundreds of megabytes of WAL, and the checkpoint it
	// triggered landed in whichever phase came next (a sitting of bench-pooler: the paths run second
	// and third admitted 0.19 and 0.26 × the first, claim p99 ≤ 512 ms; 1.08 and 1.25 × with a
	// checkpoint before each phase and none timed within one: pgcluster.BenchSettings).
	if _, err := pool.Pool().Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	return nil
}

func dbNow(ctx context.Context, pool *dbconn.DB) int64 {
	var ms int64
	_ = pool.Pool().QueryRow(ctx, "SELECT control_core.db_now_ms()").Scan(&ms)
	return ms
}

// ceilingEpochMs shifts the occurrences of ceiling phase n to n × 10^13 ms (year 2286 on), a range
// no schedule of the bench reaches: the runs table admits one Run per occurrence, and the ceiling
// writes the occurrences the replicas and the other phases write too.
const ceilingEpochMs int64 = 10_000_000_000_000

// ceiling drives the write set with no fence, one worker per pool, until nothing is claimable,
// limit passes or it has written upTo occurrences (0: no bound), and returns how many it wrote in
// how many seconds. Each worker claims up to batch rows (the ADR's claim when batch is 1) and
// writes them in one READ COMMITTED statement (CeilingAdmit), their occurrences shifted by offset;
// like a replica's round, with batches it claims the next rows while it writes the ones before.
//
// What it shares with a replica it takes from the coordinator: the claim (Store.ClaimBatch, the
// statement, its fence and its order) and the run identities (RunIDs). The loop around the claim
// is its own on purpose, not a copy of coordinator.Round's: the ceiling has no budget, no round
// and no initialisation (setDue gave every row a cursor), it ends at the first empty claim where
// a round ends at a short one, and it writes CeilingAdmit (no decision, no fence, no SERIALIZABLE)
// where a round decides and admits. Running it through Round would take a write hook on the
// coordinator, bench machinery in the production scheduler. Keep in step with Round the rules
// that move the figure: in batch mode the next claim is sent while a batch is written, and in
// single mode it goes behind the write's COMMIT in the same round trip (Store.WriteThenClaim, as
// the replica's Store.AdmitThenClaim), so both sides pay one round trip per occurrence.
func ceiling(ctx context.Context, pools []*dbconn.DB, project string, period, limit time.Duration, batch int, offset, upTo int64) (int64, float64, error) {
	var n atomic.Int64
	var firstErr error
	var once sync.Once
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i, pool := range pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			store, q := coordinator.NewStore(pool), db.New(pool.Pool())
			owner := fmt.Sprintf("ceiling-%d", i)
			type claimed struct {
				claims []*coordinator.Claim
				err    error
			}
			claim := func() <-chan claimed {
				out := make(chan claimed, 1)
				go func() {
					claims, err := store.ClaimBatch(ctx, owner, 30*time.Second, batch)
					out <- claimed{claims, err}
				}()
				return out
			}
			for next := claim(); next != nil; {
				got := <-next
				next = nil
				if got.err == nil && len(got.claims) == 0 {
					return
				}
				err := got.err
				if err == nil {
					more := ctx.Err() == nil && (upTo == 0 || n.Load()+int64(len(got.claims)) < upTo)
					if more && batch > 1 {
						next = claim() // ahead, as a batch-mode round does
					}
					var written int64
					if more && batch == 1 { // the next claim behind the write, as a single-mode round's
						var carried []*coordinator.Claim
						var ran bool
						carried, ran, err = store.WriteThenClaim(ctx, func(q *db.Queries) (err error) {
							written, err = ceilingWrite(ctx, q, got.claims, period, offset)
							return err
						}, coordinator.NextClaim{Owner: owner, Lease: 30 * time.Second, N: batch})
						if ran {
							ready := make(chan claimed, 1)
							ready <- claimed{carried, nil}
							next = ready
						}
					} else {
						written, err = ceilingWrite(ctx, q, got.claims, period, offset)
					}
					n.Add(written)
					if err == nil && more && next == nil {
						next = claim()
					}
				}
				if err != nil {
					if ctx.Err() == nil {
						once.Do(func() { firstErr = err })
					}
					if next != nil {
						<-next // the claim sent ahead: none of this phase may land in the next one
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	return n.Load(), time.Since(start).Seconds(), firstErr
}

// ceilingWrite writes claimed rows without a fence; it returns how many.
func ceilingWrite(ctx context.Context, q *db.Queries, claims []*coordinator.Claim, period time.Duration, offset int64) (int64, error) {
	p := db.CeilingAdmitParams{OccurrenceOffsetMs: offset}
	runID := coordinator.RunIDs() // the replicas' identities, one source per batch as theirs
	for _, c := range claims {
		if c.CursorMs == nil { // a row the bench did not set due: another project's, never initialised
			return 0, fmt.Errorf("ceiling: claimed %s/%s, which the bench did not set up: run the bench on a database of its own", c.ProjectID, c.TriggerID)
		}
		p.ProjectIds, p.TriggerIds, p.TaskIds = append(p.ProjectIds, c.ProjectID), append(p.TriggerIds, c.TriggerID), append(p.TaskIds, c.TaskID)
		p.TaskRevisions, p.TriggerRevisions = append(p.TaskRevisions, c.TaskRevision), append(p.TriggerRevisions, c.TriggerRevision)
		p.ExecutionRevisionIds = append(p.ExecutionRevisionIds, c.ExecutionRevisionID)
		p.ScheduledForMs = append(p.ScheduledForMs, *c.CursorMs)
		p.NextFireAtMs = append(p.NextFireAtMs, *c.CursorMs+period.Milliseconds())
		p.RunIds = append(p.RunIds, runID())
	}
	return q.CeilingAdmit(ctx, p)
}

type replicaResult struct {
	seconds        float64
	cpuSeconds     float64 // replica processes only: their user + system time
	stats          coordinator.Snapshot
	claims, admits *samples
}

// runReplicas runs one lifecycle per pool until done(admits) or the duration passes.
func runReplicas(ctx context.Context, pools []*dbconn.DB, cfg Config, done func(coordinator.Snapshot) bool) (replicaResult, error) {
	res := replicaResult{claims: &samples{}, admits: &samples{}}
	var coords []*coordinator.Coordinator
	var lifecycles []*coordinator.Lifecycle
	for i, pool := range pools {
		cc := coordinator.DefaultConfig(fmt.Sprintf("bench-replica-%d", i))
		cc.Budget, cc.Cadence, cc.AdmitBatch = cfg.Budget, cfg.Cadence, max(cfg.Batch, 1)
		co := coordinator.New(cc, coordinator.NewStore(pool), coordinator.WithLogger(cfg.Log),
			coordinator.WithObserver(coordinator.Observer{
				Claim:     func(d time.Duration) { res.claims.add(d) },
				AdmitCall: func(d time.Duration) { res.admits.add(d) },
			}))
		coords, lifecycles = append(coords, co), append(lifecycles, coordinator.NewLifecycle(co, cc))
	}
	start := time.Now()
	for _, lc := range lifecycles {
		if err := lc.Start(ctx); err != nil {
			return res, err
		}
	}
	deadline := time.NewTimer(cfg.Duration)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	total := func() (s coordinator.Snapshot) {
		for _, co := range coords {
			x := co.Stats.Snapshot()
			s.Rounds += x.Rounds
			s.Saturated += x.Saturated
			s.Claims += x.Claims
			s.Admits += x.Admits
			s.Retries += x.Retries
			s.Races += x.Races
			s.Releases += x.Releases
			s.Skips += x.Skips
			s.Errors += x.Errors
		}
		return s
	}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-deadline.C:
			break loop
		case <-tick.C:
			if done(total()) {
				break loop
			}
		}
	}
	res.seconds = time.Since(start).Seconds()
	for _, lc := range lifecycles {
		_ = lc.Stop(context.Background())
	}
	res.stats = total()
	return res, ctx.Err()
}

// samples collects latencies for percentiles.
type samples struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
}

func (s *samples) percentiles() (p50, p99 float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.d) == 0 {
		return 0, 0
	}
	sort.Slice(s.d, func(i, j int) bool { return s.d[i] < s.d[j] })
	at := func(q float64) float64 { return float64(s.d[int(q*float64(len(s.d)-1))].Microseconds()) / 1000 }
	return at(0.5), at(0.99)
}

// memory is a process's resident set in MiB: now, its peak, and the anonymous part of now (heap
// and stacks: what the process allocated, without the pages of its binary, which a larger binary
// has more of and which are clean, shared and reclaimable).
type memory struct{ RSS, Peak, Anon float64 }

// rss reads this process's resident set.
func rss() memory { return rssOf("/proc/self/status") }

// rssOf reads VmRSS, VmHWM and RssAnon from a /proc/<pid>/status file.
func rssOf(status string) memory {
	var m memory
	body, err := os.ReadFile(status)
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			m.RSS = kb / 1024
		case "VmHWM:":
			m.Peak = kb / 1024
		case "RssAnon:":
			m.Anon = kb / 1024
		}
	}
	return m
}

// Text renders a report for a terminal.
func (r Report) Text() string {
	if r.Scale != nil {
		return r.Scale.Text()
	}
	if r.Loop != nil {
		return r.Loop.Text()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "scenario %s, mode %s (admit batch %d), PostgreSQL %s: %d triggers, %d %s replicas, budget %d, cadence %gms, %.1fs\n",
		r.Scenario, r.Mode, r.Batch, r.Server, r.Triggers, r.Replicas, r.Replica, r.Budget, r.CadenceMs, r.Seconds)
	fmt.Fprintf(&b, "  admits        %d  (%.0f/s)\n", r.Admits, r.AdmitsPerSecond)
	switch {
	case r.CeilingAfterPerSecond > 0:
		fmt.Fprintf(&b, "  ceiling       %.0f/s   ratio %.2f  (mean of %.0f/s before the replicas and %.0f/s after)\n",
			r.CeilingPerSecond, r.Ratio, r.CeilingBeforePerSecond, r.CeilingAfterPerSecond)
	case r.CeilingPerSecond > 0:
		fmt.Fprintf(&b, "  ceiling       %.0f/s   ratio %.2f\n", r.CeilingPerSecond, r.Ratio)
	}
	switch {
	case r.BatchCeilingAfterPerSecond > 0:
		fmt.Fprintf(&b, "  batch ceiling %.0f/s   ratio %.2f  (the same write set in batches of %d, no fence; mean of %.0f/s before the %s and %.0f/s after)\n",
			r.BatchCeilingPerSecond, r.BatchRatio, max(r.CeilingBatch, r.Batch), r.BatchCeilingBeforePerSecond, r.measuredPhase(), r.BatchCeilingAfterPerSecond)
	case r.BatchCeilingPerSecond > 0:
		fmt.Fprintf(&b, "  batch ceiling %.0f/s   ratio %.2f  (the same write set in batches of %d, no fence)\n", r.BatchCeilingPerSecond, r.BatchRatio, max(r.CeilingBatch, r.Batch))
	}
	r.burstText(&b)
	if r.Rounds > 0 {
		fmt.Fprintf(&b, "  rounds        %d, %d saturated (claimed the whole budget)\n", r.Rounds, r.SaturatedRounds)
	}
	fmt.Fprintf(&b, "  retries       %d  (%.2f%% of admits)   races %d   releases %d   skips %d   errors %d   duplicates %d\n",
		r.Retries, 100*r.RetryRate, r.Races, r.Releases, r.Skips, r.Errors, r.Duplicates)
	if r.Replica == "process" {
		fmt.Fprintf(&b, "  claim         p50 ≤ %.1fms  p99 ≤ %.1fms  (bucket bounds of the processes' histograms)\n", r.ClaimP50Ms, r.ClaimP99Ms)
	} else {
		fmt.Fprintf(&b, "  claim         p50 %.2fms  p99 %.2fms\n", r.ClaimP50Ms, r.ClaimP99Ms)
		fmt.Fprintf(&b, "  admit         p50 %.2fms  p99 %.2fms\n", r.AdmitP50Ms, r.AdmitP99Ms)
	}
	worst := ""
	if len(r.Bursts) > 0 {
		worst = ", the worst burst's"
	}
	fmt.Fprintf(&b, "  lag           p50 %.0fms  p99 %.0fms  (admit db time - scheduled time%s)\n", r.LagP50Ms, r.LagP99Ms, worst)
	if r.Replica == "process" {
		fmt.Fprintf(&b, "  replicas      cpu %.0f%% (all processes)  rss %.1f MiB (anonymous %.1f, peak %.1f MiB), the largest replica process\n", r.CPUPercent, r.RSSMiB, r.AnonRSSMiB, r.PeakRSSMiB)
	} else {
		fmt.Fprintf(&b, "  process       cpu %.0f%%  rss %.1f MiB (anonymous %.1f, peak %.1f MiB), the whole bench process\n", r.CPUPercent, r.RSSMiB, r.AnonRSSMiB, r.PeakRSSMiB)
	}
	return b.String()
}
