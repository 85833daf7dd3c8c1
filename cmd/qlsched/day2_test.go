package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// jsonDoc runs a command with --format json and decodes its document; it fails unless the exit
// is 0, the schema field is want, and every key (at any depth) is snake_case.
func jsonDoc(t *testing.T, want string, args ...string) map[string]any {
	t.Helper()
	r := run(t, append(args, "--format", "json")...)
	if r.code != 0 {
		t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("%v: not a JSON object: %v\n%s", args, err, r.stdout)
	}
	if doc["schema"] != want {
		t.Errorf("%v: schema %v; want %q", args, doc["schema"], want)
	}
	checkSnake(t, fmt.Sprint(args), doc)
	return doc
}

var snake = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

func checkSnake(t *testing.T, where string, v any) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for k, v := range x {
			if !snake.MatchString(k) {
				t.Errorf("%s: key %q is not snake_case", where, k)
			}
			if k != "detail" { // a Run event's detail is the event's own document
				checkSnake(t, where, v)
			}
		}
	case []any:
		for _, v := range x {
			checkSnake(t, where, v)
		}
	}
}

// Issue 17, as an operator types it: a trigger published with --timezone Europe/Berlin
// --misfire fire_once --misfire-grace 5m and republished with only --disabled keeps Berlin,
// fire_once and 5m (so does every later step that does not give --misfire-grace); the
// issue's own republish (--task and --cron again, no zone, no policy) then changes nothing.
// Every publish is idempotent by content and says "unchanged"; project create of an existing
// project exits 0. Every document names its schema and uses snake_case keys.
func TestDailyCommandsChangeOnlyWhatWasAsked(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	db := []string{"--database-url", d.URL("ql_admin")}
	cmd := func(args ...string) []string { return append(args, db...) }
	publish(t, db,
		[]string{"project", "create", "--project", "billing"},
		[]string{"task", "publish", "--project", "billing", "--task", "invoice", "--executor-spec", `{"image":"billing/invoice:1.4","token":"s3cr3t"}`},
		[]string{"trigger", "publish", "--project", "billing", "--trigger", "nightly", "--task", "invoice", "--cron", "0 3 * * *",
			"--timezone", "Europe/Berlin", "--misfire", "fire_once", "--misfire-grace", "5m"})
	show := func() map[string]any {
		t.Helper()
		return jsonDoc(t, "qlsched.trigger-show/v1", cmd("trigger", "show", "--project", "billing", "--trigger", "nightly")...)
	}
	content := func(doc map[string]any) string {
		return fmt.Sprintf("rev %v %v %v %v grace=%v enabled=%v task %v@%v", doc["trigger_revision"], doc["cron_spec"], doc["timezone"],
			doc["misfire_policy"], doc["misfire_grace_ms"], doc["enabled"], doc["task_id"], doc["task_revision"])
	}
	if got, want := content(show()), "rev 1 0 3 * * * Europe/Berlin fire_once grace=300000 enabled=true task invoice@1"; got != want {
		t.Fatalf("published: %s; want %s", got, want)
	}

	steps := []struct {
		name, schema string
		args         []string
		unchanged    bool
		want         string
	}{
		{"only --disabled", "qlsched.trigger-publish/v1", []string{"trigger", "publish", "--project", "billing", "--trigger", "nightly", "--disabled"},
			false, "rev 2 0 3 * * * Europe/Berlin fire_once grace=300000 enabled=false task invoice@1"},
		{"the issue's republish", "qlsched.trigger-publish/v1", []string{"trigger", "publish", "--project", "billing", "--trigger", "nightly",
			"--task", "invoice", "--cron", "0 3 * * *", "--disabled"}, true, "rev 2 0 3 * * * Europe/Berlin fire_once grace=300000 enabled=false task invoice@1"},
		{"disable again", "qlsched.trigger-disable/v1", []string{"trigger", "disable", "--project", "billing", "--trigger", "nightly"},
			true, "rev 2 0 3 * * * Europe/Berlin fire_once grace=300000 enabled=false task invoice@1"},
		{"enable", "qlsched.trigger-enable/v1", []string{"trigger", "enable", "--project", "billing", "--trigger", "nightly"},
			false, "rev 3 0 3 * * * Europe/Berlin fire_once grace=300000 enabled=true task invoice@1"},
		{"only --cron", "qlsched.trigger-publish/v1", []string{"trigger", "publish", "--project", "billing", "--trigger", "nightly", "--cron", "30 2 * * *"},
			false, "rev 4 30 2 * * * Europe/Berlin fire_once grace=300000 enabled=true task invoice@1"},
		{"only --misfire-grace", "qlsched.trigger-publish/v1", []string{"trigger", "publish", "--project", "billing", "--trigger", "nightly",
			"--misfire-grace", "90s"}, false, "rev 5 30 2 * * * Europe/Berlin fire_once grace=90000 enabled=true task invoice@1"},
		{"the same grace again", "qlsched.trigger-publish/v1", []string{"trigger", "publish", "--project", "billing", "--trigger", "nightly",
			"--misfire-grace", "1m30s"}, true, "rev 5 30 2 * * * Europe/Berlin fire_once grace=90000 enabled=true task invoice@1"},
	}
	for _, s := range steps {
		doc := jsonDoc(t, s.schema, cmd(s.args...)...)
		if doc["unchanged"] != s.unchanged || doc["project_id"] != "billing" || doc["trigger_id"] != "nightly" {
			t.Errorf("%s: %v; want unchanged %v with the ids", s.name, doc, s.unchanged)
		}
		if got := content(show()); got != s.want {
			t.Errorf("%s: %s; want %s", s.name, got, s.want)
		}
	}

	// an unchanged publish keeps the cursor a replica set; its text says so
	d.Exec(t, `UPDATE control_core.trigger_schedules SET next_fire_at_ms = 4102444800000 WHERE trigger_id = 'nightly'`)
	r := run(t, cmd("trigger", "publish", "--project", "billing", "--trigger", "nightly", "--timezone", "Europe/Berlin")...)
	if r.code != 0 || !strings.Contains(r.stdout, "unchanged") {
		t.Errorf("same content: exit %d %q; want exit 0 saying unchanged", r.code, r.stdout)
	}
	if doc := show(); doc["next_fire_at_ms"] != float64(4102444800000) || doc["next_fire_preview"] != false {
		t.Errorf("cursor after an unchanged publish: %v (preview %v); want 4102444800000 kept", doc["next_fire_at_ms"], doc["next_fire_preview"])
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"project", "create", "--project", "billing"}, "project billing unchanged: it exists (revision 1, active)"},
		{[]string{"task", "publish", "--project", "billing", "--task", "invoice", "--executor-spec", `{"token":"s3cr3t","image":"billing/invoice:1.4"}`},
			"task billing/invoice revision 1 unchanged"},
	} {
		if r := run(t, cmd(c.args...)...); r.code != 0 || !strings.Contains(r.stdout, c.want) || strings.Contains(r.stdout, "s3cr3t") {
			t.Errorf("%v: exit %d %q; want exit 0 saying %q", c.args[:2], r.code, r.stdout, c.want)
		}
	}
	if r := run(t, cmd("trigger", "publish", "--project", "billing", "--trigger", "fresh", "--task", "invoice")...); r.code != 2 || !strings.Contains(r.stderr, "--cron: ") {
		t.Errorf("new trigger without --cron: exit %d %q; want exit 2 naming --cron", r.code, r.stderr)
	}
	for _, g := range []string{"0s", "500ms", "25h", "soon"} {
		if r := run(t, cmd("trigger", "publish", "--project", "billing", "--trigger", "nightly", "--misfire-grace", g)...); r.code != 2 || !strings.Contains(r.stderr, "--misfire-grace") {
			t.Errorf("--misfire-grace %s: exit %d %q; want exit 2 naming --misfire-grace", g, r.code, r.stderr)
		}
	}
	if r := run(t, cmd("trigger", "disable", "--project", "billing", "--trigger", "nope")...); r.code != 1 {
		t.Errorf("disable of an unknown trigger: exit %d %q; want 1", r.code, r.stderr)
	}

	// the lists: documents with their schema, nothing secret
	audit := d.Pool(t, "")
	var revisions int
	if err := audit.QueryRow(t.Context(), "SELECT count(*) FROM control_core.trigger_revisions").Scan(&revisions); err != nil || revisions != 5 {
		t.Errorf("%d trigger revisions (%v); want 5: the unchanged publishes wrote none", revisions, err)
	}
	for _, c := range []struct{ schema, list string }{
		{"qlsched.project-list/v1", "projects"}, {"qlsched.task-list/v1", "tasks"},
		{"qlsched.trigger-list/v1", "triggers"}, {"qlsched.runs-list/v1", "runs"},
	} {
		noun := strings.TrimSuffix(strings.TrimPrefix(c.schema, "qlsched."), "/v1")
		doc := jsonDoc(t, c.schema, cmd(strings.Split(noun, "-")...)...)
		if _, ok := doc[c.list].([]any); !ok {
			t.Errorf("%s: %v; want a %q array", c.schema, doc, c.list)
		}
	}
	for _, args := range [][]string{{"task", "list"}, {"task", "list", "--format", "json"}, {"project", "list"}} {
		if r := run(t, cmd(args...)...); r.code != 0 || strings.Contains(r.stdout, "s3cr3t") || strings.Contains(r.stdout, "billing/invoice") {
			t.Errorf("%v: exit %d, the spec in the output:\n%s", args, r.code, r.stdout)
		}
	}
}

// Before a replica claims a trigger, the lists and trigger show give a preview of its next fire;
// a real replica then admits, and runs list --state --since and runs show report the Run, its
// claimed Attempt, its two Events, lag and idempotency key, in the one time format.
func TestPreviewThenRunsShowWithAReplica(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	db := []string{"--database-url", d.URL("ql_admin")}
	publishEverySecond(t, d, "tick")
	publish(t, db, []string{"trigger", "publish", "--project", "p", "--trigger", "tokyo", "--task", "k", "--cron", "0 9 * * *", "--timezone", "Asia/Tokyo"})

	list := run(t, append([]string{"trigger", "list"}, db...)...)
	tokyo := regexp.MustCompile(`tokyo .* \d{4}-\d\d-\d\dT09:00:00\.000\+09:00 Asia/Tokyo \(preview\)`)
	if list.code != 0 || !tokyo.MatchString(list.stdout) || !strings.Contains(list.stdout, "Z (preview)") {
		t.Errorf("trigger list before any claim: exit %d\n%s\nwant previews: 09:00+09:00 Asia/Tokyo and a UTC one", list.code, list.stdout)
	}
	doc := jsonDoc(t, "qlsched.trigger-show/v1", append([]string{"trigger", "show", "--project", "p", "--trigger", "tokyo", "--upcoming", "3"}, db...)...)
	up, _ := doc["upcoming"].([]any)
	if doc["next_fire_preview"] != true || doc["next_fire_at_ms"] != nil || len(up) != 3 ||
		up[0].(map[string]any)["at_ms"] != doc["next_fire_ms"] || !strings.HasSuffix(up[0].(map[string]any)["at"].(string), "T09:00:00+09:00 Asia/Tokyo") {
		t.Errorf("trigger show before any claim: %v; want a preview and three upcoming occurrences at 09:00 Tokyo time", doc)
	}
	// text: a zone other than UTC gets a UTC column beside it; a UTC trigger one column, not two equal ones
	for _, c := range []struct {
		trigger string
		header  *regexp.Regexp
	}{{"tokyo", regexp.MustCompile(`(?m)^UPCOMING \(Asia/Tokyo\) +UTC$`)}, {"tick", regexp.MustCompile(`(?m)^UPCOMING \(UTC\)$`)}} {
		if r := run(t, append([]string{"trigger", "show", "--project", "p", "--trigger", c.trigger}, db...)...); r.code != 0 || !c.header.MatchString(r.stdout) {
			t.Errorf("trigger show %s: exit %d\n%s\nwant a line matching %s", c.trigger, r.code, r.stdout, c.header)
		}
	}

	rep := startReplica(t, qlsched(t), "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0", "--cadence", "100ms", "--owner", "replica-a")
	var runID string
	eventually.True(t, 20*time.Second, "a queued Run of tick", func() bool {
		r := run(t, append([]string{"runs", "list", "--state", "queued", "--since", "1m", "--trigger", "tick", "--format", "json"}, db...)...)
		var doc struct {
			Runs []struct {
				RunID string `json:"run_id"`
			} `json:"runs"`
		}
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &doc) == nil && len(doc.Runs) > 0 {
			runID = doc.Runs[0].RunID
			return true
		}
		return false
	})
	if code := rep.stop(t); code != 0 {
		t.Errorf("replica exit %d", code)
	}

	show := jsonDoc(t, "qlsched.runs-show/v1", append([]string{"runs", "show", runID}, db...)...)
	attempts, _ := show["attempts"].([]any)
	events, _ := show["events"].([]any)
	key, _ := show["idempotency_key"].(string)
	lag, hasLag := show["lag_ms"].(float64)
	if show["run_id"] != runID || show["state"] != "queued" || !strings.HasPrefix(key, "ql3:cron:v1:tick:1:") || !hasLag || lag < 0 ||
		len(attempts) != 1 || attempts[0].(map[string]any)["state"] != "claimed" || attempts[0].(map[string]any)["executor_kind"] != "remote_worker" ||
		len(events) != 2 || events[0].(map[string]any)["type"] != "run.created" || events[1].(map[string]any)["type"] != "run.queued" {
		t.Errorf("runs show: %v; want the queued Run, its claimed remote_worker Attempt, run.created and run.queued, a lag and its key", show)
	}
	text := run(t, append([]string{"runs", "show", runID}, db...)...)
	when := regexp.MustCompile(`scheduled for\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\n`)
	if text.code != 0 || !strings.Contains(text.stdout, "waiting for a dispatcher") || !when.MatchString(text.stdout) {
		t.Errorf("runs show text: exit %d\n%s\nwant an RFC 3339 UTC time and the note on the dispatcher", text.code, text.stdout)
	}
	if r := run(t, append([]string{"runs", "show", "6f1c2a34-0000-4000-8000-000000000000"}, db...)...); r.code != 1 {
		t.Errorf("runs show of an unknown Run: exit %d; want 1", r.code)
	}
	// a time at or before the epoch keeps every Run (all were admitted after it)
	if r := run(t, append([]string{"runs", "list", "--since", "1969-07-20T20:17:40Z", "--format", "json"}, db...)...); r.code != 0 || !strings.Contains(r.stdout, runID) {
		t.Errorf("runs list --since 1969-07-20T20:17:40Z: exit %d\n%s\nwant Run %s", r.code, r.stdout, runID)
	}
	if r := run(t, append([]string{"runs", "list", "--state", "failed", "--format", "json"}, db...)...); r.code != 0 || strings.Contains(r.stdout, "run_id") {
		t.Errorf("runs list --state failed: exit %d\n%s\nwant no runs", r.code, r.stdout)
	}
}

// The new commands' bad input is refused before connecting, naming the flag.
func TestDailyCommandsBadInputExits2BeforeConnecting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"runs", "list", "--state", "lost"}, `--state: "lost" is not a Run state`},
		{[]string{"runs", "list", "--since", "yesterday"}, `--since "yesterday": want a positive duration`},
		{[]string{"runs", "list", "--since", "-1h"}, `--since "-1h"`},
		{[]string{"runs", "list", "--since", "9999999999h"}, `--since "9999999999h": longer than a duration can be (2562047h0m0s at most)`},
		{[]string{"runs", "list", "--since", "0s"}, `--since "0s": want a positive duration`},
		{[]string{"runs", "show", "not-a-uuid"}, `RUN_ID "not-a-uuid": not a UUID`},
		{[]string{"runs", "show"}, "one RUN_ID"},
		{[]string{"trigger", "show", "--project", "p", "--trigger", "t", "--upcoming", "0"}, "--upcoming: 0 is out of range"},
		{[]string{"trigger", "show", "--project", "p", "--trigger", "t", "--limit", "101"}, "--limit: 101 is out of range"},
		{[]string{"trigger", "show", "--project", "p"}, "--trigger: trigger id"},
		{[]string{"trigger", "disable", "--project", "p", "--trigger", "T T"}, "--trigger: trigger id"},
		{[]string{"trigger", "enable", "--trigger", "t"}, "--project: project id"},
		{[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--timezone", ""}, "--timezone: "},
		{[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--misfire", "sometimes"}, "--misfire: "},
		{[]string{"task", "list", "--project", "P!"}, "--project: project id"},
		{[]string{"project", "pause"}, "--project: project id"},
		{[]string{"project", "resume", "--project", "P!"}, "--project: project id"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			exits2BeforeConnecting(t, c.args, c.want)
		})
	}
}

// Every document the admin commands print is listed in docs/json.md.
func TestAdminSchemasAreDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{"project-create", "project-state", "project-list", "task-publish", "task-list", "trigger-publish",
		"trigger-disable", "trigger-enable", "trigger-list", "trigger-show", "runs-list", "runs-show"} {
		if !strings.Contains(string(doc), "`qlsched."+schema+"/v1`") {
			t.Errorf("docs/json.md does not list qlsched.%s/v1", schema)
		}
	}
}
