package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/db"
)

// PlanSchema names the JSON document of a Plan (docs/json.md).
const PlanSchema = "qlsched.apply-plan/v1"

// Action is what a plan does to one project, task or trigger.
type Action string

// The actions of a plan. ActionUnlisted is not a change: a trigger of the file's projects that
// the file does not list, left as it is because pruning was not asked for.
const (
	ActionCreate    Action = "create"
	ActionUpdate    Action = "update"
	ActionUnchanged Action = "unchanged"
	ActionDisable   Action = "disable"
	ActionUnlisted  Action = "unlisted"
)

// The kinds of a PlanItem.
const (
	KindProject = "project"
	KindTask    = "task"
	KindTrigger = "trigger"
)

// Change is one field a plan item changes. Values are text; an executor spec is shown as the
// sha256 of its canonical form (its execution digest), never as itself. From is "" on a create.
type Change struct {
	Field string `json:"field"`
	From  string `json:"from"`
	To    string `json:"to"`
}

// PlanItem is one project, task or trigger of a plan. Revision is the head revision: the
// current one when unchanged, the one written when applied (0 while only planned).
type PlanItem struct {
	Kind     string   `json:"kind"`
	Project  string   `json:"project"`
	ID       string   `json:"id"`
	Action   Action   `json:"action"`
	Line     int      `json:"line,omitempty"` // in the file; 0 for a trigger the file does not list
	Changes  []Change `json:"changes"`
	Revision int64    `json:"revision,omitempty"`
	State    string   `json:"state,omitempty"` // projects: the state in the database (not changed by apply)
}

// PlanSummary counts a plan's items by action.
type PlanSummary struct {
	Create    int `json:"create"`
	Update    int `json:"update"`
	Disable   int `json:"disable"`
	Unchanged int `json:"unchanged"`
	Unlisted  int `json:"unlisted"`
}

// Plan is what applying a schedules file does, item by item in file order (each project, its
// tasks, its triggers, then the triggers of that project the file does not list).
type Plan struct {
	Schema string `json:"schema"`
	File   string `json:"file"`
	Prune  bool   `json:"prune"`
	// InSync: the database already held what the file declares (nothing to create, update or
	// disable). A check exits 1 when it is false.
	InSync bool `json:"in_sync"`
	// Applied: the changes were written (in one transaction); false for a check and for an apply
	// that found nothing to change.
	Applied bool        `json:"applied"`
	Summary PlanSummary `json:"summary"`
	Items   []PlanItem  `json:"items"`
}

// ApplyOptions modify a plan.
type ApplyOptions struct {
	// Prune disables (a new revision with enabled false) every enabled trigger of the file's
	// projects that the file does not list. Without it they are left as they are (ActionUnlisted).
	Prune bool
}

// Plan compares a schedules file with the database, in one snapshot, and writes nothing. Any role
// with SELECT on control_core may run it.
func (r *Reader) Plan(ctx context.Context, s *Schedules, opts ApplyOptions) (Plan, error) {
	var plan Plan
	err := r.snapshot(ctx, func(q *db.Queries) error {
		st, err := readState(ctx, q, s)
		if err != nil {
			return err
		}
		plan = makePlan(s, st, opts, nil)
		return nil
	})
	return plan, err
}

// Apply makes the database hold what a schedules file declares, in one transaction: all of it or
// nothing. Only items that differ get a new revision (each with its audit row, written as
// CreateProject, PublishTask and PublishTrigger write theirs); an unchanged trigger keeps its
// schedule row, cursor and claim. When nothing differs, nothing is written at all.
//
// The transaction reads the heads, and when anything is to change, takes the audited lock of each
// project with changes (in id order, so two applies do not deadlock on each other), creating a
// missing project first, then reads the heads again: a publish that committed in between is
// seen, and none can commit until this transaction ends. The plan it returns is the one computed
// under the locks, with the revisions written.
func (p *Publisher) Apply(ctx context.Context, s *Schedules, opts ApplyOptions) (Plan, error) {
	var plan Plan
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		st, err := readState(ctx, q, s)
		if err != nil {
			return err
		}
		plan = makePlan(s, st, opts, nil)
		if plan.InSync {
			return nil
		}
		created, locked := map[string]bool{}, map[string]bool{}
		for {
			need := changedProjects(plan, locked)
			if len(need) == 0 {
				break
			}
			for _, id := range need {
				if _, ok := st.projects[id]; !ok {
					if _, err := q.CreateProject(ctx, id); err == nil {
						created[id] = true
						if err := q.AuditAdmin(ctx, db.AuditAdminParams{Action: "project.create", ProjectID: id, Subject: id, Detail: []byte(`{"by":"apply"}`)}); err != nil {
							return fmt.Errorf("audit project %s: %w", id, err)
						}
					} else if !errors.Is(err, pgx.ErrNoRows) { // ErrNoRows: created meanwhile, by another
						return fmt.Errorf("create project %s: %w", id, err)
					}
				}
				if _, err := q.LockProject(ctx, db.LockProjectParams{ProjectID: id, Reason: "qlsched apply"}); err != nil {
					var pgErr *pgconn.PgError
					if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.NoDataFound {
						return fmt.Errorf("project %s: %w", id, ErrNotFound)
					}
					return fmt.Errorf("lock project %s: %w", id, err)
				}
				locked[id] = true
			}
			if st, err = readState(ctx, q, s); err != nil {
				return err
			}
			plan = makePlan(s, st, opts, created)
		}
		if plan.InSync { // another apply made the same changes while this one waited for a lock
			return nil
		}
		return execute(ctx, q, &plan, s, st)
	})
	if err != nil {
		return Plan{}, err
	}
	return plan, nil
}

// changedProjects are the projects with an item to create, update or disable that are not yet
// locked, in id order.
func changedProjects(plan Plan, locked map[string]bool) []string {
	var out []string
	for _, it := range plan.Items {
		if isChange(it.Action) && !locked[it.Project] && !slices.Contains(out, it.Project) {
			out = append(out, it.Project)
		}
	}
	slices.Sort(out)
	return out
}

func isChange(a Action) bool { return a == ActionCreate || a == ActionUpdate || a == ActionDisable }

// execute writes the plan's changes inside the caller's transaction, holding every changed
// project's lock, with the publisher's queries and audit rows, and fills in the revisions written.
func execute(ctx context.Context, q *db.Queries, plan *Plan, s *Schedules, st *state) error {
	files := map[key]*TaskSchedule{}
	triggers := map[key]*TriggerSchedule{}
	for i := range s.Projects {
		ps := &s.Projects[i]
		for j := range ps.Tasks {
			files[key{ps.ID, ps.Tasks[j].Spec.Task}] = &ps.Tasks[j]
		}
		for j := range ps.Triggers {
			triggers[key{ps.ID, ps.Triggers[j].Spec.Trigger}] = &ps.Triggers[j]
		}
	}
	for _, it := range plan.Items {
		if isChange(it.Action) && it.Kind != KindProject {
			if state := st.projects[it.Project].state; state != "active" {
				return fmt.Errorf("project %s is %s: %w", it.Project, state, ErrNotFound)
			}
		}
	}
	taskRevs := map[key]int64{}
	for k, h := range st.tasks {
		taskRevs[k] = h.revision
	}
	for i := range plan.Items {
		it := &plan.Items[i]
		k := key{it.Project, it.ID}
		switch {
		case it.Kind == KindProject && it.Action == ActionCreate:
			it.Revision = 1
		case it.Kind == KindTask && isChange(it.Action):
			rev, err := publishTaskIn(ctx, q, files[k].Spec)
			if err != nil {
				return err
			}
			if want := st.tasks[k].revision + 1; rev != want {
				return fmt.Errorf("task %s/%s: revision %d written, %d planned", it.Project, it.ID, rev, want)
			}
			it.Revision, taskRevs[k] = rev, rev
		case it.Kind == KindTrigger && it.Action == ActionDisable:
			h := st.triggers[k]
			spec := TriggerSpec{Project: it.Project, Trigger: it.ID, Task: h.task, Cron: h.cron, TimeZone: h.timeZone,
				Misfire: h.misfire, Enabled: false}
			pub, err := publishTrigger(ctx, q, spec, h.taskRevision)
			if err != nil {
				return err
			}
			it.Revision = pub.Revision
		case it.Kind == KindTrigger && isChange(it.Action):
			spec := triggers[k].Spec
			rev, ok := taskRevs[key{spec.Project, spec.Task}]
			if !ok {
				return fmt.Errorf("task %s/%s: %w", spec.Project, spec.Task, ErrNotFound)
			}
			pub, err := publishTrigger(ctx, q, spec, rev)
			if err != nil {
				return err
			}
			it.Revision = pub.Revision
		}
	}
	plan.Applied = true
	return nil
}

// publishTaskIn writes a task revision as PublishTask does (the same queries, the same audit
// row), inside the caller's transaction, which holds the project's lock.
func publishTaskIn(ctx context.Context, q *db.Queries, t TaskSpec) (int64, error) {
	exec, err := q.UpsertExecutionRevision(ctx, db.UpsertExecutionRevisionParams{ProjectID: t.Project, Spec: t.ExecutorSpec})
	if err != nil {
		return 0, fmt.Errorf("task %s/%s: execution revision: %w", t.Project, t.Task, err)
	}
	head, err := q.BumpTaskHead(ctx, db.BumpTaskHeadParams{ProjectID: t.Project, TaskID: t.Task})
	if err != nil {
		return 0, fmt.Errorf("task %s/%s: head: %w", t.Project, t.Task, err)
	}
	if _, err := q.InsertTaskRevision(ctx, db.InsertTaskRevisionParams{ProjectID: t.Project, TaskID: t.Task, Revision: head, ExecutionRevisionID: exec.ExecutionRevisionID}); err != nil {
		return 0, fmt.Errorf("task %s/%s: revision: %w", t.Project, t.Task, err)
	}
	detail, _ := json.Marshal(map[string]any{"revision": head, "execution_digest": exec.Digest})
	return head, q.AuditAdmin(ctx, db.AuditAdminParams{Action: "task.publish", ProjectID: t.Project, Subject: t.Task, Detail: detail})
}

type key struct{ project, id string }

type projectHead struct {
	state    string
	revision int64
}

type taskHead struct {
	revision int64
	digest   string
}

type triggerHead struct {
	revision       int64
	cron, timeZone string
	misfire        coordinator.MisfirePolicy
	enabled        bool
	task           string
	taskRevision   int64
}

// state is what the database holds for a file's projects, and the digest each of the file's
// executor specs would have.
type state struct {
	projects map[string]projectHead
	tasks    map[key]taskHead
	triggers map[key]triggerHead
	byProj   map[string][]string // trigger ids per project, in id order
	digests  map[key]string      // the file's tasks
}

func readState(ctx context.Context, q *db.Queries, s *Schedules) (*state, error) {
	ids := make([]string, 0, len(s.Projects))
	st := &state{projects: map[string]projectHead{}, tasks: map[key]taskHead{}, triggers: map[key]triggerHead{},
		byProj: map[string][]string{}, digests: map[key]string{}}
	for _, ps := range s.Projects {
		ids = append(ids, ps.ID)
		for _, t := range ps.Tasks {
			// the database computes the digest: it is of the spec's jsonb text, which only
			// PostgreSQL renders exactly
			d, err := q.SpecDigest(ctx, t.Spec.ExecutorSpec)
			if err != nil {
				return nil, fmt.Errorf("digest of task %s/%s: %w", ps.ID, t.Spec.Task, err)
			}
			st.digests[key{ps.ID, t.Spec.Task}] = d
		}
	}
	projects, err := q.ApplyProjects(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("read projects: %w", err)
	}
	for _, p := range projects {
		st.projects[p.ProjectID] = projectHead{p.State, p.Revision}
	}
	tasks, err := q.ApplyTaskHeads(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("read tasks: %w", err)
	}
	for _, t := range tasks {
		st.tasks[key{t.ProjectID, t.TaskID}] = taskHead{t.HeadRevision, t.ExecutionDigest}
	}
	triggers, err := q.ApplyTriggerHeads(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("read triggers: %w", err)
	}
	for _, t := range triggers {
		st.triggers[key{t.ProjectID, t.TriggerID}] = triggerHead{t.HeadRevision, t.CronSpec, t.Timezone,
			coordinator.MisfirePolicy(t.MisfirePolicy), t.Enabled, t.TaskID, t.TaskRevision}
		st.byProj[t.ProjectID] = append(st.byProj[t.ProjectID], t.TriggerID)
	}
	return st, nil
}

// makePlan compares the file with the state. created are projects this transaction created
// (they read as existing once created).
func makePlan(s *Schedules, st *state, opts ApplyOptions, created map[string]bool) Plan {
	plan := Plan{Schema: PlanSchema, File: s.File, Prune: opts.Prune, Items: []PlanItem{}}
	add := func(it PlanItem) {
		if it.Changes == nil {
			it.Changes = []Change{}
		}
		plan.Items = append(plan.Items, it)
	}
	for _, ps := range s.Projects {
		ph, exists := st.projects[ps.ID]
		item := PlanItem{Kind: KindProject, Project: ps.ID, ID: ps.ID, Line: ps.Line, Action: ActionUnchanged, Revision: ph.revision, State: ph.state}
		if !exists || created[ps.ID] {
			item.Action, item.Revision, item.State = ActionCreate, 0, "active"
		}
		add(item)
		// the task revision each trigger must pin once the plan is applied
		taskRev := map[string]int64{}
		for _, t := range ps.Tasks {
			k := key{ps.ID, t.Spec.Task}
			want := st.digests[k]
			item := PlanItem{Kind: KindTask, Project: ps.ID, ID: t.Spec.Task, Line: t.Line}
			switch h, ok := st.tasks[k]; {
			case !ok:
				item.Action, taskRev[t.Spec.Task] = ActionCreate, 1
				item.Changes = []Change{{"executor_spec", "", "sha256:" + want}}
			case h.digest != want:
				item.Action, taskRev[t.Spec.Task] = ActionUpdate, h.revision+1
				item.Changes = []Change{{"executor_spec", "sha256:" + h.digest, "sha256:" + want}}
			default:
				item.Action, item.Revision, taskRev[t.Spec.Task] = ActionUnchanged, h.revision, h.revision
			}
			add(item)
		}
		listed := map[string]bool{}
		for _, t := range ps.Triggers {
			k := key{ps.ID, t.Spec.Trigger}
			listed[t.Spec.Trigger] = true
			want := triggerHead{cron: t.Spec.Cron, timeZone: t.Spec.TimeZone, misfire: t.Spec.Misfire, enabled: t.Spec.Enabled,
				task: t.Spec.Task, taskRevision: taskRev[t.Spec.Task]}
			item := PlanItem{Kind: KindTrigger, Project: ps.ID, ID: t.Spec.Trigger, Line: t.Line}
			if h, ok := st.triggers[k]; !ok {
				item.Action, item.Changes = ActionCreate, triggerChanges(nil, want)
			} else if ch := triggerChanges(&h, want); len(ch) > 0 {
				item.Action, item.Changes = ActionUpdate, ch
			} else {
				item.Action, item.Revision = ActionUnchanged, h.revision
			}
			add(item)
		}
		for _, id := range st.byProj[ps.ID] {
			if listed[id] {
				continue
			}
			h := st.triggers[key{ps.ID, id}]
			item := PlanItem{Kind: KindTrigger, Project: ps.ID, ID: id, Action: ActionUnlisted, Revision: h.revision}
			switch {
			case opts.Prune && h.enabled:
				item.Action, item.Revision = ActionDisable, 0
				item.Changes = []Change{{"enabled", "true", "false"}}
			case opts.Prune:
				item.Action = ActionUnchanged // disabled already
			}
			add(item)
		}
	}
	for _, it := range plan.Items {
		switch it.Action {
		case ActionCreate:
			plan.Summary.Create++
		case ActionUpdate:
			plan.Summary.Update++
		case ActionDisable:
			plan.Summary.Disable++
		case ActionUnchanged:
			plan.Summary.Unchanged++
		case ActionUnlisted:
			plan.Summary.Unlisted++
		}
	}
	plan.InSync = plan.Summary.Create+plan.Summary.Update+plan.Summary.Disable == 0
	return plan
}

// triggerChanges lists the fields in which want differs from the head (every field when there
// is no head), in a fixed order.
func triggerChanges(h *triggerHead, want triggerHead) []Change {
	var from triggerHead
	if h != nil {
		from = *h
	}
	rev := func(v int64) string {
		if v == 0 {
			return ""
		}
		return strconv.FormatInt(v, 10)
	}
	fields := []Change{
		{"task", from.task, want.task},
		{"task_revision", rev(from.taskRevision), rev(want.taskRevision)},
		{"cron", from.cron, want.cron},
		{"timezone", from.timeZone, want.timeZone},
		{"misfire", string(from.misfire), string(want.misfire)},
		{"enabled", strconv.FormatBool(from.enabled), strconv.FormatBool(want.enabled)},
	}
	if h == nil {
		fields[5].From = ""
	}
	var out []Change
	for _, c := range fields {
		if c.From != c.To {
			out = append(out, c)
		}
	}
	return out
}
