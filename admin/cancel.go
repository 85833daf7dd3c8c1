package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/db"
)

// FieldReason is a cancel's reason, as a FieldError names it.
const FieldReason = "reason"

// MaxCancelReason bounds a cancel's reason (cancel_run keeps at most 256 characters).
const MaxCancelReason = 256

// terminalRunStates are the states a Run never leaves.
var terminalRunStates = []string{"succeeded", "failed", "cancelled"}

// RunCancelled is what a cancel did: From is the Run's state before, State after. Already is true
// when the Run was terminal: nothing was written (a cancel is idempotent).
type RunCancelled struct {
	RunID   uuid.UUID `json:"run_id"`
	From    string    `json:"from_state"`
	State   string    `json:"state"`
	Already bool      `json:"already"`
	Reason  string    `json:"reason"`
}

// ValidateCancelReason checks a cancel's reason: at most MaxCancelReason characters of UTF-8.
func ValidateCancelReason(reason string) error {
	if !utf8.ValidString(reason) || utf8.RuneCountInString(reason) > MaxCancelReason {
		return fieldErrf(FieldReason, "want at most %d characters of UTF-8", MaxCancelReason)
	}
	return nil
}

// CancelRun cancels a Run through control_core.cancel_run (pg-0022; the admin role holds no write
// privilege on Runs): a queued Run's Attempt is cancelled, a dispatching Run's offer withdrawn
// with it, a running Run is marked cancelled and its worker told at its next heartbeat; the
// database writes the run.cancelled event and the run.cancel audit row. A terminal Run is left
// as it is and reported Already. An unknown id is ErrNotFound.
func (p *Publisher) CancelRun(ctx context.Context, runID uuid.UUID, reason string) (RunCancelled, error) {
	out := RunCancelled{RunID: runID, Reason: reason}
	if runID == uuid.Nil {
		return out, fieldErrf(FieldRun, "the nil UUID names no Run")
	}
	if err := ValidateCancelReason(reason); err != nil {
		return out, err
	}
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		q := db.New(tx)
		// cancel_run records the audit reason as the event's and the audit row's "by"
		if err := q.SetAuditReason(ctx, "qlsched runs cancel"); err != nil {
			return fmt.Errorf("cancel run %s: audit reason: %w", runID, err)
		}
		row, err := q.CancelRun(ctx, db.CancelRunParams{RunID: runID, Reason: reason})
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.NoDataFound {
			return fmt.Errorf("run %s: %w", runID, ErrNotFound)
		} else if err != nil {
			return fmt.Errorf("cancel run %s: %w", runID, err)
		}
		out.From, out.State = row.FromState, row.RunState
		return nil
	})
	if err != nil {
		return out, err
	}
	out.Already = slices.Contains(terminalRunStates, out.From)
	return out, nil
}
