package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/db"
)

// PlanSchema names the JSON document of a Plan (docs/json.md).
const PlanSchema = "qlsched.apply-plan/v1"

// Action is what a plan does to one project, task or trigger.
type Action string

// The actions of a plan. ActionUnlisted is not a change: a trigger of the file's projects that
// the file does not list, left as it is because pruning was not asked for. An unlisted trigger of
// a task the file declares is an update when that task's head moves past the revision it pins:
// it moves with its task, so apply leaves no trigger of the file's tasks on an older revision.
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
	// QueuedForInitialisation counts the triggers whose new revision is enabled (created or
	// updated): each leaves its schedule row without a cursor, waiting for a replica to
	// initialise it (docs/scheduling.md, Initialisation). Planned for a check, written when applied.
	QueuedForInitialisation int        `json:"queued_for_initialisation"`
	Items                   []PlanItem `json:"items"`
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
// nothing. Only items that differ get a new revision, written with its audit row by the functions
// CreateProject, PublishTask and PublishTrigger run in their own transactions (createProject,
// publishTask, publishTrigger), and what differs is decided by their rules (taskUnchanged,
// triggerChanges); an unchanged trigger keeps its schedule row, cursor and claim. When nothing
// differs, nothing is written at all.
//
// The transaction reads the heads, and when anything is to change, takes the audited lock of each
// project with changes (in id order, so two applies do not deadlock on each other), creating a
// missing project first, then reads the heads again: a publish that committed in between is
// seen, and none can commit until this transaction ends. The plan it returns is the one computed
// under the locks, with the revisions written.
func (p *Publisher) Apply(ctx context.Context, s *Schedules, opts ApplyOptions) (Plan, error) {
	var plan Plan
	// retried on a deadlock with a batch admit (inTxRetrying): plan is rebuilt from the heads on
	// every call
	err := p.inTxRetrying(ctx, func(tx pgx.Tx) error {
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
					pc, err := createProject(ctx, q, id, "apply") // Created false: created meanwhile, by another
					if err != nil {
						return err
					}
					created[id] = created[id] || pc.Created
				}
				if err := lockWritableProject(ctx, q, id, "qlsched apply"); err != nil {
					return err
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
// project's lock, with the publisher's own functions (publishTask, publishTrigger: the same
// queries, content rules and audit rows as PublishTask and PublishTrigger), and fills in the
// revisions written. What they write must be what the plan says: both use the same rules on the
// same heads, so a difference is a bug and rolls everything back.
func execute(ctx context.Context, q *db.Queries, plan *Plan, s *Schedules, st *state) error {
	tasks := map[key]TaskSpec{}
	triggers := map[key]TriggerSpec{}
	for _, ps := range s.Projects {
		for _, t := range ps.Tasks {
			tasks[key{ps.ID, t.Spec.Task}] = t.Spec
		}
		for _, t := range ps.Triggers {
			triggers[key{ps.ID, t.Spec.Trigger}] = t.Spec
		}
	}
	// a trigger pins its task's head revision as a publish does; the tasks of a project come
	// before its triggers in the plan, so their new revisions are read, not planned ones
	pins := taskHeads{}
	order, err := writeOrder(ctx, q, plan.Items)
	if err != nil {
		return err
	}
	for _, i := range order {
		it := &plan.Items[i]
		k := key{it.Project, it.ID}
		switch {
		case it.Kind == KindProject && it.Action == ActionCreate:
			it.Revision = 1
		case it.Kind == KindTask && isChange(it.Action):
			pub, err := publishTask(ctx, q, tasks[k])
			if err != nil {
				return err
			}
			if want := nextRevision(st.tasks[k]); pub.Unchanged || pub.Revision != want {
				return fmt.Errorf("task %s/%s: revision %d written (unchanged %v), %d planned", it.Project, it.ID, pub.Revision, pub.Unchanged, want)
			}
			it.Revision = pub.Revision
		case it.Kind == KindTrigger && isChange(it.Action):
			head := st.triggers[k]
			spec, listed := triggers[k]
			change := "apply"
			if !listed { // a trigger the file does not list: pruned, or moving with its task
				spec, _ = unlistedSpec(it.Project, head, it.Action == ActionDisable, nil)
				if it.Action == ActionDisable {
					change = "prune"
				}
			}
			// every trigger written pins its task's head, as a publish does; an unlisted one
			// whose task the file does not declare keeps its pin (only enabled changes)
			var taskRev int64
			if _, declared := tasks[key{it.Project, spec.Task}]; !listed && !declared {
				taskRev = head.taskRevision
			} else {
				var err error
				if taskRev, err = pins.get(ctx, q, spec.Project, spec.Task); err != nil {
					return err
				}
			}
			pub, err := publishTrigger(ctx, q, spec, taskRev, head, change)
			if err != nil {
				return err
			}
			if pub.Unchanged || !sameFields(it.Changes, pub.Changed) {
				return fmt.Errorf("trigger %s/%s: published changes %v, planned %+v", it.Project, it.ID, pub.Changed, it.Changes)
			}
			it.Revision = pub.Revision
		}
	}
	plan.Applied = true
	return nil
}

// writeOrder is the order execute writes the plan's items in: projects and tasks first, in plan
// order, then the triggers in the order in which a claim takes schedule rows (ClaimDue,
// ClaimInit: coalesce(next_fire_at_ms, -1), project_id, trigger_id, in the database's collation,
// each row's cursor as it is now: claimOrder), so that the schedule rows this transaction resets
// are locked in the order a batch admit or initialisation locks them (their batches are in the
// claim's order: due rows by their cursors, uninitialised ones, NULL, by key). The reverse order
// is a lock cycle PostgreSQL breaks by aborting one side (both retry it, inTxRetrying and
// Initialise, through pgretry).
func writeOrder(ctx context.Context, q *db.Queries, items []PlanItem) ([]int, error) {
	order := make([]int, 0, len(items))
	var triggers []int
	var projects, ids []string
	for i, it := range items {
		if it.Kind == KindTrigger {
			triggers = append(triggers, i)
			projects, ids = append(projects, it.Project), append(ids, it.ID)
		} else {
			order = append(order, i)
		}
	}
	sorted, err := claimOrder(ctx, q, projects, ids)
	if err != nil {
		return nil, err
	}
	for _, k := range sorted {
		order = append(order, triggers[k])
	}
	return order, nil
}

// claimOrder returns the indexes of the keys (projects[i], ids[i]) in the order a claim takes
// schedule rows: the row's cursor as it is now (coalesce(next_fire_at_ms, -1); no row: -1), then
// project_id, trigger_id in the database's collation, equal keys in their order here. The
// database sorts them (ClaimKeyOrder): Go's byte order is that collation's only under C, and a
// publish locking rows in another order than a batch admit or initialisation makes a deadlock
// cycle with it (en-US puts "a_1" before "a-1"; a due "b" whose cursor is before "a"'s comes
// first). An admit committing between the read and the reset moves a cursor: the order is the
// claim's as of the read.
func claimOrder(ctx context.Context, q *db.Queries, projects, ids []string) ([]int, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ords, err := q.ClaimKeyOrder(ctx, db.ClaimKeyOrderParams{ProjectIds: projects, TriggerIds: ids})
	if err != nil {
		return nil, fmt.Errorf("order %d triggers as the claim does: %w", len(ids), err)
	}
	if len(ords) != len(ids) {
		return nil, fmt.Errorf("order %d triggers as the claim does: %d positions returned", len(ids), len(ords))
	}
	order := make([]int, len(ords))
	seen := make([]bool, len(ids))
	for i, o := range ords {
		if o < 1 || int(o) > len(ids) || seen[o-1] {
			return nil, fmt.Errorf("order %d triggers as the claim does: position %d out of range or repeated", len(ids), o)
		}
		seen[o-1], order[i] = true, int(o-1)
	}
	return order, nil
}

// nextRevision is the revision a publish writes after head (nil: a new item).
func nextRevision(head *taskRevision) int64 {
	if head == nil {
		return 1
	}
	return head.revision + 1
}

// unlistedSpec is what apply publishes for a trigger the file does not list, should it publish
// one: its head's content, disabled when pruned, pinned to its task's planned head revision when
// the file declares the task (taskRev, by task id; a trigger moves with its task, so no trigger of
// a file's task is left on an older revision of it), else to the revision it pins.
func unlistedSpec(project string, head *triggerRevision, prune bool, taskRev map[string]int64) (TriggerSpec, int64) {
	t := head.spec(project)
	if prune {
		t.Enabled = false
	}
	pin := head.taskRevision
	if rev, ok := taskRev[head.task]; ok {
		pin = rev
	}
	return t, pin
}

// sameFields says whether a plan's changes of a trigger (fields by file key) name the fields a
// publish result's Changed names (by triggerContentFields' names), in the same order.
func sameFields(planned []Change, changed []string) bool {
	return slices.EqualFunc(planned, changed, func(c Change, name string) bool {
		i := slices.IndexFunc(triggerContentFields[:], func(f struct{ name, fileKey string }) bool { return f.name == name })
		return i >= 0 && triggerContentFields[i].fileKey == c.Field
	})
}

type key struct{ project, id string }

type projectHead struct {
	state    string
	revision int64
}

// state is what the database holds for a file's projects (read with the publisher's head readers),
// and the digest each of the file's executor specs has.
type state struct {
	projects map[string]projectHead
	tasks    map[key]*taskRevision
	triggers map[key]*triggerRevision
	byProj   map[string][]string // trigger ids per project, in id order
	digests  map[key]string      // the file's tasks
}

func readState(ctx context.Context, q *db.Queries, s *Schedules) (*state, error) {
	st := &state{projects: map[string]projectHead{}, tasks: map[key]*taskRevision{}, triggers: map[key]*triggerRevision{},
		byProj: map[string][]string{}, digests: map[key]string{}}
	for _, ps := range s.Projects {
		for _, t := range ps.Tasks {
			// the database computes the digest: it is of the spec's jsonb text, which only
			// PostgreSQL renders exactly
			d, err := q.SpecDigest(ctx, t.Spec.ExecutorSpec)
			if err != nil {
				return nil, fmt.Errorf("digest of task %s/%s: %w", ps.ID, t.Spec.Task, err)
			}
			st.digests[key{ps.ID, t.Spec.Task}] = d
		}
		p, err := q.GetProject(ctx, ps.ID)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("read project %s: %w", ps.ID, err)
		}
		st.projects[ps.ID] = projectHead{p.State, p.Revision}
		tasks, err := readTaskHeads(ctx, q, ps.ID, "")
		if err != nil {
			return nil, err
		}
		for _, h := range tasks {
			st.tasks[key{ps.ID, h.task}] = h
		}
		triggers, err := readTriggerHeads(ctx, q, ps.ID, nil)
		if err != nil {
			return nil, err
		}
		for _, h := range triggers {
			st.triggers[key{ps.ID, h.trigger}] = h
			st.byProj[ps.ID] = append(st.byProj[ps.ID], h.trigger)
		}
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
			pol, _ := t.Spec.policy() // the file passed the publisher's checks when it was parsed
			item := PlanItem{Kind: KindTask, Project: ps.ID, ID: t.Spec.Task, Line: t.Line}
			switch h := st.tasks[k]; {
			case h == nil:
				item.Action, taskRev[t.Spec.Task] = ActionCreate, 1
				item.Changes = append([]Change{{"executor_spec", "", "sha256:" + want}}, taskPolicyChanges(nil, pol)...)
			case !taskUnchanged(h, want, pol):
				item.Action, taskRev[t.Spec.Task] = ActionUpdate, nextRevision(h)
				if h.executionDigest != want {
					item.Changes = []Change{{"executor_spec", "sha256:" + h.executionDigest, "sha256:" + want}}
				}
				item.Changes = append(item.Changes, taskPolicyChanges(h, pol)...)
			default:
				item.Action, item.Revision, taskRev[t.Spec.Task] = ActionUnchanged, h.revision, h.revision
			}
			add(item)
		}
		listed := map[string]bool{}
		for _, t := range ps.Triggers {
			k := key{ps.ID, t.Spec.Trigger}
			listed[t.Spec.Trigger] = true
			item := PlanItem{Kind: KindTrigger, Project: ps.ID, ID: t.Spec.Trigger, Line: t.Line}
			h := st.triggers[k]
			if ch := planChanges(h, t.Spec, taskRev[t.Spec.Task]); h == nil {
				item.Action, item.Changes = ActionCreate, ch
			} else if len(ch) > 0 {
				item.Action, item.Changes = ActionUpdate, ch
			} else {
				item.Action, item.Revision = ActionUnchanged, h.revision
			}
			if item.Action != ActionUnchanged && t.Spec.Enabled {
				plan.QueuedForInitialisation++
			}
			add(item)
		}
		for _, id := range st.byProj[ps.ID] {
			if listed[id] {
				continue
			}
			h := st.triggers[key{ps.ID, id}]
			item := PlanItem{Kind: KindTrigger, Project: ps.ID, ID: id, Action: ActionUnlisted, Revision: h.revision}
			spec, pin := unlistedSpec(ps.ID, h, opts.Prune, taskRev)
			switch {
			case opts.Prune && h.enabled:
				item.Action, item.Revision = ActionDisable, 0
				item.Changes = planChanges(h, spec, pin)
			case pin != h.taskRevision: // its task is the file's and moved: it moves with it
				item.Action, item.Revision = ActionUpdate, 0
				item.Changes = planChanges(h, spec, pin)
				if spec.Enabled {
					plan.QueuedForInitialisation++
				}
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

// planChanges are a plan's changes of a trigger: triggerChanges, the rule publishTrigger applies,
// with the fields named by their keys in a schedules file.
func planChanges(head *triggerRevision, t TriggerSpec, taskRev int64) []Change {
	out := []Change{}
	for _, c := range triggerChanges(head, t, taskRev) {
		out = append(out, Change{Field: triggerContentFields[c.field].fileKey, From: c.from, To: c.to})
	}
	return out
}
