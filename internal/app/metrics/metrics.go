// Package metrics exposes one replica's scheduler counters and measurements in the Prometheus
// format on /metrics. Counters are read from the coordinator's own Stats at scrape time (one
// source of truth); histograms are fed by its Observer; the database gauges (backlog, rows
// waiting for initialisation) come from one bounded query that a background loop runs once per
// interval, so a scrape never waits on the database: it serves the last reading and its age.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/base/buildinfo"
)

// BacklogFunc reads the database gauges.
type BacklogFunc func(ctx context.Context) (Backlog, error)

// Metrics is the registry of one replica, and the loop that refreshes its database gauges.
type Metrics struct {
	reg     *prometheus.Registry
	backlog *backlogCache
}

// Measurements are the histograms and the errors by class that a coordinator's Observer feeds.
// They exist before the coordinator, which takes their Observer at construction
// (coordinator.WithObserver), and New registers them.
type Measurements struct {
	owner                                  string
	errorsByClass                          *prometheus.CounterVec
	roundSeconds, claimSeconds, lagSeconds prometheus.Histogram
	missed                                 *missedCounter
}

// MaxMissedProjects bounds the project label of qlsched_missed_occurrences_total: the first
// this many projects a replica sees miss occurrences get their own series; any later one is
// counted under project="_other" (the per-trigger count is in the database: qlsched trigger
// show). With the two policies that is at most 2 × (MaxMissedProjects + 1) series per replica.
const MaxMissedProjects = 100

// OtherProject is the project label of the missed occurrences past MaxMissedProjects.
const OtherProject = "_other"

// missedCounter is qlsched_missed_occurrences_total with its project label bounded.
type missedCounter struct {
	vec  *prometheus.CounterVec
	mu   sync.Mutex
	seen map[string]bool
}

func (m *missedCounter) add(project, policy string, n int64) {
	m.mu.Lock()
	if !m.seen[project] {
		if len(m.seen) < MaxMissedProjects {
			m.seen[project] = true
		} else {
			project = OtherProject
		}
	}
	m.mu.Unlock()
	m.vec.WithLabelValues(project, policy).Add(float64(n))
}

// NewMeasurements makes the measurements of the replica owner.
func NewMeasurements(owner string) *Measurements {
	constLabels := prometheus.Labels{"owner": owner}
	m := &Measurements{owner: owner}
	m.errorsByClass = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qlsched_errors_total", ConstLabels: constLabels,
		Help: "Counted errors by class: claim, admit, init, release, skip, decide, corrupt."}, []string{"class"})
	for _, class := range []string{"claim", "admit", "init", "release", "skip", "decide", "corrupt"} {
		m.errorsByClass.WithLabelValues(class) // present at 0 from the start
	}
	m.roundSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "qlsched_round_duration_seconds", ConstLabels: constLabels,
		Help: "Duration of a coordinator round.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)})
	m.claimSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "qlsched_claim_duration_seconds", ConstLabels: constLabels,
		Help: "Duration of one claim statement sent on its own round trip (in single mode the claims sent behind an admit are not observed: their round trip is the admit's).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12)})
	m.missed = &missedCounter{seen: map[string]bool{}, vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qlsched_missed_occurrences_total", ConstLabels: constLabels,
		Help: "Occurrences the misfire decision passed over without a Run (older than the trigger's misfire grace): under skip all of them, under fire_once all but the one fired; one decision counts at most 10,000 (then a lower bound); counted when the cursor advance or admission that ends them is written. project is bounded (the first 100 projects, later ones as _other)."},
		[]string{"project", "policy"})}
	m.lagSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "qlsched_admission_lag_seconds", ConstLabels: constLabels,
		Help: "Admit database time minus the occurrence's scheduled time.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)})
	return m
}

// Observer is what the coordinator calls with each measurement.
func (m *Measurements) Observer() coordinator.Observer {
	return coordinator.Observer{
		Round:    func(d time.Duration, _ int) { m.roundSeconds.Observe(d.Seconds()) },
		Claim:    func(d time.Duration) { m.claimSeconds.Observe(d.Seconds()) },
		Admitted: func(lag time.Duration) { m.lagSeconds.Observe(lag.Seconds()) },
		Error:    func(class string) { m.errorsByClass.WithLabelValues(class).Inc() },
		Missed:   m.missed.add,
	}
}

// New registers the metrics of co, whose Observer feeds meas (the owner label is meas's). backlog
// is read by the loop Start runs, once per interval (nil: never, the gauges stay 0).
func New(co *coordinator.Coordinator, meas *Measurements, ready func() bool, backlog BacklogFunc, interval time.Duration) *Metrics {
	reg := prometheus.NewRegistry()
	constLabels := prometheus.Labels{"owner": meas.owner}
	reg.MustRegister(newStatsCollector(co, constLabels))
	reg.MustRegister(meas.errorsByClass, meas.roundSeconds, meas.claimSeconds, meas.lagSeconds, meas.missed.vec)

	b := &backlogCache{fn: backlog, interval: interval, since: time.Now(),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "qlsched_backlog_reading_errors_total", ConstLabels: constLabels,
			Help: "Background reads of the database gauges that failed (the gauges keep their last values; see qlsched_backlog_reading_age_seconds)."})}
	reg.MustRegister(b.errors)
	gauge := func(name, help string, read func(Backlog) float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, ConstLabels: constLabels, Help: help},
			func() float64 { return read(b.get()) }))
	}
	gauge("qlsched_backlog_schedules",
		"Schedule rows a claim would take now (due or uninitialised, unclaimed, active project, enabled cron trigger), counted up to 100000, read in the background once per --backlog-interval.",
		func(v Backlog) float64 { return float64(v.Due) })
	gauge("qlsched_backlog_oldest_age_seconds",
		"Age of the oldest due occurrence among those rows, by database time (0 when none).",
		func(v Backlog) float64 { return v.OldestAge.Seconds() })
	gauge("qlsched_schedules_uninitialised",
		"Of those rows, the ones waiting for initialisation (no cursor yet: newly published or reset), within the same cap.",
		func(v Backlog) float64 { return float64(v.Uninitialised) })
	gauge("qlsched_schedules_uninitialised_oldest_age_seconds",
		"How long the oldest row waiting for initialisation has waited since it was published (or last claimed without being initialised), by database time (0 when none).",
		func(v Backlog) float64 { return v.OldestUninitialisedAge.Seconds() })
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qlsched_backlog_reading_age_seconds", ConstLabels: constLabels,
		Help: "Seconds since the database gauges were last read successfully (since the replica started when never): the age of the values the scrape serves."},
		func() float64 { return b.age().Seconds() }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qlsched_ready", ConstLabels: constLabels,
		Help: "1 while the replica is ready and admitting (/readyz answers 200), else 0."},
		func() float64 {
			if ready() {
				return 1
			}
			return 0
		}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qlsched_admission_capacity_per_second", ConstLabels: constLabels,
		Help: "The most occurrences per second this replica can admit: --budget ÷ --cadence (a round that claims its whole budget waits out the cadence). Compare with rate(qlsched_claims_total)."},
		co.Capacity))
	reg.MustRegister(buildInfoGauge(buildinfo.Read(), constLabels))
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Metrics{reg: reg, backlog: b}
}

// Start starts the loop that reads the database gauges: once now, then once per interval, until
// Stop. Each read is bounded (30 s). log (nil: none) hears the first failed read of a streak, with
// its error, and the read that ends it; the counter counts every one. A second Start is an error.
func (m *Metrics) Start(ctx context.Context, log *slog.Logger) error {
	return m.backlog.start(ctx, log)
}

// Stop stops the loop and waits for it, at most until ctx ends. Stopping twice, or a Metrics
// never started, is fine.
func (m *Metrics) Stop(ctx context.Context) error {
	return m.backlog.stop(ctx)
}

// statsCollector exports the coordinator's counters, and its gauge of rounds failing in a row,
// from one Snapshot per scrape, so that the relations between them (claims >= admits + skips +
// releases) hold within every scrape.
type statsCollector struct {
	co      *coordinator.Coordinator
	metrics []statsMetric
}

type statsMetric struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
	read func(coordinator.Snapshot) int64
}

func newStatsCollector(co *coordinator.Coordinator, labels prometheus.Labels) *statsCollector {
	c := &statsCollector{co: co}
	add := func(name, help string, read func(coordinator.Snapshot) int64) {
		c.metrics = append(c.metrics, statsMetric{prometheus.NewDesc(name, help, nil, labels), prometheus.CounterValue, read})
	}
	add("qlsched_rounds_total", "Coordinator rounds run.", func(s coordinator.Snapshot) int64 { return s.Rounds })
	add("qlsched_saturated_rounds_total", "Rounds that claimed their whole budget: the replica was at its capacity (budget ÷ cadence) and due rows waited.", func(s coordinator.Snapshot) int64 { return s.Saturated })
	add("qlsched_claims_total", "Schedule rows claimed.", func(s coordinator.Snapshot) int64 { return s.Claims })
	add("qlsched_admits_total", "Runs admitted (one per occurrence).", func(s coordinator.Snapshot) int64 { return s.Admits })
	add("qlsched_skips_total", "Claims ended by the skip misfire policy (cursor advanced, no Run).", func(s coordinator.Snapshot) int64 { return s.Skips })
	add("qlsched_releases_total", "Claims ended without a Run: initialisation or not yet due.", func(s coordinator.Snapshot) int64 { return s.Releases })
	add("qlsched_races_total", "Fenced writes that found the fence or the schedule changed (nothing written).", func(s coordinator.Snapshot) int64 { return s.Races })
	add("qlsched_stale_total", "Admits refused because a revision changed since the claim.", func(s coordinator.Snapshot) int64 { return s.Stale })
	add("qlsched_serialization_retries_total", "SERIALIZABLE admit attempts retried after a serialization failure.", func(s coordinator.Snapshot) int64 { return s.Retries })
	add("qlsched_lease_takeovers_total", "Claims that replaced an expired claim.", func(s coordinator.Snapshot) int64 { return s.Takeovers })
	add("qlsched_failed_rounds_total", "Rounds that failed (the claim statement failed, or the round panicked); each is followed by a backoff.", func(s coordinator.Snapshot) int64 { return s.FailedRounds })
	c.metrics = append(c.metrics, statsMetric{prometheus.NewDesc("qlsched_consecutive_failed_rounds",
		"Rounds failed in a row up to the last one, 0 after a round that succeeded: the next round waits --cadence doubled per failure, up to --backoff-cap; from --not-ready-after on, /readyz fails.",
		nil, labels), prometheus.GaugeValue, func(s coordinator.Snapshot) int64 { return s.FailingRounds }})
	return c
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, k := range c.metrics {
		ch <- k.desc
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.co.Stats.Snapshot()
	for _, k := range c.metrics {
		ch <- prometheus.MustNewConstMetric(k.desc, k.kind, float64(k.read(s)))
	}
}

// Handler serves the registry.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// readTimeout bounds one read of the database gauges. It is not the interval: at the cap the
// statement takes seconds on a loaded server, and a read that always timed out would leave the
// gauges at their first values for ever; a slow read only delays the next one.
const readTimeout = 30 * time.Second

// backlogCache holds the last reading of the database gauges, refreshed by its own loop.
type backlogCache struct {
	fn       BacklogFunc
	interval time.Duration
	errors   prometheus.Counter

	log     *slog.Logger // set by start; only the loop reads it
	failing int          // failed reads in a row; only the loop touches it

	mu     sync.Mutex
	since  time.Time // the last successful reading, or the cache's creation
	val    Backlog
	cancel context.CancelFunc
	done   chan struct{}
}

// get returns the last reading; it never touches the database.
func (b *backlogCache) get() Backlog {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.val
}

func (b *backlogCache) age() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Since(b.since)
}

// refresh reads the gauges once; a failed read keeps the last values (their age grows), counts,
// and is logged when it starts a streak of failures (a database away for an hour logs one line,
// not one per interval).
func (b *backlogCache) refresh(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	v, err := b.fn(rctx)
	if err != nil {
		if ctx.Err() == nil { // not the loop being stopped
			b.errors.Inc()
			if b.failing++; b.failing == 1 && b.log != nil {
				b.log.Warn("database gauges: read failed; /metrics serves the last values (qlsched_backlog_reading_age_seconds grows)", "err", err)
			}
		}
		return
	}
	if b.failing > 0 && b.log != nil {
		b.log.Info("database gauges: read again", "failed_reads", b.failing)
	}
	b.failing = 0
	b.mu.Lock()
	b.val, b.since = v, time.Now()
	b.mu.Unlock()
}

func (b *backlogCache) start(ctx context.Context, log *slog.Logger) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done != nil {
		return errors.New("metrics: already started")
	}
	b.log = log
	ctx, b.cancel = context.WithCancel(context.WithoutCancel(ctx))
	b.done = make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		if b.fn == nil {
			<-ctx.Done()
			return
		}
		t := time.NewTicker(b.interval)
		defer t.Stop()
		for {
			b.refresh(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}(b.done)
	return nil
}

func (b *backlogCache) stop(ctx context.Context) error {
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("metrics: stop: %w", ctx.Err())
	}
}
