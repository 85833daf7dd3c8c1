package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/schedule"
)

// MaxShowCount bounds how many upcoming occurrences and recent Runs ShowTrigger returns.
const MaxShowCount = 100

// TriggerDetail is one trigger as `trigger show` reports it, read in one snapshot: its head
// revision and schedule row (Trigger), the next occurrences after the database's time of the
// read, and its newest Runs.
type TriggerDetail struct {
	Trigger
	// Upcoming are the first occurrences strictly after NowMs, computed from the spec in its
	// zone (whether or not the trigger is enabled: what it would fire), at most the count asked.
	Upcoming []int64 `json:"upcoming_ms"`
	Runs     []Run   `json:"runs"`
	// MissedTotal counts the occurrences the misfire decision passed over without a Run (older
	// than the grace: under skip all of them, under fire_once all but the one fired), and
	// LastMissedForMs is the latest of them (nil: none ever); both written by the scheduler in
	// the same statement that advanced the cursor (pg-0024).
	MissedTotal     int64  `json:"missed_total"`
	LastMissedForMs *int64 `json:"last_missed_for_ms"`
}

// TriggerShow asks for one trigger with its next Upcoming occurrences and its newest Runs (each
// 1 … MaxShowCount).
type TriggerShow struct {
	Project, Trigger string
	Upcoming, Runs   int
}

// Validate names the field at fault: FieldProject, FieldTrigger, FieldUpcoming or FieldLimit.
func (s TriggerShow) Validate() error {
	if err := ValidateID(FieldProject, s.Project); err != nil {
		return err
	}
	if err := ValidateID(FieldTrigger, s.Trigger); err != nil {
		return err
	}
	if s.Upcoming < 1 || s.Upcoming > MaxShowCount {
		return fieldErrf(FieldUpcoming, "%d is out of range: want 1 … %d", s.Upcoming, MaxShowCount)
	}
	if s.Runs < 1 || s.Runs > MaxShowCount {
		return fieldErrf(FieldLimit, "%d is out of range: want 1 … %d", s.Runs, MaxShowCount)
	}
	return nil
}

// ShowTrigger reads one trigger with its upcoming occurrences and newest runs. A trigger that does
// not exist is ErrNotFound.
func (r *Reader) ShowTrigger(ctx context.Context, s TriggerShow) (TriggerDetail, error) {
	var out TriggerDetail
	if err := s.Validate(); err != nil {
		return out, err
	}
	project, trigger, upcoming, runs := s.Project, s.Trigger, s.Upcoming, s.Runs
	err := r.snapshot(ctx, func(q *db.Queries) error {
		page, err := readTriggers(ctx, q, TriggerFilter{Project: project, Trigger: trigger, Limit: 1})
		if err != nil {
			return err
		}
		ts := page.Triggers
		if len(ts) == 0 {
			return fmt.Errorf("trigger %s/%s: %w", project, trigger, ErrNotFound)
		}
		out.Trigger = ts[0]
		out.Upcoming = []int64{}
		if sched, err := schedule.ParseSchedule(out.CronSpec, out.TimeZone); err != nil {
			out.ScheduleError = err.Error()
		} else {
			for at := out.NowMs; len(out.Upcoming) < upcoming; {
				if at = sched.Next(at); at == schedule.NoOccurrence {
					break
				}
				out.Upcoming = append(out.Upcoming, at)
			}
		}
		missed, err := q.TriggerMissed(ctx, db.TriggerMissedParams{ProjectID: project, TriggerID: trigger})
		switch {
		case errors.Is(err, pgx.ErrNoRows): // no schedule row (yet): nothing missed
		case err != nil:
			return fmt.Errorf("read missed occurrences of trigger %s/%s: %w", project, trigger, err)
		default:
			out.MissedTotal = missed.MissedTotal
			if missed.LastMissedForMs.Valid {
				out.LastMissedForMs = &missed.LastMissedForMs.Int64
			}
		}
		out.Runs, err = readRuns(ctx, q, RunFilter{Project: project, Trigger: trigger, Limit: runs})
		return err
	})
	return out, err
}

// Project is a project with its counts of tasks, triggers and enabled triggers, each counted up
// to CountCap (a count at the cap means "at least").
type Project struct {
	ProjectID       string `json:"project_id"`
	State           string `json:"state"`
	Revision        int64  `json:"revision"`
	Tasks           int64  `json:"tasks"`
	Triggers        int64  `json:"triggers"`
	EnabledTriggers int64  `json:"enabled_triggers"`
	CreatedAtMs     int64  `json:"created_at_ms"`
	UpdatedAtMs     int64  `json:"updated_at_ms"`
}

// Projects lists every project by id.
func (r *Reader) Projects(ctx context.Context) ([]Project, error) {
	var out []Project
	err := r.snapshot(ctx, func(q *db.Queries) error {
		rows, err := q.ListProjects(ctx, CountCap)
		if err != nil {
			return fmt.Errorf("read projects: %w", err)
		}
		counts, err := q.ProjectTriggerCounts(ctx, CountCap)
		if err != nil {
			return fmt.Errorf("read trigger counts by project: %w", err)
		}
		byProject := make(map[string]db.ProjectTriggerCountsRow, len(counts))
		for _, c := range counts {
			byProject[c.ProjectID] = c
		}
		out = make([]Project, 0, len(rows))
		for _, p := range rows {
			c := byProject[p.ProjectID]
			out = append(out, Project{ProjectID: p.ProjectID, State: p.State, Revision: p.Revision, Tasks: p.Tasks,
				Triggers: c.Triggers, EnabledTriggers: c.Enabled, CreatedAtMs: p.CreatedAtMs, UpdatedAtMs: p.UpdatedAtMs})
		}
		return nil
	})
	return out, err
}

// Task is a task's head revision: the execution revision it pins, by id and digest (never the
// spec, which may hold secrets), and how many trigger heads use the task.
type Task struct {
	ProjectID           string    `json:"project_id"`
	TaskID              string    `json:"task_id"`
	Revision            int64     `json:"revision"`
	ExecutionRevisionID uuid.UUID `json:"execution_revision_id"`
	ExecutionDigest     string    `json:"execution_digest"`
	ContentDigest       string    `json:"content_digest"`
	// the head revision's retry policy and worker selector (pg-0022)
	MaxAttempts    int32             `json:"max_attempts"`
	RetryBackoffMs int64             `json:"retry_backoff_ms"`
	WorkerSelector map[string]string `json:"worker_selector"`
	Triggers       int64             `json:"triggers"`
	CreatedAtMs    int64             `json:"created_at_ms"`
	UpdatedAtMs    int64             `json:"updated_at_ms"`
}

// MaxTaskTriggers caps the count of triggers a task list shows per task: a count at the cap means
// "at least" (the count costs one probe per trigger, so it is bounded like the page).
const MaxTaskTriggers = 100

// TaskFilter selects one page of tasks in (project, task) order; a zero Project selects all.
// After ("PROJECT/TASK", as a page's Next gives it) starts the page after that task; Limit (1 …
// MaxListLimit) bounds it, 0 meaning DefaultListLimit.
type TaskFilter struct {
	Project string
	After   string
	Limit   int
}

// Validate refuses a filter that could never match a stored row, a malformed After and a limit
// out of bounds.
func (f TaskFilter) Validate() error {
	if err := (TriggerFilter{Project: f.Project}).Validate(); err != nil {
		return err
	}
	if _, err := parseAfter(f.After, f.Project, FieldTask); err != nil {
		return err
	}
	return validateListLimit(f.Limit)
}

// TaskList is one page of tasks. Next is set when more tasks follow the page: pass it as
// TaskFilter.After (--after) for the next page.
type TaskList struct {
	Tasks []Task
	Next  string
}

// Tasks reads the first page of tasks (TaskPage without its Next).
func (r *Reader) Tasks(ctx context.Context, f TaskFilter) ([]Task, error) {
	page, err := r.TaskPage(ctx, f)
	return page.Tasks, err
}

// TaskPage reads one page of tasks by project and id, one row more than the page holds: its
// presence is the "more" hint.
func (r *Reader) TaskPage(ctx context.Context, f TaskFilter) (TaskList, error) {
	if err := f.Validate(); err != nil {
		return TaskList{}, err
	}
	after, _ := parseAfter(f.After, f.Project, FieldTask) // validated above
	limit := listLimit(f.Limit)
	var out TaskList
	err := r.snapshot(ctx, func(q *db.Queries) error {
		rows, err := q.ListTasks(ctx, db.ListTasksParams{ProjectID: optText(f.Project), AfterProject: after.Project,
			AfterTask: after.ID, Cap: MaxTaskTriggers, MaxRows: int32(limit + 1)})
		if err != nil {
			return fmt.Errorf("read tasks: %w", err)
		}
		out = TaskList{Tasks: make([]Task, 0, min(len(rows), limit))}
		if len(rows) > limit {
			rows = rows[:limit]
			out.Next = ListKey{rows[limit-1].ProjectID, rows[limit-1].TaskID}.String()
		}
		for _, t := range rows {
			sel := map[string]string{}
			if err := json.Unmarshal(t.WorkerSelector, &sel); err != nil {
				return fmt.Errorf("task %s/%s: worker selector: %w", t.ProjectID, t.TaskID, err)
			}
			out.Tasks = append(out.Tasks, Task{ProjectID: t.ProjectID, TaskID: t.TaskID, Revision: t.HeadRevision,
				ExecutionRevisionID: t.ExecutionRevisionID, ExecutionDigest: t.ExecutionDigest, ContentDigest: t.ContentDigest,
				MaxAttempts: t.MaxAttempts, RetryBackoffMs: t.RetryBackoffMs, WorkerSelector: sel,
				Triggers: t.Triggers, CreatedAtMs: t.CreatedAtMs, UpdatedAtMs: t.UpdatedAtMs})
		}
		return nil
	})
	return out, err
}

// Attempt is one Attempt of a Run. Its result and error are reported as present or not only:
// they may hold a worker's payload.
type Attempt struct {
	AttemptID       uuid.UUID  `json:"attempt_id"`
	AttemptNo       int32      `json:"attempt_no"`
	ExecutorKind    string     `json:"executor_kind"`
	State           string     `json:"state"`
	WorkerID        *string    `json:"worker_id"`
	WorkerSessionID *uuid.UUID `json:"worker_session_id"`
	RunLeaseID      *uuid.UUID `json:"run_lease_id"`
	OfferID         *uuid.UUID `json:"offer_id"`
	StartedAtMs     *int64     `json:"started_at_ms"`
	FinishedAtMs    *int64     `json:"finished_at_ms"`
	CreatedAtMs     int64      `json:"created_at_ms"`
	UpdatedAtMs     int64      `json:"updated_at_ms"`
	HasResult       bool       `json:"has_result"`
	HasError        bool       `json:"has_error"`
}

// Event is one Run event.
type Event struct {
	EventID uuid.UUID       `json:"event_id"`
	Seq     int32           `json:"seq"`
	Type    string          `json:"type"`
	AtMs    int64           `json:"at_ms"`
	Detail  json.RawMessage `json:"detail"`
}

func uuidPtr(v uuid.NullUUID) *uuid.UUID {
	if !v.Valid {
		return nil
	}
	return &v.UUID
}
