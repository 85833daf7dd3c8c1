package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// peerArgs is one of the N periodic jobs of the chaos mode; Job tells them apart (and is part of
// the unique key, UniqueOpts.ByArgs).
type peerArgs struct {
	Job int `json:"job"`
}

func (peerArgs) Kind() string { return "peer_nop" }

// peerWorker works the periodic jobs. With an execution log (the whole-loop soak, river-exec) it
// appends "job scheduled_second_ms unix_ms client" for each execution, in one write to an
// O_APPEND file (lines of concurrent executions never interleave); without one it does nothing
// (the jobs then sit in a queue no client works).
type peerWorker struct {
	river.WorkerDefaults[peerArgs]
	execLog, id string
}

func (w *peerWorker) Work(_ context.Context, job *river.Job[peerArgs]) error {
	if w.execLog == "" {
		return nil
	}
	return appendLine(w.execLog, fmt.Sprintf("%d %d %d %s\n", job.Args.Job, job.ScheduledAt.Truncate(time.Second).UnixMilli(), time.Now().UnixMilli(), w.id))
}

// appendLine appends line to path in one write.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// chaosJob is the job of qlsched's whole-loop soak (`river chaos-job`, run by qlworker): it
// appends "run_id attempt_no unix_ms" to the execution log, from the environment qlworker's
// process handler sets.
func chaosJob(args []string) error {
	fs := flag.NewFlagSet("chaos-job", flag.ContinueOnError)
	logPath := fs.String("log", "", "the execution log")
	if err := fs.Parse(args); err != nil {
		return err
	}
	run, attempt := os.Getenv("QL_RUN_ID"), os.Getenv("QL_ATTEMPT_NO")
	if *logPath == "" || run == "" || attempt == "" {
		return fmt.Errorf("chaos-job: --log, QL_RUN_ID and QL_ATTEMPT_NO are required")
	}
	return appendLine(*logPath, fmt.Sprintf("%s %s %d\n", run, attempt, time.Now().UnixMilli()))
}

// everySecond is the cron "* * * * * *": the next whole second. River's PeriodicInterval(time.Second)
// would count seconds from each leader's election instead, so occurrences would drift off whole
// seconds at every change of leader and two leaders' occurrences would not line up; a whole-second
// schedule gives every occurrence the scheduled second qlsched's triggers have, and lets
// UniqueOpts.ByPeriod (which truncates scheduled_at to the period) recognise the same occurrence
// from two leaders.
type everySecond struct{}

func (everySecond) Next(t time.Time) time.Time { return t.Truncate(time.Second).Add(time.Second) }

// peerJobs are River's best configuration against duplicates and losses for N every-second jobs,
// as its documentation recommends for periodic jobs under leader changes: RunOnStart (a new
// leader inserts one job at once instead of waiting for the next tick) together with unique jobs
// (ByArgs + ByPeriod one second, so the RunOnStart job, a paused old leader's late inserts and the
// new leader's inserts of one second collapse into one row).
//
// plain leaves both out (River's defaults), to show what they buy.
//
// queue is the queue the jobs go to: "not_worked" (admission only) or river.QueueDefault (worked).
func peerJobs(n int, plain bool, queue string) []*river.PeriodicJob {
	jobs := make([]*river.PeriodicJob, n)
	for i := range jobs {
		opts := &river.InsertOpts{Queue: queue, UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Second}}
		periodic := &river.PeriodicJobOpts{ID: fmt.Sprintf("job%05d", i), RunOnStart: true}
		if plain {
			opts.UniqueOpts, periodic.RunOnStart = river.UniqueOpts{}, false
		}
		jobs[i] = river.NewPeriodicJob(everySecond{}, func() (river.JobArgs, *river.InsertOpts) {
			return peerArgs{Job: i}, opts
		}, periodic)
	}
	return jobs
}

// chaosClient is one River client process of the chaos mode: it runs until SIGTERM, then stops
// gracefully (a leader resigns, and the others hear it over LISTEN/NOTIFY).
func chaosClient(args []string) error {
	fs := flag.NewFlagSet("chaos-client", flag.ContinueOnError)
	url := fs.String("database-url", "", "the River database")
	id := fs.String("id", "", "client ID (River's leader_id)")
	jobs := fs.Int("jobs", 100, "periodic jobs, each every second")
	plain := fs.Bool("plain", false, "River's defaults: no unique jobs, no RunOnStart")
	execLog := fs.String("exec-log", "", "work the jobs (up to --max-workers at once), each appending a line to this log")
	maxWorkers := fs.Int("max-workers", 16, "with --exec-log: jobs worked at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" || *id == "" || *jobs < 1 {
		return fmt.Errorf("chaos-client: --database-url, --id and --jobs ≥ 1 are required")
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, *url)
	if err != nil {
		return err
	}
	defer pool.Close()
	workers := river.NewWorkers()
	river.AddWorker(workers, &peerWorker{execLog: *execLog, id: *id})
	queue, slots := "not_worked", 1
	if *execLog != "" {
		queue, slots = river.QueueDefault, *maxWorkers
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID:           *id,
		Logger:       slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:       map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: slots}},
		Workers:      workers,
		PeriodicJobs: peerJobs(*jobs, *plain, queue),
	})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	log.Info("river client started", "id", *id, "jobs", *jobs)
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	log.Info("river client stopped", "id", *id)
	return nil
}
