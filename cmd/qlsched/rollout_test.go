package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// Issue 34, as an operator types it: a task published with a new spec leaves its triggers on the
// old revision, and the publish says which and the command that moves them (text and JSON);
// `task rollout --check` shows the move and writes nothing; `task rollout` moves them, says how
// many; a second rollout moves none; a rollout as the runtime role is refused by its grants.
func TestTaskPublishNamesStaleTriggersAndRolloutMovesThem(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	db := []string{"--database-url", d.URL("ql_admin")}
	cmd := func(args ...string) []string { return append(args, db...) }
	publish(t, db,
		[]string{"project", "create", "--project", "billing"},
		[]string{"task", "publish", "--project", "billing", "--task", "invoice", "--executor-spec", `{"image":"billing/invoice:1.4"}`},
		[]string{"trigger", "publish", "--project", "billing", "--trigger", "nightly", "--task", "invoice", "--cron", "0 3 * * *"},
		[]string{"trigger", "publish", "--project", "billing", "--trigger", "hourly", "--task", "invoice", "--cron", "0 * * * *"})
	pinned := func() string {
		var out string
		if err := d.Pool(t, "").QueryRow(t.Context(), `SELECT string_agg(t.trigger_id || '@' || tr.task_revision, ' ' ORDER BY t.trigger_id)
			FROM control_core.triggers t JOIN control_core.trigger_revisions tr
			  ON (tr.project_id, tr.trigger_id, tr.revision) = (t.project_id, t.trigger_id, t.head_revision)`).Scan(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	const rollout = "qlsched task rollout --project billing --task invoice"

	r := run(t, cmd("task", "publish", "--project", "billing", "--task", "invoice", "--executor-spec", `{"image":"billing/invoice:1.5"}`)...)
	if r.code != 0 || !strings.Contains(r.stdout, "2 trigger(s) still run older revisions of this task: hourly (task revision 1), nightly (task revision 1)") ||
		!strings.Contains(r.stdout, rollout) {
		t.Fatalf("task publish of a new spec: exit %d\n%s%s\nwant it to name hourly and nightly and %q", r.code, r.stdout, r.stderr, rollout)
	}
	doc := jsonDoc(t, "qlsched.task-publish/v1", cmd("task", "publish", "--project", "billing", "--task", "invoice", "--executor-spec", `{"image":"billing/invoice:1.5"}`)...)
	if stale, _ := doc["stale_triggers"].([]any); doc["unchanged"] != true || len(stale) != 2 || doc["rollout_command"] != rollout {
		t.Fatalf("task publish --format json: %v; want unchanged, 2 stale triggers and the rollout command", doc)
	}
	if got := pinned(); got != "hourly@1 nightly@1" {
		t.Fatalf("after the task publish: %s; want both still on 1", got)
	}

	r = run(t, cmd("task", "rollout", "--project", "billing", "--task", "invoice", "--check")...)
	if r.code != 0 || !strings.Contains(r.stdout, "2 trigger(s) would move, 0 already at the head") || !strings.Contains(r.stdout, "nightly: task revision 1 → 2") {
		t.Fatalf("rollout --check: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := pinned(); got != "hourly@1 nightly@1" {
		t.Fatalf("after rollout --check: %s; want nothing moved", got)
	}
	// the runtime role holds no grant to publish: refused, nothing moved
	if r := run(t, "task", "rollout", "--project", "billing", "--task", "invoice", "--database-url", d.URL("ql_runtime")); r.code == 0 {
		t.Errorf("rollout as ql_runtime: exit 0\n%s; want refused", r.stdout)
	}
	r = run(t, cmd("task", "rollout", "--project", "billing", "--task", "invoice")...)
	if r.code != 0 || !strings.Contains(r.stdout, "head revision 2: 2 trigger(s) moved, 0 already at the head") ||
		!strings.Contains(r.stdout, "nightly: task revision 1 → 2, trigger revision 2") {
		t.Fatalf("rollout: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := pinned(); got != "hourly@2 nightly@2" {
		t.Fatalf("after rollout: %s; want both on 2", got)
	}
	doc = jsonDoc(t, "qlsched.task-rollout/v1", cmd("task", "rollout", "--project", "billing", "--task", "invoice")...)
	if fmt.Sprint(doc["moved"], doc["at_head"], doc["task_revision"]) != "0 2 2" {
		t.Errorf("second rollout: %v; want 0 moved, 2 at the head of revision 2", doc)
	}
	r = run(t, cmd("task", "publish", "--project", "billing", "--task", "invoice", "--executor-spec", `{"image":"billing/invoice:1.5"}`)...)
	if r.code != 0 || strings.Contains(r.stdout, "older revisions") {
		t.Errorf("task publish after the rollout: exit %d\n%s; want no stale triggers named", r.code, r.stdout)
	}
}

// The model is written where an operator looks (docs/scheduling.md, the README's command table,
// task publish --help): a trigger pins a task revision, a task publish moves no trigger, and the
// command that does is the one task publish prints, a command of the tree.
func TestDocsSayATriggerPinsATaskRevision(t *testing.T) {
	t.Parallel()
	sched, err := os.ReadFile("../../docs/scheduling.md")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(sched), "\n### A trigger pins a task revision\n")
	if !ok {
		t.Fatal("docs/scheduling.md has no section \"A trigger pins a task revision\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, want := range []string{"publishing a task does not move its triggers", rolloutCommand("billing", "invoice"), "--check", "apply"} {
		if !strings.Contains(section, want) {
			t.Errorf("docs/scheduling.md, A trigger pins a task revision: does not say %q", want)
		}
	}
	if !strings.Contains(string(readme), "| `qlsched task rollout --project ID --task ID [--check]` |") ||
		!strings.Contains(string(readme), "a publish moves no trigger") {
		t.Error("README.md's command table does not list task rollout, or task publish does not say it moves no trigger")
	}
	task := (&app{}).taskCmd()
	rollout, _, err := task.Find([]string{"rollout"})
	if err != nil || rollout.Name() != "rollout" {
		t.Fatalf("task rollout is not a command: %v", err)
	}
	if publish, _, _ := task.Find([]string{"publish"}); !strings.Contains(publish.Long, "publishing a task does not move its triggers") {
		t.Error("task publish --help does not say that publishing a task does not move its triggers")
	}
}

// apply's plan says when a trigger it updates is not in the file: an unlisted trigger that moves
// with its task is named as such, not shown as an update the file asked for.
func TestApplyPlanNamesAnUnlistedTriggerThatMovesWithItsTask(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	u := d.URL("ql_admin")
	file := filepath.Join(t.TempDir(), "s.yaml")
	two := `schema: qlsched.schedules/v1
projects:
  - id: ops
    tasks:
      - id: sweep
        executor_spec: {image: "ops/sweep:1"}
    triggers:
      - id: hourly
        task: sweep
        cron: "0 * * * *"
      - id: daily
        task: sweep
        cron: "0 3 * * *"
`
	writeFile(t, file, two)
	if r := run(t, "apply", "-f", file, "--database-url", u); r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	one := strings.Replace(two, "      - id: daily\n        task: sweep\n        cron: \"0 3 * * *\"\n", "", 1)
	writeFile(t, file, strings.Replace(one, "sweep:1", "sweep:2", 1))
	r := run(t, "apply", "-f", file, "--check", "--database-url", u)
	var daily, hourly string
	for _, l := range strings.Split(r.stdout, "\n") {
		switch f := strings.Fields(l); {
		case len(f) > 2 && f[2] == "daily":
			daily = l
		case len(f) > 2 && f[2] == "hourly":
			hourly = l
		}
	}
	if r.code != 1 || !strings.Contains(daily, "not in the file: moves with its task: task_revision 1 → 2") {
		t.Errorf("check: exit %d, daily %q; want it named as not in the file, moving with its task\n%s", r.code, daily, r.stdout)
	}
	if strings.Contains(hourly, "not in the file") || !strings.Contains(hourly, "task_revision 1 → 2") {
		t.Errorf("hourly %q: a listed trigger is no unlisted one", hourly)
	}
}
