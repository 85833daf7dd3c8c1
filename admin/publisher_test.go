package admin_test

import (
	"context"
	"errors"
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
