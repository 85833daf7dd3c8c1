package main

import (
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// A trigger's first publish says it created the trigger; a later one names the new revision and
// what changed; disable and enable, of an existing trigger, never say created. The JSON carries
// the same as created.
func TestTriggerPublishSaysCreated(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	db := []string{"--database-url", d.URL("ql_admin")}
	cmd := func(args ...string) []string { return append(args, db...) }
	publish(t, db,
		[]string{"project", "create", "--project", "p"},
		[]string{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", `{"image":"x"}`})

	r := run(t, cmd("trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "0 3 * * *")...)
	if first, _, _ := strings.Cut(r.stdout, "\n"); r.code != 0 || first != "trigger p/t created (revision 1)" {
		t.Errorf("new trigger: exit %d, first line %q; want \"trigger p/t created (revision 1)\"\n%s", r.code, first, r.stderr)
	}
	r = run(t, cmd("trigger", "publish", "--project", "p", "--trigger", "t", "--cron", "0 4 * * *")...)
	if first, _, _ := strings.Cut(r.stdout, "\n"); r.code != 0 || first != "trigger p/t revision 2 published (changed: cron_spec)" {
		t.Errorf("new revision: exit %d, first line %q; want revision 2 published (changed: cron_spec)\n%s", r.code, first, r.stderr)
	}

	if doc := jsonDoc(t, "qlsched.trigger-publish/v1", cmd("trigger", "publish", "--project", "p", "--trigger", "u", "--task", "k",
		"--cron", "0 3 * * *")...); doc["created"] != true || doc["revision"] != float64(1) {
		t.Errorf("new trigger json: created %v revision %v; want true, 1", doc["created"], doc["revision"])
	}
	for _, c := range []struct {
		schema string
		args   []string
	}{
		{"qlsched.trigger-publish/v1", []string{"trigger", "publish", "--project", "p", "--trigger", "u", "--cron", "0 5 * * *"}},
		{"qlsched.trigger-publish/v1", []string{"trigger", "publish", "--project", "p", "--trigger", "u", "--cron", "0 5 * * *"}},
		{"qlsched.trigger-disable/v1", []string{"trigger", "disable", "--project", "p", "--trigger", "u"}},
		{"qlsched.trigger-enable/v1", []string{"trigger", "enable", "--project", "p", "--trigger", "u"}},
	} {
		if doc := jsonDoc(t, c.schema, cmd(c.args...)...); doc["created"] != false {
			t.Errorf("%v: created %v; want false (the trigger existed)", c.args[:2], doc["created"])
		}
	}
}

// qlsched status prints three tables, each under a heading that says what it lists, then its
// column headings, each column's values starting where its heading does.
func TestStatusTablesHaveHeadings(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	db := []string{"--database-url", d.URL("ql_admin")}
	publish(t, db,
		[]string{"project", "create", "--project", "ops"},
		[]string{"task", "publish", "--project", "ops", "--task", "k", "--executor-spec", `{"image":"x"}`},
		[]string{"trigger", "publish", "--project", "ops", "--trigger", "nightly", "--task", "k", "--cron", "0 3 * * *"})
	r := run(t, append([]string{"status"}, db...)...)
	if r.code != 0 {
		t.Fatalf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	tables := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n\n")
	want := []struct{ title, columns string }{
		{"Projects", "PROJECT  STATE   TRIGGERS  ENABLED  BACKLOG  OLDEST OVERDUE  LIVE CLAIMS  LAST ADMIT"},
		{"Live claims by replica, all projects", "OWNER   LIVE CLAIMS  SOONEST EXPIRY"},
		{"Last admissions (the newest per trigger among each project's newest 200 Runs)", "PROJECT  TRIGGER  REVISION  SCHEDULED FOR  ADMITTED"},
	}
	if len(tables) != len(want) {
		t.Fatalf("status: %d tables; want %d\n%s", len(tables), len(want), r.stdout)
	}
	for i, w := range want {
		lines := strings.Split(tables[i], "\n")
		if len(lines) < 3 || lines[0] != w.title || strings.TrimRight(lines[1], " ") != w.columns {
			t.Errorf("table %d: %q; want the heading %q, then the columns %q and rows", i+1, lines, w.title, w.columns)
		}
	}
	rows := strings.Split(tables[0], "\n")
	if len(rows) != 3 || !strings.HasPrefix(rows[2], "ops      active  1         1        1        -") {
		t.Errorf("projects table: %q; want the ops row under its columns", rows)
	}
}
