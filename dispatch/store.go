package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// Store runs the dispatcher's transitions (design §1.2) on a handle connected as the runtime
// role. Every transition is one statement in a READ COMMITTED transaction of its own (Offer is
// preceded by its session lock, Drain's withdrawal follows its session update), retried (≤ 3) on
// serialization failure, deadlock and unique violation; generated rows never leave it. A
// transition that wrote nothing reads a diagnosis to return the sentinel error of the fence that
// failed.
type Store struct {
	db  *dbconn.DB
	cfg Config

	onSkipped func(try int, skipped []uuid.UUID) // tests: after a withdrawal's statement that skipped offers
}

// NewStore wraps a runtime-role handle. cfg's zero fields take their defaults; NewStore does not
// Validate (the command does, before connecting), so tests may use short TTLs.
func NewStore(h *dbconn.DB, cfg Config) *Store { return &Store{db: h, cfg: cfg.WithDefaults()} }

// Config returns the store's effective configuration (defaults applied).
func (s *Store) Config() Config { return s.cfg }

// maxTries bounds the retries of one transition on 40001/40P01/23505 (design §1.3 rule 4).
const maxTries = 3

// retryable: a transition that lost a race at the database level is run again as a whole.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected, pgerrcode.UniqueViolation:
		return true
	}
	return false
}

// failed wraps a transition's error; a data exception (class 22: a value PostgreSQL cannot store,
// such as a NUL in text) is ErrBadValue, so the caller answers it as bad input, never as
// something to retry.
func failed(what string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "22") {
		return fmt.Errorf("dispatch %s: %w (SQLSTATE %s)", what, ErrBadValue, pe.Code)
	}
	return fmt.Errorf("dispatch %s: %w", what, err)
}

// run runs fn (one statement) through the handle, retried on the codes above.
func (s *Store) run(ctx context.Context, what string, fn func(*db.Queries) error) error {
	var err error
	for try := 1; try <= maxTries; try++ {
		err = s.db.Run(ctx, func(q dbconn.Querier) error { return fn(db.New(q)) })
		if err == nil || !retryable(err) {
			break
		}
	}
	if err != nil {
		return failed(what, err)
	}
	return nil
}

// runTx is run for a transition that must lock before its statement takes its snapshot (Offer):
// the statements of fn in one READ COMMITTED transaction.
func (s *Store) runTx(ctx context.Context, what string, fn func(*db.Queries) error) error {
	var err error
	for try := 1; try <= maxTries; try++ {
		err = s.db.InTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error { return fn(db.New(tx)) })
		if err == nil || !retryable(err) {
			break
		}
	}
	if err != nil {
		return failed(what, err)
	}
	return nil
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func labelsJSON(l map[string]string) ([]byte, error) {
	if l == nil {
		l = map[string]string{}
	}
	return json.Marshal(l)
}

// Register opens a session for the token (transition: session insert). ErrUnauthorized when the
// token is unknown or revoked.
func (s *Store) Register(ctx context.Context, cred Credential, reg Registration) (Session, error) {
	labels, err := labelsJSON(reg.Labels)
	if err != nil {
		return Session{}, fmt.Errorf("dispatch register: labels: %w", err)
	}
	var row db.RegisterRow
	// The token's registrations run one after the other (LockTokenRegistrations), so racing ones
	// cannot all see a free place under MaxSessionsPerToken.
	err = s.runTx(ctx, "register", func(q *db.Queries) error {
		if e := q.LockTokenRegistrations(ctx, cred.TokenHash); e != nil {
			return e
		}
		var e error
		row, e = q.Register(ctx, db.RegisterParams{WorkerID: reg.Name, Capacity: int32(reg.Capacity),
			LeaseTtlMs: ms(s.cfg.LeaseTTL), Labels: labels, Protocol: int32(reg.Protocol), TokenHash: cred.TokenHash,
			MaxSessions: MaxSessionsPerToken})
		return e
	})
	if errors.Is(err, pgx.ErrNoRows) {
		if e := s.tokenFence(ctx, cred); e != nil {
			return Session{}, e
		}
		return Session{}, ErrTooManySessions
	}
	if err != nil {
		return Session{}, err
	}
	return Session{ID: row.WorkerSessionID, WorkerID: reg.Name, State: "active", Capacity: reg.Capacity,
		Labels: reg.Labels, ExpiresInMs: row.ExpiresInMs, HeartbeatIntervalMs: ms(s.cfg.HeartbeatInterval()),
		LeaseTTLMs: ms(s.cfg.LeaseTTL), PollMaxWaitMs: ms(s.cfg.PollMaxWait)}, nil
}

// Session reads a session of the token (for a poll: its labels, state and capacity).
// ErrUnauthorized, ErrNotFound (not this token's), ErrSessionGone (closed/expired) or
// ErrSessionDraining; the Session is returned with the error for the last two.
func (s *Store) Session(ctx context.Context, cred Credential, sessionID uuid.UUID) (Session, error) {
	var row db.SessionForTokenRow
	err := s.run(ctx, "read session", func(q *db.Queries) error {
		var e error
		row, e = q.SessionForToken(ctx, db.SessionForTokenParams{SessionID: sessionID, TokenHash: cred.TokenHash})
		return e
	})
	if errors.Is(err, pgx.ErrNoRows) {
		if e := s.tokenFence(ctx, cred); e != nil {
			return Session{}, e
		}
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, err
	}
	sess := Session{ID: row.WorkerSessionID, WorkerID: row.WorkerID, State: row.State, Capacity: int(row.Capacity),
		ExpiresInMs: row.ExpiresInMs, HeartbeatIntervalMs: ms(s.cfg.HeartbeatInterval()),
		LeaseTTLMs: ms(s.cfg.LeaseTTL), PollMaxWaitMs: ms(s.cfg.PollMaxWait)}
	if err := json.Unmarshal(row.Labels, &sess.Labels); err != nil {
		return Session{}, fmt.Errorf("dispatch read session: labels: %w", err)
	}
	switch row.State {
	case "draining":
		return sess, ErrSessionDraining
	case "closed", "expired":
		return sess, ErrSessionGone
	}
	return sess, nil
}

// Authenticate is the token fence alone: ErrUnauthorized for an unknown or revoked token. The
// dispatcher runs it before it reads a request's body.
func (s *Store) Authenticate(ctx context.Context, cred Credential) error {
	return s.tokenFence(ctx, cred)
}

func (s *Store) tokenFence(ctx context.Context, cred Credential) error {
	var live bool
	if err := s.run(ctx, "read token", func(q *db.Queries) error {
		var e error
		live, e = q.TokenLive(ctx, cred.TokenHash)
		return e
	}); err != nil {
		return err
	}
	if !live {
		return ErrUnauthorized
	}
	return nil
}

// diagnosis is the read-only DispatchDiagnosis, run only on a lost fence.
type diagnosis = db.DispatchDiagnosisRow

func (s *Store) diagnose(ctx context.Context, p db.DispatchDiagnosisParams) (diagnosis, error) {
	var d diagnosis
	err := s.run(ctx, "diagnose", func(q *db.Queries) error {
		var e error
		d, e = q.DispatchDiagnosis(ctx, p)
		return e
	})
	return d, err
}

// sessionError maps the session fences of a diagnosis; nil when they hold for a session in one
// of the live states in want.
func sessionError(d diagnosis, want ...string) error {
	switch {
	case !d.TokenOk:
		return ErrUnauthorized
	case d.SessionState == "":
		return ErrNotFound
	case d.SessionState == "closed" || d.SessionState == "expired" || d.SessionExpired:
		return ErrSessionGone
	}
	for _, w := range want {
		if d.SessionState == w {
			return nil
		}
	}
	if d.SessionState == "draining" {
		return ErrSessionDraining
	}
	return ErrSessionGone
}

// Candidates is the bounded, fair, read-only placement read (DispatchCandidates, §3.2): up to
// q.Slots Runs in round-robin order over projects after q.After, and the next cursor (the project
// of the last row; q.After when none).
func (s *Store) Candidates(ctx context.Context, q CandidateQuery) ([]Candidate, string, error) {
	labels, err := labelsJSON(q.Labels)
	if err != nil {
		return nil, "", fmt.Errorf("dispatch candidates: labels: %w", err)
	}
	if q.MaxProjects <= 0 {
		q.MaxProjects = s.cfg.MaxProjects
	}
	if q.ScanCap <= 0 {
		q.ScanCap = s.cfg.ScanCap
	}
	var rows []db.DispatchCandidatesRow
	err = s.run(ctx, "candidates", func(qq *db.Queries) error {
		var e error
		rows, e = qq.DispatchCandidates(ctx, db.DispatchCandidatesParams{Slots: int32(q.Slots), After: q.After,
			MaxProjects: int32(q.MaxProjects), ScanCap: int32(q.ScanCap), Labels: labels, SessionID: q.SessionID})
		return e
	})
	if err != nil {
		return nil, "", err
	}
	out := make([]Candidate, len(rows))
	cursor := q.After
	for i, r := range rows {
		out[i] = Candidate{RunID: r.RunID, ProjectID: r.ProjectID}
		cursor = r.ProjectID
	}
	return out, cursor, nil
}

// Offer places candidates for the session (P, and P′ for a revision whose digest no longer
// recomputes): at most the session's free capacity, each Run to one session, re-verified under
// lock. The returned offers carry their callback tokens. An empty result is not an error; a
// failed session fence is (ErrUnauthorized, ErrSessionGone, ErrSessionDraining, ErrNotFound).
func (s *Store) Offer(ctx context.Context, cred Credential, sessionID uuid.UUID, cands []Candidate) ([]Offer, error) {
	if len(cands) == 0 {
		return nil, nil
	}
	// A callback token for every candidate; only the chosen rows' hashes are stored.
	tokens := make(map[string]string, len(cands))
	p := db.OfferParams{OfferTtlMs: ms(s.cfg.OfferTTL), SessionID: sessionID, TokenHash: cred.TokenHash}
	for _, c := range cands {
		tok, hash, err := NewCallbackToken()
		if err != nil {
			return nil, fmt.Errorf("dispatch offer: %w", err)
		}
		tokens[hash] = tok
		p.RunIds, p.CallbackHashes = append(p.RunIds, c.RunID), append(p.CallbackHashes, hash)
	}
	// One round trip (pipelineTx): the setting, the session's lock, then the offer, whose
	// snapshot is taken after the lock is granted (LockSession), in one READ COMMITTED
	// transaction. An offer grants nothing: its commit need not wait for the WAL flush, the
	// ACK's durable commit flushes it (sql/queries/dispatch_offer_commit.sql, docs/dispatch.md).
	var rows []db.OfferRow
	var err error
	for try := 1; try <= maxTries; try++ {
		tx := &pipelineTx{h: s.db, begin: "BEGIN ISOLATION LEVEL READ COMMITTED"}
		q := db.New(tx)
		_ = q.OfferCommitAsync(ctx)          // queued
		_, _ = q.LockSession(ctx, sessionID) // queued
		tx.last = true
		rows, err = q.Offer(ctx, p)
		if cerr := tx.commit(); err == nil {
			err = cerr
		}
		if err == nil || !retryable(err) {
			break
		}
	}
	if err != nil {
		return nil, failed("offer", err)
	}
	if len(rows) == 0 {
		d, err := s.diagnose(ctx, db.DispatchDiagnosisParams{SessionID: sessionID, TokenHash: cred.TokenHash})
		if err != nil {
			return nil, err
		}
		if err := sessionError(d, "active"); err != nil {
			return nil, err
		}
		return nil, nil
	}
	out := make([]Offer, len(rows))
	for i, r := range rows {
		o := Offer{OfferID: r.OfferID, AttemptID: r.AttemptID, RunID: r.RunID, AttemptNo: int(r.AttemptNo),
			MaxAttempts: int(r.MaxAttempts), CallbackToken: tokens[r.CallbackHash], ExpiresInMs: r.ExpiresInMs,
			ProjectID: r.ProjectID, TaskID: r.TaskID, TaskRevision: r.TaskRevision, Spec: json.RawMessage(r.Spec)}
		if r.TriggerID.Valid {
			o.TriggerID = r.TriggerID.String
		}
		if r.ScheduledForMs.Valid {
			v := r.ScheduledForMs.Int64
			o.ScheduledForMs = &v
		}
		out[i] = o
	}
	return out, nil
}

// Ack accepts an offer (A) and grants its lease; a repeated ACK of the same offer by the same
// session with the same callback token returns the existing lease (A′). ErrOfferGone,
// ErrRunCancelled, ErrNotFound, ErrUnauthorized, ErrSessionGone.
func (s *Store) Ack(ctx context.Context, cred Credential, offerID, sessionID uuid.UUID, callbackToken string) (Lease, error) {
	cb := HashToken(callbackToken)
	var row db.AckRow
	err := s.run(ctx, "ack", func(q *db.Queries) error {
		var e error
		row, e = q.Ack(ctx, db.AckParams{OfferID: offerID, SessionID: sessionID, TokenHash: cred.TokenHash,
			CallbackHash: cb, LeaseTtlMs: ms(s.cfg.LeaseTTL)})
		return e
	})
	hb := ms(s.cfg.HeartbeatInterval())
	if err == nil {
		return Lease{LeaseVersion: row.LeaseVersion, LeaseExpiresInMs: row.LeaseExpiresInMs, HeartbeatIntervalMs: hb,
			Started: true, Waited: time.Duration(row.WaitedMs) * time.Millisecond}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, err
	}
	var rep db.AckReplayRow
	err = s.run(ctx, "ack replay", func(q *db.Queries) error {
		var e error
		rep, e = q.AckReplay(ctx, db.AckReplayParams{OfferID: offerID, SessionID: sessionID, TokenHash: cred.TokenHash, CallbackHash: cb})
		return e
	})
	if err == nil {
		return Lease{LeaseVersion: rep.LeaseVersion, LeaseExpiresInMs: rep.LeaseExpiresInMs, HeartbeatIntervalMs: hb}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, err
	}
	d, err := s.diagnose(ctx, db.DispatchDiagnosisParams{SessionID: sessionID, TokenHash: cred.TokenHash, OfferID: offerID, CallbackHash: cb})
	if err != nil {
		return Lease{}, err
	}
	return Lease{}, offerError(d)
}

// offerError maps a lost ACK/reject fence.
func offerError(d diagnosis) error {
	if err := sessionError(d, "active", "draining"); err != nil {
		return err
	}
	switch {
	case d.OfferState == "":
		return ErrNotFound
	case !d.CallbackOk && d.OfferState == "offered":
		return ErrNotFound // a wrong callback token: the offer is not the caller's
	case d.RunState == "cancelled":
		return ErrRunCancelled
	}
	if d.SessionState == "draining" {
		return ErrOfferGone // drain withdrew it, or will
	}
	return ErrOfferGone
}

// Reject declines an offer (R): the Run is queued again and never re-offered to this session for
// the same Attempt; a Run locked meanwhile is tried again (withdraw). ErrOfferGone, ErrNotFound,
// ErrUnauthorized, ErrBusy (the Run stayed locked past the tries: retry).
func (s *Store) Reject(ctx context.Context, cred Credential, offerID, sessionID uuid.UUID, callbackToken, reason string) error {
	cb := HashToken(callbackToken)
	n, skipped, err := s.withdraw(ctx, "reject", db.RequeueOffersParams{Mode: "reject", OfferIds: []uuid.UUID{offerID},
		SessionID: sessionID, TokenHash: cred.TokenHash, CallbackHash: cb, Detail: reason})
	if err != nil {
		return err
	}
	if n == 1 {
		return nil
	}
	if len(skipped) > 0 { // its Run stayed locked past the tries: not recorded, the worker asks again
		return fmt.Errorf("dispatch reject: %w", ErrBusy)
	}
	d, err := s.diagnose(ctx, db.DispatchDiagnosisParams{SessionID: sessionID, TokenHash: cred.TokenHash, OfferID: offerID, CallbackHash: cb})
	if err != nil {
		return err
	}
	if d.OfferState == "rejected" {
		// A replay: answered as the first was. The offer is this session's (the diagnosis sees
		// only the caller's); its callback hash left the Attempt with the rejection.
		return nil
	}
	if e := offerError(d); e != nil {
		return e
	}
	return ErrOfferGone
}

// requeue runs RequeueOffers once: how many offers it requeued, and the ones it targeted (still
// offered in its snapshot) but skipped, their Run locked by another transaction (SKIP LOCKED).
func (s *Store) requeue(ctx context.Context, what string, p db.RequeueOffersParams) (int, []uuid.UUID, error) {
	var rows []db.RequeueOffersRow
	err := s.run(ctx, what, func(q *db.Queries) error {
		var e error
		rows, e = q.RequeueOffers(ctx, p)
		return e
	})
	n, skipped := 0, []uuid.UUID(nil)
	for _, r := range rows {
		switch {
		case r.Requeued:
			n++
		case r.Busy:
			skipped = append(skipped, r.OfferID)
		}
	}
	return n, skipped, err
}

// withdrawTries bounds the statements of one withdrawal or rejection (W, D, R): an offer skipped
// because its Run was locked (an ACK, a report, a cancel, another dispatcher's offer re-verifying
// it) is tried again after 10, 20, 40 and 80 ms. Those transitions are one statement each, so the
// lock is normally gone at the first retry; past the tries a withdrawn offer is left to the offer
// sweep (X), a rejection is answered ErrBusy.
const withdrawTries = 5

// withdraw runs RequeueOffers in mode p.Mode ('withdraw', 'drain' or 'reject') and runs it again,
// as it was, while it skipped busy offers, until withdrawTries statements ran or ctx ends: an
// offer requeued, answered or expired meanwhile is no longer targeted, so each try reaches only
// what is still offered. It returns how many offers it requeued and the ones still skipped after
// the last try.
func (s *Store) withdraw(ctx context.Context, what string, p db.RequeueOffersParams) (int, []uuid.UUID, error) {
	withdrawn := 0
	for try := 1; ; try++ {
		n, skipped, err := s.requeue(ctx, what, p)
		withdrawn += n
		if err != nil {
			return withdrawn, skipped, err
		}
		if len(skipped) > 0 && s.onSkipped != nil {
			s.onSkipped(try, skipped)
		}
		if len(skipped) == 0 || try >= withdrawTries {
			return withdrawn, skipped, nil
		}
		select {
		case <-ctx.Done():
			return withdrawn, skipped, ctx.Err()
		case <-time.After(time.Duration(10<<(try-1)) * time.Millisecond):
		}
	}
}

// Withdraw expires offers the dispatcher could not deliver (W: the poll's response could not be
// written), so their Runs are placed again at once. Offers already answered or expired are passed
// over; one whose Run is locked is tried again (withdraw): an error wrapping ErrBusy says how many
// were still locked after the last try (they expire after the offer TTL). Returns how many it
// withdrew.
func (s *Store) Withdraw(ctx context.Context, offerIDs []uuid.UUID) (int, error) {
	if len(offerIDs) == 0 {
		return 0, nil
	}
	n, skipped, err := s.withdraw(ctx, "withdraw", db.RequeueOffersParams{Mode: "withdraw", OfferIds: offerIDs})
	if err == nil && len(skipped) > 0 {
		err = fmt.Errorf("dispatch withdraw: %d offers left to the offer sweep: %w", len(skipped), ErrBusy)
	}
	return n, err
}

// Heartbeat renews the session and each listed lease that is still active, held by the session,
// of the same version and not yet past its expiry (H). An expired lease is reported lost, never
// renewed. ErrUnauthorized, ErrNotFound, ErrSessionGone.
func (s *Store) Heartbeat(ctx context.Context, cred Credential, sessionID uuid.UUID, leases []LeaseRef) (HeartbeatResult, error) {
	p := db.HeartbeatParams{SessionID: sessionID, TokenHash: cred.TokenHash, LeaseTtlMs: ms(s.cfg.LeaseTTL),
		AttemptIds: make([]uuid.UUID, 0, len(leases)), LeaseVersions: make([]int64, 0, len(leases))}
	for _, l := range leases {
		p.AttemptIds, p.LeaseVersions = append(p.AttemptIds, l.AttemptID), append(p.LeaseVersions, l.LeaseVersion)
	}
	var rows []db.HeartbeatRow
	err := s.run(ctx, "heartbeat", func(q *db.Queries) error {
		var e error
		rows, e = q.Heartbeat(ctx, p)
		return e
	})
	if err != nil {
		return HeartbeatResult{}, err
	}
	if len(rows) == 0 {
		d, err := s.diagnose(ctx, db.DispatchDiagnosisParams{SessionID: sessionID, TokenHash: cred.TokenHash})
		if err != nil {
			return HeartbeatResult{}, err
		}
		if err := sessionError(d, "active", "draining"); err != nil {
			return HeartbeatResult{}, err
		}
		// The session is live: the list was longer than its capacity (or it expired meanwhile).
		if sess, err := s.Session(ctx, cred, sessionID); (err == nil || errors.Is(err, ErrSessionDraining)) && len(leases) > sess.Capacity {
			return HeartbeatResult{}, ErrTooManyLeases
		}
		return HeartbeatResult{}, ErrSessionGone
	}
	res := HeartbeatResult{SessionExpiresInMs: rows[0].SessionExpiresInMs, Leases: make([]LeaseState, 0, len(leases))}
	for _, r := range rows {
		if r.Ord == 0 {
			continue
		}
		st := LeaseState{AttemptID: r.AttemptID, Status: LeaseLost}
		if r.Renewed {
			st.Status, st.LeaseExpiresInMs = LeaseRenewed, r.LeaseExpiresInMs
			if r.Cancelled {
				st.Status = LeaseCancel
			}
		}
		res.Leases = append(res.Leases, st)
	}
	return res, nil
}

// result is what an Attempt records of a report (attempts.result); the outcome is kept so that a
// replayed report can be told from a different one.
type result struct {
	Outcome         Outcome `json:"outcome"`
	ExitCode        *int    `json:"exit_code,omitempty"`
	Signal          string  `json:"signal,omitempty"`
	OutputTail      string  `json:"output_tail"`
	OutputTruncated bool    `json:"output_truncated"`
	DurationMs      int64   `json:"duration_ms"`
}

// Complete ends an Attempt with the worker's report (F, F′, F″; F‴ for a replay). ErrLeaseLost
// (expired, foreign, an old version, a different outcome than an earlier report), ErrRunCancelled
// (a succeeded/failed report on a cancelled Run: kept on the Attempt, refused for the Run),
// ErrBusy (the Run stayed locked: retryable), ErrNotFound, ErrUnauthorized.
func (s *Store) Complete(ctx context.Context, cred Credential, attemptID uuid.UUID, rep Report) (Completion, error) {
	switch rep.Outcome {
	case OutcomeSucceeded, OutcomeFailed, OutcomeCancelled, OutcomeHandedBack:
	default:
		return Completion{}, fmt.Errorf("dispatch complete: unknown outcome %q", rep.Outcome)
	}
	cb := HashToken(rep.CallbackToken)
	res, err := json.Marshal(result{Outcome: rep.Outcome, ExitCode: rep.ExitCode, Signal: rep.Signal,
		OutputTail: rep.OutputTail, OutputTruncated: rep.OutputTruncated, DurationMs: rep.DurationMs})
	if err != nil {
		return Completion{}, fmt.Errorf("dispatch complete: %w", err)
	}
	errDoc := []byte("null")
	if rep.Outcome != OutcomeSucceeded {
		kind := rep.ErrorKind
		if kind == "" {
			kind = map[Outcome]string{OutcomeFailed: "exit_status", OutcomeCancelled: "cancelled", OutcomeHandedBack: "handler"}[rep.Outcome]
		}
		if errDoc, err = json.Marshal(map[string]string{"kind": kind, "message": rep.ErrorMessage}); err != nil {
			return Completion{}, fmt.Errorf("dispatch complete: %w", err)
		}
	}
	p := db.FinishAttemptsParams{AttemptIds: []uuid.UUID{attemptID}, Fences: []string{"worker"},
		SessionIds: []uuid.UUID{rep.SessionID}, CallbackHashes: []string{cb}, LeaseVersions: []int64{rep.LeaseVersion},
		Outcomes: []string{string(rep.Outcome)}, Results: [][]byte{res}, Errors: [][]byte{errDoc}, TokenHash: cred.TokenHash}
	// A Run locked by a sweep is skipped (SKIP LOCKED), so a lost fence whose diagnosis still
	// shows the lease active is tried again.
	for try := 1; ; try++ {
		rows, err := s.finish(ctx, "complete", p)
		if err != nil {
			return Completion{}, err
		}
		if len(rows) == 1 {
			c := Completion{RunState: rows[0].RunStateAfter, AttemptState: rows[0].AttemptStateAfter,
				Ran: time.Duration(rows[0].RanMs) * time.Millisecond}
			if c.RunState == "cancelled" && rep.Outcome != OutcomeCancelled {
				return c, ErrRunCancelled
			}
			return c, nil
		}
		c, retry, err := s.completeLost(ctx, cred, attemptID, rep, cb)
		if !retry || try >= maxTries {
			if retry {
				// Every check of the report still holds; only the Run's lock (a cancel, a sweep)
				// outlasted the tries: the worker retries, its report is never dropped as lost.
				err = ErrBusy
			}
			return c, err
		}
		select {
		case <-ctx.Done():
			return Completion{}, ctx.Err()
		case <-time.After(time.Duration(try) * 10 * time.Millisecond):
		}
	}
}

// completeLost decides a completion that wrote nothing: a replay (F‴), a lost fence, or a Run
// that was locked (retry).
func (s *Store) completeLost(ctx context.Context, cred Credential, attemptID uuid.UUID, rep Report, cb string) (Completion, bool, error) {
	var r db.CompleteReplayRow
	err := s.run(ctx, "complete replay", func(q *db.Queries) error {
		var e error
		r, e = q.CompleteReplay(ctx, db.CompleteReplayParams{AttemptID: attemptID, LeaseVersion: rep.LeaseVersion,
			SessionID: rep.SessionID, CallbackHash: cb, TokenHash: cred.TokenHash})
		return e
	})
	if err == nil {
		c := Completion{RunState: r.RunState, Replay: true}
		if r.RunState == "cancelled" {
			// F″ ended the Attempt cancelled whatever the first report said: a later report from
			// the same lease is answered by the Run, as the first was (a cancelled report is what
			// happened, any other is refused as the first non-cancelled one was).
			if rep.Outcome != OutcomeCancelled {
				return c, false, ErrRunCancelled
			}
			return c, false, nil
		}
		if r.Outcome != string(rep.Outcome) {
			return Completion{}, false, ErrLeaseLost
		}
		return c, false, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Completion{}, false, err
	}
	d, err := s.diagnose(ctx, db.DispatchDiagnosisParams{SessionID: rep.SessionID, TokenHash: cred.TokenHash, AttemptID: attemptID, CallbackHash: cb})
	if err != nil {
		return Completion{}, false, err
	}
	switch {
	case !d.TokenOk:
		return Completion{}, false, ErrUnauthorized
	case d.SessionState == "" || d.AttemptState == "":
		return Completion{}, false, ErrNotFound
	case !d.CallbackOk:
		return Completion{}, false, ErrNotFound
	case d.AttemptState == "dispatching":
		return Completion{}, false, ErrNotFound // completion before ACK
	case d.LeaseState == "active" && d.LeaseOurs && d.LeaseVersion == rep.LeaseVersion && d.AttemptState == "running" &&
		(d.SessionState == "active" || d.SessionState == "draining"):
		return Completion{}, true, nil // every fence holds: the Run was locked
	}
	return Completion{}, false, ErrLeaseLost
}

func (s *Store) finish(ctx context.Context, what string, p db.FinishAttemptsParams) ([]db.FinishAttemptsRow, error) {
	var rows []db.FinishAttemptsRow
	err := s.run(ctx, what, func(q *db.Queries) error {
		var e error
		rows, e = q.FinishAttempts(ctx, p)
		return e
	})
	return rows, err
}

// Drain moves the session to draining (D) and withdraws its offers; its leases continue. An
// offer whose Run is locked is tried again (withdraw); one still locked after the last try is left
// to the offer sweep (X), or to a repeated drain. ErrUnauthorized, ErrNotFound, ErrSessionGone.
func (s *Store) Drain(ctx context.Context, cred Credential, sessionID uuid.UUID) (DrainResult, error) {
	var row db.DrainSessionRow
	err := s.run(ctx, "drain", func(q *db.Queries) error {
		var e error
		row, e = q.DrainSession(ctx, db.DrainSessionParams{SessionID: sessionID, TokenHash: cred.TokenHash})
		return e
	})
	if errors.Is(err, pgx.ErrNoRows) {
		d, err := s.diagnose(ctx, db.DispatchDiagnosisParams{SessionID: sessionID, TokenHash: cred.TokenHash})
		if err != nil {
			return DrainResult{}, err
		}
		if err := sessionError(d, "active", "draining"); err != nil {
			return DrainResult{}, err
		}
		return DrainResult{}, ErrSessionGone
	}
	if err != nil {
		return DrainResult{}, err
	}
	n, _, err := s.withdraw(ctx, "drain withdraw", db.RequeueOffersParams{Mode: "drain", SessionID: sessionID})
	if err != nil {
		return DrainResult{}, err
	}
	return DrainResult{WithdrawnOffers: n, ActiveLeases: int(row.ActiveLeases), AlreadyDraining: row.AlreadyDraining}, nil
}

// Close ends a session that holds no active lease (Q); closing a closed session is a no-op.
// ErrLeasesActive, ErrUnauthorized, ErrNotFound, ErrSessionGone (expired).
func (s *Store) Close(ctx context.Context, cred Credential, sessionID uuid.UUID) error {
	err := s.run(ctx, "close", func(q *db.Queries) error {
		_, e := q.CloseSession(ctx, db.CloseSessionParams{SessionID: sessionID, TokenHash: cred.TokenHash})
		return e
	})
	if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	d, err := s.diagnose(ctx, db.DispatchDiagnosisParams{SessionID: sessionID, TokenHash: cred.TokenHash})
	if err != nil {
		return err
	}
	switch {
	case !d.TokenOk:
		return ErrUnauthorized
	case d.SessionState == "":
		return ErrNotFound
	case d.SessionState == "closed":
		return nil
	case d.SessionState == "expired":
		return ErrSessionGone
	}
	return ErrLeasesActive
}

// ExpireOffers expires up to batch offers past their expiry (X), skipping locked Runs, and
// returns how many it expired.
func (s *Store) ExpireOffers(ctx context.Context, batch int) (int, error) {
	n, _, err := s.requeue(ctx, "expire offers", db.RequeueOffersParams{Mode: "expire", MaxRows: int32(batch)})
	return n, err
}

// ExpireLeases expires up to batch leases past their expiry (E): the Attempt expires and the Run
// is retried or failed by the retry policy; a cancelled Run stays cancelled.
func (s *Store) ExpireLeases(ctx context.Context, batch int) (int, error) {
	e, err := s.ExpireLeasesCounted(ctx, batch)
	return e.Expired, err
}

// ExpireLeasesCounted is ExpireLeases, saying also how many of the Runs went back to the queue.
func (s *Store) ExpireLeasesCounted(ctx context.Context, batch int) (LeaseExpiries, error) {
	var due []uuid.UUID
	if err := s.run(ctx, "find due leases", func(q *db.Queries) error {
		var e error
		due, e = q.DueLeases(ctx, int32(batch))
		return e
	}); err != nil || len(due) == 0 {
		return LeaseExpiries{}, err
	}
	var n LeaseExpiries
	count := func(rows []db.FinishAttemptsRow) {
		n.Expired += len(rows)
		for _, r := range rows {
			if r.RunStateAfter == "queued" {
				n.Requeued++
			}
		}
	}
	rows, err := s.finish(ctx, "expire leases", expiryItems(due))
	if err == nil || len(due) == 1 || ctx.Err() != nil {
		count(rows)
		return n, err
	}
	// One lease the statement cannot end (a row a hostile hand or a bug left inconsistent) must not
	// hold back every other: each is tried alone, and the ones that fail are reported, not retried
	// here (the next tick tries them again).
	var failed []error
	for _, id := range due {
		rows, err := s.finish(ctx, "expire lease", expiryItems([]uuid.UUID{id}))
		if err != nil {
			if ctx.Err() != nil {
				return n, err
			}
			failed = append(failed, fmt.Errorf("attempt %s: %w", id, err))
			continue
		}
		count(rows)
	}
	return n, errors.Join(failed...)
}

// expiryItems are FinishAttempts' items for expiring the leases of these Attempts (E).
func expiryItems(due []uuid.UUID) db.FinishAttemptsParams {
	p := db.FinishAttemptsParams{AttemptIds: due}
	errDoc := []byte(`{"kind":"lease_lost","reason":"lease_expired"}`)
	for range due {
		p.Fences = append(p.Fences, "expiry")
		p.SessionIds = append(p.SessionIds, uuid.Nil)
		p.CallbackHashes = append(p.CallbackHashes, "")
		p.LeaseVersions = append(p.LeaseVersions, 0)
		p.Outcomes = append(p.Outcomes, "expired")
		p.Results = append(p.Results, []byte("null"))
		p.Errors = append(p.Errors, errDoc)
	}
	return p
}

// ExpireSessions expires up to batch sessions past their expiry (Z).
func (s *Store) ExpireSessions(ctx context.Context, batch int) (int, error) {
	var n int64
	err := s.run(ctx, "expire sessions", func(q *db.Queries) error {
		var e error
		n, e = q.ExpireSessions(ctx, int32(batch))
		return e
	})
	return int(n), err
}
