// Package dispatcher composes one dispatcher replica (`qlsched dispatch`): readiness as
// `qlsched run` checks it, then the expiry sweeper, then the placer, then the worker protocol
// v1 handler (docs/dispatch.md). It holds no state of its own beyond the in-flight requests:
// every decision is a fenced statement of package dispatch, so any replica serves any request.
package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/roles"
)

// Options are what a dispatcher needs besides its database handle.
type Options struct {
	Config dispatch.Config // validated by the caller before any connection
	Names  roles.Names     // the roles readiness checks (connected as Names.Runtime)
	Owner  string          // this replica's name in logs and metrics
	Log    *slog.Logger
	// GaugeInterval is how often the loop's database gauges are read (0: DefaultGaugeInterval).
	GaugeInterval time.Duration
	// Wake opens the dedicated connection the wake-up on admission LISTENs on (dispatch.Waker);
	// nil: no wake-up, the placer finds new Runs by its --placement-interval probe only.
	Wake func(context.Context) (*pgx.Conn, error)
}

// Dispatcher is one started replica.
type Dispatcher struct {
	store   *dispatch.Store
	placer  *dispatch.Placer
	waker   *dispatch.Waker // nil: no wake-up on admission
	sweeper *dispatch.Sweeper
	log     *slog.Logger
	cfg     dispatch.Config

	handler  http.Handler
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	loop     *loopMetrics

	polling   atomic.Int64 // polls waiting in the placer now
	withdrawn atomic.Bool  // /readyz fails, polls answer dispatcher_stopping
	stopped   atomic.Bool  // new requests answer 503

	mu       sync.Mutex // guards inflight's Add against Stop's Wait
	inflight sync.WaitGroup

	withdrawOnce sync.Once
	placerErr    error
	stopOnce     sync.Once
	stopErr      error
}

// Start checks readiness on h (a *verify.NotReadyError when the schema or the runtime role's
// privileges drifted), then starts the sweeper and the placer. On error nothing is left running.
// The sweeper and placer run until Stop, not until ctx ends: the command's context ends at the
// first SIGTERM, and the stop order (withdraw, grace, drain) is Stop's.
func Start(ctx context.Context, h *dbconn.DB, opts Options) (*Dispatcher, error) {
	if err := verify.Readiness(ctx, h, opts.Names); err != nil {
		return nil, err
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := opts.Config.WithDefaults()
	store := dispatch.NewStore(h, cfg)
	d := &Dispatcher{store: store, log: log, cfg: cfg, reg: prometheus.NewRegistry()}
	d.sweeper = dispatch.NewSweeper(store, log)
	d.placer = dispatch.NewPlacer(store, log)
	if opts.Wake != nil {
		d.waker = dispatch.NewWaker(opts.Wake, d.placer, log)
	}
	interval := opts.GaugeInterval
	if interval <= 0 {
		interval = DefaultGaugeInterval
	}
	d.initMetrics(opts.Owner, interval) // before the sweeper starts: its observer counts every tick
	life := context.WithoutCancel(ctx)
	if err := d.sweeper.Start(life); err != nil {
		return nil, fmt.Errorf("start sweeper: %w", err)
	}
	if err := d.placer.Start(life); err != nil {
		_ = d.sweeper.Stop(context.Background())
		return nil, fmt.Errorf("start placer: %w", err)
	}
	if d.waker != nil {
		_ = d.waker.Start(life) // fails only when started twice
	}
	d.loop.gauges.start(life, log)
	d.handler = d.routes()
	return d, nil
}

func (d *Dispatcher) initMetrics(owner string, gaugeInterval time.Duration) {
	labels := prometheus.Labels{"owner": owner}
	d.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qlsched_dispatch_requests_total", ConstLabels: labels,
		Help: "Worker protocol requests by endpoint and answered code (ok, or the error code)."}, []string{"endpoint", "code"})
	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qlsched_dispatch_ready", ConstLabels: labels,
		Help: "1 while the dispatcher places Runs (until SIGTERM)."}, func() float64 {
		if ok, _ := d.Ready(); ok {
			return 1
		}
		return 0
	})
	polls := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qlsched_dispatch_polls_waiting", ConstLabels: labels,
		Help: "Worker long polls waiting for offers on this dispatcher."}, func() float64 { return float64(d.WaitingPolls()) })
	wakeListening := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qlsched_dispatch_wake_listening", ConstLabels: labels,
		Help: "1 while the wake-up on admission listens (LISTEN qlsched_runs_queued); 0: new Runs are found by the --placement-interval probe only."},
		func() float64 {
			if d.waker != nil && d.waker.Listening() {
				return 1
			}
			return 0
		})
	wakeNotifications := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "qlsched_dispatch_wake_notifications_total", ConstLabels: labels,
		Help: "Admission notifications received by the wake-up on admission."}, func() float64 {
		if d.waker == nil {
			return 0
		}
		return float64(d.waker.Notifications())
	})
	woken := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "qlsched_dispatch_woken_placements_total", ConstLabels: labels,
		Help: "Placement passes started by an admission notification that delivered offers (without waiting for the probe)."},
		func() float64 { return float64(d.placer.WokenPlacements()) })
	d.reg.MustRegister(wakeListening, wakeNotifications, woken)
	d.reg.MustRegister(d.requests, ready, polls, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.loop = newLoopMetrics(d.reg, labels, d.store, d.sweeper, gaugeInterval)
}

// Handler is the worker protocol: mount it at the root of its own listener.
func (d *Dispatcher) Handler() http.Handler { return d.handler }

// Metrics is the Prometheus handler of this replica's registry.
func (d *Dispatcher) Metrics() http.Handler {
	return promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{})
}

// WaitingPolls is how many long polls wait for offers now.
func (d *Dispatcher) WaitingPolls() int { return int(d.polling.Load()) }

// Ready is what /readyz answers: ready from Start until Withdraw.
func (d *Dispatcher) Ready() (bool, string) {
	if d.withdrawn.Load() {
		return false, "withdrawn: stopping"
	}
	return true, ""
}

// Withdraw stops placing: /readyz fails, the waiting polls are answered with no offers and
// dispatcher_stopping, and new polls get the same at once, so workers poll another replica.
// Every other endpoint keeps working (running Attempts heartbeat and complete). Idempotent.
func (d *Dispatcher) Withdraw() {
	d.withdrawOnce.Do(func() {
		d.withdrawn.Store(true)
		if d.waker != nil {
			d.waker.Stop()
		}
		if err := d.placer.Stop(context.Background()); err != nil {
			d.placerErr = fmt.Errorf("stop placer: %w", err)
		}
	})
}

// Stop withdraws (if not yet), stops the sweeper, refuses new requests (503) and waits for
// the requests in flight, bounded by ctx. Idempotent: a second call returns the first's error.
func (d *Dispatcher) Stop(ctx context.Context) error {
	d.stopOnce.Do(func() {
		d.Withdraw()
		errs := []error{d.placerErr}
		if err := d.sweeper.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop sweeper: %w", err))
		}
		if err := d.loop.gauges.stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop gauge reads: %w", err))
		}
		d.mu.Lock()
		d.stopped.Store(true)
		d.mu.Unlock()
		done := make(chan struct{})
		go func() { d.inflight.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("requests still in flight: %w", ctx.Err()))
		}
		d.stopErr = errors.Join(errs...)
	})
	return d.stopErr
}

// enter counts a request in flight; false once Stop has begun waiting.
func (d *Dispatcher) enter() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped.Load() {
		return false
	}
	d.inflight.Add(1)
	return true
}
