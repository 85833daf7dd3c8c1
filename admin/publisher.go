package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/base/limits"
	"github.com/qlcontrol/controlcore/internal/base/pgretry"
	"github.com/qlcontrol/controlcore/schedule"
	"github.com/qlcontrol/controlcore/workerproto"
)

// Publisher writes projects, tasks and triggers as the admin role, each publish in one
// transaction under the audited Project lock (control_core.lock_project).
type Publisher struct{ db *dbconn.DB }

// NewPublisher wraps a handle connected as the admin role.
func NewPublisher(h *dbconn.DB) *Publisher { return &Publisher{db: h} }

// inTx runs fn in one transaction of the default isolation (READ COMMITTED), begun by the
// handle (its prologue first): every publish and apply goes through it.
func (p *Publisher) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return p.db.InTx(ctx, pgx.TxOptions{}, fn)
}

// publishRetries bounds how many times inTxRetrying runs a transaction again after a deadlock or a
// serialization failure.
const publishRetries = 5

// inTxRetrying runs fn as inTx does, and runs it again, up to publishRetries times with a short
// growing pause (pgretry.Do), when the transaction failed with a deadlock (40P01) or a serialization failure
// (40001). A publish resets its triggers' schedule rows one by one in its own order while a batch
// admit (--admit-batch) locks its rows in the claim's order, so the two can each hold a row the
// other waits for, and PostgreSQL aborts one of them: the admit retries that (coordinator), and so
// does a publish now rather than fail the command beside a running replica. Such an error has
// rolled the whole transaction back, so the retry is the same publish from the start; fn must not
// carry anything from one call to the next (each caller rebuilds its result inside fn).
func (p *Publisher) inTxRetrying(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgretry.Do(ctx, publishRetries, func(attempt int) time.Duration { return time.Duration(10<<attempt) * time.Millisecond },
		func() error { return p.inTx(ctx, fn) })
}

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
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = createProject(ctx, db.New(tx), project, "project create")
		return err
	})
	return out, err
}

// createProject creates an active project at revision 1, inside the caller's transaction; the
// database writes its project.create audit row, with detail "by": the command, given as the
// transaction's audit reason. For a project that exists it writes nothing and reports it, Created
// false. CreateProject and Apply both create projects with it.
func createProject(ctx context.Context, q *db.Queries, project, by string) (ProjectCreated, error) {
	out := ProjectCreated{ProjectID: project}
	if err := q.SetAuditReason(ctx, by); err != nil {
		return out, fmt.Errorf("create project %s: audit reason: %w", project, err)
	}
	row, err := q.CreateProject(ctx, project)
	if errors.Is(err, pgx.ErrNoRows) { // ON CONFLICT DO NOTHING: it exists
		proj, err := q.GetProject(ctx, project)
		if err != nil {
			return out, fmt.Errorf("read project %s: %w", project, err)
		}
		out.State, out.Revision = proj.State, proj.Revision
		return out, nil
	} else if err != nil {
		return out, fmt.Errorf("create project %s: %w", project, err)
	}
	out.Created, out.State, out.Revision = true, "active", row.Revision
	return out, nil
}

// TaskSpec is a task revision to publish: a remote_worker execution spec (a JSON object) and its
// retry policy and worker selector (pg-0022), all part of the revision and of its digest.
type TaskSpec struct {
	Project, Task string
	ExecutorSpec  []byte
	// MaxAttempts: how many Attempts a Run of the task may take (1 … MaxMaxAttempts); 0 means 1.
	MaxAttempts int
	// RetryBackoff: the delay before the second Attempt, doubled for each later one (whole
	// milliseconds, 0 … MaxRetryBackoff); nil means DefaultRetryBackoff when MaxAttempts > 1, else 0.
	RetryBackoff *time.Duration
	// WorkerLabels: the labels a worker session must have (each key equal) to be offered the
	// task's Runs; at most MaxWorkerLabels. Empty: any worker.
	WorkerLabels map[string]string
}

// The retry policy's fields as a FieldError names them.
const (
	FieldMaxAttempts  = "max_attempts"
	FieldRetryBackoff = "retry_backoff"
	FieldWorkerLabel  = "worker_label"
)

// Bounds and defaults of a task's retry policy and selector (the CHECKs of task_revisions, pg-0022).
const (
	MaxMaxAttempts      = 100
	MaxRetryBackoff     = 24 * time.Hour
	DefaultRetryBackoff = 10 * time.Second
	MaxWorkerLabels     = 16
	maxSelectorBytes    = 2048
)

// A selector's label key and value follow the rule a worker's labels are registered under
// (workerproto), so every selector a task can be published with is one a worker can satisfy.
var (
	labelKey   = regexp.MustCompile(workerproto.NamePattern)
	labelValue = regexp.MustCompile(workerproto.LabelValuePattern)
)

// LabelKeyRule and LabelValueRule describe a worker label's key and value.
const (
	LabelKeyRule   = "a lower-case letter or digit, then up to 62 of a-z 0-9 _ . -"
	LabelValueRule = "1 to 63 of A-Z a-z 0-9 _ . : / + = -"
)

// Validate checks every field; the executor spec by rule and position only (it may hold secrets).
func (t TaskSpec) Validate() error {
	if err := ValidateID(FieldProject, t.Project); err != nil {
		return err
	}
	if err := ValidateID(FieldTask, t.Task); err != nil {
		return err
	}
	if err := ValidateExecutorSpec(t.ExecutorSpec); err != nil {
		return err
	}
	_, err := t.policy()
	return err
}

// taskPolicy is a task revision's retry policy and selector as stored: MaxAttempts 1 … 100,
// backoff 0 when there are no retries (the database's CHECK), selector a JSON object.
type taskPolicy struct {
	maxAttempts    int32
	retryBackoffMs int64
	selector       map[string]string
}

// policy is the spec's policy with its defaults applied, checked against the bounds.
func (t TaskSpec) policy() (taskPolicy, error) {
	p := taskPolicy{maxAttempts: 1, selector: map[string]string{}}
	if t.MaxAttempts != 0 {
		if t.MaxAttempts < 1 || t.MaxAttempts > MaxMaxAttempts {
			return p, fieldErrf(FieldMaxAttempts, "%d is out of range: want 1 … %d", t.MaxAttempts, MaxMaxAttempts)
		}
		p.maxAttempts = int32(t.MaxAttempts)
	}
	switch b := t.RetryBackoff; {
	case b == nil && p.maxAttempts > 1:
		p.retryBackoffMs = DefaultRetryBackoff.Milliseconds()
	case b == nil:
	case *b < 0 || *b > MaxRetryBackoff:
		return p, fieldErrf(FieldRetryBackoff, "%s is out of range: want 0s … %s", *b, MaxRetryBackoff)
	case *b%time.Millisecond != 0:
		return p, fieldErrf(FieldRetryBackoff, "%s: want whole milliseconds", *b)
	case *b > 0 && p.maxAttempts == 1:
		return p, fieldErrf(FieldRetryBackoff, "%s without retries: a backoff needs max attempts above 1", *b)
	default:
		p.retryBackoffMs = b.Milliseconds()
	}
	if len(t.WorkerLabels) > MaxWorkerLabels {
		return p, fieldErrf(FieldWorkerLabel, "%d labels: want at most %d", len(t.WorkerLabels), MaxWorkerLabels)
	}
	for k, v := range t.WorkerLabels {
		if !labelKey.MatchString(k) {
			return p, fieldErrf(FieldWorkerLabel, "key %s: want %s", quoteField(k), LabelKeyRule)
		}
		if !labelValue.MatchString(v) {
			return p, fieldErrf(FieldWorkerLabel, "value of %s, %s: want %s", k, quoteField(v), LabelValueRule)
		}
		p.selector[k] = v
	}
	if b, _ := json.Marshal(p.selector); len(b) > maxSelectorBytes {
		return p, fieldErrf(FieldWorkerLabel, "%d bytes as JSON: want at most %d", len(b), maxSelectorBytes)
	}
	return p, nil
}

// selectorJSON is the selector as the jsonb it is stored as.
func (p taskPolicy) selectorJSON() []byte {
	b, _ := json.Marshal(p.selector) // a map of strings always marshals
	return b
}

// selectorText renders a selector as k=v,k=v in key order ("" when empty): a plan's value.
func selectorText(sel map[string]string) string {
	keys := slices.Sorted(maps.Keys(sel))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+sel[k])
	}
	return strings.Join(parts, ",")
}

// ParseWorkerLabels reads k=v pairs (the --worker-label flag's and a file's form) into a selector;
// a key given twice is refused.
func ParseWorkerLabels(pairs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fieldErrf(FieldWorkerLabel, "%s: want key=value", quoteField(kv))
		}
		if _, dup := out[k]; dup {
			return nil, fieldErrf(FieldWorkerLabel, "key %s given twice", quoteField(k))
		}
		out[k] = v
	}
	return out, nil
}

// TaskPublished describes a task's head revision after a publish. Unchanged is true when the
// head already held the same executor spec, retry policy and selector: nothing was written and
// Revision is the head's.
type TaskPublished struct {
	ProjectID           string            `json:"project_id"`
	TaskID              string            `json:"task_id"`
	Revision            int64             `json:"revision"`
	ExecutionRevisionID uuid.UUID         `json:"execution_revision_id"`
	ExecutionDigest     string            `json:"execution_digest"`
	ContentDigest       string            `json:"content_digest"`
	MaxAttempts         int32             `json:"max_attempts"`
	RetryBackoffMs      int64             `json:"retry_backoff_ms"`
	WorkerSelector      map[string]string `json:"worker_selector"`
	Unchanged           bool              `json:"unchanged"`
	// StaleTriggers are the task's triggers whose head pins an older revision of it (a trigger
	// pins a task revision: publishing the task does not move it; RolloutTask does). Only
	// PublishTask fills it in.
	StaleTriggers []StaleTrigger `json:"stale_triggers"`
}

// PublishTask publishes a new revision of a task that pins a remote_worker execution revision
// with the task's spec (identical specs share one content-addressed execution revision). A spec
// equal to the head revision's (by its canonical jsonb digest) writes nothing and reports
// Unchanged. Either way it names the task's triggers left on older revisions of it
// (StaleTriggers).
func (p *Publisher) PublishTask(ctx context.Context, t TaskSpec) (TaskPublished, error) {
	out := TaskPublished{ProjectID: t.Project, TaskID: t.Task}
	if err := t.Validate(); err != nil {
		return out, err
	}
	err := p.inProject(ctx, t.Project, "task.publish", func(q *db.Queries) (bool, error) {
		var err error
		out, err = publishTask(ctx, q, t)
		if err != nil {
			return false, err
		}
		// read under the lock, in the publish's transaction: no trigger can move meanwhile
		if out.StaleTriggers, err = staleTriggers(ctx, q, t.Project, t.Task, out.Revision); err != nil {
			return false, err
		}
		return !out.Unchanged, nil
	})
	return out, err
}

// publishTask writes a task revision pinning the execution revision of t's spec (the database
// writes its task.publish audit row) inside the caller's transaction, which holds the project's lock; unless the head already
// pins that spec (taskUnchanged): then it writes nothing and reports the head, Unchanged.
// PublishTask and Apply both publish tasks with it.
func publishTask(ctx context.Context, q *db.Queries, t TaskSpec) (TaskPublished, error) {
	pol, err := t.policy()
	if err != nil {
		return TaskPublished{}, err
	}
	out := TaskPublished{ProjectID: t.Project, TaskID: t.Task, MaxAttempts: pol.maxAttempts, RetryBackoffMs: pol.retryBackoffMs,
		WorkerSelector: pol.selector}
	digest, err := q.SpecDigest(ctx, t.ExecutorSpec)
	if err != nil {
		return out, fmt.Errorf("task %s/%s: spec digest: %w", t.Project, t.Task, err)
	}
	head, err := taskHead(ctx, q, t.Project, t.Task)
	if err != nil {
		return out, err
	}
	if taskUnchanged(head, digest, pol) {
		out.Revision, out.ExecutionRevisionID, out.ExecutionDigest, out.ContentDigest, out.Unchanged =
			head.revision, head.executionRevisionID, head.executionDigest, head.contentDigest, true
		return out, nil
	}
	exec, err := q.UpsertExecutionRevision(ctx, db.UpsertExecutionRevisionParams{ProjectID: t.Project, Spec: t.ExecutorSpec})
	if err != nil {
		return out, fmt.Errorf("task %s/%s: execution revision: %w", t.Project, t.Task, err)
	}
	rev, err := q.BumpTaskHead(ctx, db.BumpTaskHeadParams{ProjectID: t.Project, TaskID: t.Task})
	if err != nil {
		return out, fmt.Errorf("task %s/%s: head: %w", t.Project, t.Task, err)
	}
	kr, err := q.InsertTaskRevision(ctx, db.InsertTaskRevisionParams{ProjectID: t.Project, TaskID: t.Task, Revision: rev,
		ExecutionRevisionID: exec.ExecutionRevisionID, MaxAttempts: pol.maxAttempts, RetryBackoffMs: pol.retryBackoffMs,
		WorkerSelector: pol.selectorJSON()})
	if err != nil {
		return out, fmt.Errorf("task %s/%s: revision: %w", t.Project, t.Task, err)
	}
	out.Revision, out.ExecutionRevisionID, out.ExecutionDigest, out.ContentDigest = kr.Revision, exec.ExecutionRevisionID, exec.Digest, kr.ContentDigest
	return out, nil
}

// taskRevision is a task's head revision as publishTask and a plan compare it.
type taskRevision struct {
	task                string
	revision            int64
	executionRevisionID uuid.UUID
	executionDigest     string
	contentDigest       string
	policy              taskPolicy
}

// taskUnchanged is the one content rule of tasks, for a publish and for a plan: the head pins the
// execution revision of a spec with this digest (SpecDigest, the canonical jsonb form's sha256)
// and holds this retry policy and selector (taskPolicyChanges finds no difference).
func taskUnchanged(head *taskRevision, specDigest string, p taskPolicy) bool {
	return head != nil && head.executionDigest == specDigest && len(taskPolicyChanges(head, p)) == 0
}

// taskPolicyChanges are the policy fields in which p differs from head (all of them from "" for
// a new task, head nil), named by their keys in a schedules file, values as text.
func taskPolicyChanges(head *taskRevision, p taskPolicy) []Change {
	text := func(p taskPolicy) [3]string {
		return [...]string{strconv.Itoa(int(p.maxAttempts)), (time.Duration(p.retryBackoffMs) * time.Millisecond).String(), selectorText(p.selector)}
	}
	keys := [...]string{"max_attempts", "retry_backoff", "worker_labels"}
	to := text(p)
	var from [3]string
	if head != nil {
		from = text(head.policy)
	}
	var out []Change
	for i := range keys {
		if head == nil || from[i] != to[i] {
			out = append(out, Change{Field: keys[i], From: from[i], To: to[i]})
		}
	}
	return out
}

// readTaskHeads reads the head revisions of a project's tasks, in id order; of one task when
// task is not "".
func readTaskHeads(ctx context.Context, q *db.Queries, project, task string) ([]*taskRevision, error) {
	rows, err := q.GetTaskHeads(ctx, db.GetTaskHeadsParams{ProjectID: project, TaskID: pgtype.Text{String: task, Valid: task != ""}})
	if err != nil {
		return nil, fmt.Errorf("task heads of %s: %w", project, err)
	}
	out := make([]*taskRevision, 0, len(rows))
	for _, h := range rows {
		sel := map[string]string{}
		if err := json.Unmarshal(h.WorkerSelector, &sel); err != nil {
			return nil, fmt.Errorf("task %s/%s: worker selector: %w", project, h.TaskID, err)
		}
		out = append(out, &taskRevision{task: h.TaskID, revision: h.HeadRevision, executionRevisionID: h.ExecutionRevisionID,
			executionDigest: h.ExecutionDigest, contentDigest: h.ContentDigest,
			policy: taskPolicy{maxAttempts: h.MaxAttempts, retryBackoffMs: h.RetryBackoffMs, selector: sel}})
	}
	return out, nil
}

// taskHead reads a task's head revision; nil when the task does not exist.
func taskHead(ctx context.Context, q *db.Queries, project, task string) (*taskRevision, error) {
	heads, err := readTaskHeads(ctx, q, project, task)
	if err != nil || len(heads) == 0 {
		return nil, err
	}
	return heads[0], nil
}

// TriggerSpec is a cron trigger to publish.
type TriggerSpec struct {
	Project, Trigger, Task string
	Cron, TimeZone         string
	Misfire                schedule.MisfirePolicy
	// MisfireGrace: a due occurrence at most this late is on time under both policies (whole
	// milliseconds, schedule.MinMisfireGrace to schedule.MaxMisfireGrace); 0 means
	// schedule.DefaultMisfireGrace.
	MisfireGrace time.Duration
	Enabled      bool
}

// misfireGraceMs is the grace as stored: DefaultMisfireGrace for 0.
func (t TriggerSpec) misfireGraceMs() int64 {
	if t.MisfireGrace == 0 {
		return schedule.DefaultMisfireGrace.Milliseconds()
	}
	return t.MisfireGrace.Milliseconds()
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
	if t.MisfireGrace != 0 {
		if err := schedule.CheckMisfireGrace(t.MisfireGrace); err != nil {
			return fieldErr(FieldMisfireGrace, err)
		}
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
// head's. Created is true when the trigger did not exist: this publish created it (at revision
// 1). Changed names the fields that differ from the previous head (all of them for a new
// trigger, none when Unchanged).
type TriggerPublished struct {
	ProjectID      string                 `json:"project_id"`
	TriggerID      string                 `json:"trigger_id"`
	Revision       int64                  `json:"revision"`
	TaskID         string                 `json:"task_id"`
	TaskRevision   int64                  `json:"task_revision"`
	Cron           string                 `json:"cron_spec"`
	TimeZone       string                 `json:"timezone"`
	Misfire        schedule.MisfirePolicy `json:"misfire_policy"`
	MisfireGraceMs int64                  `json:"misfire_grace_ms"`
	Enabled        bool                   `json:"enabled"`
	StateVersion   int64                  `json:"state_version"`
	ClaimVersion   int64                  `json:"claim_version"`
	ContentDigest  string                 `json:"content_digest"`
	Unchanged      bool                   `json:"unchanged"`
	Created        bool                   `json:"created"`
	Changed        []string               `json:"changed"`
	// QueuedForInitialisation: a new enabled revision was written, so its schedule row waits,
	// without a cursor, for a replica to initialise it (docs/scheduling.md, Initialisation).
	QueuedForInitialisation bool `json:"queued_for_initialisation"`
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
	out := make([]TriggerPublished, len(ts))
	err := p.inProject(ctx, ts[0].Project, "trigger.publish", func(q *db.Queries) (bool, error) {
		clear(out)
		// written by the rows' cursors, then trigger id in the database's collation (stable: a
		// trigger named twice keeps its order), the order a claim takes schedule rows, so the
		// resets lock rows as a batch admit or initialisation does (claimOrder); out stays in the
		// order of ts
		projects, ids := make([]string, len(ts)), make([]string, len(ts))
		for i, t := range ts {
			projects[i], ids[i] = t.Project, t.Trigger
		}
		order, err := claimOrder(ctx, q, projects, ids)
		if err != nil {
			return false, err
		}
		// every head in one read: under the lock only this loop moves them
		read, err := readTriggerHeads(ctx, q, ts[0].Project, ids)
		if err != nil {
			return false, err
		}
		heads := make(map[string]*triggerRevision, len(read))
		for _, h := range read {
			heads[h.trigger] = h
		}
		tasks := taskHeads{}
		wrote := false
		for _, i := range order {
			t := ts[i]
			taskRev, err := tasks.get(ctx, q, t.Project, t.Task)
			if err != nil {
				return false, err
			}
			pub, err := publishTrigger(ctx, q, t, taskRev, heads[t.Trigger], "publish")
			if err != nil {
				return false, err
			}
			// a trigger named again later in ts compares with what this one wrote, as it
			// would with a head read after it
			heads[t.Trigger] = pub.head()
			wrote = wrote || !pub.Unchanged
			out[i] = pub
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
// and Cron; TimeZone then defaults to UTC, Misfire to skip, MisfireGrace to
// schedule.DefaultMisfireGrace, Enabled to true.
type TriggerChange struct {
	Project, Trigger string
	Task             *string
	Cron             *string
	TimeZone         *string
	Misfire          *schedule.MisfirePolicy
	MisfireGrace     *time.Duration
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
	if c.MisfireGrace != nil {
		if err := schedule.CheckMisfireGrace(*c.MisfireGrace); err != nil {
			return fieldErr(FieldMisfireGrace, err)
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
	t = TriggerSpec{Project: c.Project, Trigger: c.Trigger, TimeZone: DefaultTimeZone, Misfire: DefaultMisfire,
		MisfireGrace: schedule.DefaultMisfireGrace, Enabled: true}
	if head != nil {
		t, keepTaskRev = head.spec(c.Project), head.taskRevision
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
	if c.MisfireGrace != nil {
		t.MisfireGrace = *c.MisfireGrace
	}
	if c.Enabled != nil {
		t.Enabled = *c.Enabled
	}
	return t, keepTaskRev, nil
}

// triggerRevision is a trigger's head revision as publishTrigger and a plan compare it.
type triggerRevision struct {
	trigger                    string
	revision, taskRevision     int64
	task, cron, timeZone       string
	misfire                    schedule.MisfirePolicy
	misfireGraceMs             int64
	enabled                    bool
	digest                     string
	stateVersion, claimVersion int64
}

// head is the head revision a publish leaves: its content and schedule row's versions as stored.
func (p TriggerPublished) head() *triggerRevision {
	return &triggerRevision{trigger: p.TriggerID, revision: p.Revision, taskRevision: p.TaskRevision, task: p.TaskID,
		cron: p.Cron, timeZone: p.TimeZone, misfire: p.Misfire, misfireGraceMs: p.MisfireGraceMs, enabled: p.Enabled,
		digest: p.ContentDigest, stateVersion: p.StateVersion, claimVersion: p.ClaimVersion}
}

// spec is the head's content as a TriggerSpec of project.
func (h *triggerRevision) spec(project string) TriggerSpec {
	return TriggerSpec{Project: project, Trigger: h.trigger, Task: h.task, Cron: h.cron, TimeZone: h.timeZone,
		Misfire: h.misfire, MisfireGrace: time.Duration(h.misfireGraceMs) * time.Millisecond, Enabled: h.enabled}
}

// readTriggerHeads reads the head revisions of a project's triggers with their schedule rows'
// versions, in id order: of the triggers named (each once, however often named; one that does
// not exist is left out), or of every trigger of the project when triggers is nil.
func readTriggerHeads(ctx context.Context, q *db.Queries, project string, triggers []string) ([]*triggerRevision, error) {
	rows, err := q.GetTriggerHeads(ctx, db.GetTriggerHeadsParams{ProjectID: project, TriggerIds: triggers})
	if err != nil {
		return nil, fmt.Errorf("trigger heads of %s: %w", project, err)
	}
	out := make([]*triggerRevision, 0, len(rows))
	for _, h := range rows {
		out = append(out, &triggerRevision{trigger: h.TriggerID, revision: h.Revision, taskRevision: h.TaskRevision, task: h.TaskID,
			cron: h.CronSpec, timeZone: h.Timezone, misfire: schedule.MisfirePolicy(h.MisfirePolicy), misfireGraceMs: h.MisfireGraceMs, enabled: h.Enabled,
			digest: h.ContentDigest, stateVersion: h.StateVersion, claimVersion: h.ClaimVersion})
	}
	return out, nil
}

// triggerHead reads a trigger's head revision; nil when the trigger does not exist.
func triggerHead(ctx context.Context, q *db.Queries, project, trigger string) (*triggerRevision, error) {
	heads, err := readTriggerHeads(ctx, q, project, []string{trigger})
	if err != nil || len(heads) == 0 {
		return nil, err
	}
	return heads[0], nil
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

// triggerContentFields are the fields of a trigger's content in the order a change lists them: the name
// a publish result uses (TriggerPublished's JSON keys) and the key of a schedules file (a plan's
// Change.Field).
var triggerContentFields = [...]struct{ name, fileKey string }{
	{"task", "task"}, {"task_revision", "task_revision"}, {"cron_spec", "cron"},
	{"timezone", "timezone"}, {"misfire_policy", "misfire"}, {"misfire_grace_ms", "misfire_grace"}, {"enabled", "enabled"},
}

// fieldChange is one field (an index of triggerContentFields) that differs, with both values as text.
type fieldChange struct {
	field    int
	from, to string
}

// triggerChanges is the one content rule of triggers, for a publish and for a plan: the fields in
// which t, pinned to taskRev, differs from head, in triggerContentFields' order; every field (from "")
// for a new trigger (head nil), none when the content is unchanged.
func triggerChanges(head *triggerRevision, t TriggerSpec, taskRev int64) []fieldChange {
	text := func(task string, taskRev int64, cron, tz string, m schedule.MisfirePolicy, graceMs int64, enabled bool) [len(triggerContentFields)]string {
		grace := (time.Duration(graceMs) * time.Millisecond).String()
		return [...]string{task, strconv.FormatInt(taskRev, 10), cron, tz, string(m), grace, strconv.FormatBool(enabled)}
	}
	to := text(t.Task, taskRev, t.Cron, t.TimeZone, t.Misfire, t.misfireGraceMs(), t.Enabled)
	var from [len(triggerContentFields)]string
	if head != nil {
		from = text(head.task, head.taskRevision, head.cron, head.timeZone, head.misfire, head.misfireGraceMs, head.enabled)
	}
	changes := []fieldChange{}
	for i := range triggerContentFields {
		if head == nil || from[i] != to[i] {
			changes = append(changes, fieldChange{i, from[i], to[i]})
		}
	}
	return changes
}

// publishTrigger writes one trigger's revision pinned to taskRev and its schedule row inside the
// caller's transaction; the database writes the trigger.publish audit row (detail "change": what
// asked for it, given as the transaction's audit reason), which holds the
// project's lock, unless the content equals head's (triggerChanges finds none): then it writes
// nothing and reports the head, Unchanged. Every trigger publish, Apply's included, goes through it.
func publishTrigger(ctx context.Context, q *db.Queries, t TriggerSpec, taskRev int64, head *triggerRevision, change string) (TriggerPublished, error) {
	out := TriggerPublished{ProjectID: t.Project, TriggerID: t.Trigger, TaskID: t.Task, TaskRevision: taskRev, Cron: t.Cron,
		TimeZone: t.TimeZone, Misfire: t.Misfire, MisfireGraceMs: t.misfireGraceMs(), Enabled: t.Enabled, Changed: []string{}}
	for _, c := range triggerChanges(head, t, taskRev) {
		out.Changed = append(out.Changed, triggerContentFields[c.field].name)
	}
	if head != nil && len(out.Changed) == 0 {
		out.Revision, out.StateVersion, out.ClaimVersion, out.ContentDigest, out.Unchanged =
			head.revision, head.stateVersion, head.claimVersion, head.digest, true
		return out, nil
	}
	if err := q.SetAuditReason(ctx, change); err != nil {
		return out, fmt.Errorf("trigger %s/%s: audit reason: %w", t.Project, t.Trigger, err)
	}
	rev, err := q.BumpTriggerHead(ctx, db.BumpTriggerHeadParams{ProjectID: t.Project, TriggerID: t.Trigger})
	if err != nil {
		return out, fmt.Errorf("trigger head: %w", archivedErr(err))
	}
	tr, err := q.InsertTriggerRevision(ctx, db.InsertTriggerRevisionParams{
		ProjectID: t.Project, TriggerID: t.Trigger, Revision: rev, CronSpec: t.Cron, Timezone: t.TimeZone,
		MisfirePolicy: string(t.Misfire), MisfireGraceMs: t.misfireGraceMs(), Enabled: t.Enabled, TaskID: t.Task, TaskRevision: taskRev,
	})
	if err != nil {
		return out, fmt.Errorf("trigger revision: %w", err)
	}
	sched, err := q.ResetSchedule(ctx, db.ResetScheduleParams{ProjectID: t.Project, TriggerID: t.Trigger})
	if err != nil {
		return out, fmt.Errorf("schedule row: %w", err)
	}
	out.Revision, out.StateVersion, out.ClaimVersion, out.ContentDigest = rev, sched.StateVersion, sched.ClaimVersion, tr.ContentDigest
	out.Created = head == nil
	out.QueuedForInitialisation = t.Enabled
	return out, nil
}

// errNothingWritten rolls back a publish that found nothing to change.
var errNothingWritten = errors.New("nothing written")

// inProject runs fn in one transaction holding the audited lock of an active or paused project. fn reports
// whether it wrote anything; when it did not, the transaction is rolled back, the lock's audit row
// with it, so an unchanged publish leaves no trace. A deadlock or serialization failure is retried
// (inTxRetrying: fn must start from nothing on each call); any other error (a lost connection
// included) rolls the whole publish back and is returned.
func (p *Publisher) inProject(ctx context.Context, project, reason string, fn func(q *db.Queries) (wrote bool, err error)) error {
	err := p.inTxRetrying(ctx, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := lockWritableProject(ctx, q, project, reason); err != nil {
			return err
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

// lockWritableProject takes the audited lock of a project (lock_project: it writes an audit row
// with the reason) inside the caller's transaction and checks, under the lock, that the project
// takes publishes: active or paused. Edits to a paused project are allowed (they are claimed once
// it is resumed); a publish into an archived project is refused as ErrNotFound.
func lockWritableProject(ctx context.Context, q *db.Queries, project, reason string) error {
	proj, err := lockProject(ctx, q, project, reason)
	if err != nil {
		return err
	}
	if proj.State != ProjectActive && proj.State != ProjectPaused {
		return fmt.Errorf("project %s is %s: %w", project, proj.State, ErrNotFound)
	}
	return nil
}

// lockProject takes the audited lock of a project and reads it under the lock.
func lockProject(ctx context.Context, q *db.Queries, project, reason string) (db.GetProjectRow, error) {
	if _, err := q.LockProject(ctx, db.LockProjectParams{ProjectID: project, Reason: reason}); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.NoDataFound { // from lock_project
			return db.GetProjectRow{}, fmt.Errorf("project %s: %w (create it first)", project, ErrNotFound)
		}
		return db.GetProjectRow{}, fmt.Errorf("lock project %s: %w", project, err)
	}
	proj, err := q.GetProject(ctx, project)
	if err != nil {
		return proj, fmt.Errorf("read project %s: %w", project, err)
	}
	return proj, nil
}

// The states of a project (the CHECK of projects.state, pg-0002).
const (
	ProjectActive   = "active"
	ProjectPaused   = "paused"
	ProjectArchived = "archived"
)

// ProjectStateChanged says what PauseProject or ResumeProject did: State and Revision are the
// project's after the command; Unchanged is true when it already was in that state (nothing
// was written, not even the lock's audit row).
type ProjectStateChanged struct {
	ProjectID     string `json:"project_id"`
	Action        string `json:"action"` // pause or resume
	State         string `json:"state"`
	Revision      int64  `json:"revision"`
	ContentDigest string `json:"content_digest"`
	Unchanged     bool   `json:"unchanged"`
}

// PauseProject pauses an active project: in one transaction under the audited project lock it
// sets the state to paused at the next project revision (with that content's digest) and writes
// a project.pause audit row. Nothing of a paused project is claimed, and a claim taken before the
// pause admits nothing (the admit re-checks the project's state, revision and digest); an admit
// in flight when it runs commits before it returns or not at all (LockProjectForStateChange). Schedule
// rows, cursors and revisions are not touched. Pausing a paused project writes nothing and
// reports Unchanged; an archived project is refused (ErrNotFound).
func (p *Publisher) PauseProject(ctx context.Context, project string) (ProjectStateChanged, error) {
	return p.setProjectState(ctx, project, "pause", ProjectActive, ProjectPaused)
}

// ResumeProject makes a paused project active again at the next project revision, with a
// project.resume audit row, as PauseProject does. The schedule rows kept their cursors, so the
// next claim of each trigger decides about the occurrences missed while paused by its misfire
// policy, as after an outage. Resuming an active project writes nothing and reports Unchanged.
func (p *Publisher) ResumeProject(ctx context.Context, project string) (ProjectStateChanged, error) {
	return p.setProjectState(ctx, project, "resume", ProjectPaused, ProjectActive)
}

func (p *Publisher) setProjectState(ctx context.Context, project, action, from, to string) (ProjectStateChanged, error) {
	out := ProjectStateChanged{ProjectID: project, Action: action}
	if err := ValidateID(FieldProject, project); err != nil {
		return out, err
	}
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		q := db.New(tx)
		proj, err := lockProject(ctx, q, project, "project "+action)
		if err != nil {
			return err
		}
		out.State, out.Revision, out.ContentDigest = proj.State, proj.Revision, proj.ContentDigest
		switch proj.State {
		case to:
			out.Unchanged = true
			return errNothingWritten // rolls the lock's audit row back
		case from:
		default:
			return &stateError{msg: fmt.Sprintf("project %s is %s: it cannot be %sd", project, proj.State, action)}
		}
		if err := q.LockProjectForStateChange(ctx, project); err != nil {
			return fmt.Errorf("%s project %s: lock its row: %w", action, project, err)
		}
		row, err := q.SetProjectState(ctx, db.SetProjectStateParams{State: to, ProjectID: project})
		if err != nil {
			return fmt.Errorf("%s project %s: %w", action, project, err)
		}
		out.State, out.Revision, out.ContentDigest = row.State, row.Revision, row.ContentDigest
		return nil // the database writes the project.pause or project.resume audit row
	})
	if errors.Is(err, errNothingWritten) {
		return out, nil
	}
	return out, err
}
