package admin_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/schedule"
)

func ptr[T any](v T) *T { return &v }

// head is a trigger's stored head revision, read as the superuser.
type head struct {
	revision, taskRevision int64
	cron, zone, misfire    string
	graceMs                int64
	enabled                bool
}

func (f *fixture) head(trigger string) head {
	f.t.Helper()
	var h head
	err := f.d.Pool(f.t, "").QueryRow(context.Background(), `SELECT tr.revision, tr.task_revision, tr.cron_spec, tr.timezone,
		       tr.misfire_policy, tr.misfire_grace_ms, tr.enabled
		FROM control_core.triggers t JOIN control_core.trigger_revisions tr
		  ON tr.project_id = t.project_id AND tr.trigger_id = t.trigger_id AND tr.revision = t.head_revision
		WHERE t.project_id = 'p' AND t.trigger_id = $1`, trigger).
		Scan(&h.revision, &h.taskRevision, &h.cron, &h.zone, &h.misfire, &h.graceMs, &h.enabled)
	if err != nil {
		f.t.Fatalf("head of %s: %v", trigger, err)
	}
	return h
}

// writes counts every row a publish can write: revisions, schedule resets, audit rows.
func (f *fixture) writes() int {
	f.t.Helper()
	return f.count(`SELECT (SELECT count(*) FROM control_core.trigger_revisions) + (SELECT count(*) FROM control_core.task_revisions)
		+ (SELECT count(*) FROM control_core.admin_audit_log) + (SELECT count(*) FROM control_core.execution_revisions)
		+ (SELECT coalesce(sum(state_version), 0) FROM control_core.trigger_schedules)
		+ (SELECT count(*) FROM control_core.projects)`)
}

// Issue 17's regression: a trigger published with --timezone Europe/Berlin --misfire fire_once
// --misfire-grace 5m and republished with only --disabled (and the identifying flags) keeps
// Berlin, fire_once and 5m. Each change touches only what it gives; nothing falls back to a
// default; giving the head's own value changes nothing.
func TestRepublishKeepsWhatWasNotGiven(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	berlin := admin.TriggerChange{Project: "p", Trigger: "nightly", Task: ptr("task"), Cron: ptr("0 3 * * *"),
		TimeZone: ptr("Europe/Berlin"), Misfire: ptr(schedule.MisfireFireOnce), MisfireGrace: ptr(5 * time.Minute)}
	if pub, err := f.pub.ChangeTrigger(ctx, berlin); err != nil || pub.MisfireGraceMs != 300_000 {
		t.Fatalf("publish with a 5m grace: %+v, %v", pub, err)
	}
	for _, c := range []struct {
		name   string
		change admin.TriggerChange
		want   head
		fields []string
	}{
		{"only --disabled", admin.TriggerChange{Enabled: ptr(false)},
			head{2, 1, "0 3 * * *", "Europe/Berlin", "fire_once", 300_000, false}, []string{"enabled"}},
		{"only --cron", admin.TriggerChange{Cron: ptr("30 4 * * *")},
			head{3, 1, "30 4 * * *", "Europe/Berlin", "fire_once", 300_000, false}, []string{"cron_spec"}},
		{"only --misfire", admin.TriggerChange{Misfire: ptr(schedule.MisfireSkip)},
			head{4, 1, "30 4 * * *", "Europe/Berlin", "skip", 300_000, false}, []string{"misfire_policy"}},
		{"only --timezone", admin.TriggerChange{TimeZone: ptr("America/New_York")},
			head{5, 1, "30 4 * * *", "America/New_York", "skip", 300_000, false}, []string{"timezone"}},
		{"only --misfire-grace", admin.TriggerChange{MisfireGrace: ptr(90 * time.Second)},
			head{6, 1, "30 4 * * *", "America/New_York", "skip", 90_000, false}, []string{"misfire_grace_ms"}},
		{"only --disabled=false", admin.TriggerChange{Enabled: ptr(true)},
			head{7, 1, "30 4 * * *", "America/New_York", "skip", 90_000, true}, []string{"enabled"}},
	} {
		c.change.Project, c.change.Trigger = "p", "nightly"
		pub, err := f.pub.ChangeTrigger(ctx, c.change)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := f.head("nightly"); got != c.want || pub.Unchanged || !slices.Equal(pub.Changed, c.fields) {
			t.Errorf("%s: head %+v, changed %v (unchanged %v); want %+v, changed %v", c.name, got, pub.Changed, pub.Unchanged, c.want, c.fields)
		}
	}

	// the head's own grace again is content-identical: unchanged, nothing written
	before := f.writes()
	if pub, err := f.pub.ChangeTrigger(ctx, admin.TriggerChange{Project: "p", Trigger: "nightly", MisfireGrace: ptr(90 * time.Second)}); err != nil ||
		!pub.Unchanged || pub.Revision != 7 || pub.MisfireGraceMs != 90_000 {
		t.Errorf("republish of the head's grace: %+v, %v; want unchanged revision 7", pub, err)
	}
	if after := f.writes(); after != before {
		t.Errorf("an unchanged republish wrote %d rows", after-before)
	}
	// a grace out of range is refused, naming the field
	for _, g := range []time.Duration{0, 999 * time.Millisecond, 24*time.Hour + time.Millisecond, 1500 * time.Microsecond} {
		if _, err := f.pub.ChangeTrigger(ctx, admin.TriggerChange{Project: "p", Trigger: "nightly", MisfireGrace: ptr(g)}); fieldOf(err) != admin.FieldMisfireGrace {
			t.Errorf("grace %s: %v; want a FieldError of %s", g, err, admin.FieldMisfireGrace)
		}
	}
	// a new trigger's grace defaults to 60 s
	if pub, err := f.pub.ChangeTrigger(ctx, admin.TriggerChange{Project: "p", Trigger: "fresh", Task: ptr("task"), Cron: ptr("0 3 * * *")}); err != nil ||
		pub.MisfireGraceMs != schedule.DefaultMisfireGrace.Milliseconds() {
		t.Errorf("a new trigger without a grace: %+v, %v; want %s", pub, err, schedule.DefaultMisfireGrace)
	}

	// a new trigger needs its task and its cron spec; the refusal names the field
	for _, c := range []struct {
		change admin.TriggerChange
		field  string
	}{
		{admin.TriggerChange{Project: "p", Trigger: "new", Cron: ptr("* * * * *")}, admin.FieldTask},
		{admin.TriggerChange{Project: "p", Trigger: "new", Task: ptr("task")}, admin.FieldCron},
	} {
		if _, err := f.pub.ChangeTrigger(ctx, c.change); fieldOf(err) != c.field {
			t.Errorf("new trigger without %s: %v; want a FieldError of %s", c.field, err, c.field)
		}
	}
}

// Disable and enable publish a revision that flips only enabled; flipping to the state it is in
// writes nothing; an unknown trigger is not found.
func TestDisableEnableFlipOnlyEnabled(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.pub.ChangeTrigger(ctx, admin.TriggerChange{Project: "p", Trigger: "t", Task: ptr("task"), Cron: ptr("*/5 * * * *"),
		TimeZone: ptr("Asia/Tokyo"), Misfire: ptr(schedule.MisfireFireOnce)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		do        func() (admin.TriggerPublished, error)
		unchanged bool
		want      head
	}{
		{"disable", func() (admin.TriggerPublished, error) { return f.pub.DisableTrigger(ctx, "p", "t") }, false,
			head{2, 1, "*/5 * * * *", "Asia/Tokyo", "fire_once", 60_000, false}},
		{"disable again", func() (admin.TriggerPublished, error) { return f.pub.DisableTrigger(ctx, "p", "t") }, true,
			head{2, 1, "*/5 * * * *", "Asia/Tokyo", "fire_once", 60_000, false}},
		{"enable", func() (admin.TriggerPublished, error) { return f.pub.EnableTrigger(ctx, "p", "t") }, false,
			head{3, 1, "*/5 * * * *", "Asia/Tokyo", "fire_once", 60_000, true}},
	} {
		before := f.writes()
		pub, err := c.do()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		wrote := f.writes() != before
		if got := f.head("t"); got != c.want || pub.Unchanged != c.unchanged || wrote == c.unchanged || pub.Revision != c.want.revision {
			t.Errorf("%s: head %+v, result %+v, wrote %v; want %+v, unchanged %v", c.name, got, pub, wrote, c.want, c.unchanged)
		}
	}
	audit := f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'trigger.publish' AND detail->>'change' IN ('disable', 'enable')`)
	if audit != 2 {
		t.Errorf("%d audit rows of disable/enable; want 2 (the unchanged disable writes none)", audit)
	}
	if _, err := f.pub.DisableTrigger(ctx, "p", "nope"); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("disable of an unknown trigger: %v; want ErrNotFound", err)
	}
}

// A publish whose content equals the head revision writes nothing at all (no revision, no
// schedule reset, no audit row, not even the project lock's) and keeps the cursor; a change of
// any part of the content, the task's head revision included, is a new revision.
func TestPublishIsIdempotentByContent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	s := spec("p", "t", "task", "0 3 * * *")
	first, err := f.pub.PublishTrigger(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	f.d.Exec(t, `UPDATE control_core.trigger_schedules SET next_fire_at_ms = 4102444800000 WHERE trigger_id = 't'`)
	cursor := func() int {
		return f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE next_fire_at_ms = 4102444800000`)
	}

	before := f.writes()
	again, err := f.pub.PublishTrigger(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Unchanged || again.Revision != first.Revision || again.ContentDigest != first.ContentDigest ||
		again.StateVersion != first.StateVersion || f.writes() != before || cursor() != 1 {
		t.Errorf("same content: %+v, writes %d → %d, cursor kept %d; want unchanged revision %d, nothing written, the cursor kept",
			again, before, f.writes(), cursor(), first.Revision)
	}

	// PublishTriggers (what apply uses): only the changed trigger gets a revision
	both, err := f.pub.PublishTriggers(ctx, []admin.TriggerSpec{s, spec("p", "u", "task", "@hourly")})
	if err != nil {
		t.Fatal(err)
	}
	if !both[0].Unchanged || both[1].Unchanged || both[1].Revision != 1 || cursor() != 1 {
		t.Errorf("list: %+v; want t unchanged (cursor kept), u new at revision 1", both)
	}

	// the task: the same spec is unchanged (compared by its canonical jsonb form), another is a revision
	task := admin.TaskSpec{Project: "p", Task: "task", ExecutorSpec: []byte(`{ "image" : "example/job:1" }`)}
	before = f.writes()
	if pub, err := f.pub.PublishTask(ctx, task); err != nil || !pub.Unchanged || pub.Revision != 1 || f.writes() != before {
		t.Errorf("same task spec: %+v, %v, writes %d → %d; want unchanged revision 1, nothing written", pub, err, before, f.writes())
	}
	task.ExecutorSpec = []byte(`{"image":"example/job:2"}`)
	if pub, err := f.pub.PublishTask(ctx, task); err != nil || pub.Unchanged || pub.Revision != 2 {
		t.Errorf("new task spec: %+v, %v; want revision 2", pub, err)
	}
	// the trigger's content now differs by the task revision it would pin
	if pub, err := f.pub.PublishTrigger(ctx, s); err != nil || pub.Unchanged || pub.TaskRevision != 2 ||
		!slices.Equal(pub.Changed, []string{"task_revision"}) || cursor() != 0 {
		t.Errorf("after a task revision: %+v, %v; want a new revision pinning task revision 2, cursor reset", pub, err)
	}

	// project create: an existing project is reported, nothing written
	before = f.writes()
	if res, err := f.pub.CreateProject(ctx, "p"); err != nil || res.Created || res.State != "active" || f.writes() != before {
		t.Errorf("create existing: %+v, %v; want not created, state active, nothing written", res, err)
	}
	if res, err := f.pub.CreateProject(ctx, "q"); err != nil || !res.Created || res.Revision != 1 {
		t.Errorf("create new: %+v, %v; want created at revision 1", res, err)
	}
}

// Before a replica initialised the row, the next fire is a preview from the spec and the
// database's time; once the row holds a cursor, it is the cursor; a disabled trigger has none.
// trigger show lists the upcoming occurrences and the newest Runs.
func TestNextFirePreviewAndShow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	berlin := spec("p", "nightly", "task", "0 3 * * *")
	berlin.TimeZone = "Europe/Berlin"
	off := spec("p", "off", "task", "* * * * *")
	off.Enabled = false
	if _, err := f.pub.PublishTriggers(ctx, []admin.TriggerSpec{berlin, off}); err != nil {
		t.Fatal(err)
	}
	r := admin.NewReader(f.d.Handle(t, "ql_admin"))
	sched, err := schedule.ParseSchedule("0 3 * * *", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	ts, err := r.Triggers(ctx, admin.TriggerFilter{Project: "p"})
	if err != nil || len(ts) != 2 {
		t.Fatalf("triggers %+v, %v", ts, err)
	}
	n, o := ts[0], ts[1]
	if n.NextFireAtMs != nil || n.NextFireMs == nil || !n.NextFirePreview || *n.NextFireMs != sched.Next(n.NowMs) || *n.NextFireMs <= n.NowMs {
		t.Errorf("uninitialised nightly: %+v; want a preview = Next(now) in Berlin", n)
	} else if at := time.UnixMilli(*n.NextFireMs).In(mustZone(t, "Europe/Berlin")); at.Hour() != 3 || at.Minute() != 0 {
		t.Errorf("preview %s; want 03:00 Berlin time", at)
	}
	if o.NextFireMs != nil || o.NextFirePreview {
		t.Errorf("disabled trigger: %+v; want no next fire", o)
	}

	f.d.Exec(t, `UPDATE control_core.trigger_schedules SET next_fire_at_ms = 4102444800000 WHERE trigger_id = 'nightly'`)
	runID := uuid.New()
	f.d.Exec(t, `INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
		        trigger_revision, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
		SELECT $1, 'p', 'task', 1, kr.execution_revision_id, 'nightly', 1, 100000,
		       'ql3:cron:v1:nightly:1:100000', 'queued', 'runtime', 100250, 100250, 100250
		FROM control_core.task_revisions kr WHERE kr.project_id = 'p' AND kr.task_id = 'task' AND kr.revision = 1`, runID)
	d, err := r.ShowTrigger(ctx, admin.TriggerShow{Project: "p", Trigger: "nightly", Upcoming: 3, Runs: 5})
	if err != nil {
		t.Fatal(err)
	}
	if d.NextFirePreview || d.NextFireMs == nil || *d.NextFireMs != 4102444800000 {
		t.Errorf("initialised: next fire %v (preview %v); want the cursor", d.NextFireMs, d.NextFirePreview)
	}
	if len(d.Upcoming) != 3 || d.Upcoming[0] != sched.Next(d.NowMs) || d.Upcoming[1] != sched.Next(d.Upcoming[0]) ||
		d.Upcoming[2] != sched.Next(d.Upcoming[1]) {
		t.Errorf("upcoming %v; want the three occurrences after %d", d.Upcoming, d.NowMs)
	}
	if len(d.Runs) != 1 || d.Runs[0].RunID != runID {
		t.Errorf("runs %+v; want the one Run", d.Runs)
	}
	if _, err := r.ShowTrigger(ctx, admin.TriggerShow{Project: "p", Trigger: "nope", Upcoming: 3, Runs: 5}); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("unknown trigger: %v; want ErrNotFound", err)
	}
	if _, err := r.ShowTrigger(ctx, admin.TriggerShow{Project: "p", Trigger: "nightly", Upcoming: 0, Runs: 5}); fieldOf(err) != admin.FieldUpcoming {
		t.Errorf("0 upcoming: %v; want a FieldError of upcoming", err)
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// project list, task list, runs show and runs list by state and time report what is stored.
func TestListsAndRunShow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.pub.PublishTriggers(ctx, []admin.TriggerSpec{spec("p", "a", "task", "@daily"), spec("p", "b", "task", "@hourly")}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pub.DisableTrigger(ctx, "p", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pub.CreateProject(ctx, "empty"); err != nil {
		t.Fatal(err)
	}
	r := admin.NewReader(f.d.Handle(t, "ql_admin"))
	projects, err := r.Projects(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []admin.Project{{ProjectID: "empty", State: "active", Revision: 1}, {ProjectID: "p", State: "active", Revision: 1, Tasks: 1, Triggers: 2, EnabledTriggers: 1}}
	if len(projects) != 2 {
		t.Fatalf("projects %+v; want empty and p", projects)
	}
	for i := range projects {
		projects[i].CreatedAtMs, projects[i].UpdatedAtMs = 0, 0
		if projects[i] != want[i] {
			t.Errorf("project %+v; want %+v", projects[i], want[i])
		}
	}
	tasks, err := r.Tasks(ctx, admin.TaskFilter{Project: "p"})
	if err != nil || len(tasks) != 1 || tasks[0].TaskID != "task" || tasks[0].Revision != 1 || tasks[0].Triggers != 2 || len(tasks[0].ExecutionDigest) != 64 {
		t.Errorf("tasks %+v, %v; want task at revision 1 used by 2 triggers", tasks, err)
	}

	// two Runs admitted 1 h and 1 min before the database's now, one of them with an Attempt and Events
	old, recent := uuid.New(), uuid.New()
	f.d.Exec(t, `INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
		        trigger_revision, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
		SELECT x.id, 'p', 'task', 1, kr.execution_revision_id, 'a', 1, x.at - 40, 'ql3:cron:v1:a:1:' || (x.at - 40), x.state, 'runtime',
		       x.at, x.at, x.at
		FROM control_core.task_revisions kr,
		     (VALUES ($1::uuid, control_core.db_now_ms() - 3600000, 'succeeded'), ($2::uuid, control_core.db_now_ms() - 60000, 'queued')) x(id, at, state)
		WHERE kr.project_id = 'p' AND kr.task_id = 'task' AND kr.revision = 1`, old, recent)
	f.d.Exec(t, `INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, result, created_at_ms, updated_at_ms)
		VALUES (gen_random_uuid(), $1, 1, 'remote_worker', 'claimed', '{"secret":"never-shown"}', 1, 1)`, recent)
	f.d.Exec(t, `INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms, detail)
		VALUES (gen_random_uuid(), $1, 1, 'run.created', 1, '{"run_state":"queued"}'), (gen_random_uuid(), $1, 2, 'run.queued', 1, '{}')`, recent)

	for _, c := range []struct {
		name   string
		filter admin.RunFilter
		want   []uuid.UUID
	}{
		{"all", admin.RunFilter{Limit: 10}, []uuid.UUID{recent, old}},
		{"queued", admin.RunFilter{State: "queued", Limit: 10}, []uuid.UUID{recent}},
		{"succeeded", admin.RunFilter{State: "succeeded", Limit: 10}, []uuid.UUID{old}},
		{"failed", admin.RunFilter{State: "failed", Limit: 10}, nil},
		{"within 10m", admin.RunFilter{Within: 10 * time.Minute, Limit: 10}, []uuid.UUID{recent}},
		{"within 2h", admin.RunFilter{Within: 2 * time.Hour, Limit: 10}, []uuid.UUID{recent, old}},
		{"since the future", admin.RunFilter{SinceMs: 4102444800000, Limit: 10}, nil},
		{"since 1970", admin.RunFilter{SinceMs: 1, Limit: 10}, []uuid.UUID{recent, old}},
	} {
		runs, err := r.Runs(ctx, c.filter)
		var got []uuid.UUID
		for _, x := range runs {
			got = append(got, x.RunID)
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("runs %s: %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	for _, bad := range []struct {
		filter admin.RunFilter
		field  string
	}{
		{admin.RunFilter{State: "lost", Limit: 1}, admin.FieldState},
		{admin.RunFilter{SinceMs: 1, Within: time.Hour, Limit: 1}, admin.FieldSince},
	} {
		if _, err := r.Runs(ctx, bad.filter); fieldOf(err) != bad.field {
			t.Errorf("filter %+v: %v; want a FieldError of %s", bad.filter, err, bad.field)
		}
	}

	d, err := r.RunStory(ctx, recent, admin.StoryLimits{Offers: admin.DefaultStoryOffers, Events: admin.DefaultStoryEvents})
	if err != nil {
		t.Fatal(err)
	}
	if d.IdempotencyKey == "" || d.LagMs == nil || *d.LagMs != 40 || len(d.Attempts) != 1 || !d.Attempts[0].HasResult ||
		len(d.Events) != 2 || d.Events[0].Type != "run.created" || string(d.Events[0].Detail) != `{"run_state": "queued"}` {
		t.Errorf("run %+v; want lag 40 ms, one Attempt with a result, events created and queued", d)
	}
	if _, err := r.RunStory(ctx, uuid.New(), admin.StoryLimits{Offers: 1, Events: 1}); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("unknown run: %v; want ErrNotFound", err)
	}
}
