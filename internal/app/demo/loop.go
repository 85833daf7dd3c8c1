package demo

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/app/dispatcher"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/roles"
	"github.com/qlcontrol/controlcore/worker"
	"github.com/qlcontrol/controlcore/worker/process"
)

// dispatchConfig is the demo dispatcher's: a short lease, so that a cancel reaches the worker
// within a heartbeat (a third of it), and short polls, so that stopping is quick.
func dispatchConfig() dispatch.Config {
	return dispatch.Config{LeaseTTL: 6 * time.Second, PollMaxWait: 5 * time.Second, SweepInterval: time.Second,
		DrainTimeout: 5 * time.Second}.WithDefaults()
}

// startLoop starts the rest of the closed loop: one dispatcher as `qlsched dispatch` starts one
// (its own pool as the runtime role, readiness, sweeper and placer, the worker protocol on a
// loopback port of its own) and the workers, each a worker.Runner with the process handler as
// qlworker builds one. stop (idempotent) drains the workers (running jobs are stopped and handed
// back), then withdraws and stops the dispatcher and closes its pool.
func (d *demo) startLoop(ctx context.Context, names roles.Names, token string) (stop func(), err error) {
	cfg := dispatchConfig()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	quiet := slog.New(slog.DiscardHandler)
	pool, err := d.su.For(d.database, names.Runtime).Open(ctx)
	if err != nil {
		return nil, err
	}
	dsp, err := dispatcher.Start(ctx, pool, dispatcher.Options{Config: cfg, Names: names, Owner: "demo-dispatcher", Log: quiet})
	if err != nil {
		pool.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = dsp.Stop(context.Background())
		pool.Close()
		return nil, err
	}
	srv := &http.Server{Handler: dsp.Handler(), ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(quiet.Handler(), slog.LevelWarn)}
	go func() { _ = srv.Serve(ln) }()
	d.step("dispatcher demo-dispatcher (as %s): readiness ok, worker protocol on http://%s, lease %s", names.Runtime, ln.Addr(), cfg.LeaseTTL)

	wctx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	var once sync.Once
	stop = func() {
		once.Do(func() {
			d.step("stopping the workers (running jobs are stopped and handed back) and the dispatcher")
			stopWorkers()
			wg.Wait()
			dsp.Withdraw()
			sctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
			_ = dsp.Stop(sctx)
			_ = srv.Shutdown(sctx)
			cancel()
			pool.Close()
		})
	}
	for i := range workers {
		name := fmt.Sprintf("demo-worker-%d", i+1)
		client, err := worker.NewClient(worker.ClientOptions{Dispatchers: []string{"http://" + ln.Addr().String()}, Token: token})
		if err == nil {
			var r *worker.Runner
			r, err = worker.NewRunner(worker.Config{Client: client, Name: name, Capacity: workerSlots,
				Handler: process.New(process.Options{Supervisor: d.Supervisor}), DrainGrace: time.Second, Logger: quiet})
			if err == nil {
				wg.Go(func() {
					if err := r.Run(wctx); err != nil {
						fmt.Fprintf(d.Out, "    %s stopped: %v\n", name, err)
					}
				})
			}
		}
		if err != nil {
			stop()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		fmt.Fprintf(d.Out, "    %s: %d slots, registers with the dispatcher and long-polls for offers\n", name, workerSlots)
	}
	return stop, nil
}

// startCanceller cancels the sleeper's Run through the admin path (qlsched runs cancel) a second
// after it is seen running; the channel closes when it is done or ctx ends (the demo ends it
// once every admitted Run finished, so a sleeper Run admitted is cancelled first).
func (d *demo) startCanceller(ctx context.Context, pool *dbconn.DB) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		reader, pub := admin.NewReader(pool), admin.NewPublisher(pool)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			runs, err := reader.Runs(ctx, admin.RunFilter{Trigger: triggerOnce, State: "running", Limit: 1})
			if err != nil || len(runs) == 0 {
				continue
			}
			id := runs[0].RunID
			fmt.Fprintf(d.Out, "==> run %s (%s, sleep 60) is running on a worker: cancelling it in 1s (qlsched runs cancel)\n", id, triggerOnce)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second): // for the reader: the Run is seen running first
			}
			res, err := pub.CancelRun(ctx, id, "the demo cancels a running Run")
			switch {
			case err != nil:
				fmt.Fprintf(d.Out, "    cancel failed: %v\n", err)
			case res.Already:
				fmt.Fprintf(d.Out, "    run %s already %s\n", id, res.State)
			default:
				fmt.Fprintf(d.Out, "    run %s cancelled (was %s): its worker stops the process at its next heartbeat\n", id, res.From)
			}
			return
		}
	}()
	return done
}

// live are the states of a Run not finished.
var live = []string{"queued", "dispatching", "running"}

// settle waits, after the replicas stopped, until no admitted Run is live (at most settleWait):
// the workers finish what was admitted (the retries too). What is still live then is
// d.unfinished, which fails the execution audit.
func (d *demo) settle(ctx context.Context, pool *dbconn.DB) error {
	settle := settleWait
	if d.Options.settle != 0 {
		settle = d.Options.settle
	}
	d.step("waiting for the admitted Runs to finish (at most %s)", settle)
	started := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(settle)
	for {
		la, err := admin.NewReader(pool).LoopAudit(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		var n int64
		for _, s := range live {
			n += la.Runs("", s)
		}
		if n == 0 {
			fmt.Fprintf(d.Out, "    every Run finished %.1fs after the replicas stopped\n", time.Since(started).Seconds())
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			fmt.Fprintf(d.Out, "    %d Run(s) still live after %s\n", n, settle)
			d.unfinished = n
			return nil
		case <-tick.C:
		}
	}
}

// reportLoop prints the Runs per task and state, the retried Run and the cancelled one, and the
// execution audit; a broken invariant is ErrLoopAudit.
func (d *demo) reportLoop(ctx context.Context, pool *dbconn.DB) error {
	reader := admin.NewReader(pool)
	la, err := reader.LoopAudit(ctx)
	if err != nil {
		return err
	}
	d.step("runs by task and state (the workers ran them)")
	for _, s := range la.States {
		fmt.Fprintf(d.Out, "    %-8s %-10s runs %-4d attempts %d\n", s.TaskID, s.State, s.Runs, s.Attempts)
	}
	for _, show := range []struct{ trigger, state, what string }{
		{triggerFlaky, "failed", "retried and failed"},
		{triggerOnce, "cancelled", "cancelled while it ran"},
	} {
		runs, err := reader.Runs(ctx, admin.RunFilter{Trigger: show.trigger, State: show.state, Limit: 1})
		if err != nil {
			return err
		}
		if len(runs) == 0 {
			fmt.Fprintf(d.Out, "    no %s Run %s (its trigger fired after the replicas stopped: a --duration of %s or more shows it)\n",
				show.trigger, show.state, onceAfter+2*time.Second)
			continue
		}
		r := runs[0]
		fmt.Fprintf(d.Out, "    %s: run %s (%s) %s, attempts %d, events %d\n", show.what, r.RunID, show.trigger, r.State, r.Attempts, r.Events)
	}
	d.step("execution audit (the closed loop's invariants)")
	for _, c := range la.Checks {
		status := "ok"
		if c.Violations != 0 {
			status = fmt.Sprintf("%d rows break it", c.Violations)
		}
		fmt.Fprintf(d.Out, "    %-48s %s\n", c.Name, status)
	}
	if n := la.Violations(); n != 0 {
		return fmt.Errorf("%d rows break an invariant: %w", n, ErrLoopAudit)
	}
	if d.unfinished != 0 {
		fmt.Fprintf(d.Out, "    but %d admitted Run(s) did not finish: the workers did not run them\n", d.unfinished)
		return fmt.Errorf("%d admitted Run(s) still live after the replicas stopped: %w", d.unfinished, ErrLoopAudit)
	}
	fmt.Fprintln(d.Out, "    every invariant holds: one active lease at most, no overlap, one success at most, states agree")
	return nil
}
