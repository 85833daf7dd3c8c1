package admin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/schedule"
)

// exampleFile is the repository's example, which the README shows.
func exampleFile(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../examples/schedules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func parse(t *testing.T, name, text string) *admin.Schedules {
	t.Helper()
	s, err := admin.ParseSchedules(name, []byte(text))
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	return s
}

// edit replaces old (which must occur exactly once) by new in text.
func edit(t *testing.T, text, old, new string) string {
	t.Helper()
	if n := strings.Count(text, old); n != 1 {
		t.Fatalf("edit: %q occurs %d times, want once", old, n)
	}
	return strings.Replace(text, old, new, 1)
}

// A bad file is refused as a whole, before anything is sent: every fault, in line order, with
// its line and field path, and no fault quotes an executor spec.
func TestParseSchedulesReportsEveryFault(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-token"
	bad := `schema: qlsched.schedules/v1
projects:
  - id: Billing!
    colour: blue
    tasks:
      - id: invoice
        executor_spec: {token: "` + secret + `", n: .inf}
      - id: invoice
        executor_spec: ["` + secret + `"]
      - id: report
        executor_spec: {token: "` + secret + `\0"}
    triggers:
      - id: nightly
        task: invoice
        cron: "61 * * * *"
        timezone: Mars/Olympus
        misfire: sometimes
        enabled: yes
      - id: other
        task: nope
        cron: "@every 5s"
      - id: third
        task: invoice
      - id: nightly
        task: invoice
        cron: "* * * * *"
`
	want := []struct {
		line  int
		field string
	}{
		{3, "projects[0].id"},
		{4, "projects[0].colour"},
		{7, "projects[0].tasks[invoice].executor_spec"},
		{8, "projects[0].tasks[invoice].id"},
		{9, "projects[0].tasks[invoice].executor_spec"},
		{11, "projects[0].tasks[report].executor_spec"},
		{15, "projects[0].triggers[nightly].cron"},
		{16, "projects[0].triggers[nightly].timezone"},
		{17, "projects[0].triggers[nightly].misfire"},
		{18, "projects[0].triggers[nightly].enabled"},
		{20, "projects[0].triggers[other].task"},
		{21, "projects[0].triggers[other].cron"},
		{22, "projects[0].triggers[third].cron"},
		{24, "projects[0].triggers[nightly].id"},
	}
	_, err := admin.ParseSchedules("bad.yaml", []byte(bad))
	var se *admin.SchedulesError
	if !errors.As(err, &se) {
		t.Fatalf("%v; want a *SchedulesError", err)
	}
	var got []string
	for _, fe := range se.Errors {
		got = append(got, fmt.Sprintf("%d %s", fe.Line, fe.Field))
		if msg := fe.Error(); strings.Contains(msg, secret) || !strings.HasPrefix(msg, fmt.Sprintf("bad.yaml:%d: %s: ", fe.Line, fe.Field)) {
			t.Errorf("message %q: want bad.yaml:LINE: FIELD: PROBLEM, never the spec", msg)
		}
	}
	var exp []string
	for _, w := range want {
		exp = append(exp, fmt.Sprintf("%d %s", w.line, w.field))
	}
	if strings.Join(got, "\n") != strings.Join(exp, "\n") {
		t.Errorf("faults:\n%s\nwant:\n%s\n(messages:\n%v)", strings.Join(got, "\n"), strings.Join(exp, "\n"), err)
	}

	for _, c := range []struct{ name, text, want string }{
		{"empty", "", "bad.yaml:1: file: empty"},
		{"syntax", "schema: [\n", "bad.yaml:1: syntax: "},
		{"no schema", "projects: []\n", "bad.yaml:1: schema: missing"},
		{"other schema", "schema: qlsched.schedules/v9\nprojects: [{id: p}]\n", `bad.yaml:1: schema: "qlsched.schedules/v9": want "qlsched.schedules/v1"`},
		{"two documents", "schema: qlsched.schedules/v1\nprojects: [{id: p}]\n---\nx: 1\n", "bad.yaml:3: file: a second YAML document"},
		{"a second document that does not parse", "schema: qlsched.schedules/v1\nprojects: [{id: p}]\n---\nx: [\n", "bad.yaml:4: file: a second YAML document"},
		{"not UTF-8", "schema: qlsched.schedules/v1\nprojects: [{id: p}]\n# caf\xe9\n", "bad.yaml:3: file: not valid UTF-8"},
		{"duplicate key", "schema: qlsched.schedules/v1\nschema: qlsched.schedules/v1\nprojects: [{id: p}]\n", "bad.yaml:2: schema: duplicate key"},
		{"no projects", "schema: qlsched.schedules/v1\nprojects:\n", "bad.yaml:2: projects: empty"},
		{"empty list", "schema: qlsched.schedules/v1\nprojects: []\n", "bad.yaml:2: projects: empty"},
		{"enabled not a bool", "schema: qlsched.schedules/v1\nprojects: [{id: p, tasks: [{id: k, executor_spec: {}}], triggers: [{id: t, task: k, cron: '* * * * *', enabled: 'no'}]}]\n", "bad.yaml:2: projects[p].triggers[t].enabled: want true or false"},
		{"grace not a duration", "schema: qlsched.schedules/v1\nprojects: [{id: p, tasks: [{id: k, executor_spec: {}}], triggers: [{id: t, task: k, cron: '* * * * *', misfire_grace: 5 minutes}]}]\n", `bad.yaml:2: projects[p].triggers[t].misfire_grace: "5 minutes" is not a duration`},
		{"grace 0", "schema: qlsched.schedules/v1\nprojects: [{id: p, tasks: [{id: k, executor_spec: {}}], triggers: [{id: t, task: k, cron: '* * * * *', misfire_grace: 0s}]}]\n", "bad.yaml:2: projects[p].triggers[t].misfire_grace: invalid misfire grace 0s: want 1s to 24h0m0s"},
		{"grace above 24h", "schema: qlsched.schedules/v1\nprojects: [{id: p, tasks: [{id: k, executor_spec: {}}], triggers: [{id: t, task: k, cron: '* * * * *', misfire_grace: 25h}]}]\n", "bad.yaml:2: projects[p].triggers[t].misfire_grace: invalid misfire grace 25h0m0s"},
		{"cron not a string", "schema: qlsched.schedules/v1\nprojects: [{id: p, tasks: [{id: k, executor_spec: {}}], triggers: [{id: t, task: k, cron: [1]}]}]\n", "bad.yaml:2: projects[p].triggers[t].cron: want a string, got a list"},
		{"not a list", "schema: qlsched.schedules/v1\nprojects: {id: p}\n", "bad.yaml:2: projects: want a list, got a mapping"},
	} {
		_, err := admin.ParseSchedules("bad.yaml", []byte(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
}

// The example parses; the same content written as JSON (tab-indented) parses to the same thing;
// the executor spec keeps YAML's values as JSON (numbers, lists, booleans, null).
// A secret written where YAML reads a tag or an alias (an unquoted password starting with ! or *)
// is refused without any piece of it in the message.
func TestParseSchedulesNeverShowsASecretReadAsYAMLSyntax(t *testing.T) {
	t.Parallel()
	const secret = "Sup3rS3cret"
	head := "schema: qlsched.schedules/v1\nprojects:\n  - id: sec\n    tasks:\n      - id: t1\n        executor_spec:\n"
	for _, line := range []string{
		"          password: !" + secret,
		"          password: !!str!" + secret,
		"          password: !<tag:yaml.org,2002:" + secret + "> x",
		"          password: *" + secret,
	} {
		_, err := admin.ParseSchedules("s.yaml", []byte(head+line+"\n"))
		if err == nil || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "S3cret") {
			t.Errorf("%q: %v; want a refusal that shows no piece of the secret", line, err)
		}
	}
	// the directive form names the tag's prefix
	_, err := admin.ParseSchedules("s.yaml", []byte("%TAG !x! tag:"+secret+",2000:\n---\n"+head+"          password: !x!abc\n"))
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("%%TAG directive: %v; want a refusal that shows no piece of the secret", err)
	}
}

func TestParseSchedulesAcceptsTheExampleAndJSON(t *testing.T) {
	t.Parallel()
	s := parse(t, "schedules.yaml", exampleFile(t))
	if len(s.Projects) != 2 || len(s.Projects[0].Tasks) != 2 || len(s.Projects[0].Triggers) != 3 {
		t.Fatalf("example: %+v; want 2 projects, billing with 2 tasks and 3 triggers", s.Projects)
	}
	js := "{\n\t\"schema\": \"qlsched.schedules/v1\",\n\t\"projects\": [{\"id\": \"p\", \"tasks\": [{\"id\": \"k\",\n" +
		"\t\t\"executor_spec\": {\"image\": \"x:1\", \"n\": 1.5e3, \"big\": 123456789012345678901234567890, \"hex\": 0x1F, \"on\": true, \"none\": null, \"l\": [1, \"a\"]}}],\n" +
		"\t\"triggers\": [{\"id\": \"t\", \"task\": \"k\", \"cron\": \"0 3 * * *\", \"enabled\": false}]}]\n}\n"
	j := parse(t, "schedules.json", js)
	task, trig := j.Projects[0].Tasks[0].Spec, j.Projects[0].Triggers[0].Spec
	if got, want := string(task.ExecutorSpec), `{"image":"x:1","n":1.5e3,"big":123456789012345678901234567890,"hex":31,"on":true,"none":null,"l":[1,"a"]}`; got != want {
		t.Errorf("executor spec %s, want %s", got, want)
	}
	if trig.TimeZone != "UTC" || trig.Misfire != "skip" || trig.Enabled || trig.Task != "k" || trig.Cron != "0 3 * * *" {
		t.Errorf("trigger %+v: want the defaults UTC and skip, enabled false as given", trig)
	}
	// YAML's spellings of a boolean become JSON's one spelling (they were copied as written, and
	// the spec was then refused as invalid JSON); yes without a tag is a string in YAML 1.2
	y := parse(t, "schedules.yaml", "schema: qlsched.schedules/v1\nprojects:\n  - id: p\n    tasks:\n      - id: k\n"+
		"        executor_spec: {a: True, b: FALSE, c: !!bool yes, d: !!bool off, e: yes}\n")
	if got, want := string(y.Projects[0].Tasks[0].Spec.ExecutorSpec), `{"a":true,"b":false,"c":true,"d":false,"e":"yes"}`; got != want {
		t.Errorf("executor spec %s, want %s", got, want)
	}
}

// applyFixture is a migrated database with the publisher and reader as ql_admin.
type applyFixture struct {
	t   *testing.T
	d   *testpg.DB
	pub *admin.Publisher
	rd  *admin.Reader
}

func newApplyFixture(t *testing.T) *applyFixture {
	t.Helper()
	d := testpg.New(t)
	pool := d.Handle(t, "ql_admin")
	return &applyFixture{t: t, d: d, pub: admin.NewPublisher(pool), rd: admin.NewReader(d.Handle(t, "ql_runtime"))}
}

func (f *applyFixture) count(sql string) int {
	f.t.Helper()
	var n int
	if err := f.d.Pool(f.t, "").QueryRow(context.Background(), sql).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// writes is every row an admin action leaves: revisions and audit rows.
func (f *applyFixture) writes() int {
	return f.count(`SELECT (SELECT count(*) FROM control_core.admin_audit_log) + (SELECT count(*) FROM control_core.trigger_revisions)
		+ (SELECT count(*) FROM control_core.task_revisions) + (SELECT count(*) FROM control_core.projects)`)
}

// actions renders a plan as "kind project/id action [fields]" lines.
func actions(p admin.Plan) string {
	var b strings.Builder
	for _, it := range p.Items {
		fmt.Fprintf(&b, "%s %s/%s %s", it.Kind, it.Project, it.ID, it.Action)
		if it.Action == admin.ActionUpdate || it.Action == admin.ActionDisable {
			for _, c := range it.Changes {
				fmt.Fprintf(&b, " %s", c.Field)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// The example round-trips on a real database: apply creates everything, a check then finds the
// database equal and an apply writes nothing; an edit shows as exactly the changed fields (a
// changed spec also republishes its task's triggers, which pin the task's head), and applying it
// writes revisions only for those, so an unchanged trigger keeps its cursor; --prune disables
// what the file no longer lists.
func TestApplyRoundTrip(t *testing.T) {
	t.Parallel()
	f := newApplyFixture(t)
	ctx := context.Background()
	text := exampleFile(t)

	plan, err := f.pub.Apply(ctx, parse(t, "schedules.yaml", text), admin.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Schema != admin.PlanSchema || plan.InSync || !plan.Applied || plan.Summary.Create != 9 || plan.Summary.Unchanged != 0 {
		t.Fatalf("first apply: %+v\n%s; want 9 items created", plan.Summary, actions(plan))
	}
	for _, it := range plan.Items {
		if it.Revision != 1 {
			t.Errorf("%s %s/%s: revision %d written, want 1", it.Kind, it.Project, it.ID, it.Revision)
		}
	}
	if n := f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE action IN ('project.create', 'task.publish', 'trigger.publish')`); n != 9 {
		t.Errorf("%d audit rows of creates and publishes, want 9 (one per item)", n)
	}

	check := func(s *admin.Schedules, opts admin.ApplyOptions) admin.Plan {
		t.Helper()
		p, err := f.rd.Plan(ctx, s, opts)
		if err != nil {
			t.Fatal(err)
		}
		if p.Applied {
			t.Error("a check says applied")
		}
		return p
	}
	if p := check(parse(t, "schedules.yaml", text), admin.ApplyOptions{}); !p.InSync || p.Summary.Unchanged != 9 {
		t.Fatalf("check after apply: %+v\n%s; want in sync, 9 unchanged", p.Summary, actions(p))
	}
	before := f.writes()
	if p, err := f.pub.Apply(ctx, parse(t, "schedules.yaml", text), admin.ApplyOptions{Prune: true}); err != nil || p.Applied || !p.InSync {
		t.Fatalf("apply of an applied file: %+v, %v; want nothing applied", p.Summary, err)
	}
	if after := f.writes(); after != before {
		t.Errorf("an apply with nothing to change wrote %d rows (revisions, audit, lock audit)", after-before)
	}

	// a replica's cursor on a trigger the edit leaves alone
	f.d.Exec(t, `UPDATE control_core.trigger_schedules SET next_fire_at_ms = 4102444800000, state_version = state_version + 1
		WHERE project_id = 'ops' AND trigger_id = 'every-minute'`)
	edited := edit(t, text, `cron: "30 2 * * *"`, `cron: "45 2 * * *"`)
	edited = edit(t, edited, `misfire_grace: 15m`, `misfire_grace: 2m30s`)
	edited = edit(t, edited, `image: billing/invoice:1.4`, `image: billing/invoice:1.5`)
	edited = edit(t, edited, "      - id: weekly-dunning-report\n        task: dunning\n        cron: \"@weekly\"\n        enabled: false              # published, never claimed\n", "")
	edited = edit(t, edited, "        cron: \"* * * * *\"\n", "        cron: \"* * * * *\"\n      - id: hourly\n        task: heartbeat\n        cron: \"@hourly\"\n")
	s := parse(t, "schedules.yaml", edited)
	want := `project billing/billing unchanged
task billing/invoice update executor_spec
task billing/dunning unchanged
trigger billing/monthly-invoices update task_revision misfire_grace
trigger billing/nightly-dunning update cron
trigger billing/weekly-dunning-report unlisted
project ops/ops unchanged
task ops/heartbeat unchanged
trigger ops/every-minute unchanged
trigger ops/hourly create
`
	p := check(s, admin.ApplyOptions{})
	if got := actions(p); got != want || p.InSync {
		t.Fatalf("check of the edit:\n%s\nwant:\n%s", got, want)
	}
	// weekly-dunning-report is disabled already: pruning leaves it unchanged
	if p := check(s, admin.ApplyOptions{Prune: true}); p.Summary.Disable != 0 || p.Summary.Unlisted != 0 {
		t.Errorf("prune of a disabled trigger: %+v; want it unchanged", p.Summary)
	}
	applied, err := f.pub.Apply(ctx, s, admin.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(applied); got != want || !applied.Applied {
		t.Fatalf("apply of the edit:\n%s\nwant:\n%s", got, want)
	}
	for _, it := range applied.Items {
		if it.Kind == admin.KindTrigger && it.ID == "monthly-invoices" {
			if it.Revision != 2 || it.Changes[0].From != "1" || it.Changes[0].To != "2" ||
				it.Changes[1].From != "15m0s" || it.Changes[1].To != "2m30s" {
				t.Errorf("monthly-invoices: %+v; want revision 2 pinning task revision 2, grace 15m0s → 2m30s", it)
			}
		}
	}
	// the file's grace as stored, and the default where the file gives none
	for trigger, wantMs := range map[string]int64{"monthly-invoices": 150_000, "nightly-dunning": 60_000} {
		var graceMs int64
		if err := f.d.Pool(t, "").QueryRow(ctx, `SELECT tr.misfire_grace_ms FROM control_core.triggers t JOIN control_core.trigger_revisions tr
			ON tr.project_id = t.project_id AND tr.trigger_id = t.trigger_id AND tr.revision = t.head_revision
			WHERE t.trigger_id = $1`, trigger).Scan(&graceMs); err != nil || graceMs != wantMs {
			t.Errorf("%s: misfire_grace_ms %d (%v); want %d", trigger, graceMs, err, wantMs)
		}
	}
	var next, state int64
	if err := f.d.Pool(t, "").QueryRow(ctx, `SELECT next_fire_at_ms, state_version FROM control_core.trigger_schedules
		WHERE project_id = 'ops' AND trigger_id = 'every-minute'`).Scan(&next, &state); err != nil || next != 4102444800000 || state != 2 {
		t.Errorf("unchanged trigger's schedule row: cursor %d, state version %d (%v); want the cursor kept, 4102444800000, version 2", next, state, err)
	}
	if p := check(s, admin.ApplyOptions{}); !p.InSync {
		t.Errorf("check after applying the edit:\n%s", actions(p))
	}

	// pruning an enabled trigger the file no longer lists
	pruned := parse(t, "schedules.yaml", edit(t, edited, "      - id: hourly\n        task: heartbeat\n        cron: \"@hourly\"\n", ""))
	if p := check(pruned, admin.ApplyOptions{}); !p.InSync || p.Summary.Unlisted != 2 {
		t.Errorf("without --prune an unlisted trigger is no drift: %+v", p.Summary)
	}
	p, err = f.pub.Apply(ctx, pruned, admin.ApplyOptions{Prune: true})
	if err != nil || p.Summary.Disable != 1 {
		t.Fatalf("prune: %+v, %v; want hourly disabled", p.Summary, err)
	}
	var enabled bool
	var rev int64
	if err := f.d.Pool(t, "").QueryRow(ctx, `SELECT tr.enabled, tr.revision FROM control_core.triggers t JOIN control_core.trigger_revisions tr
		ON tr.project_id = t.project_id AND tr.trigger_id = t.trigger_id AND tr.revision = t.head_revision
		WHERE t.trigger_id = 'hourly'`).Scan(&enabled, &rev); err != nil || enabled || rev != 2 {
		t.Errorf("hourly after prune: enabled %v, revision %d (%v); want revision 2, disabled", enabled, rev, err)
	}
	if p := check(pruned, admin.ApplyOptions{Prune: true}); !p.InSync {
		t.Errorf("check --prune after prune:\n%s", actions(p))
	}
}

// Apply is all or nothing: when one project of the file cannot take its changes (archived), the
// other project's changes, written earlier in the same transaction, are rolled back too.
func TestApplyIsAllOrNothing(t *testing.T) {
	t.Parallel()
	f := newApplyFixture(t)
	ctx := context.Background()
	text := exampleFile(t)
	if _, err := f.pub.Apply(ctx, parse(t, "schedules.yaml", text), admin.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	f.d.Exec(t, `UPDATE control_core.projects SET state = 'archived' WHERE project_id = 'ops'`)
	before := f.writes()
	edited := edit(t, text, `cron: "30 2 * * *"`, `cron: "45 2 * * *"`)
	edited = edit(t, edited, `cron: "* * * * *"`, `cron: "*/2 * * * *"`)
	_, err := f.pub.Apply(ctx, parse(t, "schedules.yaml", edited), admin.ApplyOptions{})
	if !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("apply into an archived project: %v; want ErrNotFound", err)
	}
	if after := f.writes(); after != before {
		t.Errorf("a failed apply left %d rows", after-before)
	}
}

// The README's "Schedules as code" shows examples/schedules.yaml as it is.
func TestReadmeShowsTheExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	section, ok := strings.CutPrefix(string(readme)[strings.Index(string(readme), "## Schedules as code"):], "## Schedules as code")
	start := strings.Index(section, "```yaml\n")
	if !ok || start < 0 {
		t.Fatal("README.md has no yaml block under ## Schedules as code")
	}
	block := section[start+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	if block != exampleFile(t) {
		t.Error("README.md's Schedules as code block differs from examples/schedules.yaml")
	}
}

// Two applies of the same file at once: the second waits for the first's locks, reads the heads
// again under them, and writes no second revision of anything.
func TestConcurrentAppliesPublishOnce(t *testing.T) {
	t.Parallel()
	f := newApplyFixture(t)
	ctx := context.Background()
	s := parse(t, "schedules.yaml", exampleFile(t))
	errs := make(chan error, 2)
	plans := make(chan admin.Plan, 2)
	for range 2 {
		go func() {
			p, err := f.pub.Apply(ctx, s, admin.ApplyOptions{})
			plans <- p
			errs <- err
		}()
	}
	applied := 0
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if (<-plans).Applied {
			applied++
		}
	}
	revisions := f.count(`SELECT (SELECT count(*) FROM control_core.trigger_revisions) + (SELECT count(*) FROM control_core.task_revisions)`)
	if revisions != 7 || applied != 1 {
		t.Errorf("%d task and trigger revisions after two concurrent applies (%d applied); want 7, each written once, by one apply", revisions, applied)
	}
	if p, err := f.rd.Plan(ctx, s, admin.ApplyOptions{}); err != nil || !p.InSync {
		t.Errorf("check after two concurrent applies: %v %s", err, actions(p))
	}
}

// Apply and the single publishes share their rules: a spec that differs from the file's only in
// its JSON form, or a trigger published again with the file's content, is unchanged for both; a
// change made by a publish is planned as the same fields the publish reported; a pruned trigger
// is disabled with its pin kept, so DisableTrigger then finds nothing to do. Apply's writes carry
// the publisher's audit rows.
func TestApplyAndPublishShareTheirRules(t *testing.T) {
	t.Parallel()
	f := newApplyFixture(t)
	ctx := context.Background()
	file := `schema: qlsched.schedules/v1
projects:
  - id: p
    tasks:
      - id: k
        executor_spec: {image: "x:1", args: [1, 2]}
    triggers:
      - id: a
        task: k
        cron: "0 3 * * *"
        timezone: Europe/Berlin
        misfire: fire_once
      - id: b
        task: k
        cron: "0 4 * * *"
`
	if _, err := f.pub.Apply(ctx, parse(t, "s.yaml", file), admin.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	task, err := f.pub.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "k", ExecutorSpec: []byte(`{ "args": [1,2], "image": "x:1" }`)})
	if err != nil || !task.Unchanged || task.Revision != 1 {
		t.Fatalf("task publish of the file's spec in another JSON form: %+v, %v; want unchanged at 1", task, err)
	}
	trig, err := f.pub.PublishTrigger(ctx, admin.TriggerSpec{Project: "p", Trigger: "a", Task: "k", Cron: "0 3 * * *",
		TimeZone: "Europe/Berlin", Misfire: "fire_once", Enabled: true})
	if err != nil || !trig.Unchanged {
		t.Fatalf("trigger publish of the file's content: %+v, %v; want unchanged", trig, err)
	}
	reordered := edit(t, file, `{image: "x:1", args: [1, 2]}`, `{args: [1, 2], image: "x:1"}`)
	if p, err := f.rd.Plan(ctx, parse(t, "s.yaml", reordered), admin.ApplyOptions{}); err != nil || !p.InSync {
		t.Fatalf("plan of the spec in another key order: %v\n%s; want in sync", err, actions(p))
	}

	// a publish outside the file: the plan undoes exactly the fields it changed
	pub, err := f.pub.ChangeTrigger(ctx, admin.TriggerChange{Project: "p", Trigger: "a", Cron: ptr("0 5 * * *"), Misfire: ptr(schedule.MisfireSkip)})
	if err != nil || pub.Unchanged {
		t.Fatalf("change: %+v, %v", pub, err)
	}
	p, err := f.rd.Plan(ctx, parse(t, "s.yaml", file), admin.ApplyOptions{Prune: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := actions(p), "project p/p unchanged\ntask p/k unchanged\ntrigger p/a update cron misfire\ntrigger p/b unchanged\n"; got != want {
		t.Errorf("plan after a publish of cron_spec, misfire_policy (%v):\n%s\nwant\n%s", pub.Changed, got, want)
	}

	// prune: b disabled by apply keeps its pin; DisableTrigger finds it done
	only := file[:strings.Index(file, "      - id: b")]
	p, err = f.pub.Apply(ctx, parse(t, "s.yaml", only), admin.ApplyOptions{Prune: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := actions(p), "project p/p unchanged\ntask p/k unchanged\ntrigger p/a update cron misfire\ntrigger p/b disable enabled\n"; got != want {
		t.Errorf("apply --prune:\n%s\nwant\n%s", got, want)
	}
	if d, err := f.pub.DisableTrigger(ctx, "p", "b"); err != nil || !d.Unchanged || d.TaskRevision != 1 || d.Cron != "0 4 * * *" {
		t.Errorf("disable after prune: %+v, %v; want unchanged, the head's content", d, err)
	}
	for _, c := range []struct{ sql, what string }{
		{`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'project.create' AND detail->>'by' = 'apply'`, "project.create by apply"},
		{`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'trigger.publish' AND detail->>'change' = 'prune' AND subject = 'b'`, "trigger.publish change prune of b"},
		{`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'trigger.publish' AND detail->>'change' = 'apply' AND subject = 'a'
		    AND detail->'changed' = '["cron_spec", "misfire_policy"]'::jsonb`, "trigger.publish change apply of a, changed cron_spec and misfire_policy"},
	} {
		if n := f.count(c.sql); n != 1 {
			t.Errorf("%d audit rows %s; want 1", n, c.what)
		}
	}
}
