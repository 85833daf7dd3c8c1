package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/base/pgretry"
)

// Outcome classifies how a fenced write ended.
type Outcome string

const (
	Written Outcome = "written"
	Race    Outcome = "race"    // the fence or the schedule changed: another owner, a takeover, a republish
	Stale   Outcome = "stale"   // a revision changed or was disabled/archived since the claim
	Corrupt Outcome = "corrupt" // a content or execution digest no longer matches its row
)

// ErrAdmitInvalid means every verified item held but the admit still wrote nothing (e.g. the
// database clock moved backwards past the decision): an error, not a race.
var ErrAdmitInvalid = errors.New("admit wrote nothing although its fence and revisions hold")

// Store runs the scheduler's queries on a pool connected as the runtime role.
type Store struct {
	db   *dbconn.DB
	wake wakes // the dispatchers' wake-up after the admits that wrote (wakeDispatchers)
}

// NewStore wraps a handle connected as the runtime role. Close ends its wake-up sender; a Store
// never closed leaks nothing (the sender runs only while a wake-up is pending).
func NewStore(h *dbconn.DB) *Store {
	s := &Store{db: h}
	s.wake.ctx, s.wake.cancel = context.WithCancel(context.Background())
	return s
}

// implicit runs fn's one statement in a pipeline's implicit transaction under settings (one of
// the *Settings statements), committed at its Sync: one round trip, behind a pooler too. fn's
// error comes first, then the commit's.
func (s *Store) implicit(ctx context.Context, settings string, fn func(*db.Queries) error) error {
	tx := newPipeline(s.db, implicitTx, settings)
	err := fn(db.New(tx))
	if cerr := tx.commit(); err == nil {
		err = cerr
	}
	return err
}

// queries runs fn through the handle (dbconn.DB.Run): on a direct connection each statement
// alone, as it is; behind a pooler in one transaction that runs the prologue first, so that no
// statement runs without the bounds (BEGIN, prologue, the statement, COMMIT: the claim and the
// admit keep their one round trip, these reads and the fenced advance pay three more).
func (s *Store) queries(ctx context.Context, fn func(*db.Queries) error) error {
	return s.db.Run(ctx, func(q dbconn.Querier) error { return fn(db.New(q)) })
}

// Claim takes the next claimable schedule row for owner with lease, or returns nil when none is.
func (s *Store) Claim(ctx context.Context, owner string, lease time.Duration) (*Claim, error) {
	claims, err := s.ClaimBatch(ctx, owner, lease, 1)
	if err != nil || len(claims) == 0 {
		return nil, err
	}
	return claims[0], nil
}

// ClaimBatch takes up to n claimable rows in the claim's order with one statement (committed
// alone: the implicit transaction of its pipeline, no BEGIN), each stamped with its own full
// four-part fence. n = 1 is the ADR's claim.
func (s *Store) ClaimBatch(ctx context.Context, owner string, lease time.Duration, n int) ([]*Claim, error) {
	return s.claimDue(ctx, owner, lease, n, false)
}

// claimDue is ClaimBatch; pastUninitialised starts the claim's order after the rows waiting for
// initialisation (the -1 range), for a round that already initialised its bound of them
// (docs/scheduling.md, Initialisation).
func (s *Store) claimDue(ctx context.Context, owner string, lease time.Duration, n int, pastUninitialised bool) ([]*Claim, error) {
	var claims []*Claim
	err := s.implicit(ctx, claimSettings, func(q *db.Queries) (err error) { // the claim commits alone
		claims, err = queueClaimDue(ctx, q, NextClaim{Owner: owner, Lease: lease, N: n, PastUninitialised: pastUninitialised})()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return claims, nil
}

// NextClaim is a claim of up to N rows for Owner with Lease, as claimDue takes it, to send behind
// an admit (AdmitThenClaim).
type NextClaim struct {
	Owner             string
	Lease             time.Duration
	N                 int
	PastUninitialised bool
}

// queueClaimDue queues the claim on q; the function it returns reads the claimed rows, once the
// pipeline that carries the claim was sent.
func queueClaimDue(ctx context.Context, q *db.Queries, c NextClaim) func() ([]*Claim, error) {
	from := int64(-1) // the ADR's whole order
	if c.PastUninitialised {
		from = 0
	}
	br := q.ClaimDue(ctx, []db.ClaimDueParams{{Owner: c.Owner, LeaseMs: c.Lease.Milliseconds(), FromKey: from, MaxRows: int32(c.N)}})
	return func() (claims []*Claim, err error) {
		br.Query(func(_ int, rows []db.ClaimDueRow, qerr error) {
			err = qerr
			for _, r := range rows {
				claims = append(claims, claimFromRow(r))
			}
		})
		_ = br.Close()
		return claims, err
	}
}

// ClaimInit takes up to n rows waiting for initialisation, in the claim's order, with one
// statement committed alone, each stamped with its own full four-part fence like ClaimBatch's.
func (s *Store) ClaimInit(ctx context.Context, owner string, lease time.Duration, n int) ([]*Claim, error) {
	var claims []*Claim
	err := s.implicit(ctx, claimSettings, func(q *db.Queries) (err error) { // the claim commits alone
		br := q.ClaimInit(ctx, []db.ClaimInitParams{{Owner: owner, LeaseMs: lease.Milliseconds(), BelowKey: 0, MaxRows: int32(n)}})
		br.Query(func(_ int, rows []db.ClaimInitRow, qerr error) {
			err = qerr
			for _, r := range rows {
				claims = append(claims, claimFromRow(db.ClaimDueRow(r))) // the same columns
			}
		})
		_ = br.Close()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim rows to initialise: %w", err)
	}
	return claims, nil
}

// InitItem is one claimed uninitialised row and its first cursor, decided at the claim's
// ClaimedAtMs (the statement verifies First > ClaimedAtMs).
type InitItem struct {
	Claim *Claim
	First int64
}

// initRetries bounds how many times Initialise runs its statement again after a deadlock or a
// serialization failure (as many as an admit by default).
const initRetries = DefaultAdmitRetries

// Initialise ends claims of uninitialised rows with their first cursors in ONE statement
// (committed alone), each row under its own fence. written[i] says whether items[i] was written;
// false: its fence or its schedule changed since the claim (a race), and nothing was written for
// it. A deadlock or serialization failure (a publish resetting the same rows in its own order)
// rolled the statement back whole, so it runs again (pgretry, bounded, backoff, until ctx ends)
// rather than leave every claim of the batch to expire with its lease.
func (s *Store) Initialise(ctx context.Context, items []InitItem) ([]bool, error) {
	var written []bool
	err := pgretry.Do(ctx, initRetries, backoff, func() error {
		var err error
		written, err = s.initialiseOnce(ctx, items)
		return err
	})
	if err != nil {
		return make([]bool, len(items)), fmt.Errorf("initialise %d schedules: %w", len(items), err)
	}
	return written, nil
}

// initialiseOnce is one InitClaimed statement, committed alone; written counts only if err is nil.
func (s *Store) initialiseOnce(ctx context.Context, items []InitItem) (written []bool, err error) {
	written = make([]bool, len(items))
	var p db.InitClaimedParams
	for _, it := range items {
		c := it.Claim
		p.ProjectIds, p.TriggerIds = append(p.ProjectIds, c.ProjectID), append(p.TriggerIds, c.TriggerID)
		p.ClaimOwners, p.ClaimTokens, p.ClaimVersions = append(p.ClaimOwners, c.Fence.Owner), append(p.ClaimTokens, c.Fence.Token), append(p.ClaimVersions, c.Fence.Version)
		p.TriggerRevisions, p.StateVersions = append(p.TriggerRevisions, c.TriggerRevision), append(p.StateVersions, c.StateVersion)
		p.ClaimedAtMs, p.NextFireAtMs = append(p.ClaimedAtMs, c.ClaimedAtMs), append(p.NextFireAtMs, it.First)
	}
	err = s.implicit(ctx, hotSettings, func(q *db.Queries) (err error) {
		br := q.InitClaimed(ctx, []db.InitClaimedParams{p})
		br.Query(func(_ int, ords []int32, qerr error) {
			if qerr != nil {
				err = qerr
				return
			}
			for _, o := range ords {
				if o < 1 || int(o) > len(items) || written[o-1] {
					err = fmt.Errorf("result for item %d of %d is out of range or repeated", o, len(items))
					return
				}
				written[o-1] = true
			}
		})
		_ = br.Close()
		return err
	})
	return written, err
}

// Advance ends a claim without a Run: init (first cursor), skip (advance only) or release
// (next == cursor). Fenced like the admit.
func (s *Store) Advance(ctx context.Context, c *Claim, next int64) (Outcome, error) {
	return s.AdvanceMissed(ctx, c, next, 0, 0)
}

// AdvanceMissed is Advance for a skip that passed over missed occurrences (Decision.Missed),
// the latest of them lastMissed: the same statement adds missed to the row's missed_total and
// records lastMissed, so the count moves exactly when the cursor does.
func (s *Store) AdvanceMissed(ctx context.Context, c *Claim, next, missed, lastMissed int64) (Outcome, error) {
	err := s.queries(ctx, func(q *db.Queries) error {
		p := advanceParams(c, next)
		p.Missed, p.LastMissedMs = missed, lastMissed
		_, err := q.AdvanceClaimed(ctx, p)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Race, nil
	}
	if err != nil {
		return "", fmt.Errorf("advance schedule %s/%s: %w", c.ProjectID, c.TriggerID, err)
	}
	return Written, nil
}

// Admitted is what an admit wrote.
type Admitted struct {
	RunID, AttemptID uuid.UUID
	AdmittedAtMs     int64
	Retries          int   // serialization failures retried before it committed
	CommittedAtMs    int64 // when the batch's commit returned here (unix ms, this host's clock); 0 when admitted alone after a failed batch
}

// Admit runs the atomic admission of ADR-0105 in one SERIALIZABLE transaction, retrying a
// serialization failure up to retries times. Outcome Written comes with the Run; Race, Stale and
// Corrupt mean nothing was written (diagnosed after the fact, off the happy path).
func (s *Store) Admit(ctx context.Context, c *Claim, scheduledFor, next int64, runID uuid.UUID, retries int) (Admitted, Outcome, error) {
	res := s.AdmitBatch(ctx, []AdmitItem{{Claim: c, ScheduledFor: scheduledFor, Next: next, RunID: runID}}, retries)[0]
	return res.Admitted, res.Outcome, res.Err
}

// AdmitItem is one occurrence to admit under its claim. The decision behind it must have been
// made at the claim's observation of database time, ClaimedAtMs: the admit verifies
// ScheduledFor <= ClaimedAtMs < Next.
type AdmitItem struct {
	Claim              *Claim
	ScheduledFor, Next int64
	RunID              uuid.UUID
	// Missed and LastMissed are the decision's passed-over occurrences and the latest of them
	// (Decision.Missed, Decision.LastMissedMs): the admit adds them to the row's missed_total.
	Missed, LastMissed int64
}

// AdmitResult is how one item ended: Written (with the Run), Race, Stale or Corrupt (nothing
// written for it), or Err.
type AdmitResult struct {
	Admitted
	Outcome Outcome
	Err     error
}

// AdmitBatch admits every item in ONE SERIALIZABLE transaction, sent as one pipeline (BEGIN,
// the admit, COMMIT), with the one admission statement (Admit), for one item as for many. Each
// row is verified on its own: an item whose checks fail writes nothing and is diagnosed on its
// own, while the others commit. A
// serialization failure retries the whole batch (bounded); any other error, or a serialization
// failure that outlasts the retries, aborts the transaction, so the items are then admitted one
// by one to isolate the failing one.
func (s *Store) AdmitBatch(ctx context.Context, items []AdmitItem, retries int) []AdmitResult {
	return s.admitBatch(ctx, items, retries, nil)
}

// AdmitThenClaim is Admit of it, with next sent behind the admit's COMMIT in the same round trip
// (dbconn.DB.PipelineThen): the claim still commits alone, in the transaction after the admit's,
// so ADR-0105's two transactions stay two, but the one-row mode pays one round trip per
// admission instead of two. The claim runs after the admit committed, so it sees the row the
// admit advanced as a claim sent after it would. carried reports whether the claim ran and
// committed (claims are then its rows, maybe none). It did not when the admit failed (the server
// skipped it; a retry of the admit carries it again), and the caller claims on its own; nor when
// the claim itself failed after the admit committed: claimErr is then that failure, which the
// caller counts and ends its round on, as for a claim sent on its own.
func (s *Store) AdmitThenClaim(ctx context.Context, it AdmitItem, retries int, next NextClaim) (res AdmitResult, claims []*Claim, carried bool, claimErr error) {
	then := &claimThen{NextClaim: next}
	res = s.admitBatch(ctx, []AdmitItem{it}, retries, then)[0]
	return res, then.claims, then.ran, then.err
}

// claimThen is the claim an admit carries (AdmitThenClaim), and what became of it.
type claimThen struct {
	NextClaim
	claims []*Claim
	ran    bool  // it committed: claims are its rows
	err    error // its own failure, after the admit committed (nil when the admit failed: it did not run)
}

func (s *Store) admitBatch(ctx context.Context, items []AdmitItem, retries int, then *claimThen) []AdmitResult {
	results := make([]AdmitResult, len(items))
	retried := 0
	for attempt := 0; ; attempt++ {
		written, err := s.admitOnce(ctx, items, then)
		if err == nil {
			committed := time.Now().UnixMilli()
			for _, w := range written {
				if w != nil {
					w.CommittedAtMs = committed
				}
			}
			s.wakeDispatchers(written)
			for i := range items {
				if written[i] != nil {
					results[i].Outcome, results[i].Admitted = Written, *written[i]
				} else {
					results[i].Outcome, results[i].Err = s.diagnose(ctx, items[i].Claim)
				}
				results[i].Retries = retried
			}
			return results
		}
		if pgretry.Retryable(err) && attempt < retries {
			retried++
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return fill(results, retried, err)
			}
			continue
		}
		// Any other error aborted the batch (or, for a lost connection, left its outcome
		// unknown), and so does a serialization failure once its retries are spent: admit the
		// items one by one, each under its own fence, rather than leave every claim of the batch
		// to expire (a whole lease of lost occurrences for each of its triggers).
		if len(items) > 1 && ctx.Err() == nil {
			for i, it := range items { // isolate the item that fails
				results[i] = s.AdmitBatch(ctx, []AdmitItem{it}, retries)[0]
				results[i].Retries += retried
			}
			return results
		}
		c := items[0].Claim
		return fill(results, retried, fmt.Errorf("admit %s/%s at %d: %w", c.ProjectID, c.TriggerID, items[0].ScheduledFor, err))
	}
}

func fill(results []AdmitResult, retried int, err error) []AdmitResult {
	for i := range results {
		results[i].Err, results[i].Retries = err, retried
	}
	return results
}

// admitOnce runs one SERIALIZABLE transaction admitting items with the one admission statement
// (Admit, one element per item: one item is the ADR's single admit) and returns, per item, what
// was written, or nil where the item's verification wrote nothing. Results count only if the
// transaction committed (err == nil).
func (s *Store) admitOnce(ctx context.Context, items []AdmitItem, then *claimThen) (written []*Admitted, err error) {
	written = make([]*Admitted, len(items))
	err = s.explicitThen(ctx, serializableTx, admitSettings, then, func(q *db.Queries) (err error) {
		br := q.Admit(ctx, []db.AdmitParams{admitParams(items)})
		br.Query(func(_ int, rows []db.AdmitRow, rerr error) {
			if rerr != nil {
				err = rerr
				return
			}
			for _, r := range rows {
				if r.Ord < 1 || int(r.Ord) > len(items) || written[r.Ord-1] != nil {
					err = fmt.Errorf("admit: result for item %d of %d is out of range or repeated", r.Ord, len(items))
					return
				}
				written[r.Ord-1] = &Admitted{RunID: r.RunID, AttemptID: r.AttemptID, AdmittedAtMs: r.AdmittedAtMs}
			}
		})
		_ = br.Close()
		return err
	})
	return written, err // the results count only if err is nil
}

// explicitThen runs fn's statement in an explicit transaction of kind tx under settings, sent as
// one pipeline; with then, the claim then goes behind its COMMIT in the same round trip and
// commits alone (dbconn.DB.PipelineThen), and then says whether it ran. fn's error comes first,
// then the commit's; nil means fn's transaction committed.
func (s *Store) explicitThen(ctx context.Context, tx txKind, settings string, then *claimThen, fn func(*db.Queries) error) error {
	p := newPipeline(s.db, tx, settings)
	var read func() ([]*Claim, error)
	if then != nil { // queued first, sent behind the COMMIT
		p.then = &pipeline{db: s.db, tx: implicitTx, settings: claimSettings, follows: true}
		read = queueClaimDue(ctx, db.New(p.then), then.NextClaim)
	}
	err := fn(db.New(p))
	if cerr := p.commit(); err == nil {
		err = cerr
	}
	if then != nil {
		claims, cerr := read()
		if err := p.then.commit(); cerr == nil { // the Sync, read in every case: it ends the round trip
			cerr = err
		}
		then.claims, then.ran = claims, cerr == nil
		then.err = nil
		if err == nil { // fn's transaction committed: cerr is the claim's own
			then.err = cerr
		}
	}
	return err
}

// WriteThenClaim runs write's statement in a READ COMMITTED transaction under the hot settings
// and sends next behind its COMMIT in the same round trip, as AdmitThenClaim does behind the
// admit: the bench's ceiling writes the admission's rows with it, so that in single mode it pays
// the round trips a replica pays. carried is as AdmitThenClaim's.
func (s *Store) WriteThenClaim(ctx context.Context, write func(*db.Queries) error, next NextClaim) (claims []*Claim, carried bool, err error) {
	then := &claimThen{NextClaim: next}
	err = s.explicitThen(ctx, readCommittedTx, hotSettings, then, write)
	return then.claims, then.ran, err
}

// HotSettings are the planner settings of the hot statements (claim, admit), which the store sets
// transaction-locally (hotSettings); a caller that measures against them (the bench's ceiling)
// gives its sessions the same:
//
//   - generic plans: a prepared statement otherwise gets a custom plan per execution for as long
//     as the planner's estimates favour it, and for the claim's and the admit's joins that
//     planning was more than half of the database's CPU under load (perf, batch mode). Their
//     generic plans are the ones the tests check (index scan on the claim's index, TID scans for
//     the admit), so this keeps the plan the tests prove and stops paying for it each time;
//   - no JIT: the claim's generic plan cannot know its LIMIT, so on a large table its estimated
//     cost passes the JIT thresholds and every claim would compile (and optimise) ~50 functions,
//     hundreds of milliseconds for a statement that runs in one (BenchmarkClaim, 1,000,000 rows).
func HotSettings() map[string]string {
	return map[string]string{"plan_cache_mode": "force_generic_plan", "jit": "off"}
}

// hotSettings sets HotSettings for the current transaction (in a fixed order: one statement text).
var hotSettings = func() string {
	settings := HotSettings()
	calls := make([]string, 0, len(settings))
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		calls = append(calls, fmt.Sprintf("set_config('%s', '%s', true)", name, settings[name]))
	}
	return "SELECT " + strings.Join(calls, ", ")
}()

// admitSettings add, for the admit, joins in the order written: it joins eight relations, and
// searching every order cost 100 ms per plan (alone; several times that under load). A generic
// plan is rebuilt whenever autovacuum or autoanalyze invalidates it, which under a steady insert
// load was every few seconds on every connection: 48 plans, 8.7 s of planning, in a 15 s batch
// bench (pg_stat_statements); 27 plans and 0.27 s with this. The written order is the plan the
// tests check (TID scan first), for one row as for many.
var admitSettings = hotSettings + ", set_config('join_collapse_limit', '1', true)"

// claimSettings add, for the claims (ClaimDue, ClaimInit), no sort: the generic plan cannot know
// the LIMIT, so once an autoanalyze saw a backlog due at a few cursors scattered over the heap
// (as the replicas leave an every-minute backlog: correlation 0.23), a bitmap scan and a sort of
// the whole due range looked cheaper than the index walk's random heap reads: 300 ms a claim at
// 30,000 due rows (bench-pooler, direct runs), against 0.8 ms for the walk. The claim's order is
// the index's, so the walk needs no sort.
var claimSettings = hotSettings + ", set_config('enable_sort', 'off', true)"

// txKind is the transaction a pipeline's statements run in. The store writes it out where it
// sends a statement: the claim in PostgreSQL's implicit transaction of the pipeline, committed
// alone at its Sync (no BEGIN or COMMIT on the wire, as the ADR's claim wants); the admit in an
// explicit SERIALIZABLE transaction whose BEGIN and COMMIT travel in the same pipeline.
type txKind int

const (
	implicitTx      txKind = iota // committed at the pipeline's Sync; a failed statement rolls it back
	serializableTx                // BEGIN ISOLATION LEVEL SERIALIZABLE … COMMIT, read by commit
	readCommittedTx               // BEGIN ISOLATION LEVEL READ COMMITTED … COMMIT (the bench's ceiling)
)

// pipeline is a db.DBTX that sends what it is given, inside its transaction and after the
// handle's prologue and the planner settings, as ONE round trip (dbconn.DB.Pipeline): [BEGIN,]
// prologue, settings, the statements, [COMMIT,] Sync. Every method of db.DBTX does that (a batch
// query's SendBatch as a plain query's Exec, Query or QueryRow), so the store does not depend on
// how the generated code sends its statements; one pipeline is one transaction, so a second call
// is refused. The caller reads the results through the generated code, then ends the pipeline
// with commit, which says whether the transaction committed: nothing read counts unless commit
// returned nil.
type pipeline struct {
	db       *dbconn.DB
	tx       txKind
	settings string // the transaction-local planner settings statement (hotSettings or admitSettings)
	results  *pipelineResults
	// then is the transaction sent behind this one's COMMIT in the same round trip
	// (dbconn.DB.PipelineThen), queued on it before this one sends; follows marks such a
	// pipeline, whose own call only queues (held) and which this one sends.
	then    *pipeline
	follows bool
	held    *pgx.Batch
}

// wakeDispatchers notifies the dispatchers listening (dispatch.Waker) that the admit that just
// committed wrote a Run, so they place it at once (sql/queries/wake.sql: in a transaction of its
// own, never in the admit's, whose durable commit it would serialize with every other admit's).
// It only marks the wake-up pending and returns: the Store's sender sends it, off the round's
// path, one notification at a time; the admits that commit while one is in flight are all
// covered by the next, sent after it (never lost, never more than one in flight per Store).
// A notification that fails is dropped and counted (WakeStats): a lost one costs at most one
// --placement-interval probe.
func (s *Store) wakeDispatchers(written []*Admitted) {
	if slices.ContainsFunc(written, func(a *Admitted) bool { return a != nil }) {
		s.wake.mark(s.sendWake)
	}
}

// sendWake sends one wake-up, one round trip behind a pooler too (the pipeline's implicit
// transaction), unless no worker session is active (wakeWanted): then it sends nothing and
// returns false. In a deployment that admits with no dispatcher at work, that is a third of an
// admission's transactions (claim, admit, wake-up) saved, which behind a transaction pooler
// share its few server connections.
func (s *Store) sendWake(ctx context.Context) (bool, error) {
	if !s.wakeWanted(ctx) {
		return false, nil
	}
	return true, s.implicit(ctx, hotSettings, func(q *db.Queries) error { return q.WakeOnAdmit(ctx) })
}

// wakeRecheck is how long the sender trusts its last reading of whether a worker session is
// active. Skipping costs nothing a Run waits for: a session's first poll starts a placement pass
// that finds every Run queued meanwhile, and the Runs admitted in the wakeRecheck after it are
// found by the dispatchers' --placement-interval probe while their polls wait.
const wakeRecheck = 5 * time.Second

// wakeWanted reads WakeWanted at most once per wakeRecheck (in the sender goroutine only). A
// reading that fails counts as wanted: a wake-up too many costs one round trip.
func (s *Store) wakeWanted(ctx context.Context) bool {
	w := &s.wake
	if now := time.Now(); w.checkedAt.IsZero() || now.Sub(w.checkedAt) >= wakeRecheck {
		var wanted bool
		err := s.implicit(ctx, hotSettings, func(q *db.Queries) (err error) {
			wanted, err = q.WakeWanted(ctx)
			return err
		})
		w.checkedAt, w.wanted = now, err != nil || wanted
	}
	return w.wanted
}

// WakeStats counts the dispatchers' wake-ups: Marked admits that wrote (each asks for one),
// Sent notifications committed, Failed notifications dropped, Skipped wake-ups not sent because
// no worker session was active. Marked - Sent - Failed - Skipped admits were coalesced into
// another's (or are pending).
type WakeStats struct{ Marked, Sent, Failed, Skipped int64 }

// WakeStats reads the wake-up counters.
func (s *Store) WakeStats() WakeStats {
	return WakeStats{Marked: s.wake.marked.Load(), Sent: s.wake.sent.Load(), Failed: s.wake.failed.Load(),
		Skipped: s.wake.skipped.Load()}
}

// Close ends the wake-up sender: the admits after it wake no dispatcher; one pending is still
// sent until ctx ends, then the one in flight is cancelled. It returns once the sender has ended.
// The handle is not closed (the caller's).
func (s *Store) Close(ctx context.Context) {
	s.wake.close(ctx)
}

// wakes coalesces the wake-ups of one Store: at most one notification in flight, sent by a
// goroutine started when a wake-up is marked and none runs, which ends once nothing is pending.
type wakes struct {
	mu      sync.Mutex
	pending bool // an admit wrote since the sender last took the mark
	running bool // the sender goroutine runs
	closed  bool
	sender  sync.WaitGroup
	ctx     context.Context // the notifications' context, cancelled by close
	cancel  context.CancelFunc
	// beforeSend, when set (tests only), runs in the sender before each notification.
	beforeSend func()
	// the sender's last reading of WakeWanted (sender goroutine only: one runs at a time)
	checkedAt time.Time
	wanted    bool

	marked, sent, failed, skipped atomic.Int64
}

// mark asks for one wake-up after the admit that committed: it never blocks on the database.
func (w *wakes) mark(send func(context.Context) (bool, error)) {
	w.marked.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.pending = true
	if !w.running {
		w.running = true
		w.sender.Add(1)
		go w.run(send)
	}
}

// run sends one notification for every mark taken, until no mark is pending: a mark set while a
// notification is in flight is sent after it (the mark is taken before the send).
func (w *wakes) run(send func(context.Context) (bool, error)) {
	defer w.sender.Done()
	for {
		w.mu.Lock()
		if !w.pending || w.ctx.Err() != nil {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.pending = false
		w.mu.Unlock()
		if w.beforeSend != nil {
			w.beforeSend()
		}
		switch sent, err := send(w.ctx); {
		case err != nil:
			w.failed.Add(1)
		case sent:
			w.sent.Add(1)
		default:
			w.skipped.Add(1)
		}
	}
}

func (w *wakes) close(ctx context.Context) {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	done := make(chan struct{})
	go func() { w.sender.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	w.cancel()
	<-done
}

// pooledSQL maps the claim's and the admit's generated statements (ClaimDue, Admit) to the calls
// of the PL/pgSQL functions whose bodies they are (sql/queries/pooled.sql, pg-0027): the same
// parameters in the same order, the same columns of the same types, so the generated code that
// queued the statement reads the function's rows. A pipeline sends the call in place of the
// statement when its handle plans every statement at each execution (behind a transaction
// pooler: dbconn.DB.PlansPerExecution), since the server plans a function's statement once per
// server session; on a direct or session-pooled connection the statement goes as it is.
var pooledSQL = func() map[string]string {
	ctx := context.Background()
	sqlOf := func(send func(q *db.Queries)) string {
		c := &capture{}
		send(db.New(c))
		return c.sql
	}
	return map[string]string{
		sqlOf(func(q *db.Queries) { q.ClaimDue(ctx, []db.ClaimDueParams{{}}) }): sqlOf(func(q *db.Queries) { q.ClaimDuePooled(ctx, []db.ClaimDuePooledParams{{}}) }),
		sqlOf(func(q *db.Queries) { q.Admit(ctx, []db.AdmitParams{{}}) }):       sqlOf(func(q *db.Queries) { q.AdmitPooled(ctx, []db.AdmitPooledParams{{}}) }),
	}
}()

// capture is a db.DBTX that keeps the text of the one statement it is sent and runs nothing
// (pooledSQL reads the generated texts with it).
type capture struct {
	sql string
}

func (c *capture) SendBatch(_ context.Context, b *pgx.Batch) pgx.BatchResults {
	c.sql = b.QueuedQueries[0].SQL
	return &pipelineResults{err: errors.New("capture: nothing is sent")}
}
func (c *capture) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.New("capture: nothing is sent")
}
func (c *capture) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errors.New("capture: nothing is sent")
}
func (c *capture) QueryRow(context.Context, string, ...any) pgx.Row {
	return errRow{errors.New("capture: nothing is sent")}
}

func newPipeline(h *dbconn.DB, tx txKind, settings string) *pipeline {
	return &pipeline{db: h, tx: tx, settings: settings}
}

var errPipelineSent = errors.New("pipeline: a pipelined transaction sends one round trip, and it was sent")

// errPipelineHeld: a transaction queued to follow another (pipeline.then) reads nothing until
// that one sent it.
var errPipelineHeld = errors.New("pipeline: the transaction this one follows was not sent")

// send queues the settings and b's statements and sends them in the pipeline's transaction.
func (p *pipeline) send(ctx context.Context, b *pgx.Batch) *pipelineResults {
	if p.results != nil {
		return &pipelineResults{err: errPipelineSent}
	}
	wire := &pgx.Batch{}
	wire.Queue(p.settings)
	for _, q := range b.QueuedQueries {
		if call, ok := pooledSQL[q.SQL]; ok && p.db.PlansPerExecution() {
			q = &pgx.QueuedQuery{SQL: call, Arguments: q.Arguments}
		}
		wire.QueuedQueries = append(wire.QueuedQueries, q)
	}
	if p.follows {
		p.held, p.results = wire, &pipelineResults{err: errPipelineHeld}
		return p.results
	}
	begin := ""
	switch p.tx {
	case serializableTx:
		begin = "BEGIN ISOLATION LEVEL SERIALIZABLE"
	case readCommittedTx:
		begin = "BEGIN ISOLATION LEVEL READ COMMITTED"
	}
	p.results = &pipelineResults{}
	if p.then == nil || p.then.held == nil || begin == "" {
		p.results.pr = p.db.Pipeline(ctx, begin, wire)
		return p.results
	}
	p.results.pr, p.then.results.pr = p.db.PipelineThen(ctx, begin, wire, p.then.held)
	p.then.results.err = nil
	return p.results
}

func one(sql string, args []any) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	return b
}

// SendBatch sends b's statements in the pipeline's transaction.
func (p *pipeline) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return p.send(ctx, b)
}

// Exec sends one statement in the pipeline's transaction and reads its result.
func (p *pipeline) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return p.send(ctx, one(sql, args)).Exec()
}

// Query sends one statement in the pipeline's transaction and returns its rows (read them
// before commit).
func (p *pipeline) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return p.send(ctx, one(sql, args)).Query()
}

// QueryRow sends one statement in the pipeline's transaction and returns its row.
func (p *pipeline) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return p.send(ctx, one(sql, args)).QueryRow()
}

// commit ends the pipeline: it reads the COMMIT, if any, then closes the pipeline (the Sync:
// the implicit transaction's commit). It returns the first error of the pipeline; nil means
// the transaction committed. Call it after reading the query's results (the generated
// results' Close only marks them closed).
func (p *pipeline) commit() error {
	if p.results == nil {
		return errors.New("pipeline: nothing was sent")
	}
	return p.results.commit()
}

// pipelineResults are the caller's view of the pipeline: its own results, in order, after the
// planner settings (read first, their error reported as that of the first statement).
type pipelineResults struct {
	pr    *dbconn.PipelineResults // nil when nothing was sent (err says why)
	begun bool
	err   error
}

// begin reads the result the caller did not queue: the planner settings.
func (r *pipelineResults) begin() error {
	if !r.begun && r.err == nil {
		r.begun = true
		if _, err := r.pr.Exec(); err != nil {
			r.err = err
		}
	}
	return r.err
}

func (r *pipelineResults) Exec() (pgconn.CommandTag, error) {
	if err := r.begin(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return r.pr.Exec()
}

func (r *pipelineResults) Query() (pgx.Rows, error) {
	if err := r.begin(); err != nil {
		return nil, err
	}
	return r.pr.Query()
}

func (r *pipelineResults) QueryRow() pgx.Row {
	if err := r.begin(); err != nil {
		return errRow{err}
	}
	return r.pr.QueryRow()
}

// Close is the generated code's end of its results; the transaction ends in commit.
func (r *pipelineResults) Close() error { return r.err }

// Tx: the transaction here is the pipeline's own, not a pgx.Tx.
func (r *pipelineResults) Tx() pgx.Tx { return nil }

// commit reads COMMIT (unless the transaction already failed) and closes the pipeline.
// Idempotent.
func (r *pipelineResults) commit() error {
	if r.pr == nil {
		return r.err
	}
	_ = r.begin() // its error is r.err
	if err := r.pr.Commit(); r.err == nil {
		r.err = err
	}
	return r.err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// NextDueIn is how long until the earliest claimable row falls due, by database time.
func (s *Store) NextDueIn(ctx context.Context) (time.Duration, error) {
	var ms int64
	err := s.queries(ctx, func(q *db.Queries) (err error) {
		ms, err = q.NextDueIn(ctx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("next due time: %w", err)
	}
	if ms > int64(time.Hour/time.Millisecond) {
		return time.Hour, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// diagnose tells why an admit wrote nothing.
func (s *Store) diagnose(ctx context.Context, c *Claim) (Outcome, error) {
	var d db.AdmitDiagnosisRow
	err := s.queries(ctx, func(q *db.Queries) (err error) {
		d, err = q.AdmitDiagnosis(ctx, diagnosisParams(c))
		return err
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Race, nil // the schedule row is gone
	case err != nil:
		return "", fmt.Errorf("diagnose admit of %s/%s: %w", c.ProjectID, c.TriggerID, err)
	case !d.FenceHolds || !d.ScheduleUnchanged:
		return Race, nil
	case !d.DigestsValid:
		return Corrupt, nil
	case !d.RevisionsUnchanged:
		return Stale, nil
	default:
		return "", ErrAdmitInvalid
	}
}

// The one place where the coordinator's types meet the generated query types: a claim row
// becomes a Claim, and a Claim (its fence, the schedule as claimed, the revisions and digests)
// becomes the parameters of the statements that end it.

// claimFromRow is the Claim the claim statement returned.
func claimFromRow(r db.ClaimDueRow) *Claim {
	return &Claim{
		ProjectID: r.ProjectID, TriggerID: r.TriggerID, TriggerRevision: r.TriggerRevision,
		CursorMs: int8Ptr(r.NextFireAtMs), LastScheduledAtMs: int8Ptr(r.LastScheduledAtMs), StateVersion: r.StateVersion,
		// the claim statement always writes all four parts (a CHECK keeps them all or none)
		Fence:       Fence{Owner: r.ClaimOwner.String, Token: r.ClaimToken.UUID, Version: r.ClaimVersion, ExpiresAtMs: r.ClaimExpiresAtMs.Int64},
		ClaimedAtMs: r.ClaimedAtMs, Takeover: r.Takeover,
		ProjectRevision: r.ProjectRevision, ProjectDigest: r.ProjectDigest,
		CronSpec: r.CronSpec, TimeZone: r.Timezone, MisfirePolicy: r.MisfirePolicy, MisfireGraceMs: r.MisfireGraceMs, TriggerDigest: r.TriggerDigest,
		TaskID: r.TaskID, TaskRevision: r.TaskRevision, TaskDigest: r.TaskDigest,
		ExecutionRevisionID: r.ExecutionRevisionID, ExecutionDigest: r.ExecutionDigest,
		RowCtid: r.RowCtid,
	}
}

func int8Ptr(v pgtype.Int8) *int64 {
	if !v.Valid {
		return nil
	}
	return &v.Int64
}

func int8Of(v *int64) pgtype.Int8 {
	if v == nil {
		return pgtype.Int8{}
	}
	return pgtype.Int8{Int64: *v, Valid: true}
}

// advanceParams end c with next as the new cursor (init, skip, release).
func advanceParams(c *Claim, next int64) db.AdvanceClaimedParams {
	return db.AdvanceClaimedParams{
		NextFireAtMs: next, ProjectID: c.ProjectID, TriggerID: c.TriggerID,
		ClaimOwner: c.Fence.Owner, ClaimToken: c.Fence.Token, ClaimVersion: c.Fence.Version,
		TriggerRevision: c.TriggerRevision, StateVersion: c.StateVersion, CursorMs: int8Of(c.CursorMs),
	}
}

// admitParams is the admission statement's parallel arrays, one element per item.
func admitParams(items []AdmitItem) db.AdmitParams {
	var p db.AdmitParams
	for _, it := range items {
		c := it.Claim
		p.RowCtids, p.ProjectIds, p.TriggerIds = append(p.RowCtids, c.RowCtid), append(p.ProjectIds, c.ProjectID), append(p.TriggerIds, c.TriggerID)
		p.ClaimOwners, p.ClaimTokens, p.ClaimVersions = append(p.ClaimOwners, c.Fence.Owner), append(p.ClaimTokens, c.Fence.Token), append(p.ClaimVersions, c.Fence.Version)
		// an uninitialised row is never admitted (its decision is init): -1 matches no cursor
		cursor := int8Of(c.CursorMs)
		if !cursor.Valid {
			cursor.Int64 = -1
		}
		p.TriggerRevisions, p.StateVersions, p.CursorsMs = append(p.TriggerRevisions, c.TriggerRevision), append(p.StateVersions, c.StateVersion), append(p.CursorsMs, cursor.Int64)
		p.ScheduledForMs, p.NextFireAtMs = append(p.ScheduledForMs, it.ScheduledFor), append(p.NextFireAtMs, it.Next)
		p.ClaimedAtMs = append(p.ClaimedAtMs, c.ClaimedAtMs)
		p.ProjectRevisions, p.ProjectDigests = append(p.ProjectRevisions, c.ProjectRevision), append(p.ProjectDigests, c.ProjectDigest)
		p.TriggerDigests, p.TaskDigests = append(p.TriggerDigests, c.TriggerDigest), append(p.TaskDigests, c.TaskDigest)
		p.ExecutionRevisionIds, p.ExecutionDigests = append(p.ExecutionRevisionIds, c.ExecutionRevisionID), append(p.ExecutionDigests, c.ExecutionDigest)
		p.TaskIds, p.TaskRevisions = append(p.TaskIds, c.TaskID), append(p.TaskRevisions, c.TaskRevision)
		p.RunIds = append(p.RunIds, it.RunID)
		p.Missed, p.LastMissedMs = append(p.Missed, it.Missed), append(p.LastMissedMs, it.LastMissed)
	}
	return p
}

// diagnosisParams asks why c's admit wrote nothing.
func diagnosisParams(c *Claim) db.AdmitDiagnosisParams {
	return db.AdmitDiagnosisParams{
		ProjectID: c.ProjectID, TriggerID: c.TriggerID,
		ClaimOwner: c.Fence.Owner, ClaimToken: c.Fence.Token, ClaimVersion: c.Fence.Version,
		TriggerRevision: c.TriggerRevision, StateVersion: c.StateVersion, CursorMs: int8Of(c.CursorMs),
		ProjectRevision: c.ProjectRevision, ProjectDigest: c.ProjectDigest, TriggerDigest: c.TriggerDigest,
		TaskID: c.TaskID, TaskRevision: c.TaskRevision, TaskDigest: c.TaskDigest, ExecutionDigest: c.ExecutionDigest,
	}
}

// backoff grows 2, 4, 8 … ms, capped at 100 ms, with the low bits of the clock as jitter.
func backoff(attempt int) time.Duration {
	d := time.Duration(2<<min(attempt, 6)) * time.Millisecond
	return min(d, 100*time.Millisecond) + time.Duration(time.Now().UnixNano()%int64(time.Millisecond))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
