package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// ErrDrainTimeout means Stop gave up waiting for the current round and cancelled it. Claims it
// held are not lost: they expire after the lease and another replica takes them over.
var ErrDrainTimeout = errors.New("round did not drain in time; cancelled")

// Lifecycle runs a Coordinator's rounds at a fixed cadence, one at a time. Rounds never overlap:
// a round that overruns the cadence delays the next one (in batch mode a saturated round that
// overran it sends the next round's first claim while it admits its last batch, as it does
// between its own batches: one claim and one admission in flight, each round still at most its
// budget). A round that fails (its claim statement
// fails, or it panics) is followed by a backoff instead: the cadence, doubled with each failure
// in a row, up to BackoffCap; after NotReadyAfter failures in a row Health reports the replica
// not ready, until a round succeeds. The loop is owned by Start/Stop; it does not keep the process
// alive on its own (the composition root decides when to exit).
type Lifecycle struct {
	c             *Coordinator
	cadence       time.Duration
	drain         time.Duration
	backoffCap    time.Duration
	notReadyAfter int
	log           *slog.Logger

	mu      sync.Mutex
	started bool
	stop    chan struct{} // closed by Stop: finish the claims in hand, claim nothing more
	done    chan struct{} // closed when the loop has exited
	cancel  context.CancelFunc
	// afterRound, when set, is called after every round with the number of rows it claimed.
	afterRound func(claimed int)
	// onRoundStart is a test seam called as each round begins.
	onRoundStart func()
	// wait and now are the loop's clock: wait returns after d, or false as soon as stop closes.
	// Tests replace both to step the loop round by round and read the delays it chose.
	wait func(d time.Duration, stop <-chan struct{}) bool
	now  func() time.Time

	healthMu sync.Mutex
	health   Health
	reminded time.Time // when the failing state was last logged
}

// Health is the state of a Lifecycle's rounds.
type Health struct {
	// FailedRounds is how many rounds failed in a row up to the last one; 0 after a success.
	FailedRounds int64
	Since        time.Time // start of the first of those rounds
	Err          error     // the last one's error
	// Ready is false from NotReadyAfter failed rounds in a row until a round succeeds.
	Ready bool
}

// failingReminder spaces the lines that repeat, while rounds keep failing, how many failed and
// the latest error: the state changes are logged once each, and a reader of the last minutes of
// a long outage's log would otherwise find nothing, nor learn that the error changed.
const failingReminder = 10 * time.Minute

// LifecycleOption sets up a Lifecycle at construction (NewLifecycle): nothing of it is set after.
type LifecycleOption func(*Lifecycle)

// AfterRound has f called after every round, on the loop's goroutine, with the number of rows
// the round claimed.
func AfterRound(f func(claimed int)) LifecycleOption { return func(l *Lifecycle) { l.afterRound = f } }

// NewLifecycle wraps c with the cadence, drain, backoff and readiness bounds of cfg. It logs to
// c's logger.
func NewLifecycle(c *Coordinator, cfg Config, opts ...LifecycleOption) *Lifecycle {
	l := &Lifecycle{c: c, cadence: cfg.Cadence, drain: cfg.DrainTimeout, backoffCap: cfg.BackoffCap,
		notReadyAfter: max(cfg.NotReadyAfter, 1), log: c.log, wait: sleepUnlessStopped, now: time.Now, health: Health{Ready: true}}
	for _, o := range opts {
		o(l)
	}
	return l
}

func sleepUnlessStopped(d time.Duration, stop <-chan struct{}) bool {
	select { // a zero delay must not win against a stop that is already due
	case <-stop:
		return false
	default:
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-stop:
		return false
	case <-timer.C:
		return true
	}
}

// Health reports the state of the rounds; safe to call while they run.
func (l *Lifecycle) Health() Health {
	l.healthMu.Lock()
	defer l.healthMu.Unlock()
	return l.health
}

// Start begins the rounds. It returns an error if the lifecycle was already started.
func (l *Lifecycle) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return errors.New("lifecycle already started")
	}
	l.started = true
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	// The rounds' context outlives ctx's cancellation only until Stop's drain bound: Stop, not
	// the caller's context, decides when in-flight queries are cut.
	roundCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel = cancel
	go l.loop(roundCtx, l.stop, l.done)
	return nil
}

func (l *Lifecycle) loop(ctx context.Context, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	defer l.c.finishAhead(ctx) // a claim sent ahead for a round that will not run: finished, not left to expire
	var sat saturation
	for delay := time.Duration(0); l.wait(delay, stop); {
		started := l.now()
		claimed, err := l.round(ctx, stop, started)
		if l.afterRound != nil {
			l.afterRound(claimed)
		}
		sat.observe(l.log, l.c.cfg, started, claimed)
		if failed := l.record(started, err); failed > 0 {
			delay = l.backoff(failed)
			l.logFailing(failed, delay)
		} else {
			delay = l.nextDelay(ctx, started, claimed)
		}
	}
}

// record keeps the outcome of the round that began at started; it returns the rounds failed in
// a row (0: it succeeded).
func (l *Lifecycle) record(started time.Time, err error) int64 {
	l.healthMu.Lock()
	defer l.healthMu.Unlock()
	h := &l.health
	if err == nil {
		if h.FailedRounds > 0 {
			l.log.Warn("rounds recovered: a round succeeded", "failed_rounds", h.FailedRounds,
				"failed_for", started.Sub(h.Since).Round(time.Millisecond).String())
		}
		*h = Health{Ready: true}
		l.c.Stats.FailingRounds.Store(0)
		return 0
	}
	if h.FailedRounds == 0 {
		h.Since, l.reminded = started, started
	}
	h.FailedRounds++
	h.Err = err
	h.Ready = h.FailedRounds < int64(l.notReadyAfter)
	l.c.Stats.FailedRounds.Add(1)
	l.c.Stats.FailingRounds.Store(h.FailedRounds)
	return h.FailedRounds
}

// logFailing logs the failing state's changes once each (the first failure, the readiness lost),
// and then at most every failingReminder, never each round.
func (l *Lifecycle) logFailing(failed int64, next time.Duration) {
	l.healthMu.Lock()
	defer l.healthMu.Unlock()
	h, now := l.health, l.now()
	attrs := []any{"err", h.Err, "failed_rounds", failed, "ready", h.Ready, "next_round_in", next.String()}
	switch {
	case failed == 1:
		l.log.Error("round failed; backing off until a round succeeds (next rounds wait --cadence doubled per failure, up to --backoff-cap)",
			append(attrs, "not_ready_after", l.notReadyAfter)...)
	case failed == int64(l.notReadyAfter):
		l.log.Error("not ready: rounds failed in a row", append(attrs, "failing_for", now.Sub(h.Since).Round(time.Millisecond).String())...)
	case now.Sub(l.reminded) >= failingReminder:
		l.log.Error("rounds still failing", append(attrs, "failing_for", now.Sub(h.Since).Round(time.Millisecond).String())...)
	default:
		return
	}
	l.reminded = now
}

// backoff is the wait after the failed-th failed round in a row: the cadence, doubled with each
// further failure, at most the cap; never less than the cadence (a zero cap from a Config that
// skipped Validate must not make the loop spin).
func (l *Lifecycle) backoff(failed int64) time.Duration {
	d := l.cadence
	for i := int64(1); i < failed && d < l.backoffCap; i++ {
		d *= 2
	}
	return max(l.cadence, min(d, l.backoffCap))
}

// saturation logs a run of rounds that each claimed their whole budget: once when it starts and
// once when it ends, never per round. While it lasts the replica admits at most Capacity per
// second and due rows wait, with no error anywhere (fire_once later folds what was missed into
// one occurrence); the counter qlsched_saturated_rounds_total counts every full round. A run
// starts at saturationRun full rounds in a row and ends at saturationRun rounds in a row that
// claim less: a load just below capacity, whose rounds alternate between full and not, would
// otherwise log a start and an end every other round.
type saturation struct {
	since       time.Time // start of the first full round of the current run (or candidate run)
	full, spare int       // full rounds in a row; rounds in a row that claimed less
	rounds      int64     // full rounds since the run started
	logged      bool      // the start was logged; the end is due
}

const saturationRun = 3

func (s *saturation) observe(log *slog.Logger, cfg Config, started time.Time, claimed int) {
	if claimed >= cfg.Budget {
		if s.full == 0 && !s.logged {
			s.since, s.rounds = started, 0
		}
		s.full, s.spare, s.rounds = s.full+1, 0, s.rounds+1
		if s.full == saturationRun && !s.logged {
			s.logged = true
			log.Warn("saturated: rounds claim their whole budget, so this replica admits at most budget ÷ cadence; due rows wait. Raise --admit-batch and --budget, lower --cadence, or add replicas",
				"budget", cfg.Budget, "cadence", cfg.Cadence.String(), "capacity_per_second", capacity(cfg))
		}
		return
	}
	s.full, s.spare = 0, s.spare+1
	if s.logged && s.spare == saturationRun {
		log.Info("saturation ended", "saturated_rounds", s.rounds, "lasted", started.Sub(s.since).Round(time.Millisecond).String())
		s.logged = false
	}
}

// nextDelay keeps the cadence between round starts, except that a round that ran out of
// claimable rows (claimed < budget) wakes the coordinator when the next row falls due, if that is
// sooner: an occurrence is then admitted at its time instead of up to one cadence later. The
// delay never drops below MinCadence, so rows that are due but held by other replicas do not
// make it spin. Rounds still never overlap and each still claims at most the budget.
func (l *Lifecycle) nextDelay(ctx context.Context, started time.Time, claimed int) time.Duration {
	delay := max(0, l.cadence-l.now().Sub(started))
	if claimed >= l.c.cfg.Budget || ctx.Err() != nil {
		return delay
	}
	dueIn, err := l.c.store.NextDueIn(ctx)
	if err != nil {
		return delay // counted by the next round's claim if the database is really gone
	}
	return min(delay, max(dueIn, MinCadence))
}

// round runs one round, turning a panic into a counted, logged error (a failed round): the loop
// never dies. It returns the failure of the round's claim statement, or the panic.
//
// The round may send the next round's first claim ahead (Coordinator.roundAhead) once it has
// run for a cadence: a round that spends its budget is then followed at once (nextDelay), so
// the claim would be sent the moment it ends anyway.
func (l *Lifecycle) round(ctx context.Context, stop <-chan struct{}, started time.Time) (claimed int, err error) {
	defer func() {
		if r := recover(); r != nil {
			l.c.Stats.Errors.Add(1)
			l.log.Error("round panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("round panicked: %v", r)
		}
	}()
	if l.onRoundStart != nil {
		l.onRoundStart()
	}
	return l.c.roundAhead(ctx, stop, func() bool { return l.now().Sub(started) >= l.cadence })
}

// Stop withdraws the lifecycle: no new round starts, the current round finishes the claim in
// hand and stops claiming (in single mode the claim already sent behind the admit in flight is
// in hand too: at most one more row is admitted after Stop). Stop waits at most the drain timeout, then cancels the round's
// queries and returns ErrDrainTimeout. Calling Stop again, or before Start, returns nil.
func (l *Lifecycle) Stop(ctx context.Context) error {
	l.mu.Lock()
	if !l.started || l.stop == nil {
		l.mu.Unlock()
		return nil
	}
	stop, done, cancel := l.stop, l.done, l.cancel
	l.stop = nil
	l.mu.Unlock()

	close(stop)
	timer := time.NewTimer(l.drain)
	defer timer.Stop()
	select {
	case <-done:
		cancel()
		return nil
	case <-timer.C:
	case <-ctx.Done():
	}
	cancel()
	<-done // cancelled queries return promptly
	return ErrDrainTimeout
}

// Done is closed once the loop has exited after Stop.
func (l *Lifecycle) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}
