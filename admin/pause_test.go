package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/coordinator"
)

// project is the stored project row, read as the superuser, with whether its digest is the one
// project_digest computes for its content.
func (f *fixture) project(id string) (state string, revision int64, digestValid bool) {
	f.t.Helper()
	err := f.d.Pool(f.t, "").QueryRow(context.Background(), `SELECT state, revision,
		       content_digest = control_core.project_digest(project_id, state, revision)
		FROM control_core.projects WHERE project_id = $1`, id).Scan(&state, &revision, &digestValid)
	if err != nil {
		f.t.Fatalf("project %s: %v", id, err)
	}
	return state, revision, digestValid
}

// Pause and resume each bump the project revision with a valid digest and write one audit row
// of their own in the same transaction; repeating either writes nothing (not even the lock's
// audit row) and reports Unchanged; an archived project is refused; publishes into a paused
// project are allowed; schedule rows are not touched.
func TestPauseResumeIsAuditedAndIdempotent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.pub.PublishTrigger(ctx, spec("p", "tick", "task", "* * * * * *")); err != nil {
		t.Fatal(err)
	}
	schedule := func() string {
		var s string
		if err := f.d.Pool(t, "").QueryRow(ctx, `SELECT row(s.*)::text FROM control_core.trigger_schedules s
			WHERE project_id = 'p' AND trigger_id = 'tick'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	row := schedule()

	res, err := f.pub.PauseProject(ctx, "p")
	if err != nil || res.Unchanged || res.State != "paused" || res.Revision != 2 || res.Action != "pause" {
		t.Fatalf("pause: %+v, %v; want paused at revision 2", res, err)
	}
	if st, rev, ok := f.project("p"); st != "paused" || rev != 2 || !ok {
		t.Errorf("stored: %s, revision %d, digest valid %v; want paused, 2, true", st, rev, ok)
	}
	if n := f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'project.pause' AND project_id = 'p'
		AND detail->>'from' = 'active' AND detail->>'to' = 'paused' AND (detail->>'revision')::bigint = 2`); n != 1 {
		t.Errorf("%d project.pause audit rows; want 1", n)
	}
	before := f.writes()
	if res, err := f.pub.PauseProject(ctx, "p"); err != nil || !res.Unchanged || res.State != "paused" || res.Revision != 2 {
		t.Errorf("pause again: %+v, %v; want unchanged, paused at 2", res, err)
	}
	if f.writes() != before {
		t.Errorf("pausing a paused project wrote something")
	}
	if schedule() != row {
		t.Errorf("pause touched the schedule row:\n%s\n%s", row, schedule())
	}

	// edits while paused are allowed (documented): a task publish gets its revision
	if pub, err := f.pub.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "other", ExecutorSpec: []byte(`{"image":"x:1"}`)}); err != nil || pub.Revision != 1 {
		t.Errorf("publish into a paused project: %+v, %v; want revision 1", pub, err)
	}

	res, err = f.pub.ResumeProject(ctx, "p")
	if err != nil || res.Unchanged || res.State != "active" || res.Revision != 3 {
		t.Fatalf("resume: %+v, %v; want active at revision 3", res, err)
	}
	if st, rev, ok := f.project("p"); st != "active" || rev != 3 || !ok {
		t.Errorf("stored: %s, revision %d, digest valid %v; want active, 3, true", st, rev, ok)
	}
	if n := f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'project.resume' AND project_id = 'p'`); n != 1 {
		t.Errorf("%d project.resume audit rows; want 1", n)
	}
	before = f.writes()
	if res, err := f.pub.ResumeProject(ctx, "p"); err != nil || !res.Unchanged || res.State != "active" {
		t.Errorf("resume an active project: %+v, %v; want unchanged", res, err)
	}
	if f.writes() != before {
		t.Errorf("resuming an active project wrote something")
	}
	if schedule() != row {
		t.Errorf("pause/resume touched the schedule row")
	}

	f.d.Exec(t, `UPDATE control_core.projects SET state = 'archived' WHERE project_id = 'p'`)
	for name, do := range map[string]func(context.Context, string) (admin.ProjectStateChanged, error){
		"pause": f.pub.PauseProject, "resume": f.pub.ResumeProject} {
		if _, err := do(ctx, "p"); !errors.Is(err, admin.ErrNotFound) {
			t.Errorf("%s an archived project: %v; want ErrNotFound", name, err)
		}
	}
	if _, err := f.pub.PauseProject(ctx, "nope"); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("pause a missing project: %v; want ErrNotFound", err)
	}
}

// A claim taken before the pause admits nothing: the admit re-checks the project's state,
// revision and digest. Not after the resume either (the revision moved on). While paused,
// nothing is claimed.
func TestClaimInFlightAtPauseIsRefusedAtAdmit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.pub.PublishTrigger(ctx, spec("p", "tick", "task", "0 0 1 1 *")); err != nil {
		t.Fatal(err)
	}
	store := coordinator.NewStore(f.d.Handle(t, "ql_runtime"))
	due := func() { // put the cursor 5 s in the past, cleared claim: due now
		f.d.Exec(t, `UPDATE control_core.trigger_schedules SET next_fire_at_ms = control_core.db_now_ms() - 5000,
			claim_owner = NULL, claim_token = NULL, claim_expires_at_ms = NULL WHERE project_id = 'p'`)
	}
	claim := func() *coordinator.Claim {
		t.Helper()
		c, err := store.Claim(ctx, "replica", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	admit := func(c *coordinator.Claim) coordinator.Outcome {
		t.Helper()
		_, out, err := store.Admit(ctx, c, *c.CursorMs, c.ClaimedAtMs+1000, uuid.New(), 3)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	// control: the same steps without a pause admit
	due()
	if c := claim(); c == nil || c.CursorMs == nil {
		t.Fatalf("claim: %+v; want the due row", c)
	} else if out := admit(c); out != coordinator.Written {
		t.Fatalf("admit without a pause: %s; want written", out)
	}

	due()
	inFlight := claim()
	if inFlight == nil {
		t.Fatal("no claim")
	}
	if _, err := f.pub.PauseProject(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if out := admit(inFlight); out != coordinator.Stale {
		t.Errorf("admit of a claim taken before the pause: %s; want stale", out)
	}
	due()
	if c := claim(); c != nil {
		t.Errorf("claimed %s/%s of a paused project", c.ProjectID, c.TriggerID)
	}
	if _, err := f.pub.ResumeProject(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if out := admit(inFlight); out != coordinator.Stale && out != coordinator.Race {
		t.Errorf("admit of the pre-pause claim after resume: %s; want refused", out)
	}
	if n := f.count(`SELECT count(*) FROM control_core.runs`); n != 1 {
		t.Errorf("%d runs; want 1 (the control)", n)
	}
}

// Apply follows the publishers' choice: edits into a paused project are applied (they take effect
// on resume) and the project stays paused; apply never changes a project's state.
func TestApplyIntoAPausedProject(t *testing.T) {
	t.Parallel()
	f := newApplyFixture(t)
	ctx := context.Background()
	text := exampleFile(t)
	if _, err := f.pub.Apply(ctx, parse(t, "schedules.yaml", text), admin.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pub.PauseProject(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	edited := edit(t, text, `cron: "* * * * *"`, `cron: "*/2 * * * *"`)
	plan, err := f.pub.Apply(ctx, parse(t, "schedules.yaml", edited), admin.ApplyOptions{})
	if err != nil {
		t.Fatalf("apply into a paused project: %v", err)
	}
	if plan.InSync {
		t.Errorf("apply found nothing to change:\n%s", actions(plan))
	}
	if n := f.count(`SELECT count(*) FROM control_core.trigger_revisions WHERE cron_spec = '*/2 * * * *'`); n != 1 {
		t.Errorf("%d revisions with the edited spec; want 1", n)
	}
	if n := f.count(`SELECT count(*) FROM control_core.projects WHERE project_id = 'ops' AND state = 'paused'`); n != 1 {
		t.Error("apply changed the paused project's state")
	}
}
