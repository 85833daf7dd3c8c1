package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/db"
)

// RecoveryReport says what startup recovery found and did.
type RecoveryReport struct {
	Candidates   int // runtime-owned queued/dispatching Runs not in the pristine admitted shape
	FailedClosed int
	Skipped      int // changed concurrently (the dispatcher acted first): left alone
}

// recoveryBatch bounds one read of the recovery source.
const recoveryBatch = 500

// Recover runs startup recovery before the lifecycle starts. The recovery source (the
// RecoveryCandidates query) excludes exactly the pristine shape an admit leaves, which the
// dispatcher can still claim normally; every other runtime-owned queued/dispatching shape is a
// candidate and fails closed.
//
// "Fails closed" means: the Run and its newest Attempt are marked failed, with the observed shape
// in the Attempt's error and a run.recovery_failed event. Nothing is re-admitted, re-queued or
// dispatched: a half-dispatched Attempt might already be executing somewhere, so running it again
// could run it twice; an operator (or a retry policy outside the scheduler) decides what next.
// Each candidate is fenced on the states and updated_at_ms recovery observed, so a concurrent
// change wins and the candidate is skipped.
func Recover(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) (RecoveryReport, error) {
	var rep RecoveryReport
	q := db.New(pool)
	// Candidates left alone (changed concurrently) stay candidates; the next read skips them, so
	// it reaches the ones behind them. Every row read is either failed closed, which takes it out
	// of the source, or added here: the loop ends.
	skipped := []uuid.UUID{}
	for {
		rows, err := q.RecoveryCandidates(ctx, db.RecoveryCandidatesParams{SkipRunIds: skipped, MaxRows: recoveryBatch})
		if err != nil {
			return rep, fmt.Errorf("read recovery source: %w", err)
		}
		for _, r := range rows {
			rep.Candidates++
			ok, err := failClosed(ctx, pool, r)
			if err != nil {
				return rep, err
			}
			if ok {
				rep.FailedClosed++
				log.Warn("startup recovery failed a run closed", "run_id", r.RunID, "run_state", r.RunState,
					"attempt_state", r.AttemptState.String)
			} else {
				rep.Skipped++
				skipped = append(skipped, r.RunID)
			}
		}
		if len(rows) < recoveryBatch {
			return rep, nil
		}
	}
}

func failClosed(ctx context.Context, pool *pgxpool.Pool, r db.RecoveryCandidatesRow) (bool, error) {
	written := false
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		_, err := db.New(tx).FailClosed(ctx, db.FailClosedParams{
			AttemptID: r.AttemptID, RunID: r.RunID, AttemptState: r.AttemptState,
			AttemptUpdatedAtMs: r.AttemptUpdatedAtMs, RunState: r.RunState, RunUpdatedAtMs: r.RunUpdatedAtMs,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		written = err == nil
		return err
	})
	if isSerializationFailure(err) {
		return false, nil // changed under us: the other writer wins
	}
	if err != nil {
		return false, fmt.Errorf("fail run %s closed: %w", r.RunID, err)
	}
	return written, nil
}

// ReadinessError lists why the runtime may not start.
type ReadinessError struct{ Problems []string }

func (e *ReadinessError) Error() string {
	return fmt.Sprintf("database not ready for the scheduler: %v", e.Problems)
}

// RequiredCapability is the control-core version this scheduler runs on.
const RequiredCapability = 17

// CheckReadiness fails closed unless control-core is at v17, the schema holds everything of the
// readiness contract that qlmigrate verify checks (a dropped claim index or CHECK constraint, or an
// edited db_now_ms(), would silently change what a claim or an admit means), and the connected
// role holds exactly what the runtime uses (and not INSERT on trigger_schedules).
func CheckReadiness(ctx context.Context, pool *pgxpool.Pool) error {
	schemaOK, err := db.New(pool).SchemaExists(ctx)
	if err != nil {
		return fmt.Errorf("readiness: %w", err)
	}
	if !schemaOK {
		return &ReadinessError{Problems: []string{"control_core is not installed (or not visible to this role): run qlmigrate up"}}
	}
	// RuntimeReadiness names these objects; on a half-migrated database (qlmigrate up --to 13) a
	// missing one makes it raise an error (exit 3) where the answer is "not ready" (exit 1).
	missing, err := db.New(pool).RuntimeObjects(ctx)
	if err != nil {
		return fmt.Errorf("readiness: look up the runtime's objects: %w", err)
	}
	if len(missing) > 0 {
		var p []string
		// best effort: the capabilities table may itself be among the missing
		if c, err := db.New(pool).Capability(ctx, "control-core"); err == nil && c.Version != RequiredCapability {
			p = append(p, fmt.Sprintf("control-core is at v%d, want v%d: run qlmigrate up", c.Version, RequiredCapability))
		}
		for _, m := range missing {
			p = append(p, m+" does not exist (a partly migrated database?): run qlmigrate up")
		}
		return &ReadinessError{Problems: p}
	}
	r, err := db.New(pool).RuntimeReadiness(ctx)
	if err != nil {
		return fmt.Errorf("readiness: %w", err)
	}
	var p []string
	if r.Capability != RequiredCapability {
		p = append(p, fmt.Sprintf("control-core is at v%d, want v%d: run qlmigrate up", r.Capability, RequiredCapability))
	}
	for _, c := range []struct {
		ok   bool
		what string
	}{
		{r.SchedulesRw, "SELECT, UPDATE on control_core.trigger_schedules"},
		{!r.SchedulesInsert, "no INSERT on control_core.trigger_schedules (the runtime must not create schedules)"},
		{r.RunsRw, "SELECT, INSERT, UPDATE on control_core.runs"},
		{r.AttemptsRw, "SELECT, INSERT, UPDATE on control_core.attempts"},
		{r.EventsRw, "SELECT, INSERT on control_core.run_events"},
		{r.DbTime, "EXECUTE on control_core.db_now_ms()"},
	} {
		if !c.ok {
			p = append(p, "the connected role needs "+c.what)
		}
	}
	if r.Capability == RequiredCapability { // the contract is v17's: another version only floods
		contract, err := schemaDrift(ctx, pool)
		if err != nil {
			return fmt.Errorf("readiness: %w", err)
		}
		p = append(p, contract...)
	}
	if len(p) > 0 {
		return &ReadinessError{Problems: p}
	}
	return nil
}

// schemaDrift compares the catalogs with the readiness contract, as qlmigrate verify does, and
// describes every missing or changed object (objects beyond the contract are allowed).
func schemaDrift(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	var drift []checksums.Drift
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog"); err != nil {
			return err
		}
		var err error
		drift, err = checksums.ReadinessDrift(ctx, db.New(tx), checksums.Locator{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the schema from the catalogs: %w", err)
	}
	var p []string
	for _, d := range drift {
		if !d.Note {
			p = append(p, fmt.Sprintf("%s: %s (qlmigrate verify says how to fix it)", d.Object, d.Message))
		}
	}
	return p, nil
}
