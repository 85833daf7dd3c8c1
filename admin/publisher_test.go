package admin_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/testpg"
	"github.com/qlcontrol/controlcore/schedule"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// fixture is one test database with a project p and a task "task", the publisher connected as
// ql_admin and a superuser pool for asserting.
type fixture struct {
	t   *testing.T
	d   *testpg.DB
	pub *admin.Publisher
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	d := testpg.New(t)
	f := &fixture{t: t, d: d, pub: admin.NewPublisher(d.Pool(t, "ql_admin"))}
	ctx := context.Background()
	if _, err := f.pub.CreateProject(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pub.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "task", ExecutorSpec: []byte(`{"image":"example/job:1"}`)}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) count(sql string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.d.Pool(f.t, "").QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func spec(project, trigger, task, cron string) admin.TriggerSpec {
	return admin.TriggerSpec{Project: project, Trigger: trigger, Task: task, Cron: cron, TimeZone: "UTC",
		Misfire: schedule.MisfireSkip, Enabled: true}
}

// PublishTriggers is all or none: a bad spec or a second project anywhere in the list is refused
// before anything is sent, a failure mid-way (an unknown task) rolls every trigger back, and a
// good list publishes each trigger as PublishTrigger would, with its schedule row and audit entry.
func TestPublishTriggersAllOrNone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	published := func() int {
		return f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'trigger.publish'`)
	}
	audit := published()
	for _, tc := range []struct {
		name  string
		specs []admin.TriggerSpec
		want  error // nil: any error
	}{
		{"bad cron last", []admin.TriggerSpec{spec("p", "a", "task", "* * * * *"), spec("p", "b", "task", "61 * * * *")}, nil},
		{"two projects", []admin.TriggerSpec{spec("p", "a", "task", "* * * * *"), spec("q", "b", "task", "* * * * *")}, nil},
		{"unknown task last", []admin.TriggerSpec{spec("p", "a", "task", "* * * * *"), spec("p", "b", "nope", "* * * * *")}, admin.ErrNotFound},
	} {
		if _, err := f.pub.PublishTriggers(ctx, tc.specs); err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: %v, want an error (%v)", tc.name, err, tc.want)
		}
	}
	if n := f.count(`SELECT count(*) FROM control_core.trigger_revisions`); n != 0 || published() != audit {
		t.Fatalf("after refused lists: %d trigger revisions, audit %d → %d; want nothing written", n, audit, published())
	}

	out, err := f.pub.PublishTriggers(ctx, []admin.TriggerSpec{spec("p", "a", "task", "* * * * *"), spec("p", "b", "task", "*/5 * * * *")})
	if err != nil {
		t.Fatal(err)
	}
	rows := f.count(`SELECT count(*) FROM control_core.trigger_schedules s JOIN control_core.trigger_revisions r
		USING (project_id, trigger_id) WHERE s.trigger_revision = 1 AND r.revision = 1 AND s.next_fire_at_ms IS NULL`)
	if len(out) != 2 || out[0].Revision != 1 || out[1].Revision != 1 || out[0].ContentDigest == out[1].ContentDigest ||
		rows != 2 || published() != audit+2 {
		t.Errorf("published %+v, %d schedule rows at revision 1, audit %d → %d; want 2 triggers, 2 rows, 2 audit entries",
			out, rows, audit, published())
	}
}

// Refused input is a *FieldError naming the field at fault (never a command-line flag), and its
// message never quotes an executor spec. Nothing is sent: the publisher has no pool.
func TestRefusalsNameTheField(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-token"
	pub := admin.NewPublisher(nil) // a refusal must come before any use of the pool
	ctx := context.Background()
	trigger := func(mutate func(*admin.TriggerSpec)) func() error {
		return func() error {
			s := spec("p", "t", "k", "0 3 * * *")
			mutate(&s)
			_, err := pub.PublishTrigger(ctx, s)
			return err
		}
	}
	task := func(project, task, spec string) func() error {
		return func() error {
			_, err := pub.PublishTask(ctx, admin.TaskSpec{Project: project, Task: task, ExecutorSpec: []byte(spec)})
			return err
		}
	}
	for _, c := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"project id", func() error { _, err := pub.CreateProject(ctx, "P!"); return err }, admin.FieldProject},
		{"task id", task("p", "K K", `{}`), admin.FieldTask},
		{"spec not an object", task("p", "k", `["`+secret+`"]`), admin.FieldExecutorSpec},
		{"spec with \\u0000", task("p", "k", `{"a":"\u0000","token":"`+secret+`"}`), admin.FieldExecutorSpec},
		{"trigger id", trigger(func(s *admin.TriggerSpec) { s.Trigger = "" }), admin.FieldTrigger},
		{"cron grammar", trigger(func(s *admin.TriggerSpec) { s.Cron = "61 * * * *" }), admin.FieldCron},
		{"cron @every", trigger(func(s *admin.TriggerSpec) { s.Cron = "@every 5s" }), admin.FieldCron},
		{"cron form", trigger(func(s *admin.TriggerSpec) { s.Cron = " 0 3 * * *" }), admin.FieldCron},
		{"unknown zone", trigger(func(s *admin.TriggerSpec) { s.TimeZone = "Mars/Olympus" }), admin.FieldTimeZone},
		{"zone form", trigger(func(s *admin.TriggerSpec) { s.TimeZone = "Europe/Berlin " }), admin.FieldTimeZone},
		{"misfire", trigger(func(s *admin.TriggerSpec) { s.Misfire = "sometimes" }), admin.FieldMisfire},
	} {
		err := c.call()
		var fe *admin.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v; want a *FieldError of field %q", c.name, err, c.field)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "--") || strings.Contains(msg, secret) {
			t.Errorf("%s: message %q names a flag or quotes the spec", c.name, msg)
		}
	}
}

// fieldOf is the field a *FieldError names, "" for any other error.
func fieldOf(err error) string {
	var fe *admin.FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}

// A trigger named more than once in one PublishTriggers call is published in list order, each
// time compared with the head the time before left in the same transaction: the same content
// again is Unchanged, other content the next revision (its schedule row reset again).
func TestPublishTriggersNamingATriggerTwice(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.pub.PublishTrigger(ctx, spec("p", "old", "task", "@hourly")); err != nil {
		t.Fatal(err)
	}
	all := []string{"task", "task_revision", "cron_spec", "timezone", "misfire_policy", "misfire_grace_ms", "enabled"}
	type result struct {
		revision, stateVersion int64
		unchanged              bool
		changed                []string
	}
	for _, tc := range []struct {
		name, trigger string
		crons         []string
		want          []result
	}{
		{"new, then the same", "a", []string{"@hourly", "@hourly"},
			[]result{{1, 1, false, all}, {1, 1, true, []string{}}}},
		{"new, changed, changed back", "b", []string{"@hourly", "@daily", "@hourly"},
			[]result{{1, 1, false, all}, {2, 2, false, []string{"cron_spec"}}, {3, 3, false, []string{"cron_spec"}}}},
		{"existing unchanged, then changed", "old", []string{"@hourly", "@daily"},
			[]result{{1, 1, true, []string{}}, {2, 2, false, []string{"cron_spec"}}}},
	} {
		var specs []admin.TriggerSpec
		for _, cron := range tc.crons {
			specs = append(specs, spec("p", tc.trigger, "task", cron))
		}
		out, err := f.pub.PublishTriggers(ctx, specs)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		for i, w := range tc.want {
			got := result{out[i].Revision, out[i].StateVersion, out[i].Unchanged, out[i].Changed}
			if got.revision != w.revision || got.stateVersion != w.stateVersion || got.unchanged != w.unchanged ||
				!slices.Equal(got.changed, w.changed) || out[i].Cron != tc.crons[i] {
				t.Errorf("%s, #%d (%s): %+v; want %+v", tc.name, i, tc.crons[i], got, w)
			}
		}
		last := tc.want[len(tc.want)-1]
		stored := f.count(`SELECT count(*) FROM control_core.triggers t JOIN control_core.trigger_schedules s USING (project_id, trigger_id)
			JOIN control_core.trigger_revisions r ON r.project_id = t.project_id AND r.trigger_id = t.trigger_id AND r.revision = t.head_revision
			WHERE t.trigger_id = $1 AND t.head_revision = $2 AND s.trigger_revision = $2 AND s.state_version = $3 AND r.cron_spec = $4`,
			tc.trigger, last.revision, last.stateVersion, tc.crons[len(tc.crons)-1])
		if stored != 1 {
			t.Errorf("%s: no head at revision %d (%s) with its schedule row at state version %d", tc.name, last.revision,
				tc.crons[len(tc.crons)-1], last.stateVersion)
		}
	}
}
