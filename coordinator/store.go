package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/db"
)

// Claim is a schedule row this replica holds under the four-part fence, with everything the
// decision and the admit need (all read by the claim statement itself).
type Claim = db.ClaimDueRow

// Cursor returns the claimed cursor; nil means waiting for initialisation.
func cursorOf(c *Claim) *int64 {
	if !c.NextFireAtMs.Valid {
		return nil
	}
	v := c.NextFireAtMs.Int64
	return &v
}

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
	pool *pgxpool.Pool
	q    *db.Queries
}

// NewStore wraps pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool, q: db.New(pool)} }

// Claim takes the next claimable schedule row for owner with lease, or returns nil when none is.
func (s *Store) Claim(ctx context.Context, owner string, lease time.Duration) (*Claim, error) {
	row, err := s.q.ClaimDue(ctx, db.ClaimDueParams{Owner: owner, LeaseMs: lease.Milliseconds()})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return &row, nil
}

// Advance ends a claim without a Run: init (first cursor), skip (advance only) or release
// (next == cursor). Fenced like the admit.
func (s *Store) Advance(ctx context.Context, c *Claim, next int64) (Outcome, error) {
	_, err := s.q.AdvanceClaimed(ctx, db.AdvanceClaimedParams{
		NextFireAtMs: next, ProjectID: c.ProjectID, TriggerID: c.TriggerID,
		ClaimOwner: c.ClaimOwner.String, ClaimToken: c.ClaimToken.UUID, ClaimVersion: c.ClaimVersion,
		TriggerRevision: c.TriggerRevision, StateVersion: c.StateVersion, CursorMs: c.NextFireAtMs,
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
	Retries          int // serialization failures retried before it committed
}

// Admit runs the atomic admission of ADR-0105 in one SERIALIZABLE transaction, retrying a
// serialization failure up to retries times. Outcome Written comes with the Run; Race, Stale and
// Corrupt mean nothing was written (diagnosed after the fact, off the happy path).
func (s *Store) Admit(ctx context.Context, c *Claim, scheduledFor, next int64, runID uuid.UUID, retries int) (Admitted, Outcome, error) {
	params := db.AdmitParams{
		NextFireAtMs: next, ScheduledForMs: scheduledFor, ProjectID: c.ProjectID, TriggerID: c.TriggerID,
		ClaimOwner: c.ClaimOwner.String, ClaimToken: c.ClaimToken.UUID, ClaimVersion: c.ClaimVersion,
		TriggerRevision: c.TriggerRevision, StateVersion: c.StateVersion, CursorMs: c.NextFireAtMs.Int64,
		ProjectRevision: c.ProjectRevision, ProjectDigest: c.ProjectDigest, TriggerDigest: c.TriggerDigest,
		TaskDigest: c.TaskDigest, ExecutionRevisionID: c.ExecutionRevisionID, ExecutionDigest: c.ExecutionDigest,
		RunID: runID, RowCtid: c.RowCtid,
	}
	var res Admitted
	for attempt := 0; ; attempt++ {
		row, err := s.admitOnce(ctx, params)
		if err == nil {
			res.RunID, res.AttemptID, res.AdmittedAtMs = row.RunID, row.AttemptID, row.AdmittedAtMs.Int64
			return res, Written, nil
		}
		if errors.Is(err, pgx.ErrNoRows) {
			outcome, derr := s.diagnose(ctx, c)
			return res, outcome, derr
		}
		if isSerializationFailure(err) && attempt < retries {
			res.Retries++
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return res, "", err
			}
			continue
		}
		return res, "", fmt.Errorf("admit %s/%s at %d: %w", c.ProjectID, c.TriggerID, scheduledFor, err)
	}
}

func (s *Store) admitOnce(ctx context.Context, p db.AdmitParams) (db.AdmitRow, error) {
	return db.New(serializableTrip{s.pool}).Admit(ctx, p)
}

// serializableTrip runs one sqlc query as its own SERIALIZABLE transaction in a single round
// trip: BEGIN ISOLATION LEVEL SERIALIZABLE, the query and COMMIT go out as one pipeline. The
// admit is a single statement, so this is exactly the ADR's one SERIALIZABLE transaction, at a
// third of the round trips of Begin/Query/Commit. When the query fails, the server skips the
// COMMIT and the connection is left in a failed transaction; the pool then discards it.
type serializableTrip struct{ pool *pgxpool.Pool }

func (t serializableTrip) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL SERIALIZABLE")
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	return &tripRow{br: t.pool.SendBatch(ctx, b)}
}

func (t serializableTrip) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.New("serializableTrip: only single-row queries are supported")
}

func (t serializableTrip) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errors.New("serializableTrip: only single-row queries are supported")
}

type tripRow struct{ br pgx.BatchResults }

// Scan reads BEGIN, the row and COMMIT in order; an error anywhere wins over the row, and
// ErrNoRows is returned only when the (empty) transaction committed.
func (r *tripRow) Scan(dest ...any) error {
	_, err := r.br.Exec()
	if err == nil {
		err = r.br.QueryRow().Scan(dest...)
	}
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		if _, cerr := r.br.Exec(); cerr != nil {
			err = cerr
		}
	}
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

// NextDueIn is how long until the earliest claimable row falls due, by database time.
func (s *Store) NextDueIn(ctx context.Context) (time.Duration, error) {
	ms, err := s.q.NextDueIn(ctx)
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
	d, err := s.q.AdmitDiagnosis(ctx, db.AdmitDiagnosisParams{
		ProjectID: c.ProjectID, TriggerID: c.TriggerID,
		ClaimOwner: c.ClaimOwner.String, ClaimToken: c.ClaimToken.UUID, ClaimVersion: c.ClaimVersion,
		TriggerRevision: c.TriggerRevision, StateVersion: c.StateVersion, CursorMs: c.NextFireAtMs,
		ProjectRevision: c.ProjectRevision, ProjectDigest: c.ProjectDigest, TriggerDigest: c.TriggerDigest,
		TaskDigest: c.TaskDigest, ExecutionDigest: c.ExecutionDigest,
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Race, nil // the schedule row is gone
	case err != nil:
		return "", fmt.Errorf("diagnose admit of %s/%s: %w", c.ProjectID, c.TriggerID, err)
	case !d.FenceHeld || !d.FenceLive || !d.ScheduleUnchanged:
		return Race, nil
	case !d.DigestsValid:
		return Corrupt, nil
	case !d.RevisionsUnchanged:
		return Stale, nil
	default:
		return "", ErrAdmitInvalid
	}
}

func isSerializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
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

var _ = pgtype.Int8{}
