package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/db"
)

// A trigger pins a task revision (its content and digest name it), so publishing a task leaves
// every trigger of the task running the revision it pinned. TaskRollout moves them, on purpose:
// each trigger behind the task's head gets a new revision pinned to the head, written by
// publishTrigger, as any trigger publish, with its schedule row reset (cursor and claim cleared,
// state and claim versions incremented: a claim taken under the old revision fails its fence).

// StaleTrigger is a trigger whose head revision pins an older revision of its task.
type StaleTrigger struct {
	TriggerID    string `json:"trigger_id"`
	Revision     int64  `json:"revision"`      // the trigger's head revision
	TaskRevision int64  `json:"task_revision"` // the task revision it pins
	Enabled      bool   `json:"enabled"`
}

// staleTriggers are the triggers of a task whose head pins a revision older than head, in id order.
func staleTriggers(ctx context.Context, q *db.Queries, project, task string, head int64) ([]StaleTrigger, error) {
	pins, err := q.TaskTriggerPins(ctx, db.TaskTriggerPinsParams{ProjectID: project, TaskID: task})
	if err != nil {
		return nil, fmt.Errorf("triggers of task %s/%s: %w", project, task, err)
	}
	out := []StaleTrigger{}
	for _, p := range pins {
		if p.TaskRevision < head {
			out = append(out, StaleTrigger{TriggerID: p.TriggerID, Revision: p.Revision, TaskRevision: p.TaskRevision, Enabled: p.Enabled})
		}
	}
	return out, nil
}

// RolledTrigger is one trigger of a rollout: the task revision it pinned, and the one it pins
// after (the task's head). Revision is its head revision after: the new one when it moved (0 in
// a check), else the one it has.
type RolledTrigger struct {
	TriggerID        string `json:"trigger_id"`
	Moved            bool   `json:"moved"`
	FromTaskRevision int64  `json:"from_task_revision"`
	TaskRevision     int64  `json:"task_revision"`
	Revision         int64  `json:"revision"`
	Enabled          bool   `json:"enabled"`
	// QueuedForInitialisation: the new revision is enabled, so its schedule row waits, without
	// a cursor, for a replica to initialise it.
	QueuedForInitialisation bool `json:"queued_for_initialisation"`
}

// TaskRollout says what a rollout did (or, Check, would do): every trigger of the task, Moved
// those that were behind the head, AtHead those already pinned to it (left alone).
type TaskRollout struct {
	ProjectID    string          `json:"project_id"`
	TaskID       string          `json:"task_id"`
	TaskRevision int64           `json:"task_revision"` // the task's head revision
	Check        bool            `json:"check"`
	Moved        int             `json:"moved"`
	AtHead       int             `json:"at_head"`
	Triggers     []RolledTrigger `json:"triggers"`
}

// RolloutTask moves every trigger of a task to the task's head revision, in one transaction
// under the audited project lock (reason "task.rollout"): each trigger behind the head gets a
// new revision pinned to it, its content otherwise the head's, with its trigger.publish audit row
// (change "rollout") and its schedule row reset. Triggers at the head are left alone, cursor and
// claim kept; when all are, nothing is written (not even the lock's audit row). With check it
// writes nothing and reports what would move.
func (p *Publisher) RolloutTask(ctx context.Context, project, task string, check bool) (TaskRollout, error) {
	out := TaskRollout{ProjectID: project, TaskID: task, Check: check, Triggers: []RolledTrigger{}}
	if err := ValidateID(FieldProject, project); err != nil {
		return out, err
	}
	if err := ValidateID(FieldTask, task); err != nil {
		return out, err
	}
	roll := func(q *db.Queries) (bool, error) {
		res := TaskRollout{ProjectID: project, TaskID: task, Check: check, Triggers: []RolledTrigger{}}
		head, err := taskHead(ctx, q, project, task)
		if err != nil {
			return false, err
		}
		if head == nil {
			return false, fmt.Errorf("task %s/%s: %w", project, task, ErrNotFound)
		}
		res.TaskRevision = head.revision
		pins, err := q.TaskTriggerPins(ctx, db.TaskTriggerPinsParams{ProjectID: project, TaskID: task})
		if err != nil {
			return false, fmt.Errorf("triggers of task %s/%s: %w", project, task, err)
		}
		var behind []string
		for _, pin := range pins {
			if pin.TaskRevision != head.revision {
				behind = append(behind, pin.TriggerID)
			}
		}
		moving := map[string]*triggerRevision{}
		if len(behind) > 0 {
			heads, err := readTriggerHeads(ctx, q, project, behind)
			if err != nil {
				return false, err
			}
			for _, h := range heads {
				moving[h.trigger] = h
			}
		}
		// written in the claim's order (claimOrder: the rows' cursors, then trigger id in the
		// database's collation), so the resets lock rows as a batch admit or initialisation does;
		// reported in id order
		written := map[string]int64{}
		if !check && len(behind) > 0 {
			order, err := claimOrder(ctx, q, slices.Repeat([]string{project}, len(behind)), behind)
			if err != nil {
				return false, err
			}
			for _, k := range order {
				id := behind[k]
				h := moving[id]
				if h == nil {
					continue
				}
				pub, err := publishTrigger(ctx, q, h.spec(project), head.revision, h, "rollout")
				if err != nil {
					return false, err
				}
				if pub.Unchanged || pub.TaskRevision != head.revision {
					return false, fmt.Errorf("trigger %s/%s: rollout wrote task revision %d (unchanged %v), want %d",
						project, id, pub.TaskRevision, pub.Unchanged, head.revision)
				}
				written[id] = pub.Revision
			}
		}
		for _, pin := range pins {
			rt := RolledTrigger{TriggerID: pin.TriggerID, FromTaskRevision: pin.TaskRevision, TaskRevision: pin.TaskRevision,
				Revision: pin.Revision, Enabled: pin.Enabled}
			if h := moving[pin.TriggerID]; h != nil {
				rt.Moved, rt.TaskRevision, rt.Revision, rt.QueuedForInitialisation = true, head.revision, 0, h.enabled
				if !check {
					rt.Revision = written[pin.TriggerID]
				}
				res.Moved++
			} else {
				res.AtHead++
			}
			res.Triggers = append(res.Triggers, rt)
		}
		out = res
		return !check && res.Moved > 0, nil
	}
	if check {
		// a read of one snapshot: no lock, nothing written
		err := p.db.InTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
			q := db.New(tx)
			// refuse what the rollout refuses (lockWritableProject): a missing or archived project
			proj, err := q.GetProject(ctx, project)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("project %s: %w (create it first)", project, ErrNotFound)
			} else if err != nil {
				return fmt.Errorf("read project %s: %w", project, err)
			}
			if proj.State != ProjectActive && proj.State != ProjectPaused {
				return fmt.Errorf("project %s is %s: %w", project, proj.State, ErrNotFound)
			}
			_, err = roll(q)
			return err
		})
		return out, err
	}
	err := p.inProject(ctx, project, "task.rollout", roll)
	return out, err
}
