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
// a round that overruns the cadence delays the next one. The loop is owned by Start/Stop; it does
// not keep the process alive on its own (the composition root decides when to exit).
type Lifecycle struct {
	c       *Coordinator
	cadence time.Duration
	drain   time.Duration
	log     *slog.Logger

	mu      sync.Mutex
	started bool
	stop    chan struct{} // closed by Stop: finish the claims in hand, claim nothing more
	done    chan struct{} // closed when the loop has exited
	cancel  context.CancelFunc
	// OnRound, when set, is called after every round with the number of rows it claimed.
	OnRound func(claimed int)
	// onRoundStart is a test seam called as each round begins.
	onRoundStart func()
}

// NewLifecycle wraps c with the cadence and drain bound of cfg.
func NewLifecycle(c *Coordinator, cfg Config) *Lifecycle {
	return &Lifecycle{c: c, cadence: cfg.Cadence, drain: cfg.DrainTimeout, log: c.log}
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
	timer := time.NewTimer(0)
	defer timer.Stop()
	var sat saturation
	for {
		select {
		case <-stop:
			return
		case <-timer.C:
		}
		started := time.Now()
		claimed := l.round(ctx, stop)
		if l.OnRound != nil {
			l.OnRound(claimed)
		}
		sat.observe(l.log, l.c.cfg, started, claimed)
		timer.Reset(l.nextDelay(ctx, started, claimed))
	}
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
	delay := max(0, l.cadence-time.Since(started))
	if claimed >= l.c.cfg.Budget || ctx.Err() != nil {
		return delay
	}
	dueIn, err := l.c.store.NextDueIn(ctx)
	if err != nil {
		return delay // counted by the next round's claim if the database is really gone
	}
	return min(delay, max(dueIn, MinCadence))
}

// round runs one round, turning a panic into a counted, logged error: the timer never dies.
func (l *Lifecycle) round(ctx context.Context, stop <-chan struct{}) (claimed int) {
	defer func() {
		if r := recover(); r != nil {
			l.c.Stats.Errors.Add(1)
			l.log.Error("round panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	if l.onRoundStart != nil {
		l.onRoundStart()
	}
	return l.c.Round(ctx, stop)
}

// Stop withdraws the lifecycle: no new round starts, the current round finishes the claim in
// hand and stops claiming. Stop waits at most the drain timeout, then cancels the round's
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
