package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/limits"
	"github.com/qlcontrol/controlcore/schedule"
)

// Publisher writes projects, tasks and triggers as the admin role, each publish in one
// transaction under the audited Project lock (control_core.lock_project).
type Publisher struct{ pool *pgxpool.Pool }

// NewPublisher wraps a pool connected as the admin role.
func NewPublisher(pool *pgxpool.Pool) *Publisher { return &Publisher{pool: pool} }

// ProjectCreated says what CreateProject found: Created is false when the project already
// existed (in State, at Revision), in which case nothing was written.
type ProjectCreated struct {
	ProjectID string `json:"project_id"`
	Created   bool   `json:"created"`
	State     string `json:"state"`
	Revision  int64  `json:"revision"`
}

// CreateProject creates an active project at revision 1, with its audit row. It is idempotent:
// for a project that already exists it writes nothing and reports Created false with the
// project's state, so a script can run it again.
func (p *Publisher) CreateProject(ctx context.Context, project string) (ProjectCreated, error) {
	out := ProjectCreated{ProjectID: project}
	if err := ValidateID(FieldProject, project); err != nil {
		return out, err
	}
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		row, err := q.CreateProject(ctx, project)
		if errors.Is(err, pgx.ErrNoRows) { // ON CONFLICT DO NOTHING: it exists
			proj, err := q.GetProject(ctx, project)
			if err != nil {
				return fmt.Errorf("read project %s: %w", project, err)
			}
			out.State, out.Revision = proj.State, proj.Revision
			return nil
		} else if err != nil {
			return fmt.Errorf("create project %s: %w", project, err)
		}
		out.Created, out.State, out.Revision = true, "active", row.Revision
		return q.AuditAdmin(ctx, db.AuditAdminParams{Action: "project.create", ProjectID: project, Subject: project, Detail: []byte("{}")})
	})
	return out, err
}

// TaskSpec is a task revision to publish: a remote_worker execution spec (a JSON object).
type TaskSpec struct {
	Project, Task string
	ExecutorSpec  []byte
}

// Validate checks every field; the executor spec by rule and position only (it may hold secrets).
func (t TaskSpec) Validate() error {
	if err := ValidateID(FieldProject, t.Project); err != nil {
		return err
	}
	if err := ValidateID(FieldTask, t.Task); err != nil {
		return err
	}
	return ValidateExecutorSpec(t.ExecutorSpec)
}

// TaskPublished describes a task's head revision after a publish. Unchanged is true when the
// head already held the same executor spec: nothing was written and Revision is the head's.
type TaskPublished struct {
	ProjectID           string    `json:"project_id"`
	TaskID              string    `json:"task_id"`
	Revision            int64     `json:"revision"`
	ExecutionRevisionID uuid.UUID `json:"execution_revision_id"`
	ExecutionDigest     string    `json:"execution_digest"`
	ContentDigest       string    `json:"content_digest"`
	Unchanged           bool      `json:"unchanged"`
}

// PublishTask publishes a new revision of a task that pins a remote_worker execution revision
// with the task's spec (identical specs share one content-addressed execution revision). A spec
// equal to the head revision's (by its canonical jsonb digest) writes nothing and reports
// Unchanged.
func (p *Publisher) PublishTask(ctx context.Context, t TaskSpec) (TaskPublished, error) {
	out := TaskPublished{ProjectID: t.Project, TaskID: t.Task}
	if err := t.Validate(); err != nil {
		return out, err
	}
	err := p.inProject(ctx, t.Project, "task.publish", func(q *db.Queries) (bool, error) {
		head, err := q.GetTaskHeadExecution(ctx, db.GetTaskHeadExecutionParams{ProjectID: t.Project, TaskID: t.Task, Spec: t.ExecutorSpec})
		switch {
		case err == nil && head.SameSpec:
			out.Revision, out.ExecutionRevisionID, out.ExecutionDigest, out.ContentDigest, out.Unchanged =
				head.HeadRevision, head.ExecutionRevisionID, head.ExecutionDigest, head.ContentDigest, true
			return false, nil
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return false, fmt.Errorf("task head: %w", err)
		}
		exec, err := q.UpsertExecutionRevision(ctx, db.UpsertExecutionRevisionParams{ProjectID: t.Project, Spec: t.ExecutorSpec})
		if err != nil {
			return false, fmt.Errorf("execution revision: %w", err)
		}
		rev, err := q.BumpTaskHead(ctx, db.BumpTaskHeadParams{ProjectID: t.Project, TaskID: t.Task})
		if err != nil {
			return false, fmt.Errorf("task head: %w", err)
		}
		kr, err := q.InsertTaskRevision(ctx, db.InsertTaskRevisionParams{ProjectID: t.Project, TaskID: t.Task, Revision: rev, ExecutionRevisionID: exec.ExecutionRevisionID})
		if err != nil {
			return false, fmt.Errorf("task revision: %w", err)
		}
		out.Revision, out.ExecutionRevisionID, out.ExecutionDigest, out.ContentDigest = kr.Revision, exec.ExecutionRevisionID, exec.Digest, kr.ContentDigest
		detail, _ := json.Marshal(map[string]any{"revision": rev, "execution_digest": exec.Digest})
		return true, q.AuditAdmin(ctx, db.AuditAdminParams{Action: "task.publish", ProjectID: t.Project, Subject: t.Task, Detail: detail})
	})
	return out, err
}

// TriggerSpec is a cron trigger to publish.
type TriggerSpec struct {
	Project, Trigger, Task string
	Cron, TimeZone         string
	Misfire                schedule.MisfirePolicy
	Enabled                bool
}

// Validate checks every field, parsing the cron spec and the time zone. The form checks come
// first: they are the columns' bounds, and a spec or zone the database would store differently
// from what was parsed (leading or trailing spaces) is refused, not trimmed.
func (t TriggerSpec) Validate() error {
	for _, f := range []struct{ field, id string }{{FieldProject, t.Project}, {FieldTrigger, t.Trigger}, {FieldTask, t.Task}} {
		if err := ValidateID(f.field, f.id); err != nil {
			return err
		}
	}
	if _, err := schedule.ParseMisfirePolicy(string(t.Misfire)); err != nil {
		return fieldErr(FieldMisfire, err)
	}
	if err := limits.CheckCronSpec(t.Cron); err != nil {
		return fieldErr(FieldCron, err)
	}
	if err := limits.CheckTimeZone(t.TimeZone); err != nil {
		return fieldErr(FieldTimeZone, err)
	}
	// The grammar in a zone that always resolves first, so that a refusal names the field at
	// fault: the spec here, the zone below.
	if _, err := schedule.ParseSchedule(t.Cron, "UTC"); err != nil {
		return fieldErr(FieldCron, err)
	}
	if _, err := schedule.ParseSchedule(t.Cron, t.TimeZone); err != nil {
		return fieldErr(FieldTimeZone, err)
	}
	return nil
}

// TriggerPublished describes a trigger's head revision after a publish: its content as stored,
// and its schedule row's versions. Unchanged is true when the head already held this content:
// nothing was written, the schedule row (cursor and claim) is untouched and Revision is the
// head's. Changed names the fields that differ from the previous head (all of them for a new
// trigger, none when Unchanged).
type TriggerPublished struct {
	ProjectID     string                 `json:"project_id"`
	TriggerID     string                 `json:"trigger_id"`
	Revision      int64                  `json:"revision"`
	TaskID        string                 `json:"task_id"`
	TaskRevision  int64                  `json:"task_revision"`
	Cron          string                 `json:"cron_spec"`
	TimeZone      string                 `json:"timezone"`
	Misfire       schedule.MisfirePolicy `json:"misfire_policy"`
	Enabled       bool                   `json:"enabled"`
	StateVersion  int64                  `json:"state_version"`
	ClaimVersion  int64                  `json:"claim_version"`
	ContentDigest string                 `json:"content_digest"`
	Unchanged     bool                   `json:"unchanged"`
	Changed       []string               `json:"changed"`
}

// PublishTrigger publishes a new revision of a cron trigger pinned to the task's head revision
// and, in the same transaction, upserts its schedule row: cursor and claim cleared, state and
// claim versions incremented, so any claim on an older revision fails its fence forever. Content
// equal to the head revision's (the task's head revision included) writes nothing and reports
// Unchanged: the cursor is kept.
func (p *Publisher) PublishTrigger(ctx context.Context, t TriggerSpec) (TriggerPublished, error) {
	out, err := p.PublishTriggers(ctx, []TriggerSpec{t})
	if err != nil {
		return TriggerPublished{}, err
	}
	return out[0], nil
}

// PublishTriggers publishes triggers of one project as PublishTrigger does, all in one
// transaction under one project lock: all or none. Every spec is checked before anything is
// sent. When every trigger is unchanged nothing at all is written (not even the lock's audit
// row); otherwise only the changed ones get revisions.
func (p *Publisher) PublishTriggers(ctx context.Context, ts []TriggerSpec) ([]TriggerPublished, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	for _, t := range ts {
		if err := t.Validate(); err != nil {
			return nil, err
		}
		if t.Project != ts[0].Project {
			return nil, fieldErrf(FieldProject, "trigger %s/%s: one project per call (%s first)", t.Project, t.Trigger, ts[0].Project)
		}
	}
	out := make([]TriggerPublished, 0, len(ts))
	err := p.inProject(ctx, ts[0].Project, "trigger.publish", func(q *db.Queries) (bool, error) {
		out = out[:0]
		heads := taskHeads{}
		wrote := false
		for _, t := range ts {
			taskRev, err := heads.get(ctx, q, t.Project, t.Task)
			if err != nil {
				return false, err
			}
			head, err := triggerHead(ctx, q, t.Project, t.Trigger)
			if err != nil {
				return false, err
			}
			pub, err := publishTrigger(ctx, q, t, taskRev, head, "publish")
			if err != nil {
				return false, err
			}
			wrote = wrote || !pub.Unchanged
			out = append(out, pub)
		}
		return wrote, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// TriggerChange publishes a trigger that may already exist, changing only what it gives: a nil
// field keeps the head revision's value, never a default. Task, when given, pins the task's
// current head revision (also when it names the head's task, so a republish picks up a newer
// task revision); when not given the head's task revision stays pinned. A new trigger needs Task
// and Cron; TimeZone then defaults to UTC, Misfire to skip, Enabled to true.
type TriggerChange struct {
	Project, Trigger string
	Task             *string
	Cron             *string
	TimeZone         *string
	Misfire          *schedule.MisfirePolicy
	Enabled          *bool
}

// Validate checks each given field on its own (the spec and zone together once both are known:
// ChangeTrigger checks the merged content before it writes).
func (c TriggerChange) Validate() error {
	if err := ValidateID(FieldProject, c.Project); err != nil {
		return err
	}
	if err := ValidateID(FieldTrigger, c.Trigger); err != nil {
		return err
	}
	if c.Task != nil {
		if err := ValidateID(FieldTask, *c.Task); err != nil {
			return err
		}
	}
	if c.Misfire != nil {
		if _, err := schedule.ParseMisfirePolicy(string(*c.Misfire)); err != nil {
			return fieldErr(FieldMisfire, err)
		}
	}
	if c.Cron != nil {
		if err := limits.CheckCronSpec(*c.Cron); err != nil {
			return fieldErr(FieldCron, err)
		}
		if _, err := schedule.ParseSchedule(*c.Cron, "UTC"); err != nil {
			return fieldErr(FieldCron, err)
		}
	}
	if c.TimeZone != nil {
		if err := limits.CheckTimeZone(*c.TimeZone); err != nil {
			return fieldErr(FieldTimeZone, err)
		}
		if _, err := schedule.ParseSchedule("0 0 * * *", *c.TimeZone); err != nil {
			return fieldErr(FieldTimeZone, err)
		}
	}
	return nil
}

// ChangeTrigger publishes the head revision's content with the given fields changed (or a new
// trigger, see TriggerChange), as PublishTrigger does: unchanged content writes nothing.
func (p *Publisher) ChangeTrigger(ctx context.Context, c TriggerChange) (TriggerPublished, error) {
	return p.changeTrigger(ctx, c, false, "publish")
}

// DisableTrigger publishes a new revision of an existing trigger that differs from the head only
// in being disabled (its schedule row is reset as by any new revision; a disabled trigger is
// never claimed). An already disabled trigger is Unchanged.
func (p *Publisher) DisableTrigger(ctx context.Context, project, trigger string) (TriggerPublished, error) {
	off := false
	return p.changeTrigger(ctx, TriggerChange{Project: project, Trigger: trigger, Enabled: &off}, true, "disable")
}

// EnableTrigger publishes a new revision of an existing trigger that differs from the head only
// in being enabled. The new revision starts from a cleared cursor: its first occurrence is the
// first one after the next claim, so nothing that fell while it was disabled is admitted.
func (p *Publisher) EnableTrigger(ctx context.Context, project, trigger string) (TriggerPublished, error) {
	on := true
	return p.changeTrigger(ctx, TriggerChange{Project: project, Trigger: trigger, Enabled: &on}, true, "enable")
}

func (p *Publisher) changeTrigger(ctx context.Context, c TriggerChange, mustExist bool, change string) (TriggerPublished, error) {
	if err := c.Validate(); err != nil {
		return TriggerPublished{}, err
	}
	var out TriggerPublished
	err := p.inProject(ctx, c.Project, "trigger."+change, func(q *db.Queries) (bool, error) {
		head, err := triggerHead(ctx, q, c.Project, c.Trigger)
		if err != nil {
			return false, err
		}
		if head == nil && mustExist {
			return false, fmt.Errorf("trigger %s/%s: %w", c.Project, c.Trigger, ErrNotFound)
		}
		t, keepTaskRev, err := c.merge(head)
		if err != nil {
			return false, err
		}
		if err := t.Validate(); err != nil { // the spec in the zone, as merged
			return false, err
		}
		taskRev := keepTaskRev
		if taskRev == 0 {
			if taskRev, err = (taskHeads{}).get(ctx, q, t.Project, t.Task); err != nil {
				return false, err
			}
		}
		out, err = publishTrigger(ctx, q, t, taskRev, head, change)
		return err == nil && !out.Unchanged, err
	})
	return out, err
}

// merge is the content to publish: the change over the head (nil for a new trigger). keepTaskRev
// is the head's task revision when the change names no task, else 0 (pin the task's head).
func (c TriggerChange) merge(head *triggerRevision) (t TriggerSpec, keepTaskRev int64, err error) {
	t = TriggerSpec{Project: c.Project, Trigger: c.Trigger, TimeZone: "UTC", Misfire: schedule.MisfireSkip, Enabled: true}
	if head != nil {
		t.Task, t.Cron, t.TimeZone, t.Misfire, t.Enabled = head.task, head.cron, head.timeZone, head.misfire, head.enabled
		keepTaskRev = head.taskRevision
	} else {
		if c.Task == nil {
			return t, 0, fieldErrf(FieldTask, "trigger %s/%s does not exist yet: a new trigger needs its task", c.Project, c.Trigger)
		}
		if c.Cron == nil {
			return t, 0, fieldErrf(FieldCron, "trigger %s/%s does not exist yet: a new trigger needs its cron spec", c.Project, c.Trigger)
		}
	}
	if c.Task != nil {
		t.Task, keepTaskRev = *c.Task, 0
	}
	if c.Cron != nil {
		t.Cron = *c.Cron
	}
	if c.TimeZone != nil {
		t.TimeZone = *c.TimeZone
	}
	if c.Misfire != nil {
		t.Misfire = *c.Misfire
	}
	if c.Enabled != nil {
		t.Enabled = *c.Enabled
	}
	return t, keepTaskRev, nil
}

// triggerRevision is a trigger's head revision as publishTrigger compares it.
type triggerRevision struct {
	revision, taskRevision     int64
	task, cron, timeZone       string
	misfire                    schedule.MisfirePolicy
	enabled                    bool
	digest                     string
	stateVersion, claimVersion int64
}

// triggerHead reads a trigger's head revision; nil when the trigger does not exist.
func triggerHead(ctx context.Context, q *db.Queries, project, trigger string) (*triggerRevision, error) {
	h, err := q.GetTriggerHead(ctx, db.GetTriggerHeadParams{ProjectID: project, TriggerID: trigger})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("trigger head %s/%s: %w", project, trigger, err)
	}
	return &triggerRevision{revision: h.Revision, taskRevision: h.TaskRevision, task: h.TaskID, cron: h.CronSpec,
		timeZone: h.Timezone, misfire: schedule.MisfirePolicy(h.MisfirePolicy), enabled: h.Enabled,
		digest: h.ContentDigest, stateVersion: h.StateVersion, claimVersion: h.ClaimVersion}, nil
}

// taskHeads reads each task's head revision once: it cannot move while the project lock is held.
type taskHeads map[string]int64

func (h taskHeads) get(ctx context.Context, q *db.Queries, project, task string) (int64, error) {
	if rev, ok := h[task]; ok {
		return rev, nil
	}
	rev, err := q.GetTaskHead(ctx, db.GetTaskHeadParams{ProjectID: project, TaskID: task})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("task %s/%s: %w (publish it first)", project, task, ErrNotFound)
	} else if err != nil {
		return 0, fmt.Errorf("task head: %w", err)
	}
	h[task] = rev
	return rev, nil
}

// changedFields names the fields of t (pinned to taskRev) that differ from head; every field
// for a new trigger.
func changedFields(t TriggerSpec, taskRev int64, head *triggerRevision) []string {
	if head == nil {
		return []string{"task", "task_revision", "cron_spec", "timezone", "misfire_policy", "enabled"}
	}
	changed := []string{}
	for _, f := range []struct {
		name string
		diff bool
	}{
		{"task", t.Task != head.task}, {"task_revision", taskRev != head.taskRevision}, {"cron_spec", t.Cron != head.cron},
		{"timezone", t.TimeZone != head.timeZone}, {"misfire_policy", t.Misfire != head.misfire}, {"enabled", t.Enabled != head.enabled},
	} {
		if f.diff {
			changed = append(changed, f.name)
		}
	}
	return changed
}

// publishTrigger writes one trigger's revision pinned to taskRev, its schedule row and its audit
// entry, inside the caller's transaction, unless the content equals head's: then it writes
// nothing and reports the head, Unchanged.
func publishTrigger(ctx context.Context, q *db.Queries, t TriggerSpec, taskRev int64, head *triggerRevision, change string) (TriggerPublished, error) {
	out := TriggerPublished{ProjectID: t.Project, TriggerID: t.Trigger, TaskID: t.Task, TaskRevision: taskRev, Cron: t.Cron,
		TimeZone: t.TimeZone, Misfire: t.Misfire, Enabled: t.Enabled, Changed: changedFields(t, taskRev, head)}
	if head != nil && len(out.Changed) == 0 {
		out.Revision, out.StateVersion, out.ClaimVersion, out.ContentDigest, out.Unchanged =
			head.revision, head.stateVersion, head.claimVersion, head.digest, true
		return out, nil
	}
	rev, err := q.BumpTriggerHead(ctx, db.BumpTriggerHeadParams{ProjectID: t.Project, TriggerID: t.Trigger})
	if err != nil {
		return out, fmt.Errorf("trigger head: %w", err)
	}
	tr, err := q.InsertTriggerRevision(ctx, db.InsertTriggerRevisionParams{
		ProjectID: t.Project, TriggerID: t.Trigger, Revision: rev, CronSpec: t.Cron, Timezone: t.TimeZone,
		MisfirePolicy: string(t.Misfire), Enabled: t.Enabled, TaskID: t.Task, TaskRevision: taskRev,
	})
	if err != nil {
		return out, fmt.Errorf("trigger revision: %w", err)
	}
	sched, err := q.UpsertSchedule(ctx, db.UpsertScheduleParams{ProjectID: t.Project, TriggerID: t.Trigger, TriggerRevision: rev})
	if err != nil {
		return out, fmt.Errorf("schedule row: %w", err)
	}
	out.Revision, out.StateVersion, out.ClaimVersion, out.ContentDigest = rev, sched.StateVersion, sched.ClaimVersion, tr.ContentDigest
	detail, _ := json.Marshal(map[string]any{"revision": rev, "change": change, "changed": out.Changed, "cron": t.Cron,
		"timezone": t.TimeZone, "misfire": t.Misfire, "enabled": t.Enabled, "task": t.Task, "task_revision": taskRev})
	return out, q.AuditAdmin(ctx, db.AuditAdminParams{Action: "trigger.publish", ProjectID: t.Project, Subject: t.Trigger, Detail: detail})
}

// errNothingWritten rolls back a publish that found nothing to change.
var errNothingWritten = errors.New("nothing written")

// inProject runs fn in one transaction holding the audited lock of an active project. fn reports
// whether it wrote anything; when it did not, the transaction is rolled back, the lock's audit row
// with it, so an unchanged publish leaves no trace. It runs fn once and retries nothing: any error
// (a serialization failure or a lost connection included) rolls the whole publish back and is
// returned; running the publish again is the caller's decision (it is idempotent by content).
func (p *Publisher) inProject(ctx context.Context, project, reason string, fn func(q *db.Queries) (wrote bool, err error)) error {
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if _, err := q.LockProject(ctx, db.LockProjectParams{ProjectID: project, Reason: reason}); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.NoDataFound { // from lock_project
				return fmt.Errorf("project %s: %w (create it first)", project, ErrNotFound)
			}
			return fmt.Errorf("lock project %s: %w", project, err)
		}
		proj, err := q.GetProject(ctx, project)
		if err != nil {
			return fmt.Errorf("read project %s: %w", project, err)
		}
		if proj.State != "active" {
			return fmt.Errorf("project %s is %s: %w", project, proj.State, ErrNotFound)
		}
		wrote, err := fn(q)
		if err == nil && !wrote {
			return errNothingWritten
		}
		return err
	})
	if errors.Is(err, errNothingWritten) {
		return nil
	}
	return err
}
