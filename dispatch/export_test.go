package dispatch

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/db"
)

// ExpireAttemptLeases runs the lease sweep's statement (FinishAttempts, fence 'expiry') on the
// given Attempts, as if DueLeases had found them: what a sweep does when a heartbeat renews a
// lease between the two statements. It returns how many leases it ended.
func (s *Store) ExpireAttemptLeases(ctx context.Context, attempts []uuid.UUID) (int, error) {
	p := db.FinishAttemptsParams{AttemptIds: attempts}
	for range attempts {
		p.Fences, p.SessionIds, p.CallbackHashes = append(p.Fences, "expiry"), append(p.SessionIds, uuid.Nil), append(p.CallbackHashes, "")
		p.LeaseVersions, p.Outcomes = append(p.LeaseVersions, 0), append(p.Outcomes, "expired")
		p.Results, p.Errors = append(p.Results, []byte("null")), append(p.Errors, []byte(`{"kind":"lease_lost"}`))
	}
	rows, err := s.finish(ctx, "expire leases", p)
	return len(rows), err
}

// WaitingPolls is how many polls wait in the placer now.
func (p *Placer) WaitingPolls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.order)
}

// Passes is how many placement passes the placer ran.
func (p *Placer) Passes() int64 { return p.passes.Load() }

// OfferStatementByStatement is the offer as it was before it was pipelined (issue 33 point 6):
// BEGIN, the session's lock, the offer, COMMIT, four round trips, committed durably. Kept for
// BenchmarkOfferCommitAB only; it returns how many offers it made.
func (s *Store) OfferStatementByStatement(ctx context.Context, cred Credential, sessionID uuid.UUID, cands []Candidate) (int, error) {
	p := db.OfferParams{OfferTtlMs: ms(s.cfg.OfferTTL), SessionID: sessionID, TokenHash: cred.TokenHash}
	for _, c := range cands {
		_, hash, err := NewCallbackToken()
		if err != nil {
			return 0, err
		}
		p.RunIds, p.CallbackHashes = append(p.RunIds, c.RunID), append(p.CallbackHashes, hash)
	}
	var rows []db.OfferRow
	err := s.runTx(ctx, "offer", func(q *db.Queries) error {
		if _, e := q.LockSession(ctx, sessionID); e != nil {
			return e
		}
		var e error
		rows, e = q.Offer(ctx, p)
		return e
	})
	return len(rows), err
}

// PlaceFor runs the placement of one pass for a poll of slots by session s, without the loop;
// afterRead, when not nil, runs after each candidate read, before its offer.
func (p *Placer) PlaceFor(ctx context.Context, cred Credential, s Session, slots int, afterRead func(read int)) ([]Offer, error) {
	p.afterRead = afterRead
	w := &waiter{cred: cred, session: s.ID, labels: s.Labels, slots: min(slots, s.Capacity), capacity: s.Capacity}
	return p.place(ctx, w)
}

// PassOver is PassOverPolls of polls by one credential, each asking for its session's capacity.
func (p *Placer) PassOver(ctx context.Context, cred Credential, sessions []Session) map[uuid.UUID][]Offer {
	creds := make([]Credential, len(sessions))
	for i := range creds {
		creds[i] = cred
	}
	got, _ := p.PassOverPolls(ctx, creds, sessions, nil)
	return got
}

// PassOverPolls runs one placement pass, without the loop, over polls of sessions in that order
// (slots[i] for sessions[i], at most its capacity; 0 or missing: its capacity), and returns what
// each poll was answered and what each was ended with (a session fence).
func (p *Placer) PassOverPolls(ctx context.Context, creds []Credential, sessions []Session, slots []int) (map[uuid.UUID][]Offer, map[uuid.UUID]error) {
	ws := make([]*waiter, len(sessions))
	p.mu.Lock()
	for i, s := range sessions {
		n := s.Capacity
		if i < len(slots) && slots[i] > 0 {
			n = min(slots[i], s.Capacity)
		}
		ws[i] = &waiter{cred: creds[i], session: s.ID, labels: s.Labels, slots: n, capacity: s.Capacity,
			out: make(chan []Offer, 1), gone: make(chan error, 1)}
		p.waiting[s.ID] = ws[i]
		p.order = append(p.order, ws[i])
	}
	p.mu.Unlock()
	p.pass(ctx, false, time.Now())
	got, ended := map[uuid.UUID][]Offer{}, map[uuid.UUID]error{}
	for _, w := range ws {
		select {
		case o := <-w.out:
			got[w.session] = o
		default:
		}
		select {
		case err := <-w.gone:
			ended[w.session] = err
		default:
		}
	}
	return got, ended
}

// OfferHeld makes an offer as Offer's statements do, in a transaction left open: it returns how
// many offers it made and the transaction's end (commit).
func (s *Store) OfferHeld(ctx context.Context, cred Credential, sessionID uuid.UUID, cands []Candidate) (int, func() error, error) {
	p := db.OfferParams{OfferTtlMs: ms(s.cfg.OfferTTL), SessionID: sessionID, TokenHash: cred.TokenHash}
	for _, c := range cands {
		_, hash, err := NewCallbackToken()
		if err != nil {
			return 0, nil, err
		}
		p.RunIds, p.CallbackHashes = append(p.RunIds, c.RunID), append(p.CallbackHashes, hash)
	}
	tx, err := s.db.Begin(ctx, pgx.TxOptions{})
	if err != nil {
		return 0, nil, err
	}
	q := db.New(tx)
	if _, err := q.LockSession(ctx, sessionID); err != nil {
		_ = tx.Rollback(ctx)
		return 0, nil, err
	}
	rows, err := q.Offer(ctx, p)
	if err != nil {
		_ = tx.Rollback(ctx)
		return 0, nil, err
	}
	return len(rows), func() error { return tx.Commit(ctx) }, nil
}

// OnWithdrawSkipped sets what runs after each statement of a withdrawal (Withdraw, Drain) that
// skipped offers (their Run locked), before the store tries them again: the try's number and the
// offers skipped.
func (s *Store) OnWithdrawSkipped(fn func(try int, skipped []uuid.UUID)) { s.onSkipped = fn }

// AckHeld runs the ACK's statement in a transaction left open, so it holds the Run's row lock as an
// ACK in flight does: it returns whether the ACK granted a lease and the transaction's end (commit).
func (s *Store) AckHeld(ctx context.Context, cred Credential, offerID, sessionID uuid.UUID, callbackToken string) (bool, func() error, error) {
	tx, err := s.db.Begin(ctx, pgx.TxOptions{})
	if err != nil {
		return false, nil, err
	}
	_, err = db.New(tx).Ack(ctx, db.AckParams{OfferID: offerID, SessionID: sessionID, TokenHash: cred.TokenHash,
		CallbackHash: HashToken(callbackToken), LeaseTtlMs: ms(s.cfg.LeaseTTL)})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		_ = tx.Rollback(ctx)
		return false, nil, err
	}
	return err == nil, func() error { return tx.Commit(ctx) }, nil
}

// WithdrawTries is how many statements one withdrawal runs at most.
const WithdrawTries = withdrawTries
