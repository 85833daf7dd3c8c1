package coordinator

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

// InvalidError is input rejected before anything was written.
type InvalidError struct{ Err error }

func (e *InvalidError) Error() string { return e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

func invalidf(format string, args ...any) error {
	return &InvalidError{Err: fmt.Errorf(format, args...)}
}

// ErrNotFound means a project or task named by a publish does not exist.
var ErrNotFound = errors.New("not found")

// ErrExists means the project already exists.
var ErrExists = errors.New("already exists")

// ValidateID checks a project, task or trigger identifier against the database's CHECK.
func ValidateID(kind, id string) error {
	if err := limits.CheckID(kind, id); err != nil {
		return &InvalidError{Err: err}
	}
	return nil
}

// MaxExecutorSpec bounds an execution spec's size.
const MaxExecutorSpec = limits.MaxExecutorSpec

// ValidateExecutorSpec accepts exactly the JSON objects jsonb stores, up to MaxExecutorSpec bytes.
// Its error names the position and the rule, never the content: a spec may hold secrets.
func ValidateExecutorSpec(spec []byte) error {
	if err := limits.CheckExecutorSpec(spec); err != nil {
		return &InvalidError{Err: fmt.Errorf("--executor-spec: %w", err)}
	}
	return nil
}

// Publisher writes projects, tasks and triggers as the admin role, each publish in one
// transaction under the audited Project lock (control_core.lock_project).
type Publisher struct{ pool *pgxpool.Pool }

// NewPublisher wraps a pool connected as the admin role.
func NewPublisher(pool *pgxpool.Pool) *Publisher { return &Publisher{pool: pool} }

// CreateProject creates an active project at revision 1.
func (p *Publisher) CreateProject(ctx context.Context, project string) error {
	if err := ValidateID("project", project); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if _, err := q.CreateProject(ctx, project); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("project %s: %w", project, ErrExists)
		} else if err != nil {
			return fmt.Errorf("create project %s: %w", project, err)
		}
		return q.AuditAdmin(ctx, db.AuditAdminParams{Action: "project.create", ProjectID: project, Subject: project, Detail: []byte("{}")})
	})
}

// TaskPublished describes a new task revision.
type TaskPublished struct {
	Revision            int64
	ExecutionRevisionID uuid.UUID
	ExecutionDigest     string
	ContentDigest       string
}

// PublishTask publishes a new revision of task that pins a remote_worker execution revision with
// spec (a JSON object; identical specs share one content-addressed execution revision).
func (p *Publisher) PublishTask(ctx context.Context, project, task string, spec []byte) (TaskPublished, error) {
	var out TaskPublished
	if err := ValidateID("project", project); err != nil {
		return out, err
	}
	if err := ValidateID("task", task); err != nil {
		return out, err
	}
	if err := ValidateExecutorSpec(spec); err != nil {
		return out, err
	}
	err := p.inProject(ctx, project, "task.publish", func(q *db.Queries) error {
		exec, err := q.UpsertExecutionRevision(ctx, db.UpsertExecutionRevisionParams{ProjectID: project, Spec: spec})
		if err != nil {
			return fmt.Errorf("execution revision: %w", err)
		}
		head, err := q.BumpTaskHead(ctx, db.BumpTaskHeadParams{ProjectID: project, TaskID: task})
		if err != nil {
			return fmt.Errorf("task head: %w", err)
		}
		rev, err := q.InsertTaskRevision(ctx, db.InsertTaskRevisionParams{ProjectID: project, TaskID: task, Revision: head, ExecutionRevisionID: exec.ExecutionRevisionID})
		if err != nil {
			return fmt.Errorf("task revision: %w", err)
		}
		out = TaskPublished{Revision: rev.Revision, ExecutionRevisionID: exec.ExecutionRevisionID, ExecutionDigest: exec.Digest, ContentDigest: rev.ContentDigest}
		detail, _ := json.Marshal(map[string]any{"revision": head, "execution_digest": exec.Digest})
		return q.AuditAdmin(ctx, db.AuditAdminParams{Action: "task.publish", ProjectID: project, Subject: task, Detail: detail})
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
	for _, f := range []struct{ kind, id string }{{"project", t.Project}, {"trigger", t.Trigger}, {"task", t.Task}} {
		if err := ValidateID(f.kind, f.id); err != nil {
			return err
		}
	}
	if _, err := schedule.ParseMisfirePolicy(string(t.Misfire)); err != nil {
		return &InvalidError{Err: err}
	}
	if err := limits.CheckCronSpec(t.Cron); err != nil {
		return invalidf("--cron: %w", err)
	}
	if err := limits.CheckTimeZone(t.TimeZone); err != nil {
		return invalidf("--timezone: %w", err)
	}
	if _, err := schedule.ParseSchedule(t.Cron, t.TimeZone); err != nil {
		return &InvalidError{Err: err}
	}
	return nil
}

// TriggerPublished describes a new trigger revision and its reset schedule row.
type TriggerPublished struct {
	Revision, TaskRevision     int64
	StateVersion, ClaimVersion int64
	ContentDigest              string
}

// PublishTrigger publishes a new revision of a cron trigger pinned to the task's head revision
// and, in the same transaction, upserts its schedule row: cursor and claim cleared, state and
// claim versions incremented, so any claim on an older revision fails its fence forever.
func (p *Publisher) PublishTrigger(ctx context.Context, t TriggerSpec) (TriggerPublished, error) {
	out, err := p.PublishTriggers(ctx, []TriggerSpec{t})
	if err != nil {
		return TriggerPublished{}, err
	}
	return out[0], nil
}

// PublishTriggers publishes triggers of one project as PublishTrigger does, all in one
// transaction under one project lock: all or none. Every spec is checked before anything is
// sent.
func (p *Publisher) PublishTriggers(ctx context.Context, ts []TriggerSpec) ([]TriggerPublished, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	for _, t := range ts {
		if err := t.Validate(); err != nil {
			return nil, err
		}
		if t.Project != ts[0].Project {
			return nil, fmt.Errorf("trigger %s/%s: one project per call (%s first)", t.Project, t.Trigger, ts[0].Project)
		}
	}
	out := make([]TriggerPublished, 0, len(ts))
	err := p.inProject(ctx, ts[0].Project, "trigger.publish", func(q *db.Queries) error {
		out = out[:0] // a retried transaction starts over
		// a task's head cannot move while the project lock is held: read each one once
		heads := map[string]int64{}
		for _, t := range ts {
			taskRev, ok := heads[t.Task]
			if !ok {
				var err error
				taskRev, err = q.GetTaskHead(ctx, db.GetTaskHeadParams{ProjectID: t.Project, TaskID: t.Task})
				if errors.Is(err, pgx.ErrNoRows) {
					return fmt.Errorf("task %s/%s: %w (publish it first)", t.Project, t.Task, ErrNotFound)
				} else if err != nil {
					return fmt.Errorf("task head: %w", err)
				}
				heads[t.Task] = taskRev
			}
			pub, err := publishTrigger(ctx, q, t, taskRev)
			if err != nil {
				return err
			}
			out = append(out, pub)
		}
		return nil
	})
	return out, err
}

// publishTrigger writes one trigger's revision pinned to taskRev, its schedule row and its audit
// entry, inside the caller's transaction.
func publishTrigger(ctx context.Context, q *db.Queries, t TriggerSpec, taskRev int64) (TriggerPublished, error) {
	var out TriggerPublished
	head, err := q.BumpTriggerHead(ctx, db.BumpTriggerHeadParams{ProjectID: t.Project, TriggerID: t.Trigger})
	if err != nil {
		return out, fmt.Errorf("trigger head: %w", err)
	}
	rev, err := q.InsertTriggerRevision(ctx, db.InsertTriggerRevisionParams{
		ProjectID: t.Project, TriggerID: t.Trigger, Revision: head, CronSpec: t.Cron, Timezone: t.TimeZone,
		MisfirePolicy: string(t.Misfire), Enabled: t.Enabled, TaskID: t.Task, TaskRevision: taskRev,
	})
	if err != nil {
		return out, fmt.Errorf("trigger revision: %w", err)
	}
	sched, err := q.UpsertSchedule(ctx, db.UpsertScheduleParams{ProjectID: t.Project, TriggerID: t.Trigger, TriggerRevision: head})
	if err != nil {
		return out, fmt.Errorf("schedule row: %w", err)
	}
	out = TriggerPublished{Revision: head, TaskRevision: taskRev, StateVersion: sched.StateVersion, ClaimVersion: sched.ClaimVersion, ContentDigest: rev.ContentDigest}
	detail, _ := json.Marshal(map[string]any{"revision": head, "cron": t.Cron, "timezone": t.TimeZone,
		"misfire": t.Misfire, "enabled": t.Enabled, "task_revision": taskRev})
	return out, q.AuditAdmin(ctx, db.AuditAdminParams{Action: "trigger.publish", ProjectID: t.Project, Subject: t.Trigger, Detail: detail})
}

// inProject runs fn in one transaction holding the audited lock of an active project.
func (p *Publisher) inProject(ctx context.Context, project, reason string, fn func(q *db.Queries) error) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
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
		return fn(q)
	})
}
