package dispatch

import (
	"context"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// Store runs the dispatcher's transitions (design §1.2) on a handle connected as the runtime
// role. Every method is one statement in a READ COMMITTED transaction of its own, retried (≤ 3)
// on serialization failure, deadlock and unique violation; generated rows never leave it.
type Store struct {
	db  *dbconn.DB
	cfg Config
}

// NewStore wraps a runtime-role handle. cfg's zero fields take their defaults; NewStore does not
// Validate (the command does, before connecting), so tests may use short TTLs.
func NewStore(h *dbconn.DB, cfg Config) *Store { return &Store{db: h, cfg: cfg.WithDefaults()} }

// Config returns the store's effective configuration (defaults applied).
func (s *Store) Config() Config { return s.cfg }

// Register opens a session for the token (transition: session insert). ErrUnauthorized when the
// token is unknown or revoked.
func (s *Store) Register(ctx context.Context, cred Credential, reg Registration) (Session, error) {
	return Session{}, ErrNotImplemented
}

// Session reads a session of the token (for a poll: its labels, state and capacity).
// ErrUnauthorized, ErrNotFound (not this token's), ErrSessionGone (closed/expired) or
// ErrSessionDraining.
func (s *Store) Session(ctx context.Context, cred Credential, sessionID uuid.UUID) (Session, error) {
	return Session{}, ErrNotImplemented
}

// Candidates is the bounded, fair, read-only placement read (DispatchCandidates, §3.2): up to
// q.Slots Runs in round-robin order over projects after q.After, and the next cursor.
func (s *Store) Candidates(ctx context.Context, q CandidateQuery) ([]Candidate, string, error) {
	return nil, "", ErrNotImplemented
}

// Offer places candidates for the session (P, and P′ for a revision whose digest no longer
// recomputes): at most the session's free capacity, each Run to one session, re-verified under
// lock. The returned offers carry their callback tokens. An empty result is not an error; a
// failed session fence is (ErrUnauthorized, ErrSessionGone, ErrSessionDraining, ErrNotFound).
func (s *Store) Offer(ctx context.Context, cred Credential, sessionID uuid.UUID, cands []Candidate) ([]Offer, error) {
	return nil, ErrNotImplemented
}

// Ack accepts an offer (A) and grants its lease; a repeated ACK of the same offer by the same
// session with the same callback token returns the existing lease (A′). ErrOfferGone,
// ErrRunCancelled, ErrNotFound, ErrUnauthorized, ErrSessionGone.
func (s *Store) Ack(ctx context.Context, cred Credential, offerID, sessionID uuid.UUID, callbackToken string) (Lease, error) {
	return Lease{}, ErrNotImplemented
}

// Reject declines an offer (R): the Run is queued again and never re-offered to this session for
// the same Attempt. ErrOfferGone, ErrNotFound, ErrUnauthorized.
func (s *Store) Reject(ctx context.Context, cred Credential, offerID, sessionID uuid.UUID, callbackToken, reason string) error {
	return ErrNotImplemented
}

// Withdraw expires offers the dispatcher could not deliver (W: the poll's response could not be
// written). Best effort: offers already answered or expired are skipped. Returns how many it
// withdrew.
func (s *Store) Withdraw(ctx context.Context, offerIDs []uuid.UUID) (int, error) {
	return 0, ErrNotImplemented
}

// Heartbeat renews the session and each listed lease that is still active, held by the session,
// of the same version and not yet past its expiry (H). An expired lease is reported lost, never
// renewed. ErrUnauthorized, ErrNotFound, ErrSessionGone.
func (s *Store) Heartbeat(ctx context.Context, cred Credential, sessionID uuid.UUID, leases []LeaseRef) (HeartbeatResult, error) {
	return HeartbeatResult{}, ErrNotImplemented
}

// Complete ends an Attempt with the worker's report (F, F′, F″; F‴ for a replay). ErrLeaseLost
// (expired, foreign, an old version, a different outcome than an earlier report), ErrRunCancelled
// (a succeeded/failed report on a cancelled Run: kept on the Attempt, refused for the Run),
// ErrNotFound, ErrUnauthorized.
func (s *Store) Complete(ctx context.Context, cred Credential, attemptID uuid.UUID, rep Report) (Completion, error) {
	return Completion{}, ErrNotImplemented
}

// Drain moves the session to draining (D) and withdraws its offers; its leases continue.
// ErrUnauthorized, ErrNotFound, ErrSessionGone.
func (s *Store) Drain(ctx context.Context, cred Credential, sessionID uuid.UUID) (DrainResult, error) {
	return DrainResult{}, ErrNotImplemented
}

// Close ends a session that holds no active lease (Q); closing a closed session is a no-op.
// ErrLeasesActive, ErrUnauthorized, ErrNotFound, ErrSessionGone (expired).
func (s *Store) Close(ctx context.Context, cred Credential, sessionID uuid.UUID) error {
	return ErrNotImplemented
}

// ExpireOffers expires up to batch offers past their expiry (X), skipping locked Runs, and
// returns how many it expired.
func (s *Store) ExpireOffers(ctx context.Context, batch int) (int, error) {
	return 0, ErrNotImplemented
}

// ExpireLeases expires up to batch leases past their expiry (E): the Attempt expires and the Run
// is retried or failed by the retry policy; a cancelled Run stays cancelled.
func (s *Store) ExpireLeases(ctx context.Context, batch int) (int, error) {
	return 0, ErrNotImplemented
}

// ExpireSessions expires up to batch sessions past their expiry (Z).
func (s *Store) ExpireSessions(ctx context.Context, batch int) (int, error) {
	return 0, ErrNotImplemented
}
