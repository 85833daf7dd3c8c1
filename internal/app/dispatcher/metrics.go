package dispatcher

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/qlcontrol/controlcore/dispatch"
)

// DefaultGaugeInterval is how often a replica reads the closed loop's database gauges.
const DefaultGaugeInterval = 15 * time.Second

// gaugeReadTimeout bounds one read of the database gauges (like the replica's backlog read: a
// slow read delays the next one, it never leaves the gauges at their first values for ever).
const gaugeReadTimeout = 30 * time.Second

// loopMetrics are the closed loop's metrics of one dispatcher (docs/dispatch.md, Metrics). The
// counters and histograms count what this replica did (sum them over replicas); the database
// gauges are read in the background, once per interval, and are the same on every replica
// (alert on them with max()).
type loopMetrics struct {
	startWait   prometheus.Histogram
	ran         prometheus.Histogram
	finished    *prometheus.CounterVec
	retries     prometheus.Counter
	offersGone  prometheus.Counter
	leasesGone  prometheus.Counter
	sessionGone prometheus.Counter
	gauges      *gaugeCache
}

func newLoopMetrics(reg *prometheus.Registry, labels prometheus.Labels, store *dispatch.Store, sweeper *dispatch.Sweeper, interval time.Duration) *loopMetrics {
	m := &loopMetrics{}
	m.startWait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "qlsched_dispatch_start_latency_seconds", ConstLabels: labels,
		Help:    "Admitted (or, for a retry, its backoff's end) to running, by database time: observed when an ACK starts a Run.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)})
	m.ran = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "qlsched_dispatch_attempt_duration_seconds", ConstLabels: labels,
		Help:    "An Attempt's run, from its lease's grant to the worker's report, by database time: observed at completion.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 18)})
	m.finished = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qlsched_dispatch_attempts_finished_total", ConstLabels: labels,
		Help: "Attempts ended, by outcome: succeeded, failed, cancelled, handed_back (worker reports this replica answered), expired (leases its sweeper expired)."},
		[]string{"outcome"})
	for _, o := range []string{"succeeded", "failed", "cancelled", "handed_back", "expired"} {
		m.finished.WithLabelValues(o) // present at 0 from the start
	}
	m.retries = prometheus.NewCounter(prometheus.CounterOpts{Name: "qlsched_dispatch_retries_total", ConstLabels: labels,
		Help: "Runs queued again for another Attempt after a failed or handed-back report, or an expired lease."})
	m.offersGone = prometheus.NewCounter(prometheus.CounterOpts{Name: "qlsched_dispatch_offers_expired_total", ConstLabels: labels,
		Help: "Offers this replica's sweeper expired unanswered (the Run is queued again)."})
	m.leasesGone = prometheus.NewCounter(prometheus.CounterOpts{Name: "qlsched_dispatch_leases_expired_total", ConstLabels: labels,
		Help: "Leases this replica's sweeper expired (no heartbeat within the lease TTL: the Attempt expired)."})
	m.sessionGone = prometheus.NewCounter(prometheus.CounterOpts{Name: "qlsched_dispatch_sessions_expired_total", ConstLabels: labels,
		Help: "Worker sessions this replica's sweeper expired."})
	sweepErrors := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "qlsched_dispatch_sweep_errors_total", ConstLabels: labels,
		Help: "Sweep statements that failed on this replica (logged; the next tick tries again)."},
		func() float64 { return float64(sweeper.Errors()) })
	m.gauges = &gaugeCache{fn: store.Gauges, interval: interval, since: time.Now(),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "qlsched_dispatch_gauges_reading_errors_total", ConstLabels: labels,
			Help: "Background reads of the loop's database gauges that failed (the gauges keep their last values)."})}
	reg.MustRegister(m.startWait, m.ran, m.finished, m.retries, m.offersGone, m.leasesGone, m.sessionGone, sweepErrors,
		m.gauges.errors, newGaugeCollector(m.gauges, labels))
	sweeper.Observe(m.swept)
	return m
}

// started is an ACK's lease: a Run that went to running.
func (m *loopMetrics) started(l dispatch.Lease) {
	if l.Started && l.Waited >= 0 {
		m.startWait.Observe(l.Waited.Seconds())
	}
}

// completed is a report this replica wrote (not a replay).
func (m *loopMetrics) completed(outcome dispatch.Outcome, c dispatch.Completion) {
	if c.Replay || c.AttemptState == "" {
		return
	}
	label := string(outcome)
	if c.AttemptState == "cancelled" { // a report on a cancelled Run ends its Attempt cancelled
		label = "cancelled"
	}
	m.finished.WithLabelValues(label).Inc()
	m.ran.Observe(c.Ran.Seconds())
	if c.RunState == "queued" {
		m.retries.Inc()
	}
}

func (m *loopMetrics) swept(s dispatch.Swept) {
	m.offersGone.Add(float64(s.Offers))
	m.leasesGone.Add(float64(s.Leases.Expired))
	m.finished.WithLabelValues("expired").Add(float64(s.Leases.Expired))
	m.retries.Add(float64(s.Leases.Requeued))
	m.sessionGone.Add(float64(s.Sessions))
}

// gaugeCollector serves the last reading of the database gauges; a project whose queue emptied
// leaves the per-project series.
type gaugeCollector struct {
	c                                   *gaugeCache
	depth, age, sessions, free, readAge *prometheus.Desc
}

func newGaugeCollector(c *gaugeCache, labels prometheus.Labels) *gaugeCollector {
	return &gaugeCollector{c: c,
		depth: prometheus.NewDesc("qlsched_dispatch_queue_runs",
			"Queued Runs of an active project (the database's, the same on every replica: use max), counted within 100000 queued Runs per read over all projects; at most 500 projects.",
			[]string{"project"}, labels),
		age: prometheus.NewDesc("qlsched_dispatch_queue_oldest_age_seconds",
			"How long the project's oldest queued Run has been ready (admitted, scheduled or its retry's backoff ended) without a worker taking it, by database time (0 when none is ready yet). The same on every replica.",
			[]string{"project"}, labels),
		sessions: prometheus.NewDesc("qlsched_dispatch_worker_sessions",
			"Live (unexpired) worker sessions by state: active (taking offers) or draining. The same on every replica.",
			[]string{"state"}, labels),
		free: prometheus.NewDesc("qlsched_dispatch_free_capacity",
			"Free slots of the active worker sessions: capacity minus live offers and active leases. The same on every replica.",
			nil, labels),
		readAge: prometheus.NewDesc("qlsched_dispatch_gauges_reading_age_seconds",
			"Seconds since the loop's database gauges were last read successfully (since the replica started when never).",
			nil, labels),
	}
}

func (g *gaugeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.depth, g.age, g.sessions, g.free, g.readAge} {
		ch <- d
	}
}

func (g *gaugeCollector) Collect(ch chan<- prometheus.Metric) {
	v, age := g.c.get()
	for _, q := range v.Queues {
		ch <- prometheus.MustNewConstMetric(g.depth, prometheus.GaugeValue, float64(q.Queued), q.ProjectID)
		ch <- prometheus.MustNewConstMetric(g.age, prometheus.GaugeValue, q.OldestAge.Seconds(), q.ProjectID)
	}
	ch <- prometheus.MustNewConstMetric(g.sessions, prometheus.GaugeValue, float64(v.ActiveSessions), "active")
	ch <- prometheus.MustNewConstMetric(g.sessions, prometheus.GaugeValue, float64(v.DrainingSessions), "draining")
	ch <- prometheus.MustNewConstMetric(g.free, prometheus.GaugeValue, float64(v.FreeCapacity))
	ch <- prometheus.MustNewConstMetric(g.readAge, prometheus.GaugeValue, age.Seconds())
}

// gaugeCache holds the last reading, refreshed by its own loop (start … stop).
type gaugeCache struct {
	fn       func(context.Context) (dispatch.Gauges, error)
	interval time.Duration
	errors   prometheus.Counter
	log      *slog.Logger // set by start; only the loop reads it
	failing  int          // failed reads in a row; only the loop touches it

	mu     sync.Mutex
	since  time.Time // the last successful reading, or the cache's creation
	val    dispatch.Gauges
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *gaugeCache) get() (dispatch.Gauges, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.val, time.Since(c.since)
}

// refresh reads once; a failed read keeps the last values (their age grows), counts, and is
// logged when it starts a streak of failures.
func (c *gaugeCache) refresh(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, gaugeReadTimeout)
	defer cancel()
	v, err := c.fn(rctx)
	if err != nil {
		if ctx.Err() == nil {
			c.errors.Inc()
			if c.failing++; c.failing == 1 {
				c.log.Warn("loop gauges: read failed; /metrics serves the last values (qlsched_dispatch_gauges_reading_age_seconds grows)", "err", err)
			}
		}
		return
	}
	if c.failing > 0 {
		c.log.Info("loop gauges: read again", "failed_reads", c.failing)
	}
	c.failing = 0
	c.mu.Lock()
	c.val, c.since = v, time.Now()
	c.mu.Unlock()
}

// start reads now, then once per interval, until stop.
func (c *gaugeCache) start(ctx context.Context, log *slog.Logger) {
	c.log = log
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	c.mu.Lock()
	c.cancel, c.done = cancel, done
	c.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(c.interval)
		defer t.Stop()
		for {
			c.refresh(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// stop ends the loop and waits for it, at most until ctx ends.
func (c *gaugeCache) stop(ctx context.Context) error {
	c.mu.Lock()
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
