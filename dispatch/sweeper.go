package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Sweeper expires offers (X), leases (E) and sessions (Z) every SweepInterval on every
// dispatcher (no leader: SKIP LOCKED keeps replicas apart, and a dead leader cannot delay
// expiry). A full batch repeats at once, up to maxRounds times a tick. Errors are logged and
// counted, never fatal.
type Sweeper struct {
	store  *Store
	log    *slog.Logger
	errors atomic.Int64

	mu      sync.Mutex
	observe func(Swept) // Observe's
	stop    context.CancelFunc
	done    chan struct{}
}

// maxRounds bounds the repeats of a full batch within one tick.
const maxRounds = 8

// NewSweeper makes a sweeper over store.
func NewSweeper(store *Store, log *slog.Logger) *Sweeper {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sweeper{store: store, log: log}
}

// Swept is what one tick (SweepOnce) expired: offers (X), leases (E, and how many of their Runs
// went back to the queue) and sessions (Z).
type Swept struct {
	Offers   int
	Leases   LeaseExpiries
	Sessions int
}

// Observe makes fn hear every tick's Swept, from the goroutine that swept (metrics count with it).
// Call it before Start.
func (w *Sweeper) Observe(fn func(Swept)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.observe = fn
}

// Errors is how many sweep statements have failed so far.
func (w *Sweeper) Errors() int64 { return w.errors.Load() }

// Start runs the sweep loop in a goroutine until ctx ends or Stop is called.
func (w *Sweeper) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done != nil {
		return errors.New("dispatch sweeper: already started")
	}
	ctx, w.stop = context.WithCancel(ctx)
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		t := time.NewTicker(w.store.cfg.SweepInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			_, _, _, _ = w.SweepOnce(ctx)
		}
	}()
	return nil
}

// Stop ends the loop and waits for a running sweep to finish (bounded by ctx).
func (w *Sweeper) Stop(ctx context.Context) error {
	w.mu.Lock()
	stop, done := w.stop, w.done
	w.mu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SweepOnce runs one tick (offers, leases, sessions) and returns how many rows each expired; err
// is the first error (the other sweeps still ran).
func (w *Sweeper) SweepOnce(ctx context.Context) (offers, leases, sessions int, err error) {
	batch := w.store.cfg.SweepBatch
	sweep := func(name string, fn func(context.Context, int) (int, error)) int {
		total := 0
		for range maxRounds {
			n, e := fn(ctx, batch)
			total += n
			if e != nil {
				if ctx.Err() == nil {
					w.errors.Add(1)
					w.log.Warn("dispatch sweep failed", "sweep", name, "error", e)
				}
				if err == nil {
					err = e
				}
				break
			}
			if n < batch {
				break
			}
		}
		return total
	}
	var requeued int
	offers = sweep("offers", w.store.ExpireOffers)
	leases = sweep("leases", func(ctx context.Context, batch int) (int, error) {
		e, err := w.store.ExpireLeasesCounted(ctx, batch)
		requeued += e.Requeued
		return e.Expired, err
	})
	sessions = sweep("sessions", w.store.ExpireSessions)
	w.mu.Lock()
	observe := w.observe
	w.mu.Unlock()
	if observe != nil {
		observe(Swept{Offers: offers, Leases: LeaseExpiries{Expired: leases, Requeued: requeued}, Sessions: sessions})
	}
	return offers, leases, sessions, err
}
