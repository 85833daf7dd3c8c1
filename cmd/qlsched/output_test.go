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
