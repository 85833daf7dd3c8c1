package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/qlcontrol/controlcore/internal/app/pgcluster"
)

// `river loop` is the peer of `qlbench --scenario loop` (make bench-loop): N periodic jobs every
// second, enqueued by one client's elected leader and worked by the same client's workers (one
// queue, --workers × --capacity slots, the qlworker processes' slots), each job running the same
// no-op command as the loop's Runs (`true`, a process per job, as qlworker starts one; with
// --command "" the job is a Go no-op instead). From the database, in database time: inserted →
// running (attempted_at − created_at) of the jobs inserted in the window, and the jobs completed
// in it per second. With --against (qlbench's --format json document) it prints both side by
// side, with the ratios.

type loopArgs struct{}

func (loopArgs) Kind() string { return "loop" }

type loopWorker struct {
	river.WorkerDefaults[loopArgs]
	command string
}

func (w *loopWorker) Work(ctx context.Context, _ *river.Job[loopArgs]) error {
	if w.command == "" {
		return nil
	}
	return exec.CommandContext(ctx, w.command).Run()
}

type loopResult struct {
	Peer                 string  `json:"peer"`
	ServerVersion        string  `json:"server_version"`
	Jobs                 int     `json:"jobs"`
	Slots                int     `json:"slots"`
	Command              string  `json:"command"`
	WindowSeconds        float64 `json:"window_seconds"`
	Inserted             int64   `json:"inserted"`
	NotCompleted         int64   `json:"not_completed"`
	RunningP50Ms         float64 `json:"running_p50_ms"`
	RunningP99Ms         float64 `json:"running_p99_ms"`
	RunningMaxMs         float64 `json:"running_max_ms"`
	Completions          int64   `json:"completions"`
	CompletionsPerSecond float64 `json:"completions_per_second"`
}

// qlLoop is what `river loop` reads of qlbench's loop document.
type qlLoop struct {
	Loop *struct {
		Server               string   `json:"server"`
		Triggers             int      `json:"triggers"`
		Dispatchers          int      `json:"dispatchers"`
		Workers              int      `json:"workers"`
		Capacity             int      `json:"capacity"`
		Command              []string `json:"command"`
		WindowSeconds        float64  `json:"window_seconds"`
		Runs                 int64    `json:"runs"`
		NotSucceeded         int64    `json:"not_succeeded"`
		RunningP50Ms         float64  `json:"running_p50_ms"`
		RunningP99Ms         float64  `json:"running_p99_ms"`
		RunningMaxMs         float64  `json:"running_max_ms"`
		Completions          int64    `json:"completions"`
		CompletionsPerSecond float64  `json:"completions_per_second"`
		CeilingRuns          int64    `json:"ceiling_runs"`
		CeilingPerSecond     float64  `json:"ceiling_per_second"`
		Ratio                float64  `json:"ratio"`
		TargetP99Ms          float64  `json:"target_p99_ms"`
		TargetRatio          float64  `json:"target_ratio"`
	} `json:"loop"`
}

func peerLoop(args []string) error {
	fs := flag.NewFlagSet("loop", flag.ContinueOnError)
	jobs := fs.Int("jobs", 100, "N: periodic jobs, each every second (1 … 100000)")
	workers := fs.Int("workers", 4, "W: qlbench's --workers; the queue's slots are W × --capacity")
	capacity := fs.Int("capacity", 4, "qlbench's --capacity (slots per worker)")
	duration := fs.Duration("duration", 45*time.Second, "measured window (5s … 1h)")
	warmup := fs.Duration("warmup", 5*time.Second, "time before the window: leader election, first ticks")
	command := fs.String("command", "true", "the command each job runs (a process per job); empty: a Go no-op")
	against := fs.String("against", "", "qlbench --scenario loop --format json output to print beside River's, with ratios")
	url := fs.String("database-url", "", "an empty PostgreSQL database to use (default: a throwaway server, fsync on)")
	format := fs.String("format", "text", "text or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	slots := *workers * *capacity
	if *jobs < 1 || *jobs > 100000 || *workers < 1 || *capacity < 1 || slots > 10000 || *duration < 5*time.Second ||
		*duration > time.Hour || *warmup < 0 || (*format != "text" && *format != "json") {
		return errors.New("--jobs 1 … 100000, --workers ≥ 1, --capacity ≥ 1 (≤ 10000 slots), --duration 5s … 1h, --warmup ≥ 0, --format text|json")
	}
	var ql qlLoop
	if *against != "" {
		body, err := os.ReadFile(*against)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(body, &ql); err != nil || ql.Loop == nil {
			return fmt.Errorf("--against %s: not a qlbench --scenario loop --format json document (%v)", *against, err)
		}
	}
	if *command != "" {
		if _, err := exec.LookPath(*command); err != nil {
			return fmt.Errorf("--command: %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := runLoop(ctx, *url, *jobs, slots, *command, *warmup, *duration)
	if err != nil {
		return err
	}
	if *format == "json" {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("peer River %s, %s: %d periodic jobs every second, one client, %d slots, command %q, %.1fs window\n",
		res.Peer, res.ServerVersion, res.Jobs, res.Slots, res.Command, res.WindowSeconds)
	fmt.Printf("  jobs                 %d inserted in the window, %d not completed\n", res.Inserted, res.NotCompleted)
	fmt.Printf("  inserted → running   p50 %.0fms  p99 %.0fms  max %.0fms  (attempted_at − created_at)\n", res.RunningP50Ms, res.RunningP99Ms, res.RunningMaxMs)
	fmt.Printf("  completions          %d  (%.1f/s)\n", res.Completions, res.CompletionsPerSecond)
	if l := ql.Loop; l != nil {
		fmt.Printf("\nqlsched beside River, one sitting (%d every-second triggers / periodic jobs; %d dispatch × %d qlworker × capacity %d against one client × %d slots):\n\n",
			l.Triggers, l.Dispatchers, l.Workers, l.Capacity, res.Slots)
		fmt.Println("| measure | qlsched loop | River | qlsched ÷ River | target |")
		fmt.Println("| --- | --- | --- | --- | --- |")
		row := func(name string, q, r float64, unit, target string) {
			ratio := "—"
			if r > 0 {
				ratio = fmt.Sprintf("%.2f", q/r)
			}
			fmt.Printf("| %s | %.1f%s | %.1f%s | %s | %s |\n", name, q, unit, r, unit, ratio, target)
		}
		row("admitted → running p50", l.RunningP50Ms, res.RunningP50Ms, " ms", "")
		row("admitted → running p99", l.RunningP99Ms, res.RunningP99Ms, " ms", fmt.Sprintf("≤ %.0f ms", l.TargetP99Ms))
		row("admitted → running max", l.RunningMaxMs, res.RunningMaxMs, " ms", "")
		row("completions/s", l.CompletionsPerSecond, res.CompletionsPerSecond, "", "")
		fmt.Printf("| the loop's ceiling (%d pre-admitted Runs) | %.1f/s | — | — | |\n", l.CeilingRuns, l.CeilingPerSecond)
		fmt.Printf("| completions/s ÷ the loop's ceiling | %.2f | — | — | ≥ %.2f |\n", l.Ratio, l.TargetRatio)
		fmt.Printf("| not succeeded / not completed | %d | %d | | 0 |\n", l.NotSucceeded, res.NotCompleted)
	}
	return nil
}

func runLoop(ctx context.Context, url string, jobs, slots int, command string, warmup, window time.Duration) (*loopResult, error) {
	if url == "" {
		fmt.Fprintln(os.Stderr, "river loop: starting a throwaway PostgreSQL (fsync on)")
		cluster, err := pgcluster.Start(ctx, pgcluster.Options{Durable: true,
			Settings: pgcluster.BenchSettings(nil)}) // qlbench's settings
		if err != nil {
			return nil, err
		}
		defer cluster.Stop() //nolint:errcheck // best effort on the way out
		url = cluster.URL("postgres", "postgres")
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	res := &loopResult{Peer: riverVersion(), Jobs: jobs, Slots: slots, Command: command}
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&res.ServerVersion); err != nil {
		return nil, err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river migrations: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &loopWorker{command: command})
	periodic := make([]*river.PeriodicJob, jobs)
	for i := range periodic {
		periodic[i] = river.NewPeriodicJob(river.PeriodicInterval(time.Second),
			func() (river.JobArgs, *river.InsertOpts) { return loopArgs{}, nil }, nil)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:       map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: slots}},
		Workers:      workers,
		PeriodicJobs: periodic,
	})
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	stopped := false
	stopClient := func() {
		if stopped {
			return
		}
		stopped = true
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	}
	defer stopClient()

	fmt.Fprintf(os.Stderr, "river loop: %d periodic jobs every second, %d slots, command %q; warm-up %s, then a %s window\n",
		jobs, slots, command, warmup, window)
	var from, to time.Time
	if err := pool.QueryRow(ctx, "SELECT now() + $1::interval, now() + $2::interval",
		warmup.String(), (warmup+window).String()).Scan(&from, &to); err != nil {
		return nil, err
	}
	if err := sleepCtx(ctx, warmup+window+time.Second); err != nil { // the last inserts of the window commit
		return nil, err
	}
	// the jobs inserted in the window finish (the periodic jobs go on; later ones are not read)
	deadline := time.Now().Add(time.Minute)
	for {
		var open int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'loop' AND created_at >= $1 AND created_at < $2
			AND finalized_at IS NULL`, from, to).Scan(&open); err != nil {
			return nil, err
		}
		if open == 0 || time.Now().After(deadline) {
			break
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	stopClient()
	res.WindowSeconds = to.Sub(from).Seconds()
	err = pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE state <> 'completed'),
		       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - created_at) * 1000), 0),
		       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - created_at) * 1000), 0),
		       coalesce(max(extract(epoch FROM attempted_at - created_at) * 1000), 0)
		FROM river_job WHERE kind = 'loop' AND created_at >= $1 AND created_at < $2`, from, to).
		Scan(&res.Inserted, &res.NotCompleted, &res.RunningP50Ms, &res.RunningP99Ms, &res.RunningMaxMs)
	if err != nil {
		return nil, err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'loop' AND state = 'completed'
		AND finalized_at >= $1 AND finalized_at < $2`, from, to).Scan(&res.Completions); err != nil {
		return nil, err
	}
	if res.Inserted == 0 {
		return nil, errors.New("no job was inserted in the window (was a leader elected?)")
	}
	res.CompletionsPerSecond = float64(res.Completions) / res.WindowSeconds
	return res, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
