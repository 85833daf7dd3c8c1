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

type peerWorker struct{ river.WorkerDefaults[peerArgs] }

func (*peerWorker) Work(context.Context, *river.Job[peerArgs]) error { return nil }

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
func peerJobs(n int, plain bool) []*river.PeriodicJob {
	jobs := make([]*river.PeriodicJob, n)
	for i := range jobs {
		opts := &river.InsertOpts{Queue: "not_worked", UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Second}}
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
	river.AddWorker(workers, &peerWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID:           *id,
		Logger:       slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:       map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers:      workers,
		PeriodicJobs: peerJobs(*jobs, *plain),
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
