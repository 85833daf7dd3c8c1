package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/db"
)

// Fields of the lifecycle commands, as a FieldError names them.
const (
	FieldOlderThan = "older_than"
	FieldBatch     = "batch"
)

// MinPruneAge is the youngest a pruned Run may be: prune_runs (pg-0025) refuses less.
const MinPruneAge = time.Hour

// MaxPruneBatch bounds a prune batch (prune_runs refuses more).
const MaxPruneBatch = 10000

// DefaultPruneBatch is a prune batch when none is given.
const DefaultPruneBatch = 500

// RunNowResult is what a run-now did: the Run of the trigger's head revision (TriggerRevision),
// keyed IdempotencyKey. Already is true when this request had already made it.
type RunNowResult struct {
	ProjectID       string    `json:"project_id"`
	TriggerID       string    `json:"trigger_id"`
	RunID           uuid.UUID `json:"run_id"`
	TriggerRevision int64     `json:"trigger_revision"`
	IdempotencyKey  string    `json:"idempotency_key"`
	Request         uuid.UUID `json:"request_id"`
	Already         bool      `json:"already"`
	Reason          string    `json:"reason"`
}

// RunNow queues one Run of a trigger's head revision now through control_core.run_now (pg-0025):
// verified as an admission is (project active, head revision enabled, every digest recomputed),
// a manual Run (owner operator) keyed ql3:now:v1:<trigger>:<revision>:<request>, its claimed
// Attempt and events written, one trigger.run_now audit row; the trigger's schedule row is not
// touched. A nil request gets a new one. Unknown project or trigger: ErrNotFound; a paused
// project, a disabled or archived trigger: a state error (errors.Is ErrNotFound).
func (p *Publisher) RunNow(ctx context.Context, project, trigger string, request uuid.UUID, reason string) (RunNowResult, error) {
	out := RunNowResult{ProjectID: project, TriggerID: trigger, Request: request, Reason: reason}
	if err := ValidateID(FieldProject, project); err != nil {
		return out, err
	}
	if err := ValidateID(FieldTrigger, trigger); err != nil {
		return out, err
	}
	if err := ValidateCancelReason(reason); err != nil {
		return out, err
	}
	if out.Request == uuid.Nil {
		out.Request = uuid.New()
	}
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.SetAuditReason(ctx, "qlsched trigger run-now"); err != nil {
			return fmt.Errorf("run-now %s/%s: audit reason: %w", project, trigger, err)
		}
		// run_now looks the request up at the head revision only: a retry after the head moved,
		// or the request reused for another trigger, would make a second Run.
		made, err := q.RunNowByRequest(ctx, db.RunNowByRequestParams{ProjectID: project, Request: out.Request})
		if err != nil {
			return fmt.Errorf("run-now %s/%s: request %s: %w", project, trigger, out.Request, err)
		}
		for _, m := range made {
			t, rev, ok := parseRunNowKey(m.IdempotencyKey, out.Request)
			if !ok || t != trigger {
				return &stateError{msg: fmt.Sprintf("run-now %s/%s: request %s already made Run %s (key %s): a request id runs one trigger once; leave --request out for a new one",
					project, trigger, out.Request, m.RunID, m.IdempotencyKey)}
			}
			out.RunID, out.TriggerRevision, out.IdempotencyKey, out.Already = m.RunID, rev, m.IdempotencyKey, true
			return nil
		}
		row, err := q.RunNow(ctx, db.RunNowParams{ProjectID: project, TriggerID: trigger, Request: out.Request, Reason: reason})
		if err != nil {
			return fmt.Errorf("run-now %s/%s: %w", project, trigger, lifecycleErr(err))
		}
		out.RunID, out.TriggerRevision, out.IdempotencyKey, out.Already = row.RunID, row.TriggerRevision, row.IdempotencyKey, row.Already
		return nil
	})
	return out, err
}

// parseRunNowKey splits a run-now key ql3:now:v1:<trigger>:<revision>:<request> (a trigger id may
// hold ':'; a revision never does).
func parseRunNowKey(key string, request uuid.UUID) (trigger string, revision int64, ok bool) {
	rest, found := strings.CutPrefix(key, "ql3:now:v1:")
	if !found {
		return "", 0, false
	}
	if rest, found = strings.CutSuffix(rest, ":"+request.String()); !found {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return "", 0, false
	}
	rev, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return rest[:i], rev, true
}

// TriggerArchived is what an archive did. Already is true when the trigger was archived before
// (nothing written); Revision is the head revision it was archived at.
type TriggerArchived struct {
	ProjectID    string `json:"project_id"`
	TriggerID    string `json:"trigger_id"`
	Revision     int64  `json:"revision"`
	ArchivedAtMs int64  `json:"archived_at_ms"`
	Already      bool   `json:"already"`
}

// ArchiveTrigger archives a trigger through control_core.archive_trigger (pg-0025): its schedule
// row is deleted, so it leaves every list and is never claimed again; its revisions, Runs and
// audit rows stay; one trigger.archive audit row. Publishing it again is refused. Idempotent.
func (p *Publisher) ArchiveTrigger(ctx context.Context, project, trigger string) (TriggerArchived, error) {
	out := TriggerArchived{ProjectID: project, TriggerID: trigger}
	if err := ValidateID(FieldProject, project); err != nil {
		return out, err
	}
	if err := ValidateID(FieldTrigger, trigger); err != nil {
		return out, err
	}
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.SetAuditReason(ctx, "qlsched trigger archive"); err != nil {
			return fmt.Errorf("archive %s/%s: audit reason: %w", project, trigger, err)
		}
		row, err := q.ArchiveTrigger(ctx, db.ArchiveTriggerParams{ProjectID: project, TriggerID: trigger})
		if err != nil {
			return fmt.Errorf("archive %s/%s: %w", project, trigger, lifecycleErr(err))
		}
		out.Revision, out.ArchivedAtMs, out.Already = row.Revision, row.ArchivedAtMs, row.Already
		return nil
	})
	return out, err
}

// PruneRequest is a runs prune: a project's terminal Runs finished more than OlderThan ago, in
// batches of Batch Runs, each its own transaction. DryRun counts the first batch only.
type PruneRequest struct {
	Project   string
	OlderThan time.Duration
	Batch     int
	DryRun    bool
}

// Validate refuses a prune before anything is opened: an id, OlderThan at least MinPruneAge in
// whole milliseconds, Batch 1..MaxPruneBatch.
func (r PruneRequest) Validate() error {
	if err := ValidateID(FieldProject, r.Project); err != nil {
		return err
	}
	if r.OlderThan < MinPruneAge {
		return fieldErrf(FieldOlderThan, "%s is below the minimum %s: a Run that young may still be read", r.OlderThan, MinPruneAge)
	}
	if r.OlderThan%time.Millisecond != 0 {
		return fieldErrf(FieldOlderThan, "%s is not a whole number of milliseconds", r.OlderThan)
	}
	if r.Batch < 1 || r.Batch > MaxPruneBatch {
		return fieldErrf(FieldBatch, "%d is outside 1..%d", r.Batch, MaxPruneBatch)
	}
	return nil
}

// Pruned counts what a prune deleted (or, DryRun, would delete in its first batch), over Batches
// committed batches. CutoffMs is the last batch's cutoff (database time - OlderThan).
type Pruned struct {
	ProjectID   string `json:"project_id"`
	OlderThanMs int64  `json:"older_than_ms"`
	DryRun      bool   `json:"dry_run"`
	Batches     int    `json:"batches"`
	Runs        int64  `json:"runs"`
	Attempts    int64  `json:"attempts"`
	Events      int64  `json:"events"`
	Leases      int64  `json:"leases"`
	Offers      int64  `json:"offers"`
	CutoffMs    int64  `json:"cutoff_ms"`
}

// PruneRuns deletes a project's old terminal Runs with their Attempts, events, leases and offers
// through control_core.prune_runs (pg-0025), batch after batch (each committed with its run.prune
// audit row) until a batch comes back short; progress, when not nil, is called after each batch
// with the totals so far. A live Run (or a terminal one whose Attempt or lease is still live) is
// never taken. What was committed stays committed when a later batch fails.
func (p *Publisher) PruneRuns(ctx context.Context, r PruneRequest, progress func(Pruned)) (Pruned, error) {
	out := Pruned{ProjectID: r.Project, OlderThanMs: r.OlderThan.Milliseconds(), DryRun: r.DryRun}
	if err := r.Validate(); err != nil {
		return out, err
	}
	for {
		var row db.PruneRunsRow
		err := p.inTx(ctx, func(tx pgx.Tx) error {
			q := db.New(tx)
			if err := q.SetAuditReason(ctx, "qlsched runs prune"); err != nil {
				return fmt.Errorf("prune %s: audit reason: %w", r.Project, err)
			}
			var err error
			row, err = q.PruneRuns(ctx, db.PruneRunsParams{ProjectID: r.Project, OlderThanMs: out.OlderThanMs,
				Batch: int32(r.Batch), DryRun: r.DryRun})
			if err != nil {
				return fmt.Errorf("prune %s (batch %d): %w", r.Project, out.Batches+1, lifecycleErr(err))
			}
			if r.DryRun {
				return errDryRun // counted, nothing to keep
			}
			return nil
		})
		if err != nil && !errors.Is(err, errDryRun) {
			return out, err
		}
		out.CutoffMs = row.CutoffMs
		out.Runs += row.Runs
		out.Attempts += row.Attempts
		out.Events += row.Events
		out.Leases += row.Leases
		out.Offers += row.Offers
		if row.Runs > 0 && !r.DryRun {
			out.Batches++
		}
		if progress != nil && row.Runs > 0 {
			progress(out)
		}
		if r.DryRun || row.Runs < int64(r.Batch) {
			return out, nil
		}
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("prune %s: after %d batches: %w", r.Project, out.Batches, err)
		}
	}
}

// errDryRun rolls back a dry run's transaction.
var errDryRun = errors.New("dry run")

// lifecycleErr turns pg-0025's refusals into the package's errors: no_data_found is ErrNotFound,
// object_not_in_prerequisite_state (paused project, disabled or archived trigger) a state error,
// invalid_parameter_value a FieldError-free input error; anything else is returned as it is.
func lifecycleErr(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case pgerrcode.NoDataFound:
		return fmt.Errorf("%s: %w", pgErr.Message, ErrNotFound)
	case pgerrcode.ObjectNotInPrerequisiteState:
		return &stateError{msg: pgErr.Message}
	case pgerrcode.DataCorrupted:
		return fmt.Errorf("%s (refused: a stored revision does not match its digest; investigate before running it): %w", pgErr.Message, err)
	}
	return err
}

// archivedErr is a publish of an archived trigger (pg-0025's archived_trigger_guard): a state
// error naming it; other errors are returned as they are.
func archivedErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ObjectNotInPrerequisiteState && pgErr.Hint == "archived_trigger" {
		return &stateError{msg: pgErr.Message}
	}
	return err
}
