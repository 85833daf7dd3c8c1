package dispatch

import (
	"context"
	"log/slog"
)

// Sweeper expires offers (X), leases (E) and sessions (Z) every SweepInterval on every
// dispatcher (no leader: SKIP LOCKED keeps replicas apart). A full batch repeats at once, up to
// 8 times a tick. Errors are logged and counted, never fatal.
type Sweeper struct {
	store *Store
	log   *slog.Logger
}

// NewSweeper makes a sweeper over store.
func NewSweeper(store *Store, log *slog.Logger) *Sweeper {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sweeper{store: store, log: log}
}

// Start runs the sweep loop in a goroutine until ctx ends or Stop is called.
func (w *Sweeper) Start(ctx context.Context) error { return ErrNotImplemented }

// Stop ends the loop and waits for a running sweep to finish (bounded by ctx).
func (w *Sweeper) Stop(ctx context.Context) error { return ErrNotImplemented }

// SweepOnce runs one tick (offers, leases, sessions) and returns how many rows each expired.
func (w *Sweeper) SweepOnce(ctx context.Context) (offers, leases, sessions int, err error) {
	return 0, 0, 0, ErrNotImplemented
}
