package dispatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"
)

// Placer answers workers' long polls by placing Runs for the polling session (design §3.1): it
// keeps the waiting polls and one rotation cursor in memory and probes for ready work every
// PlacementInterval while a poll waits, and at once when a poll arrives or Kick is called.
type Placer struct {
	store *Store
	log   *slog.Logger
}

// NewPlacer makes a placer over store; log receives identifiers and outcomes only (never tokens).
func NewPlacer(store *Store, log *slog.Logger) *Placer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Placer{store: store, log: log}
}

// Start runs the placement loop until ctx ends or Stop is called.
func (p *Placer) Start(ctx context.Context) error { return ErrNotImplemented }

// Stop answers every waiting poll with ErrStopping, refuses new ones and waits for the loop to
// end (bounded by ctx).
func (p *Placer) Stop(ctx context.Context) error { return ErrNotImplemented }

// Kick asks for a placement pass now (a local handler freed capacity).
func (p *Placer) Kick() {}

// Poll waits up to wait (capped at PollMaxWait) for offers placed for the session, at most
// maxOffers, and returns at the first placed offer or at the deadline (an empty slice). A second
// poll of the same session answers the first with an empty slice. Errors: ErrUnauthorized,
// ErrNotFound, ErrSessionGone, ErrSessionDraining, ErrStopping (answer [] with
// dispatcher_stopping), ctx's error.
func (p *Placer) Poll(ctx context.Context, cred Credential, sessionID uuid.UUID, maxOffers int, wait time.Duration) ([]Offer, error) {
	return nil, ErrNotImplemented
}
