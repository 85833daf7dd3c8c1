package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/base/pgretry"
)

// RecoveryReport says what startup recovery found and did.
type RecoveryReport struct {
	Candidates   int // runtime-owned queued/dispatching Runs in none of the dispatcher's shapes
	FailedClosed int
	Skipped      int // changed concurrently (the dispatcher acted first): left alone
}

// recoveryBatch bounds one read of the recovery source.
const recoveryBatch = 500

// Recover runs startup recovery before the lifecycle starts. The recovery source (the
// RecoveryCandidates query) excludes exactly the shapes the dispatcher owns (pg-0022; ADR-0105's
// recovery clause as amended by issue 32, docs/scheduling.md): a queued Run whose newest Attempt
// is claimed in the live shape, whatever its attempt_no (admitted, or a retry waiting out its
// backoff), which placement offers; and a dispatching Run whose newest Attempt is dispatching in
// the live shape, which a worker answers or a dispatcher's sweep expires on database time. Every
// other runtime-owned queued/dispatching shape is a candidate and fails closed. The source reads
// two partial indexes holding only Runs and live Attempts out of those shapes, so its cost grows
// neither with the queued Runs admitted nor with the Attempts executed. A live Run whose newest
// Attempt disagrees with it is in neither index: the deferred trigger run_attempt_agree (I1)
// refuses it at commit.
//
// "Fails closed" means: the Run and its newest Attempt are marked failed, with the observed shape
// in the Attempt's error and a run.recovery_failed event. Nothing is re-admitted, re-queued or
// dispatched: a half-dispatched Attempt might already be executing somewhere, so running it again
// could run it twice; an operator (or a retry policy outside the scheduler) decides what next.
// Each candidate is fenced on the states and updated_at_ms recovery observed, so a concurrent
// change wins and the candidate is skipped.
func Recover(ctx context.Context, h *dbconn.DB, log *slog.Logger) (RecoveryReport, error) {
	var rep RecoveryReport
	s := NewStore(h)
	// Candidates left alone (changed concurrently) stay candidates; the next read skips them, so
	// it reaches the ones behind them. Every row read is either failed closed, which takes it out
	// of the source, or added here: the loop ends.
	skipped := []uuid.UUID{}
	for {
		var rows []db.RecoveryCandidatesRow
		err := s.queries(ctx, func(q *db.Queries) (err error) {
			rows, err = q.RecoveryCandidates(ctx, db.RecoveryCandidatesParams{SkipRunIds: skipped, MaxRows: recoveryBatch})
			return err
		})
		if err != nil {
			return rep, fmt.Errorf("read recovery source: %w", err)
		}
		for _, r := range rows {
			rep.Candidates++
			ok, err := failClosed(ctx, h, r)
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

func failClosed(ctx context.Context, h *dbconn.DB, r db.RecoveryCandidatesRow) (bool, error) {
	written := false
	err := h.InTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
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
	if pgretry.Retryable(err) {
		return false, nil // changed under us: the other writer wins
	}
	if err != nil {
		return false, fmt.Errorf("fail run %s closed: %w", r.RunID, err)
	}
	return written, nil
}
