// Package demo runs the whole stack once, for a person watching: a PostgreSQL (a throwaway one it
// starts, or a database of its own on a given server), the four roles, the migration stream,
// verify, a published project, and replicas composed as `qlsched run` composes one (readiness,
// startup recovery, lifecycle); beside them the rest of the closed loop: one dispatcher composed
// as `qlsched dispatch` composes one and two workers built as qlworker builds one, which run the
// Runs' commands (one succeeds, one fails and is retried, one is cancelled while it runs). Then
// the Runs, the exactly-once audit and the execution audit. It removes everything it started,
// also when its context is cancelled.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/app/pgcluster"
	replicapkg "github.com/qlcontrol/controlcore/internal/app/replica"
	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/roles"
	"github.com/qlcontrol/controlcore/schedule"
)

// Bounds of Options.
const (
	MaxReplicas = 8
	MinDuration = time.Second
	MaxDuration = 10 * time.Minute
)

// Options configure one demo.
type Options struct {
	// Replicas is how many replicas run, each with its own pool and owner (1 … MaxReplicas).
	Replicas int
	// Duration is how long they run (MinDuration … MaxDuration).
	Duration time.Duration
	// Server, when not nil, is a superuser connection to run the demo on, in a database the demo
	// creates and drops; nil starts a throwaway PostgreSQL from this machine's server binaries.
	Server *dbconn.Config
	// Out receives the progress, one line at a time.
	Out io.Writer
	// Supervisor is the workers' per-job supervisor argv (process.Options.Supervisor): with it, a
	// job and its descendants die with the demo even when it is killed; nil runs each job as a
	// direct child of the demo (stopped with its process group when the demo stops).
	Supervisor []string

	// settle replaces settleWait when not 0 (a test's short wait)
	settle time.Duration
}

// Validate checks the bounds; its error names the field.
func (o Options) Validate() error {
	if o.Replicas < 1 || o.Replicas > MaxReplicas {
		return fmt.Errorf("replicas %d: want 1 … %d", o.Replicas, MaxReplicas)
	}
	if o.Duration < MinDuration || o.Duration > MaxDuration {
		return fmt.Errorf("duration %s: want %s … %s", o.Duration, MinDuration, MaxDuration)
	}
	return nil
}

// Problems the demo found (a command maps them to "a check found a problem").
var (
	ErrNotSuperuser = errors.New("not a superuser: the demo creates a database and the four roles")
	ErrDrift        = errors.New("verify found drift on a fresh database")
	ErrNotExactOnce = errors.New("exactly-once audit failed")
	ErrLoopAudit    = errors.New("execution audit failed")
)

// Triggers are the sample triggers: every second, every 2 s catching up once, every 5 s skipping
// after an outage, and a daily one that initialises and waits.
var Triggers = []admin.TriggerSpec{
	{Trigger: "every-second", Cron: "* * * * * *", TimeZone: "UTC", Misfire: schedule.MisfireSkip},
	{Trigger: "every-2s", Cron: "*/2 * * * * *", TimeZone: "Europe/Berlin", Misfire: schedule.MisfireFireOnce},
	{Trigger: "every-5s", Cron: "*/5 * * * * *", TimeZone: "America/New_York", Misfire: schedule.MisfireSkip},
	{Trigger: "nightly", Cron: "0 3 * * *", TimeZone: "Asia/Tokyo", Misfire: schedule.MisfireFireOnce},
}

// The tasks the workers run: every hello Run succeeds; every flaky Run exits 1, is retried once
// after retryBackoff and fails; the one sleeper Run is cancelled while it runs.
const (
	taskHello     = "hello"
	taskFlaky     = "flaky"
	taskSleeper   = "sleeper"
	triggerFlaky  = "flaky-3s"
	triggerOnce   = "sleep-once"
	retryBackoff  = 500 * time.Millisecond
	flakyAttempts = 2
	workers       = 2
	workerSlots   = 2
	// onceAfter is how long after the replicas started the sleeper's trigger fires (once: a
	// daily cron at that second)
	onceAfter = 2 * time.Second
	// settleWait bounds the wait for the admitted Runs to finish after the replicas stopped
	settleWait = 15 * time.Second
)

// cadence is the replicas' round cadence: short, so that a few seconds show many rounds.
const cadence = 250 * time.Millisecond

// Run runs the demo. Every role's work goes through su.For(database, role): the superuser acting
// as that role.
func Run(ctx context.Context, opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	opts.Out = &lockedWriter{w: opts.Out} // fmt.Fprintf writes a line in one Write
	d := &demo{Options: opts, database: "control"}
	if err := d.run(ctx); err != nil {
		return err
	}
	d.nextSteps()
	return nil
}

// nextStepCommands is what the demo suggests at its end: the README's path from here to a real database
// and a replica of one's own.
var nextStepCommands = []string{
	"go install ./cmd/...    # qlmigrate and qlsched into $(go env GOPATH)/bin: put that on PATH (or make build: ./bin)",
	"psql postgres://postgres@HOST/postgres -c 'CREATE DATABASE control'",
	"qlmigrate roles create --database-url postgres://postgres@HOST/control",
	"qlmigrate up --database-url postgres://ql_owner@HOST/control",
	"export QL_DATABASE_URL=postgres://ql_admin@HOST/control",
	"qlsched apply -f examples/schedules.yaml --check; qlsched apply -f examples/schedules.yaml",
	"QL_DATABASE_URL=postgres://ql_runtime@HOST/control qlsched run   # on every replica (the default --owner, host name and pid, is unique)",
	"qlsched status; qlsched trigger list; qlsched runs list --state queued",
}

// nextSteps prints nextStepCommands and where the admitted Runs go.
func (d *demo) nextSteps() {
	d.step("next steps (README.md)")
	for _, s := range nextStepCommands {
		fmt.Fprintf(d.Out, "    %s\n", s)
	}
	fmt.Fprintln(d.Out, "    The Runs stay queued, each with one claimed remote_worker Attempt, until a dispatcher")
	fmt.Fprintln(d.Out, "    (qlsched dispatch) offers them to workers (qlworker), as this demo did (docs/dispatch.md).")
}

type demo struct {
	Options
	su       *dbconn.Config
	database string
	// marker is in every job's environment (QLDEMO_ID): what this demo started, and only that
	marker string
	// unfinished is how many admitted Runs were still live when settle gave up waiting
	unfinished int64
}

// lockedWriter serialises the lines of the progress loop and the canceller.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (d *demo) step(format string, args ...any) { fmt.Fprintf(d.Out, "==> "+format+"\n", args...) }

func (d *demo) run(ctx context.Context) (err error) {
	if d.Server == nil {
		d.step("starting a throwaway PostgreSQL")
		cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
		if err != nil {
			return &dbconn.ConnectError{Err: err}
		}
		defer func() {
			d.step("stopping PostgreSQL and removing %s", cluster.DataDir())
			_ = cluster.Stop()
		}()
		d.step("PostgreSQL from %s on 127.0.0.1:%d, data in %s", cluster.BinDir, cluster.Port, cluster.DataDir())
		d.marker = cluster.DataDir()
		if d.su, err = dbconn.Resolve(cluster.URL("postgres", "postgres")); err != nil {
			return err
		}
	} else {
		d.su, d.database = d.Server, fmt.Sprintf("qlsched_demo_%d", time.Now().UnixMilli())
		d.marker = d.database
		d.step("using the server of --database-url, %s, in a new database %s", d.Server.Describe(), d.database)
	}
	if err := d.createDatabase(ctx); err != nil {
		return err
	}
	if d.Server != nil {
		// a database left behind (with the workers' token valid in it) is a failure, not a success
		defer func() { err = errors.Join(err, d.dropDatabase()) }()
	}

	names, err := roles.NewNames(roles.DefaultPrefix)
	if err != nil {
		return err
	}
	if err := d.prepare(ctx, names); err != nil {
		return err
	}
	adminPool, err := d.su.For(d.database, names.Admin).Open(ctx)
	if err != nil {
		return err
	}
	defer adminPool.Close()
	token, err := d.publish(ctx, adminPool, names)
	if err != nil {
		return err
	}
	stopLoop, err := d.startLoop(ctx, names, token)
	if err != nil {
		return err
	}
	defer stopLoop()
	cctx, stopCanceller := context.WithCancel(ctx)
	cancelled := d.startCanceller(cctx, adminPool)
	defer func() { stopCanceller(); <-cancelled }()
	if err := d.runReplicas(ctx, names, adminPool); err != nil {
		return err
	}
	if err := d.settle(ctx, adminPool); err != nil {
		return err
	}
	stopCanceller()
	<-cancelled
	stopLoop()
	return d.report(ctx, adminPool)
}

// createDatabase checks that su is a superuser and creates the demo's database.
func (d *demo) createDatabase(ctx context.Context) error {
	conn, err := d.su.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var superuser bool
	if err := conn.QueryRow(ctx, "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user").Scan(&superuser); err != nil {
		return d.su.RedactError(err)
	}
	if !superuser {
		return fmt.Errorf("%s: %w", d.su.Pool.ConnConfig.User, ErrNotSuperuser)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// template0: a fresh database whatever an administrator put into template1, and no conflict
	// with sessions connected to template1. Not cancelled with ctx: a CREATE DATABASE cut off by
	// Ctrl-C may still commit on the server while the demo, never told, would not drop it; run to
	// its end, the database is dropped by the caller like any other.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	if _, err := conn.Exec(cctx, "CREATE DATABASE "+pgx.Identifier{d.database}.Sanitize()+" TEMPLATE template0"); err != nil {
		return d.su.RedactError(err)
	}
	return nil
}

// dropDatabase drops the demo's database on a given server, also after a cancellation; when it
// cannot, it says how to and returns why.
func (d *demo) dropDatabase() error {
	d.step("dropping database %s", d.database)
	drop := "DROP DATABASE IF EXISTS " + pgx.Identifier{d.database}.Sanitize() + " WITH (FORCE)"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := d.su.Connect(ctx)
	if err == nil {
		_, err = conn.Exec(ctx, drop)
		conn.Close(ctx)
	}
	if err != nil {
		err = d.su.RedactError(err)
		fmt.Fprintf(d.Out, "    could not drop it (%v): run %s\n", err, drop)
		return fmt.Errorf("database %s left behind, the worker token demo-workers valid in it: %w", d.database, err)
	}
	return nil
}

// prepare does what a DBA and a CI pipeline do before a replica starts: roles create, up as the
// owner role, and verify (checksums, capability, readiness, exact privileges).
func (d *demo) prepare(ctx context.Context, names roles.Names) error {
	d.step("qlmigrate roles create")
	conn, err := d.su.For(d.database, "").Connect(ctx)
	if err != nil {
		return err
	}
	report, err := roles.Create(ctx, conn, names)
	conn.Close(context.Background())
	if err != nil {
		return err
	}
	for _, r := range report.Roles {
		fmt.Fprintf(d.Out, "    %s\n", r)
	}

	d.step("qlmigrate up (as %s)", names.Owner)
	r, err := migrate.Open(ctx, d.su.For(d.database, ""), migrate.Options{Names: names, AsOwner: true})
	if err != nil {
		return err
	}
	applied, err := r.Up(ctx, 0)
	r.Close()
	if err != nil {
		return err
	}
	if len(applied) > 0 {
		d.step("applied %d migrations: %s … %s", len(applied), applied[0].Migration.Name, applied[len(applied)-1].Migration.Name)
	}

	d.step("qlmigrate verify (as %s)", names.Owner)
	ownerPool, err := d.su.For(d.database, names.Owner).Open(ctx)
	if err != nil {
		return err
	}
	verified, err := verify.Run(ctx, ownerPool, verify.Options{Names: names})
	ownerPool.Close()
	if err != nil {
		return err
	}
	for _, c := range verified.Checks {
		fmt.Fprintf(d.Out, "    %-17s %s\n", c.Name, c.Status)
	}
	if !verified.OK {
		return fmt.Errorf("%d finding(s): %w", verified.Summary.Drift, ErrDrift)
	}
	d.step("%s is at v%d / %s", verified.Expected.Component, verified.Expected.Capability, verified.Expected.Name)
	return nil
}

// publish publishes the project, its three tasks and their triggers, and creates the workers'
// token (returned, never printed), all as the admin role.
func (d *demo) publish(ctx context.Context, pool *dbconn.DB, names roles.Names) (string, error) {
	d.step("publishing project demo, tasks %s, %s and %s, and %d triggers (as %s)", taskHello, taskFlaky, taskSleeper, len(Triggers)+1, names.Admin)
	pub := admin.NewPublisher(pool)
	if _, err := pub.CreateProject(ctx, "demo"); err != nil {
		return "", err
	}
	backoff := retryBackoff
	env := fmt.Sprintf(`"env":{"QLDEMO_ID":%q}`, d.marker)
	tasks := []struct {
		spec    admin.TaskSpec
		command string
	}{
		{admin.TaskSpec{Task: taskHello, ExecutorSpec: []byte(`{"command":["sh","-c","echo hello"],` + env + `}`)}, `sh -c "echo hello"`},
		{admin.TaskSpec{Task: taskFlaky, ExecutorSpec: []byte(`{"command":["false"],` + env + `}`), MaxAttempts: flakyAttempts, RetryBackoff: &backoff},
			fmt.Sprintf("false (exits 1), max attempts %d, retry backoff %s", flakyAttempts, retryBackoff)},
		{admin.TaskSpec{Task: taskSleeper, ExecutorSpec: []byte(`{"command":["sleep","60"],` + env + `}`)}, "sleep 60 (cancelled while it runs)"},
	}
	for _, t := range tasks {
		t.spec.Project = "demo"
		if _, err := pub.PublishTask(ctx, t.spec); err != nil {
			return "", err
		}
		fmt.Fprintf(d.Out, "    task %-8s %s\n", t.spec.Task, t.command)
	}
	triggers := append([]admin.TriggerSpec(nil), Triggers...)
	for i := range triggers {
		triggers[i].Task = taskHello
	}
	triggers = append(triggers,
		admin.TriggerSpec{Task: taskFlaky, Trigger: triggerFlaky, Cron: "*/3 * * * * *", TimeZone: "UTC", Misfire: schedule.MisfireSkip})
	for _, t := range triggers {
		if err := d.publishTrigger(ctx, pub, t); err != nil {
			return "", err
		}
	}
	tok, err := pub.CreateWorkerToken(ctx, "demo-workers")
	if err != nil {
		return "", err
	}
	fmt.Fprintf(d.Out, "    worker token demo-workers (id %s) created, as qlsched worker token create does; the secret stays in memory\n", tok.ID)
	return tok.Token, nil
}

func (d *demo) publishTrigger(ctx context.Context, pub *admin.Publisher, t admin.TriggerSpec) error {
	t.Project, t.Enabled = "demo", true
	if _, err := pub.PublishTrigger(ctx, t); err != nil {
		return err
	}
	fmt.Fprintf(d.Out, "    %-14s %-16q %-18s misfire %-9s task %s\n", t.Trigger, t.Cron, t.TimeZone, t.Misfire, t.Task)
	return nil
}

// publishOnce publishes the sleeper's trigger once the replicas run: a daily cron at the second
// onceAfter from now (rounded up), so it fires once, whatever the time the replicas took to start.
func (d *demo) publishOnce(ctx context.Context, pool *dbconn.DB) error {
	once := time.Now().Add(onceAfter).UTC().Truncate(time.Second).Add(time.Second)
	d.step("publishing trigger %s: it fires once, at %s", triggerOnce, once.Format(time.RFC3339))
	return d.publishTrigger(ctx, admin.NewPublisher(pool), admin.TriggerSpec{Task: taskSleeper, Trigger: triggerOnce,
		Cron: fmt.Sprintf("%d %d %d * * *", once.Second(), once.Minute(), once.Hour()), TimeZone: "UTC", Misfire: schedule.MisfireFireOnce})
}

// timeLayout is the demo's time: RFC 3339 with milliseconds and the zone (UTC: Z), as qlsched's
// admin commands print one.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// legend says what the progress lines count, before the first of them (the same words as the
// metrics of README.md, Metrics).
var legend = []string{
	"progress, once a second (counters summed over the replicas since they started):",
	"  claims    schedule rows claimed (each claim ends in one of the next four, or expires)",
	"  admits    Runs admitted: one per occurrence, with Attempt 1 and its events",
	"  skips     claims ended by the skip misfire policy: occurrences older than the grace, no Run",
	"  releases  claims ended without a Run: a first cursor set (initialisation) or not yet due",
	"  races     fenced writes that lost their fence to another replica (nothing written)",
	"  errors    anything else that failed (logged); retries: serialization failures retried",
	"  succeeded / failed / cancelled   Runs the workers finished, by outcome",
}

// replica is one running replica of the demo.
type replica struct {
	co *coordinator.Coordinator
	lc *coordinator.Lifecycle
}

// startReplica starts one replica the way `qlsched run` does (package replica: readiness on the
// runtime role's own connection, startup recovery, then the lifecycle).
func startReplica(ctx context.Context, pool *dbconn.DB, names roles.Names, owner string) (*replica, coordinator.RecoveryReport, error) {
	cfg := coordinator.DefaultConfig(owner)
	cfg.Cadence = cadence
	if err := cfg.Validate(); err != nil {
		return nil, coordinator.RecoveryReport{}, err
	}
	r, err := replicapkg.Start(ctx, pool, replicapkg.Options{Config: cfg, Names: names, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, coordinator.RecoveryReport{}, err
	}
	return &replica{co: r.Coordinator, lc: r.Lifecycle}, r.Recovery, nil
}

func (d *demo) runReplicas(ctx context.Context, names roles.Names, adminPool *dbconn.DB) error {
	d.step("running %d replicas for %s (as %s, cadence %s): readiness, startup recovery, rounds", d.Replicas, d.Duration, names.Runtime, cadence)
	var (
		replicas []*replica
		pools    []*dbconn.DB
	)
	// On every way out, in reverse: the lifecycles stop (again: a second Stop returns nil), then
	// the pools close, so no round is left running on a closed pool when a later start fails.
	defer func() {
		for _, r := range replicas {
			_ = r.lc.Stop(context.Background())
		}
		for _, p := range pools {
			p.Close()
		}
	}()
	for i := range d.Replicas {
		pool, err := d.su.For(d.database, names.Runtime).Open(ctx)
		if err != nil {
			return err
		}
		pools = append(pools, pool)
		owner := fmt.Sprintf("demo-replica-%d", i+1)
		r, rep, err := startReplica(ctx, pool, names, owner)
		if err != nil {
			return fmt.Errorf("%s: %w", owner, err)
		}
		fmt.Fprintf(d.Out, "    %s: ready; startup recovery: %d candidates, %d failed closed\n", owner, rep.Candidates, rep.FailedClosed)
		replicas = append(replicas, r)
	}
	if err := d.publishOnce(ctx, adminPool); err != nil {
		return err
	}

	for _, l := range legend {
		fmt.Fprintf(d.Out, "    %s\n", l)
	}
	runCtx, stopRun := context.WithTimeout(ctx, d.Duration)
	defer stopRun()
	started := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-runCtx.Done():
			done = true
		case <-tick.C:
		}
		var sum coordinator.Snapshot
		for _, r := range replicas {
			st := r.co.Stats.Snapshot()
			sum.Claims += st.Claims
			sum.Admits += st.Admits
			sum.Skips += st.Skips
			sum.Releases += st.Releases
			sum.Races += st.Races
			sum.Errors += st.Errors
		}
		// the Runs the workers finished so far (the loop's side of the progress line)
		var finished string
		if la, err := admin.NewReader(adminPool).LoopAudit(ctx); err == nil {
			finished = fmt.Sprintf(" | succeeded %-4d failed %-3d cancelled %d",
				la.Runs("", "succeeded"), la.Runs("", "failed"), la.Runs("", "cancelled"))
		}
		// one line each: a log or a pipe gets lines, not one long line of carriage returns
		fmt.Fprintf(d.Out, "    %4.0fs  claims %-5d admits %-5d skips %-3d releases %-3d races %-3d errors %d%s\n",
			time.Since(started).Seconds(), sum.Claims, sum.Admits, sum.Skips, sum.Releases, sum.Races, sum.Errors, finished)
	}
	for _, r := range replicas {
		if err := r.lc.Stop(context.Background()); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for i, r := range replicas {
		st := r.co.Stats.Snapshot()
		fmt.Fprintf(d.Out, "    replica %d: claims %d, admits %d, skips %d, releases %d, races %d, retries %d, errors %d\n",
			i+1, st.Claims, st.Admits, st.Skips, st.Releases, st.Races, st.Retries, st.Errors)
	}
	return nil
}

// report prints the newest Runs, the exactly-once audit and the execution audit.
func (d *demo) report(ctx context.Context, pool *dbconn.DB) error {
	d.step("admitted runs (newest 8)")
	runs, err := admin.NewReader(pool).Runs(ctx, admin.RunFilter{Limit: 8})
	if err != nil {
		return err
	}
	for _, r := range runs {
		trigger, at := "", "-"
		if r.TriggerID != nil {
			trigger = *r.TriggerID
		}
		if r.ScheduledForMs != nil {
			at = time.UnixMilli(*r.ScheduledForMs).UTC().Format(timeLayout)
		}
		lag, _ := r.LagMs()
		fmt.Fprintf(d.Out, "    %s  %-13s scheduled %s  lag %4dms  %-9s  attempts %d events %d\n", r.RunID, trigger, at, lag,
			r.State, r.Attempts, r.Events)
	}
	d.step("exactly-once audit")
	audit, err := admin.NewReader(pool).ExactlyOnce(ctx)
	if err != nil {
		return err
	}
	var problems int64
	for _, a := range audit {
		fmt.Fprintf(d.Out, "    %-13s runs %-4d occurrences %-4d duplicates %d  misshapen %d  lag p50 %4.0fms max %4dms\n",
			a.TriggerID, a.Runs, a.Occurrences, a.Duplicates, a.Misshapen, a.LagP50Ms, a.LagMaxMs)
		problems += a.Problems()
	}
	if problems != 0 {
		return fmt.Errorf("%d duplicate or misshapen runs: %w", problems, ErrNotExactOnce)
	}
	fmt.Fprintln(d.Out, "    every occurrence admitted exactly once: 1 Run each, admitted with Attempt 1, run.created and run.queued")
	return d.reportLoop(ctx, pool)
}
