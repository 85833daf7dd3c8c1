// Command river measures the peer users would pick instead of qlsched: River's periodic jobs
// (github.com/riverqueue/river), N jobs every second enqueued by one client's elected leader, on a
// throwaway PostgreSQL started from the same server binaries and with the same settings (fsync
// on) as `qlbench`, so the two rates come from one machine in one sitting.
//
// It is a separate module so River's dependencies stay out of control-core's go.mod. It prints
// jobs inserted per second over the measured window and the lag from each job's scheduled time
// to its insertion (created_at - scheduled_at, both database times).
//
//	cd bench/river && go run . --jobs 20000 --duration 30s
//
// `river chaos` (chaos.go) is the peer under faults: R River client processes (`river
// chaos-client`) and R `qlsched run` processes put through one seeded fault plan on one server,
// and one audit by scheduled second (internal/testkit/chaos):
//
//	go build -o bin/ ./cmd/qlsched && cd bench/river && go run . chaos --qlsched ../../bin/qlsched --jobs 50 --duration 45s
//
// `river loop` (loop.go) is the peer of `qlbench --scenario loop`: the same periodic jobs worked
// by the client's own workers, each running the loop's no-op command (make bench-loop).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/qlcontrol/controlcore/internal/app/pgcluster"
)

// nopArgs is the periodic job; it is inserted into a queue no client works, so the measurement
// is the enqueue path alone, as in qlbench (which admits Runs and dispatches nothing).
type nopArgs struct{}

func (nopArgs) Kind() string { return "nop" }

type nopWorker struct{ river.WorkerDefaults[nopArgs] }

func (*nopWorker) Work(context.Context, *river.Job[nopArgs]) error { return nil }

type result struct {
	Peer             string  `json:"peer"`
	ServerVersion    string  `json:"server_version"`
	Jobs             int     `json:"jobs"`
	WindowSeconds    float64 `json:"window_seconds"`
	Inserted         int64   `json:"inserted"`
	InsertsPerSecond float64 `json:"inserts_per_second"`
	LagP50Ms         float64 `json:"lag_p50_ms"`
	LagP99Ms         float64 `json:"lag_p99_ms"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "loop" {
		if err := peerLoop(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "river loop:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && (os.Args[1] == "chaos" || os.Args[1] == "chaos-client" || os.Args[1] == "chaos-job") {
		run := peerChaos
		switch os.Args[1] {
		case "chaos-client":
			run = chaosClient
		case "chaos-job":
			run = chaosJob
		}
		if err := run(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "river "+os.Args[1]+":", err)
			os.Exit(1)
		}
		return
	}
	jobs := flag.Int("jobs", 20000, "periodic jobs, each every second (1 … 100000)")
	duration := flag.Duration("duration", 30*time.Second, "measured window (5s … 10m)")
	warmup := flag.Duration("warmup", 5*time.Second, "time before the window: leader election, first ticks")
	url := flag.String("database-url", "", "an empty PostgreSQL database to use (default: a throwaway server, fsync on)")
	format := flag.String("format", "text", "text or json")
	flag.Parse()
	if *jobs < 1 || *jobs > 100000 || *duration < 5*time.Second || *duration > 10*time.Minute ||
		*warmup < 0 || (*format != "text" && *format != "json") {
		fmt.Fprintln(os.Stderr, "river: --jobs 1 … 100000, --duration 5s … 10m, --warmup ≥ 0, --format text|json")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, *url, *jobs, *warmup, *duration)
	if err != nil {
		fmt.Fprintln(os.Stderr, "river:", err)
		os.Exit(1)
	}
	if *format == "json" {
		_ = json.NewEncoder(os.Stdout).Encode(res)
		return
	}
	fmt.Printf("peer River %s, %s: %d periodic jobs every second, one client, %.1fs window\n",
		res.Peer, res.ServerVersion, res.Jobs, res.WindowSeconds)
	fmt.Printf("  inserted      %d  (%.0f/s)\n", res.Inserted, res.InsertsPerSecond)
	fmt.Printf("  lag           p50 %.0fms  p99 %.0fms  (created_at - scheduled_at)\n", res.LagP50Ms, res.LagP99Ms)
}

// riverVersion is the River module this binary was built with (go.mod pins it).
func riverVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == "github.com/riverqueue/river" {
				return m.Version
			}
		}
	}
	return "(unknown version)"
}

func run(ctx context.Context, url string, jobs int, warmup, window time.Duration) (*result, error) {
	if url == "" {
		fmt.Fprintln(os.Stderr, "river: starting a throwaway PostgreSQL (fsync on)")
		cluster, err := pgcluster.Start(ctx, pgcluster.Options{Durable: true})
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
	res := &result{Peer: riverVersion(), Jobs: jobs}
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
	river.AddWorker(workers, &nopWorker{})
	periodic := make([]*river.PeriodicJob, jobs)
	for i := range periodic {
		periodic[i] = river.NewPeriodicJob(river.PeriodicInterval(time.Second),
			func() (river.JobArgs, *river.InsertOpts) { return nopArgs{}, &river.InsertOpts{Queue: "not_worked"} }, nil)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:       map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers:      workers,
		PeriodicJobs: periodic,
	})
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	}()

	fmt.Fprintf(os.Stderr, "river: %d periodic jobs every second; warm-up %s, then a %s window\n", jobs, warmup, window)
	var from, to time.Time
	if err := pool.QueryRow(ctx, "SELECT now() + $1::interval, now() + $2::interval",
		warmup.String(), (warmup+window).String()).Scan(&from, &to); err != nil {
		return nil, err
	}
	select {
	case <-time.After(warmup + window + time.Second): // the last inserts of the window commit
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res.WindowSeconds = to.Sub(from).Seconds()
	err = pool.QueryRow(ctx, `
		SELECT count(*),
		       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM created_at - scheduled_at) * 1000), 0),
		       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM created_at - scheduled_at) * 1000), 0)
		FROM river_job WHERE kind = 'nop' AND created_at >= $1 AND created_at < $2`, from, to).
		Scan(&res.Inserted, &res.LagP50Ms, &res.LagP99Ms)
	if err != nil {
		return nil, err
	}
	if res.Inserted == 0 {
		return nil, errors.New("no job was inserted in the window (was a leader elected?)")
	}
	res.InsertsPerSecond = float64(res.Inserted) / res.WindowSeconds
	return res, nil
}
