// Command qlbench measures the scheduler's admission throughput, latency and lag against the
// database's own ceiling, and times the operator's reads at scale (docs/performance.md). It is a
// binary of its own so that qlsched, the production binary, links no bench machinery and
// nothing that spawns initdb. See `qlbench --help`.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"
	_ "time/tzdata" // every binary resolves zones identically, also in minimal containers

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/internal/app/bench"
	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/base/buildinfo"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

func main() {
	a := &app{}
	os.Exit(cli.Run(a.rootCmd(), os.Args[1:], os.Stderr, a.redact))
}

// app holds the global flags.
type app struct {
	databaseURL string
	format      cli.Format
	logFormat   string
	logLevelStr string
	qlsched     string
	qlworker    string

	logLevel slog.Level
	conn     *dbconn.Config
}

func (a *app) redact(s string) string {
	if a.conn == nil {
		return s
	}
	return a.conn.Redact(s)
}

func (a *app) rootCmd() *cobra.Command {
	cfg := bench.Config{Scenario: bench.Backlog, Triggers: 10000, Every: "minute", Replicas: 4,
		Duration: 30 * time.Second, Budget: 256, Cadence: 10 * time.Millisecond, Batch: 1, Bursts: 2,
		Projects: bench.DefaultScaleProjects, HistoryRuns: bench.DefaultScaleHistoryRuns, Samples: 5,
		MassPublish: bench.DefaultScaleMassPublish, InitWait: 2 * time.Minute,
		Dispatchers: bench.DefaultLoopDispatchers, Workers: bench.DefaultLoopWorkers, Capacity: bench.DefaultLoopCapacity,
		CeilingRuns: bench.DefaultLoopCeilingRuns}
	root := &cobra.Command{
		Use:   "qlbench [--scenario backlog|steady|burst|scale|loop] [--triggers N] [--replicas R] [--duration D]",
		Short: "Measure admission throughput against the database's ceiling, latency and lag",
		Long: `qlbench starts a throwaway PostgreSQL with fsync on (or uses --database-url: a migrated database
and a role that may publish and claim, e.g. a superuser; QL_DATABASE_URL and the PG* variables
are not read, so a shell set up for production never benchmarks it by accident), publishes --triggers cron triggers in a
new project and runs --replicas replicas (separate pools, distinct owners): in-process, or with
--processes as real ` + "`qlsched run`" + ` processes connected as the runtime role (counters from their
final log line, claim latency from their /metrics histograms, CPU and RSS from /proc).

  backlog  every trigger is due at once. First the ceiling: the same write set (claim statement,
           then one READ COMMITTED statement inserting run, attempt, 2 events and advancing the
           schedule, no fence checks; the next claim behind its COMMIT in the same round trip,
           as a single-mode replica sends it behind its admit) at the same concurrency; then the
           real replicas; then, in
           single mode, the ceiling once more, on a fresh backlog: the reported ceiling is the
           mean of the two, so a drift of the disk's flush latency does not land on one side
           only. Reports admits/s, ceiling/s and their ratio from one run on one server. With
           --admit-batch N a batch ceiling follows the first: the same write set claimed and
           written N rows at a time (one READ COMMITTED statement per batch), the database's own
           rate for batches, and the ratio to it. --every second keeps every trigger due each
           second (continuous demand) instead of once.
  steady   triggers fire once a minute at seconds spread over the minute; after the cursors are
           initialised, the replicas run for --duration and the admission lag is the measure.
  burst    every trigger has the same minute-aligned spec (* * * * *), so all of them fall due
           at each minute boundary. First the batch ceiling (the same write set, --admit-batch
           rows at a time, 128 in single mode); then every trigger is set due at the next
           minute boundary at least 5 s away, the replicas start idle and run through --bursts
           boundaries, and stop once the last burst is admitted or --duration after its instant;
           then the batch ceiling again, on the tables the bursts left: the reported ceiling is
           the mean of the two. Per burst, from the runs table in database time: admitted,
           missing, the time to drain (last admission minus the instant), admitted ÷ drain time
           and its ratio to the batch ceiling, lag p50/p99/max. In-process replicas only.
  scale    issue 37's data set and every operator read at it. --projects projects (20) with
           --triggers daily triggers (100,000 by default for this scenario) published through
           the admin code of ` + "`qlsched apply`" + ` (one apply per project), and --history-runs Runs
           of history (2,000,000) written set-based as a superuser OUTSIDE the product path:
           the rows admission writes (queued Run, claimed remote_worker Attempt, run.created
           and run.queued), one INSERT … SELECT generate_series per table. The data set's rows
           are initialised first (in-process replicas at budget 256, cadence 10 ms, up to
           --init-wait), and the tables vacuumed and checkpointed. Then each read, --samples times, as an operator meets it: the built
           binary's status, project list, runs list (with and without --project, with a
           state filter that matches nothing), trigger list, task list (as ql_admin, wall
           time from exec to exit); the console's overview and a project's pages (GET against ` + "`qlsched ui`" + `);
           a replica process's /metrics (--backlog-interval 1s, scraped every 1.1 s so each
           scrape runs the backlog statement) and its start until "startup recovery done"
           (readiness included). Then the mass publish: two in-process replicas at the
           defaults and one every-second trigger admitting, --mass-publish new triggers
           (20,000) in one apply, and the time until every one is initialised, capped at
           --init-wait (reported as not initialised within it), with the every-second
           trigger's admitted and missed occurrences and max lag meanwhile. Prints the table
           (read, median, max, target, pass) in the Markdown of docs/performance.md, "Scale";
           --format json for the document. Needs --runtime-url (and --admin-url for the reads
           as the admin role) with --database-url.
  loop     the closed loop (issue 33): --triggers every-second triggers (20 by default for
           this scenario) of a task whose command is ["true"], one ` + "`qlsched run`" + ` process,
           --dispatchers ` + "`qlsched dispatch`" + ` processes and --workers ` + "`qlworker`" + ` processes of
           --capacity slots each, all connected as the runtime role. After a 5 s warm-up, a
           --duration window; then the scheduler stops and the Runs in flight finish. From the
           database, in database time: admitted → running p50/p99/max (the first Attempt's
           start, the worker's acknowledgement, minus the Run's admission) of the Runs
           admitted in the window, and the Runs that succeeded in it per second. Then the
           loop's own ceiling: the workers stop, --ceiling-runs Runs are admitted (in-process,
           batch admission), as many workers start again and drain them through the same
           dispatchers: Runs ÷ (last finish − first start). Targets: p99 ≤ 50 ms below
           capacity, completions/s ≥ 0.8 × the ceiling (when the demand, --triggers per
           second, reaches it). --qlworker names the worker binary (default: beside qlbench,
           else on PATH). Not run in CI: ` + "`make bench-loop`" + ` runs it beside River.

Each measured phase (a ceiling, a burst) starts on vacuumed and analysed tables (the Run tables
once they hold Runs), so no phase pays autovacuum for the one before; best effort (the role may
not own them, and a burst that drains less than 15 s before the next instant leaves no time):
the progress says when a phase starts unsettled. With batches the ceiling's workers claim
their next rows while they write, as a batch-mode round does.

Reported: admits/s, rounds and the rounds that claimed their whole budget (saturated), claim and admit latency p50/p99, admission lag p50/p99 (admit database time
minus scheduled time), serialization retries, races, releases, duplicates (must be 0), process
CPU and RSS. --format json prints one qlsched.bench/v1 document (docs/json.md); the progress
goes to stderr.

The replica processes (--processes) and the scale scenario's reads run the qlsched binary:
--qlsched, else qlsched beside this binary, else qlsched on PATH. Build both with
go build -o bin/ ./cmd/... and run bin/qlbench.

Exit codes: 0 success, 1 duplicate occurrences, 2 bad usage or configuration (nothing was
started), 3 cannot connect or the database failed, 130 interrupted.`,
		Example: `  qlbench --scenario backlog --replicas 4 --budget 256 --cadence 10ms
  qlbench --scenario steady --triggers 1000 --replicas 2 --budget 16 --cadence 1s --duration 70s
  qlbench --scenario burst --triggers 10000 --replicas 4 --admit-batch 128 --bursts 2
  qlbench --scenario scale --triggers 100000 --projects 20 --history-runs 2000000`,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if a.logLevel, err = cli.LogLevel(a.logFormat, a.logLevelStr); err != nil {
				return err
			}
			if cfg.Scenario == bench.Scale && !cmd.Flags().Changed("triggers") {
				cfg.Triggers = bench.DefaultScaleTriggers
			}
			if a.databaseURL != "" {
				if a.conn, err = dbconn.Resolve(a.databaseURL); err != nil {
					return err
				}
				cfg.URL = a.databaseURL
			}
			if cfg.Scenario == bench.Loop && !cmd.Flags().Changed("triggers") {
				cfg.Triggers = bench.DefaultLoopTriggers
			}
			if cfg.Scenario == bench.Loop {
				if cfg.WorkerExe, err = siblingBinary("qlworker", "--qlworker", a.qlworker); err != nil {
					return err
				}
			}
			if cfg.Processes || cfg.Scenario == bench.Scale || cfg.Scenario == bench.Loop || cmd.Flags().Changed("qlsched") {
				if cfg.Exe, err = qlschedBinary(a.qlsched); err != nil {
					return err
				}
			}
			if err := cfg.Validate(); err != nil {
				return cli.ConfigUsageError(err)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Log = cli.Logger(a.logFormat, a.logLevel)
			rep, err := bench.Run(cmd.Context(), cfg, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			doc := cli.Document{Schema: "qlsched.bench/v1", Body: rep} // the schema predates qlbench (docs/json.md)
			if err := cli.Output(cmd.OutOrStdout(), a.format, doc, func() { fmt.Fprint(cmd.OutOrStdout(), rep.Text()) }); err != nil {
				return err
			}
			if rep.Duplicates != 0 {
				return cli.Problemf("%d duplicate occurrences", rep.Duplicates)
			}
			return nil
		},
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	cli.AddVersion(root, buildinfo.Read())
	pf := root.PersistentFlags()
	// only the flag: QL_DATABASE_URL and PG* are never read (--help says why)
	pf.StringVar(&a.databaseURL, "database-url", "", "PostgreSQL URL of a migrated database to run on (default: a throwaway server of its own)")
	cli.FormatVar(pf, &a.format)
	pf.StringVar(&a.logFormat, "log-format", "text", "log format on stderr: text (terminals) or json (collectors)")
	pf.StringVar(&a.logLevelStr, "log-level", "info", "log level: debug, info, warn or error")
	f := root.Flags()
	f.StringVar(&cfg.Scenario, "scenario", cfg.Scenario, "backlog, steady, burst or scale")
	f.IntVar(&cfg.Triggers, "triggers", cfg.Triggers, "cron triggers to publish")
	f.StringVar(&cfg.Every, "every", cfg.Every, "backlog: triggers due once (minute) or every second (second)")
	f.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "in-process replicas, each with its own pool and owner")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long the replicas run at most (burst: after the last burst's instant)")
	f.IntVar(&cfg.Bursts, "bursts", cfg.Bursts, "burst: minute boundaries to measure, 1 … 10")
	f.IntVar(&cfg.Budget, "budget", cfg.Budget, "claims per round per replica, 1 … 256")
	f.DurationVar(&cfg.Cadence, "cadence", cfg.Cadence, "time between round starts, 10ms … 1m")
	f.IntVar(&cfg.Batch, "admit-batch", cfg.Batch, "batch admission: rows per claim and per admit transaction (1: single mode)")
	f.BoolVar(&cfg.Processes, "processes", false, "run the replicas as real qlsched run processes (connected as the runtime role) instead of in-process")
	f.StringVar(&cfg.RuntimeURL, "runtime-url", "", "with --processes and --database-url: the URL the replica processes connect with (the runtime role)")
	f.IntVar(&cfg.Projects, "projects", cfg.Projects, "scale: projects the triggers are spread over")
	f.Int64Var(&cfg.HistoryRuns, "history-runs", cfg.HistoryRuns, "scale: Runs of history written set-based")
	f.IntVar(&cfg.Samples, "samples", cfg.Samples, "scale: times each read is timed (median and max)")
	f.IntVar(&cfg.MassPublish, "mass-publish", cfg.MassPublish, "scale: new triggers in the mass publish (0: none)")
	f.DurationVar(&cfg.InitWait, "init-wait", cfg.InitWait, "scale: how long to wait for an initialisation (the data set's, the mass publish's)")
	f.StringVar(&cfg.AdminURL, "admin-url", "", "scale with --database-url: the URL the timed reads connect with (the admin role; default --database-url)")
	f.IntVar(&cfg.Dispatchers, "dispatchers", cfg.Dispatchers, "loop: qlsched dispatch processes, 1 … 16")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "loop: qlworker processes, 1 … 64")
	f.IntVar(&cfg.Capacity, "capacity", cfg.Capacity, "loop: jobs each worker runs at once, 1 … 256")
	f.IntVar(&cfg.CeilingRuns, "ceiling-runs", cfg.CeilingRuns, "loop: pre-admitted Runs the ceiling drains (0: no ceiling)")
	f.StringVar(&cfg.SegmentsFile, "segments-file", "", "loop: write each window Run's times (admitted, committed, notified, pass, offered, answered, running; unix ms, tab-separated, a header line) to this file")
	f.StringVar(&a.qlworker, "qlworker", "", "loop: the qlworker binary (default: qlworker beside qlbench, else on PATH)")
	f.StringVar(&cfg.CPUProfileDir, "cpu-profile", "", "diagnosis, backlog and steady: write Go CPU profiles into this existing directory: in-process.pprof (the replicas' phase), or with --processes one <owner>.pprof per qlsched run process (its --cpu-profile)")
	f.StringVar(&a.qlsched, "qlsched", "", "the qlsched binary --processes and scale run (default: qlsched beside qlbench, else on PATH)")
	return root
}

// qlschedBinary finds the qlsched binary the replica processes and the scale reads run: flag (a
// path, or a name looked up on PATH), else qlsched beside this binary, else qlsched on PATH. Not
// finding it is a usage error, reported before anything starts.
func qlschedBinary(flag string) (string, error) {
	if flag != "" {
		p, err := exec.LookPath(flag)
		if err != nil {
			return "", cli.Usagef("--qlsched %s: %v", flag, err)
		}
		return filepath.Abs(p)
	}
	var self string
	if exe, err := os.Executable(); err == nil {
		self = filepath.Dir(exe)
		if p, err := exec.LookPath(filepath.Join(self, "qlsched")); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("qlsched"); err == nil {
		return filepath.Abs(p)
	}
	return "", cli.Usagef("--processes and --scenario scale run qlsched: none beside qlbench (%s) nor on PATH; "+
		"build it: go build -o bin/ ./cmd/... and run bin/qlbench, or give --qlsched PATH", self)
}

// siblingBinary finds binary name as qlschedBinary finds qlsched: flag (its value given), else
// beside this binary, else on PATH; not finding it is a usage error.
func siblingBinary(name, flagName, value string) (string, error) {
	if value != "" {
		p, err := exec.LookPath(value)
		if err != nil {
			return "", cli.Usagef("%s %s: %v", flagName, value, err)
		}
		return filepath.Abs(p)
	}
	if exe, err := os.Executable(); err == nil {
		if p, err := exec.LookPath(filepath.Join(filepath.Dir(exe), name)); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return filepath.Abs(p)
	}
	return "", cli.Usagef("--scenario loop runs %s: none beside qlbench nor on PATH; build it: go build -o bin/ ./cmd/... "+
		"and run bin/qlbench, or give %s PATH", name, flagName)
}
