package main

import (
	"context"
	"encoding/json"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// Issue 17 point 2 with a replica running: two every-second triggers (skip, fire_once) admit;
// project pause stops every admission (a few seconds of database time, nothing admitted);
// project resume lets the next claim of each decide by its misfire policy, on the cursor the
// pause left, as after an outage: skip admits no Run for the paused interval, fire_once exactly
// one, for the latest missed occurrence. The triggers have the smallest misfire grace (1s), so
// the few seconds of the pause are beyond it: only occurrences at most 1 s before the first claim
// after the resume are on time.
func TestPauseResumeWithAReplicaRunning(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	ctx := context.Background()
	su := d.Pool(t, "")
	adm := []string{"--database-url", d.URL("ql_admin")}
	publish(t, adm,
		[]string{"project", "create", "--project", "p"},
		[]string{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", `{"image":"x"}`},
		[]string{"trigger", "publish", "--project", "p", "--trigger", "skip", "--task", "k", "--cron", "* * * * * *", "--misfire", "skip",
			"--misfire-grace", "1s"},
		[]string{"trigger", "publish", "--project", "p", "--trigger", "once", "--task", "k", "--cron", "* * * * * *", "--misfire", "fire_once",
			"--misfire-grace", "1s"})
	dbNow := func() int64 {
		var now int64
		if err := su.QueryRow(ctx, `SELECT control_core.db_now_ms()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := su.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	rep := startReplica(t, qlsched(t), "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0",
		"--cadence", "100ms", "--owner", "replica-a", "--log-level", "debug")
	eventually.True(t, 20*time.Second, "2 Runs of each trigger", func() bool {
		return count(`SELECT count(*) FROM control_core.runs WHERE trigger_id = 'skip'`) >= 2 &&
			count(`SELECT count(*) FROM control_core.runs WHERE trigger_id = 'once'`) >= 2
	})

	r := run(t, append([]string{"project", "pause", "--project", "p"}, adm...)...)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "project p paused (revision 2)") {
		t.Fatalf("pause: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	t.Logf("$ qlsched project pause --project p\n%s", r.stdout)
	var pausedAt int64
	if err := su.QueryRow(ctx, `SELECT updated_at_ms FROM control_core.projects WHERE project_id = 'p'`).Scan(&pausedAt); err != nil {
		t.Fatal(err)
	}
	r = run(t, append([]string{"project", "pause", "--project", "p"}, adm...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "unchanged") {
		t.Errorf("pause again: exit %d, %q; want exit 0, unchanged", r.code, r.stdout)
	}
	t.Logf("$ qlsched project pause --project p   # again\n%s", r.stdout)
	r = run(t, append([]string{"project", "list"}, adm...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "paused") {
		t.Errorf("project list: exit %d, %q; want the paused state", r.code, r.stdout)
	}
	t.Logf("$ qlsched project list\n%s", r.stdout)

	// a few seconds of database time, then resume just after a second boundary, so the first
	// claim after the resume falls in the same second (the cadence is 100 ms)
	eventually.True(t, 20*time.Second, "4 s of database time paused, at 100-300 ms into a second", func() bool {
		now := dbNow()
		return now >= pausedAt+4000 && now%1000 >= 100 && now%1000 <= 300
	})
	if n := count(`SELECT count(*) FROM control_core.runs WHERE created_at_ms > $1`, pausedAt); n != 0 {
		t.Fatalf("%d Runs admitted while paused", n)
	}
	lastBefore := map[string]int64{}
	for _, trig := range []string{"skip", "once"} {
		var last int64
		if err := su.QueryRow(ctx, `SELECT max(scheduled_for_ms) FROM control_core.runs WHERE trigger_id = $1`, trig).Scan(&last); err != nil {
			t.Fatal(err)
		}
		lastBefore[trig] = last
	}

	r = run(t, append([]string{"project", "resume", "--project", "p", "--format", "json"}, adm...)...)
	var res struct {
		Schema    string `json:"schema"`
		ProjectID string `json:"project_id"`
		Action    string `json:"action"`
		State     string `json:"state"`
		Revision  int64  `json:"revision"`
		Unchanged bool   `json:"unchanged"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &res) != nil || res.Schema != "qlsched.project-state/v1" ||
		res.Action != "resume" || res.State != "active" || res.Revision != 3 || res.Unchanged {
		t.Fatalf("resume --format json: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	t.Logf("$ qlsched project resume --project p --format json\n%s", r.stdout)
	var resumedAt int64
	if err := su.QueryRow(ctx, `SELECT updated_at_ms FROM control_core.projects WHERE project_id = 'p'`).Scan(&resumedAt); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "a Run of each trigger after the resume", func() bool {
		return count(`SELECT count(*) FROM control_core.runs WHERE trigger_id = 'skip' AND scheduled_for_ms > $1`, lastBefore["skip"]) >= 1 &&
			count(`SELECT count(*) FROM control_core.runs WHERE trigger_id = 'once' AND scheduled_for_ms > $1`, lastBefore["once"]) >= 1
	})
	if rc := rep.stop(t); rc != 0 {
		t.Errorf("replica exit %d", rc)
	}
	runs := func(trig string, from, to int64) []int64 {
		rows, err := su.Query(ctx, `SELECT scheduled_for_ms FROM control_core.runs
			WHERE trigger_id = $1 AND scheduled_for_ms > $2 AND scheduled_for_ms <= $3 ORDER BY 1`, trig, from, to)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []int64
		for rows.Next() {
			var ms int64
			if err := rows.Scan(&ms); err != nil {
				t.Fatal(err)
			}
			out = append(out, ms)
		}
		return out
	}
	// skip: every claim after the resume decides at resumedAt or later, so an occurrence more than
	// the grace (1 s) before the resume is missed: nothing of the paused interval is admitted
	if got := runs("skip", lastBefore["skip"], resumedAt-1001); len(got) != 0 {
		t.Errorf("skip: Runs for the paused interval at %v; want none", got)
	}
	// fire_once: exactly one Run for the paused interval, the latest missed occurrence when the first
	// claim after the resume decided (the last whole second more than 1 s before it, so not before
	// the resume's second - 2 s, or later on a slow machine), and the replica decided it as a
	// catch-up; never the backlog the pause left.
	after := runs("once", lastBefore["once"], math.MaxInt64)
	if floor := resumedAt/1000*1000 - 2000; len(after) == 0 || after[0] < floor {
		t.Fatalf("fire_once: Runs after the pause at %v; want the first at or after %d (paused %d, resumed %d, last before %d)",
			after, floor, pausedAt, resumedAt, lastBefore["once"])
	}
	var runID string
	if err := su.QueryRow(ctx, `SELECT run_id::text FROM control_core.runs WHERE trigger_id = 'once' AND scheduled_for_ms = $1`, after[0]).Scan(&runID); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.all.String(), "run_id="+runID+" lag_ms=") || !regexp.MustCompile(`run_id=`+runID+` lag_ms=-?\d+ catch_up=true`).MatchString(rep.all.String()) {
		t.Errorf("fire_once: the first Run after the resume (%s, scheduled %d) was not admitted as a catch-up; replica log:\n%s", runID, after[0], rep.all.String())
	}
}

// project pause --help says what the misfire grace does to a pause: on resume the occurrences
// within the grace get their Runs, the older ones are the policy's (skip none, fire_once one), and
// the ones passed over are counted where an operator looks.
func TestPauseHelpExplainsTheGrace(t *testing.T) {
	t.Parallel()
	r := run(t, "project", "pause", "--help")
	text := strings.Join(strings.Fields(r.stdout), " ")
	for _, want := range []string{"by the trigger's misfire grace (misfire_grace_ms, 60 s by default) and policy",
		"at most the grace older than the resume is on time and gets its Run", "skip admits none of them, fire_once admits one Run, for the latest",
		"qlsched trigger show: missed", "qlsched_missed_occurrences_total",
		"a trigger republished while paused restarts at its next occurrence after the resume"} {
		if r.code != 0 || !strings.Contains(text, want) {
			t.Errorf("project pause --help: exit %d, lacks %q:\n%s", r.code, want, r.stdout)
		}
	}
}
