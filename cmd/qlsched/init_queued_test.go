package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// queuedFile declares three enabled triggers and one disabled: an apply queues the three for
// initialisation (the disabled one is never claimed, so it waits for nothing).
const queuedFile = `schema: qlsched.schedules/v1
projects:
  - id: mass
    tasks:
      - id: job
        executor_spec: {image: "mass/job:1"}
    triggers:
      - {id: a, task: job, cron: "* * * * *"}
      - {id: b, task: job, cron: "*/5 * * * *"}
      - {id: c, task: job, cron: "@hourly"}
      - {id: off, task: job, cron: "@daily", enabled: false}
`

// apply and trigger publish say how much initialisation they queued, in text and in JSON: the
// new or changed enabled triggers, whose schedule rows now wait without a cursor; nothing for an
// unchanged or a disabled one.
func TestApplyAndPublishSayWhatTheyQueuedForInitialisation(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	db := []string{"--database-url", d.URL("ql_admin")}
	file := filepath.Join(t.TempDir(), "schedules.yaml")
	writeFile(t, file, queuedFile)
	queued := func(args ...string) (string, float64) {
		t.Helper()
		r := run(t, append(args, db...)...)
		if r.code != 0 && !(r.code == 1 && strings.Contains(strings.Join(args, " "), "--check")) {
			t.Fatalf("qlsched %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		j := run(t, append(append(args, "--format", "json"), db...)...)
		var doc map[string]any
		if err := json.Unmarshal([]byte(j.stdout), &doc); err != nil {
			t.Fatalf("qlsched %v --format json: %v\n%s", args, err, j.stdout)
		}
		n, ok := doc["queued_for_initialisation"].(float64)
		if b, isBool := doc["queued_for_initialisation"].(bool); isBool {
			n, ok = map[bool]float64{true: 1}[b], true
		}
		if !ok {
			t.Fatalf("qlsched %v --format json: no queued_for_initialisation in %s", args, j.stdout)
		}
		return r.stdout, n
	}
	steps := []struct {
		name     string
		args     []string
		wantText string // "" : no line about initialisation at all
		wantJSON float64
	}{
		{"check", []string{"apply", "-f", file, "--check"}, "3 triggers to be queued for initialisation", 3},
		{"apply", []string{"apply", "-f", file}, "3 triggers queued for initialisation", 0}, // JSON run: in sync by then
		{"apply again", []string{"apply", "-f", file}, "", 0},
		{"publish a change", []string{"trigger", "publish", "--project", "mass", "--trigger", "a", "--cron", "*/2 * * * *"},
			"1 trigger queued for initialisation", 0}, // JSON run: unchanged by then
		{"publish a new one", []string{"trigger", "publish", "--project", "mass", "--trigger", "new", "--task", "job", "--cron", "@daily"},
			"1 trigger queued for initialisation", 0},
		{"publish disabled", []string{"trigger", "publish", "--project", "mass", "--trigger", "b", "--disabled"}, "", 0},
	}
	for _, s := range steps {
		text, n := queued(s.args...)
		has := strings.Contains(text, "queued for initialisation")
		if (s.wantText == "" && has) || (s.wantText != "" && !strings.Contains(text, s.wantText)) || n != s.wantJSON {
			t.Errorf("%s: text %q, JSON %v; want the line %q and %v in JSON", s.name, text, n, s.wantText, s.wantJSON)
		}
	}
	// JSON of a publish that writes: a fresh trigger.
	j := run(t, append([]string{"trigger", "publish", "--project", "mass", "--trigger", "fresh", "--task", "job", "--cron", "@daily", "--format", "json"}, db...)...)
	var doc map[string]any
	if err := json.Unmarshal([]byte(j.stdout), &doc); err != nil || doc["queued_for_initialisation"] != true {
		t.Errorf("publish of a new trigger, JSON: %v, queued_for_initialisation %v; want true\n%s", err, doc["queued_for_initialisation"], j.stdout)
	}
	j = run(t, append([]string{"apply", "-f", file, "--format", "json"}, db...)...) // reverts a, b and disables nothing else
	if err := json.Unmarshal([]byte(j.stdout), &doc); err != nil || doc["queued_for_initialisation"] != float64(2) {
		t.Errorf("apply reverting a and b, JSON: %v, queued_for_initialisation %v; want 2 (a changed back, b enabled again)\n%s",
			err, doc["queued_for_initialisation"], j.stdout)
	}
}
