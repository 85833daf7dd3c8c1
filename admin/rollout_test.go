package admin_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/qlcontrol/controlcore/admin"
)

// A trigger pins a task revision: a task publish leaves the task's triggers where they were and
// names them; a rollout moves exactly those (a new trigger revision pinned to the head, its
// schedule row reset: state and claim versions incremented, cursor and claim cleared), audited,
// in one transaction; a check writes nothing; a second rollout finds nothing to move and writes
// nothing, not even the lock's audit row.
func TestRolloutMovesTheTaskTriggersToItsHead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.pub.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "other", ExecutorSpec: []byte(`{"image":"o:1"}`)}); err != nil {
		t.Fatal(err)
	}
	off := spec("p", "c", "task", "0 4 * * *")
	off.Enabled = false
	if _, err := f.pub.PublishTriggers(ctx, []admin.TriggerSpec{spec("p", "a", "task", "0 3 * * *"),
		spec("p", "b", "task", "*/5 * * * *"), off, spec("p", "d", "other", "0 5 * * *")}); err != nil {
		t.Fatal(err)
	}
	versions := func(trigger string) (state, claim int64) {
		t.Helper()
		if err := f.d.Pool(t, "").QueryRow(ctx, `SELECT state_version, claim_version FROM control_core.trigger_schedules
			WHERE project_id = 'p' AND trigger_id = $1`, trigger).Scan(&state, &claim); err != nil {
			t.Fatal(err)
		}
		return state, claim
	}
	aState, aClaim := versions("a")
	dState, dClaim := versions("d")

	pub, err := f.pub.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "task", ExecutorSpec: []byte(`{"image":"example/job:2"}`)})
	if err != nil {
		t.Fatal(err)
	}
	var stale []string
	for _, s := range pub.StaleTriggers {
		stale = append(stale, s.TriggerID)
		if s.TaskRevision != 1 {
			t.Errorf("stale %s pins task revision %d, want 1", s.TriggerID, s.TaskRevision)
		}
	}
	if pub.Revision != 2 || !slices.Equal(stale, []string{"a", "b", "c"}) {
		t.Fatalf("task publish: revision %d, stale %v; want 2, [a b c]", pub.Revision, stale)
	}
	pinned := func() map[string]int64 {
		t.Helper()
		rows, err := f.d.Pool(t, "").Query(ctx, `SELECT t.trigger_id, tr.task_revision FROM control_core.triggers t
			JOIN control_core.trigger_revisions tr ON (tr.project_id, tr.trigger_id, tr.revision) = (t.project_id, t.trigger_id, t.head_revision)
			WHERE t.project_id = 'p'`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var id string
			var rev int64
			if err := rows.Scan(&id, &rev); err != nil {
				t.Fatal(err)
			}
			out[id] = rev
		}
		return out
	}
	writes := func() int {
		return f.count(`SELECT (SELECT count(*) FROM control_core.admin_audit_log) + (SELECT count(*) FROM control_core.trigger_revisions)`)
	}

	before := writes()
	check, err := f.pub.RolloutTask(ctx, "p", "task", true)
	if err != nil {
		t.Fatal(err)
	}
	if !check.Check || check.Moved != 3 || check.AtHead != 0 || check.TaskRevision != 2 || writes() != before {
		t.Fatalf("check: %+v (writes %d → %d); want 3 to move, nothing written", check, before, writes())
	}
	if p := pinned(); p["a"] != 1 {
		t.Fatalf("after a check: %v, want a still on 1", p)
	}

	roll, err := f.pub.RolloutTask(ctx, "p", "task", false)
	if err != nil {
		t.Fatal(err)
	}
	if roll.Moved != 3 || roll.AtHead != 0 || len(roll.Triggers) != 3 {
		t.Fatalf("rollout: %+v, want 3 moved", roll)
	}
	for _, rt := range roll.Triggers {
		if !rt.Moved || rt.FromTaskRevision != 1 || rt.TaskRevision != 2 || rt.Revision != 2 || rt.QueuedForInitialisation != rt.Enabled {
			t.Errorf("rollout of %s: %+v; want moved 1 → 2 as trigger revision 2", rt.TriggerID, rt)
		}
	}
	if p := pinned(); p["a"] != 2 || p["b"] != 2 || p["c"] != 2 || p["d"] != 1 {
		t.Fatalf("pins after rollout: %v; want a, b, c on 2 and d (another task) on 1", p)
	}
	if s, c := versions("a"); s != aState+1 || c != aClaim+1 {
		t.Errorf("a's schedule row: versions %d/%d, want %d/%d (a claim on the old revision fails its fence)", s, c, aState+1, aClaim+1)
	}
	if n := f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE project_id = 'p' AND trigger_id IN ('a', 'b', 'c')
		AND trigger_revision = 2 AND next_fire_at_ms IS NULL AND claim_owner IS NULL`); n != 3 {
		t.Errorf("%d schedule rows at revision 2 with cursor and claim cleared, want 3", n)
	}
	if s, c := versions("d"); s != dState || c != dClaim {
		t.Errorf("d's schedule row moved: %d/%d, want %d/%d", s, c, dState, dClaim)
	}
	if n := f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'trigger.publish' AND detail->>'change' = 'rollout'`); n != 3 {
		t.Errorf("%d trigger.publish audit rows of change rollout, want 3", n)
	}
	if n := f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'project.lock' AND detail->>'reason' = 'task.rollout'`); n != 1 {
		t.Errorf("%d project locks for task.rollout, want 1", n)
	}

	before = writes()
	again, err := f.pub.RolloutTask(ctx, "p", "task", false)
	if err != nil {
		t.Fatal(err)
	}
	if again.Moved != 0 || again.AtHead != 3 || writes() != before {
		t.Fatalf("second rollout: %+v (writes %d → %d); want nothing moved, nothing written", again, before, writes())
	}
	if pub, err := f.pub.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "task", ExecutorSpec: []byte(`{"image":"example/job:2"}`)}); err != nil || len(pub.StaleTriggers) != 0 {
		t.Fatalf("task publish after the rollout: %+v, %v; want no stale triggers", pub.StaleTriggers, err)
	}

	if _, err := f.pub.RolloutTask(ctx, "p", "nope", false); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("rollout of a missing task: %v, want ErrNotFound", err)
	}
}

// In an apply, a trigger moves with its task: one the file does not list, published on the
// file's task by hand, is planned as a task_revision update when the file changes the task and
// then pins the new head, so apply leaves no trigger of the file's tasks behind; one on a task
// the file does not declare keeps its pin; a plan after the apply is in sync.
func TestApplyMovesUnlistedTriggersWithTheirTask(t *testing.T) {
	t.Parallel()
	f := newApplyFixture(t)
	ctx := context.Background()
	file := `schema: qlsched.schedules/v1
projects:
  - id: p
    tasks:
      - id: k
        executor_spec: {image: "x:1"}
    triggers:
      - id: a
        task: k
        cron: "0 3 * * *"
`
	if _, err := f.pub.Apply(ctx, parse(t, "s.yaml", file), admin.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pub.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "outside", ExecutorSpec: []byte(`{"image":"o"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pub.PublishTriggers(ctx, []admin.TriggerSpec{spec("p", "byhand", "k", "0 6 * * *"), spec("p", "other", "outside", "0 7 * * *")}); err != nil {
		t.Fatal(err)
	}
	changed := edit(t, file, `"x:1"`, `"x:2"`)
	plan, err := f.rd.Plan(ctx, parse(t, "s.yaml", changed), admin.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "project p/p unchanged\ntask p/k update executor_spec\ntrigger p/a update task_revision\ntrigger p/byhand update task_revision\ntrigger p/other unlisted\n"
	if got := actions(plan); got != want || plan.QueuedForInitialisation != 2 {
		t.Fatalf("plan of a changed task:\n%s(queued %d)\nwant\n%s(queued 2)", got, plan.QueuedForInitialisation, want)
	}
	applied, err := f.pub.Apply(ctx, parse(t, "s.yaml", changed), admin.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(applied); got != want || !applied.Applied {
		t.Fatalf("apply of a changed task:\n%s\nwant\n%s", got, want)
	}
	if n := f.count(`SELECT count(*) FROM control_core.triggers t
		JOIN control_core.trigger_revisions tr ON (tr.project_id, tr.trigger_id, tr.revision) = (t.project_id, t.trigger_id, t.head_revision)
		WHERE t.project_id = 'p' AND tr.task_id = 'k' AND tr.task_revision = 2 AND tr.enabled`); n != 2 {
		t.Errorf("%d enabled triggers of k on its head revision 2 after apply, want 2 (a and byhand)", n)
	}
	if n := f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'trigger.publish' AND subject = 'byhand'
		AND detail->>'change' = 'apply' AND detail->'changed' = '["task_revision"]'::jsonb`); n != 1 {
		t.Errorf("%d audit rows of byhand moving with its task, want 1", n)
	}
	if p, err := f.rd.Plan(ctx, parse(t, "s.yaml", changed), admin.ApplyOptions{}); err != nil || !p.InSync {
		t.Fatalf("plan after the apply: %v\n%s; want in sync", err, actions(p))
	}
	// with --prune an unlisted trigger of the file's task is disabled on the task's head
	pruned := edit(t, changed, `"x:2"`, `"x:3"`)
	p, err := f.pub.Apply(ctx, parse(t, "s.yaml", pruned), admin.ApplyOptions{Prune: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := actions(p), "project p/p unchanged\ntask p/k update executor_spec\ntrigger p/a update task_revision\ntrigger p/byhand disable task_revision enabled\ntrigger p/other disable enabled\n"; got != want {
		t.Errorf("apply --prune of a changed task:\n%s\nwant\n%s", got, want)
	}
}

// A check says what the rollout would do, so it refuses what the rollout refuses: a rollout in an
// archived project is refused (ErrNotFound, nothing written), and so is its check, instead of
// reporting triggers that "would move".
func TestRolloutCheckRefusesAnArchivedProjectAsTheRolloutDoes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.pub.PublishTriggers(ctx, []admin.TriggerSpec{spec("p", "a", "task", "0 3 * * *")}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pub.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "task", ExecutorSpec: []byte(`{"image":"example/job:2"}`)}); err != nil {
		t.Fatal(err)
	}
	f.d.Exec(t, `UPDATE control_core.projects SET state = 'archived' WHERE project_id = 'p'`)
	if _, err := f.pub.RolloutTask(ctx, "p", "task", false); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("rollout in an archived project: %v; want ErrNotFound", err)
	}
	check, err := f.pub.RolloutTask(ctx, "p", "task", true)
	if !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("check in an archived project: %+v, %v; want ErrNotFound as the rollout", check, err)
	}
}
