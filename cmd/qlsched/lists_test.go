package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// seedLists publishes projects a (7 triggers a-t1 … a-t7 of task job, 3 tasks), b (none) and c
// (5 triggers, one task) as the admin role, and the 102 triggers of project big straight into
// the tables (more than a default page), and returns the admin role's flags.
func seedLists(t *testing.T) (*testpg.DB, []string) {
	t.Helper()
	d := testpg.New(t)
	db := []string{"--database-url", d.URL("ql_admin")}
	var cmds [][]string
	for _, p := range []string{"a", "b", "c", "big"} {
		cmds = append(cmds, []string{"project", "create", "--project", p},
			[]string{"task", "publish", "--project", p, "--task", "job", "--executor-spec", `{"image":"x"}`})
	}
	cmds = append(cmds, []string{"task", "publish", "--project", "a", "--task", "job2", "--executor-spec", `{"image":"y"}`},
		[]string{"task", "publish", "--project", "a", "--task", "job3", "--executor-spec", `{"image":"z"}`})
	publish(t, db, cmds...)
	ctx := context.Background()
	pub := admin.NewPublisher(d.Handle(t, "ql_admin"))
	for _, x := range []struct {
		project string
		n       int
	}{{"a", 7}, {"c", 5}} {
		for i := 1; i <= x.n; i++ {
			if _, err := pub.PublishTrigger(ctx, admin.TriggerSpec{Project: x.project, Trigger: fmt.Sprintf("t%d", i), Task: "job",
				Cron: "*/5 * * * *", TimeZone: "UTC", Misfire: "skip", Enabled: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.Exec(t, `SET session_replication_role = replica;
		INSERT INTO control_core.triggers (project_id, trigger_id, head_revision)
		    SELECT 'big', 't' || lpad(g::text, 3, '0'), 1 FROM generate_series(1, 102) g;
		INSERT INTO control_core.trigger_revisions (project_id, trigger_id, revision, kind, cron_spec, timezone,
		        misfire_policy, misfire_grace_ms, enabled, task_id, task_revision, content_digest)
		    SELECT 'big', 't' || lpad(g::text, 3, '0'), 1, 'cron', '0 * * * *', 'UTC', 'skip', 60000, true, 'job', 1, repeat('a', 64)
		    FROM generate_series(1, 102) g;
		INSERT INTO control_core.trigger_schedules (project_id, trigger_id, trigger_revision, state_version, claim_version, updated_at_ms)
		    SELECT 'big', 't' || lpad(g::text, 3, '0'), 1, 1, 0, control_core.db_now_ms() FROM generate_series(1, 102) g;`)
	return d, db
}

// listPage is what a paged list prints with --format json.
type listPage struct {
	Triggers []struct {
		ProjectID string `json:"project_id"`
		TriggerID string `json:"trigger_id"`
	} `json:"triggers"`
	Tasks []struct {
		ProjectID string `json:"project_id"`
		TaskID    string `json:"task_id"`
	} `json:"tasks"`
	More      bool    `json:"more"`
	NextAfter *string `json:"next_after"`
}

func (p listPage) keys() []string {
	var out []string
	for _, x := range p.Triggers {
		out = append(out, x.ProjectID+"/"+x.TriggerID)
	}
	for _, x := range p.Tasks {
		out = append(out, x.ProjectID+"/"+x.TaskID)
	}
	return out
}

func jsonPage(t *testing.T, args ...string) listPage {
	t.Helper()
	r := run(t, append(args, "--format", "json")...)
	if r.code != 0 {
		t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
	}
	var p listPage
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, r.stdout)
	}
	if p.More != (p.NextAfter != nil) {
		t.Errorf("%v: more %v but next_after %v", args, p.More, p.NextAfter)
	}
	return p
}

// moreLine is the text output's hint: the command line of the next page.
var moreLine = regexp.MustCompile(`(?m)^more: (\d+) shown, more follow; next page: qlsched (.*)$`)

// Issue 37: trigger list and task list are keyset-paged. Followed page by page (by the JSON's
// next_after, and by running the command line the text prints), a listing holds every row once,
// in key order, whatever the page size, with or without --project; the last page says no more;
// without --limit a page holds admin.DefaultListLimit rows.
func TestPagedListsReturnEveryRowOnceInKeyOrder(t *testing.T) {
	t.Parallel()
	d, db := seedLists(t)
	var big []string
	for i := 1; i <= 102; i++ {
		big = append(big, fmt.Sprintf("big/t%03d", i))
	}
	var a, c []string
	for i := 1; i <= 7; i++ {
		a = append(a, fmt.Sprintf("a/t%d", i))
	}
	for i := 1; i <= 5; i++ {
		c = append(c, fmt.Sprintf("c/t%d", i))
	}
	allTriggers := slices.Concat(a, big, c)
	// The reads run in parallel (each walk pages through processes, one after the other); the
	// case that adds a row runs after all of them.
	t.Run("reads", func(t *testing.T) { pagedListReads(t, db, a, big, c, allTriggers) })
	t.Run("a row added before the cursor between pages", func(t *testing.T) {
		p := jsonPage(t, append([]string{"trigger", "list", "--project", "a", "--limit", "3"}, db...)...)
		// a-t0 sorts before the page's end: the next page neither repeats nor skips a row
		d.Exec(t, `SET session_replication_role = replica;
			INSERT INTO control_core.triggers (project_id, trigger_id, head_revision) VALUES ('a', 't0', 1);
			INSERT INTO control_core.trigger_revisions (project_id, trigger_id, revision, kind, cron_spec, timezone,
			        misfire_policy, misfire_grace_ms, enabled, task_id, task_revision, content_digest)
			    VALUES ('a', 't0', 1, 'cron', '0 * * * *', 'UTC', 'skip', 60000, true, 'job', 1, repeat('a', 64));
			INSERT INTO control_core.trigger_schedules (project_id, trigger_id, trigger_revision, state_version, claim_version, updated_at_ms)
			    VALUES ('a', 't0', 1, 1, 0, control_core.db_now_ms())`)
		p2 := jsonPage(t, append([]string{"trigger", "list", "--project", "a", "--limit", "3", "--after", *p.NextAfter}, db...)...)
		if !slices.Equal(p.keys(), a[:3]) || !slices.Equal(p2.keys(), a[3:6]) {
			t.Errorf("pages %v then %v; want %v then %v", p.keys(), p2.keys(), a[:3], a[3:6])
		}
	})
}

// pagedListReads are TestPagedListsReturnEveryRowOnceInKeyOrder's reads, parallel subtests of t.
func pagedListReads(t *testing.T, db, a, big, c, allTriggers []string) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"triggers by 5", []string{"trigger", "list", "--limit", "5"}, allTriggers},
		{"triggers by 1", []string{"trigger", "list", "--limit", "1"}, allTriggers},
		{"triggers by 7 (a page ends at a project's end)", []string{"trigger", "list", "--limit", "7"}, allTriggers},
		{"triggers of c by 2", []string{"trigger", "list", "--project", "c", "--limit", "2"}, c},
		{"triggers of empty b", []string{"trigger", "list", "--project", "b"}, nil},
		{"tasks by 2", []string{"task", "list", "--limit", "2"}, []string{"a/job", "a/job2", "a/job3", "b/job", "big/job", "c/job"}},
		{"tasks of a by 2", []string{"task", "list", "--project", "a", "--limit", "2"}, []string{"a/job", "a/job2", "a/job3"}},
	} {
		// the two walks are independent reads: two subtests, so the longest (by 1) is half a chain
		t.Run(tc.name+"/json", func(t *testing.T) {
			t.Parallel()
			// by the JSON's next_after
			var got []string
			args := append(slices.Clone(tc.args), db...)
			for page := 0; ; page++ {
				if page > len(tc.want)+1 {
					t.Fatalf("more than %d pages: %v", page, got)
				}
				p := jsonPage(t, args...)
				got = append(got, p.keys()...)
				if !p.More {
					break
				}
				args = append(slices.Clone(tc.args), append(db, "--after", *p.NextAfter)...)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("JSON pages: %v\nwant %v", got, tc.want)
			}
		})
		t.Run(tc.name+"/text", func(t *testing.T) {
			t.Parallel()
			// by running the command line the text prints
			var got []string
			args := append(slices.Clone(tc.args), db...)
			for page := 0; ; page++ {
				if page > len(tc.want)+1 {
					t.Fatalf("more than %d pages", page)
				}
				r := run(t, args...)
				if r.code != 0 {
					t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
				}
				lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
				m := moreLine.FindStringSubmatch(r.stdout)
				rows := lines[1:]
				if m != nil {
					rows = lines[1 : len(lines)-1]
					if m[1] != fmt.Sprint(len(rows)) {
						t.Errorf("the hint says %s shown; the page has %d rows", m[1], len(rows))
					}
				}
				for _, l := range rows {
					f := strings.Fields(l)
					got = append(got, f[0]+"/"+f[1])
				}
				if m == nil {
					break
				}
				if strings.Contains(m[2], "database-url") {
					t.Fatalf("the hint repeats the connection: %s", m[2])
				}
				args = append(strings.Fields(m[2]), db...)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("text pages: %v\nwant %v", got, tc.want)
			}
		})
	}

	t.Run("default limit", func(t *testing.T) {
		t.Parallel()
		p := jsonPage(t, append([]string{"trigger", "list", "--project", "big"}, db...)...)
		if len(p.Triggers) != admin.DefaultListLimit || !p.More || *p.NextAfter != big[admin.DefaultListLimit-1] {
			t.Errorf("%d triggers, more %v, next %v; want %d, more, next %s", len(p.Triggers), p.More, p.NextAfter,
				admin.DefaultListLimit, big[admin.DefaultListLimit-1])
		}
		p = jsonPage(t, append([]string{"trigger", "list", "--project", "big", "--after", *p.NextAfter}, db...)...)
		if !slices.Equal(p.keys(), big[admin.DefaultListLimit:]) || p.More || p.NextAfter != nil {
			t.Errorf("second page %v more %v; want %v and no more", p.keys(), p.More, big[admin.DefaultListLimit:])
		}
	})

}

// Bad paging flags are refused before any connection (exit 2, naming the flag), and --help
// explains the paging.
func TestPagedListFlagsAreCheckedBeforeConnecting(t *testing.T) {
	t.Parallel()
	nowhere := []string{"--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"trigger", "list", "--limit", "0"}, "--limit: 0 is out of range"},
		{[]string{"trigger", "list", "--limit", "-3"}, "--limit: -3 is out of range"},
		{[]string{"trigger", "list", "--limit", fmt.Sprint(admin.MaxListLimit + 1)}, "--limit"},
		{[]string{"trigger", "list", "--after", "t1"}, "--after: \"t1\": want PROJECT/TRIGGER"},
		{[]string{"trigger", "list", "--after", "A/t1"}, "--after"},
		{[]string{"trigger", "list", "--after", "a/"}, "--after"},
		{[]string{"trigger", "list", "--project", "c", "--after", "a/t1"}, "--after: \"a/t1\" lies in project a, not in --project c"},
		{[]string{"task", "list", "--limit", "0"}, "--limit: 0 is out of range"},
		{[]string{"task", "list", "--after", "job"}, "want PROJECT/TASK"},
		{[]string{"runs", "list", "--limit", "0"}, "--limit"},
	} {
		r := run(t, append(tc.args, nowhere...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	for _, cmd := range [][]string{{"trigger", "list"}, {"task", "list"}} {
		r := run(t, append(cmd, "--help")...)
		for _, want := range []string{"--after", "--limit", fmt.Sprintf("default %d", admin.DefaultListLimit), "more:"} {
			if r.code != 0 || !strings.Contains(r.stdout, want) {
				t.Errorf("%v --help: exit %d, want %q in\n%s", cmd, r.code, want, r.stdout)
			}
		}
	}
}

// Issue 37: runs list's filters, in one project and across projects: newest first, merged across
// projects; with --trigger newest occurrence first; a filter that matches nothing is empty.
func TestRunsListFiltersAcrossProjects(t *testing.T) {
	t.Parallel()
	d, db := seedLists(t)
	// run i (1 … 60) of project a (i odd) or c (i even), trigger t(i mod 3 + 1), admitted i
	// seconds after the base (the newest last); every fifth failed
	d.Exec(t, `SET session_replication_role = replica;
		INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
		        trigger_revision, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
		SELECT lpad(to_hex(i), 32, '0')::uuid, x.p, 'job', 1, kr.execution_revision_id, 't' || (i % 3 + 1), 1, x.at,
		       control_core.cron_idempotency_key('t' || (i % 3 + 1), 1, x.at), CASE WHEN i % 5 = 0 THEN 'failed' ELSE 'queued' END,
		       'runtime', x.at + 7, x.at + 7, x.at + 7
		FROM generate_series(1, 60) i
		CROSS JOIN LATERAL (SELECT CASE WHEN i % 2 = 1 THEN 'a' ELSE 'c' END AS p, 1700000000000 + i * 1000 AS at) x
		JOIN control_core.task_revisions kr ON kr.project_id = x.p AND kr.task_id = 'job' AND kr.revision = 1`)
	ids := func(pred func(i int) bool, limit int) []string {
		var out []string
		for i := 60; i >= 1 && len(out) < limit; i-- {
			if pred(i) {
				out = append(out, fmt.Sprintf("%032x", i))
			}
		}
		return out
	}
	uuidOf := func(s string) string { return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:] }
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"all", nil, ids(func(int) bool { return true }, 50)},
		{"all, limit 7", []string{"--limit", "7"}, ids(func(int) bool { return true }, 7)},
		{"project a", []string{"--project", "a"}, ids(func(i int) bool { return i%2 == 1 }, 50)},
		{"failed", []string{"--state", "failed"}, ids(func(i int) bool { return i%5 == 0 }, 50)},
		{"failed in c", []string{"--state", "failed", "--project", "c"}, ids(func(i int) bool { return i%5 == 0 && i%2 == 0 }, 50)},
		{"running: none", []string{"--state", "running"}, nil},
		{"trigger t2", []string{"--trigger", "t2"}, ids(func(i int) bool { return i%3 == 1 }, 50)},
		{"trigger t2 in a, failed", []string{"--trigger", "t2", "--project", "a", "--state", "failed"},
			ids(func(i int) bool { return i%3 == 1 && i%2 == 1 && i%5 == 0 }, 50)},
		{"since the last 10 s", []string{"--since", "2023-11-14T22:14:10.007Z"}, ids(func(i int) bool { return i >= 50 }, 50)},
		{"since the future", []string{"--since", "2100-01-01T00:00:00Z"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := jsonDoc(t, "qlsched.runs-list/v1", append(append([]string{"runs", "list"}, tc.args...), db...)...)
			var got []string
			for _, r := range doc["runs"].([]any) {
				got = append(got, r.(map[string]any)["run_id"].(string))
			}
			var want []string
			for _, w := range tc.want {
				want = append(want, uuidOf(w))
			}
			if !slices.Equal(got, want) {
				t.Errorf("runs %v\nwant %v", got, want)
			}
		})
	}
}

// planRows runs EXPLAIN (ANALYZE, FORMAT JSON) of one statement of sql/queries (parameters as
// given, sqlc.narg NULL unless given) and returns the rows its scans of runs and
// trigger_schedules read: returned plus removed by a filter, summed over loops.
func planRows(t *testing.T, conn *pgx.Conn, file, name string, values map[string]string) int {
	t.Helper()
	src, err := os.ReadFile("../../sql/queries/" + file)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(src), "-- name: "+name+" ")
	if !ok {
		t.Fatalf("%s has no statement %s", file, name)
	}
	_, after, _ = strings.Cut(after, "\n")
	after = regexp.MustCompile(`--[^\n]*`).ReplaceAllString(after, "") // comments may hold ";" and "@"
	stmt, _, _ := strings.Cut(after, ";")
	stmt = regexp.MustCompile(`sqlc\.narg\((\w+)\)`).ReplaceAllStringFunc(stmt, func(m string) string {
		if v, ok := values[m[len("sqlc.narg("):len(m)-1]]; ok {
			return v
		}
		return "NULL"
	})
	stmt = regexp.MustCompile(`@(\w+)`).ReplaceAllStringFunc(stmt, func(m string) string {
		v, ok := values[m[1:]]
		if !ok {
			t.Fatalf("%s: no value for %s", name, m)
		}
		return v
	})
	var plan []struct{ Plan map[string]any }
	if err := conn.QueryRow(context.Background(), "EXPLAIN (ANALYZE, FORMAT JSON) "+stmt).Scan(&plan); err != nil {
		t.Fatalf("explain %s: %v", name, err)
	}
	var walk func(n map[string]any) int
	walk = func(n map[string]any) int {
		sum := 0
		if rel, _ := n["Relation Name"].(string); rel == "runs" || rel == "trigger_schedules" {
			loops, _ := n["Actual Loops"].(float64)
			rows, _ := n["Actual Rows"].(float64)
			removed, _ := n["Rows Removed by Filter"].(float64)
			sum += int(loops*rows + removed)
		}
		for _, c := range n["Plans"].([]any) {
			sum += walk(c.(map[string]any))
		}
		return sum
	}
	if len(plan) != 1 {
		t.Fatalf("explain %s: %d plans", name, len(plan))
	}
	if _, ok := plan[0].Plan["Plans"]; !ok {
		plan[0].Plan["Plans"] = []any{}
	}
	var fix func(n map[string]any)
	fix = func(n map[string]any) {
		if _, ok := n["Plans"]; !ok {
			n["Plans"] = []any{}
		}
		for _, c := range n["Plans"].([]any) {
			fix(c.(map[string]any))
		}
	}
	fix(plan[0].Plan)
	return walk(plan[0].Plan)
}

// Issue 37: the operator reads cost what they return, not what the history holds. Against
// 3,000 admitted Runs of project a (all queued, as admission writes them) each statement reads at
// most a bound of Runs and schedule rows that does not grow with the history.
func TestOperatorReadsAreBounded(t *testing.T) {
	t.Parallel()
	d, _ := seedLists(t)
	d.Exec(t, `SET session_replication_role = replica;
		INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
		        trigger_revision, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
		SELECT lpad(to_hex(i), 32, '0')::uuid, 'a', 'job', 1, kr.execution_revision_id, 't' || (i % 7 + 1), 1, x.at,
		       control_core.cron_idempotency_key('t' || (i % 7 + 1), 1, x.at), 'queued', 'runtime', x.at + 7, x.at + 7, x.at + 7
		FROM generate_series(1, 3000) i
		CROSS JOIN LATERAL (SELECT 1700000000000 + i * 1000 AS at) x
		JOIN control_core.task_revisions kr ON kr.project_id = 'a' AND kr.task_id = 'job' AND kr.revision = 1;
		UPDATE control_core.trigger_schedules s SET last_scheduled_at_ms = (SELECT max(r.scheduled_for_ms) FROM control_core.runs r
		    WHERE r.project_id = s.project_id AND r.trigger_id = s.trigger_id);
		ANALYZE control_core.runs, control_core.trigger_schedules, control_core.projects`)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.URL("ql_admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET jit = off"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file, stmt string
		values           map[string]string
		max              int
	}{
		// a state no Run is in: one empty range of the state index, in one project or in each
		{"runs list --project a --state failed", "publish.sql", "ListRuns", map[string]string{"project_id": "'a'", "state": "'failed'", "max_rows": "50"}, 0},
		{"runs list --state failed", "publish.sql", "ListRuns", map[string]string{"state": "'failed'", "max_rows": "50"}, 0},
		// a page of the newest, across projects: at most a page per project
		{"runs list", "publish.sql", "ListRuns", map[string]string{"max_rows": "50"}, 4 * 50},
		{"runs list --since the future", "publish.sql", "ListRuns", map[string]string{"since_ms": "4102444800000", "max_rows": "50"}, 0},
		// per project a walk of the due range (every schedule row here: none is initialised), at
		// this size a sequential scan of the 114 rows for each of the 4 projects; no Run
		{"status: backlog", "status.sql", "ProjectBacklog", map[string]string{"cap": "1000"}, 4 * (102 + 7 + 5)},
		// the last admissions: the newest 200 admitted Runs of each project (only a holds Runs)
		{"status: last admissions", "status.sql", "LastAdmits", map[string]string{"walk": "200", "max_admits": "5"}, 200},
	} {
		if got := planRows(t, conn, tc.file, tc.stmt, tc.values); got > tc.max {
			t.Errorf("%s: read %d rows of runs and trigger_schedules; want at most %d", tc.name, got, tc.max)
		}
	}
}

// status and project list count each project's triggers up to admin.CountCap and walk at most
// CountCap rows of its due range, and say so: 1,200 enabled triggers in "big", all due, print as
// "1000+" and set the JSON's partial flags; the small project "a" is exact. The live claims stay
// exact: a replica working the backlog holds its oldest rows, which a walk from the newest end
// never reaches. In "c", 1,100 disabled triggers fill the walk before its one overdue trigger:
// the oldest overdue occurrence is "?", not "-".
func TestStatusAndProjectListStopAtTheCountCap(t *testing.T) {
	t.Parallel()
	d, db := seedLists(t)
	d.Exec(t, `SET session_replication_role = replica;
		INSERT INTO control_core.triggers (project_id, trigger_id, head_revision)
		    SELECT 'big', 'u' || g, 1 FROM generate_series(1, 1200) g;
		INSERT INTO control_core.trigger_revisions (project_id, trigger_id, revision, kind, cron_spec, timezone,
		        misfire_policy, misfire_grace_ms, enabled, task_id, task_revision, content_digest)
		    SELECT 'big', 'u' || g, 1, 'cron', '0 * * * *', 'UTC', 'skip', 60000, true, 'job', 1, repeat('a', 64)
		    FROM generate_series(1, 1200) g;
		INSERT INTO control_core.trigger_schedules (project_id, trigger_id, trigger_revision, next_fire_at_ms, state_version, claim_version, updated_at_ms)
		    SELECT 'big', 'u' || g, 1, control_core.db_now_ms() - 600000 + g, 1, 0, control_core.db_now_ms() FROM generate_series(1, 1200) g;
		UPDATE control_core.trigger_schedules SET claim_owner = 'replica-old', claim_token = gen_random_uuid(), claim_version = 1,
		    claim_expires_at_ms = control_core.db_now_ms() + 600000
		WHERE project_id = 'big' AND trigger_id IN (SELECT 'u' || g FROM generate_series(1, 30) g);
		INSERT INTO control_core.triggers (project_id, trigger_id, head_revision)
		    SELECT 'c', 'off' || g, 1 FROM generate_series(1, 1100) g;
		INSERT INTO control_core.trigger_revisions (project_id, trigger_id, revision, kind, cron_spec, timezone,
		        misfire_policy, misfire_grace_ms, enabled, task_id, task_revision, content_digest)
		    SELECT 'c', 'off' || g, 1, 'cron', '0 * * * *', 'UTC', 'skip', 60000, false, 'job', 1, repeat('a', 64)
		    FROM generate_series(1, 1100) g;
		INSERT INTO control_core.trigger_schedules (project_id, trigger_id, trigger_revision, state_version, claim_version, updated_at_ms)
		    SELECT 'c', 'off' || g, 1, 1, 0, control_core.db_now_ms() FROM generate_series(1, 1100) g;
		UPDATE control_core.trigger_schedules SET next_fire_at_ms = control_core.db_now_ms() - 60000
		WHERE project_id = 'c' AND trigger_id = 't1';
		ANALYZE control_core.trigger_schedules, control_core.trigger_revisions`)
	capped := fmt.Sprintf("%d+", admin.CountCap)

	r := run(t, append([]string{"status"}, db...)...)
	if r.code != 0 {
		t.Fatalf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	big := regexp.MustCompile(`(?m)^big\s+active\s+(\S+)\s+(\S+)\s+(\S+)\s`).FindStringSubmatch(r.stdout)
	// the backlog: the walk's 1,000 rows less the 30 claimed ones, and more beyond
	if big == nil || big[1] != capped || big[2] != capped || big[3] != fmt.Sprintf("%d+", admin.CountCap-30) {
		t.Errorf("status: big's triggers, enabled and backlog %q; want %s, %s, %d+\n%s", big, capped, capped, admin.CountCap-30, r.stdout)
	}
	if !regexp.MustCompile(`(?m)^a\s+active\s+7\s+7\s+7\s`).MatchString(r.stdout) {
		t.Errorf("status: a's counts are not exact (7 7 7)\n%s", r.stdout)
	}
	if !regexp.MustCompile(`(?m)^big\s.*\s30 \(replica-old: 30\)\s`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^replica-old\s+30\s+in `).MatchString(r.stdout) {
		t.Errorf("status: the 30 claims on big's oldest due rows are not counted exactly\n%s", r.stdout)
	}
	if !regexp.MustCompile(`(?m)^c\s+active\s+1000\+\s+5\s+\d+\+\s+\? \(none in the first 1000 due rows\)`).MatchString(r.stdout) {
		t.Errorf("status: c's overdue trigger beyond 1,100 disabled rows is not marked as possibly there\n%s", r.stdout)
	}
	r = run(t, append([]string{"status", "--format", "json"}, db...)...)
	var st struct {
		Projects []struct {
			ProjectID      string `json:"project_id"`
			Triggers       int64  `json:"triggers"`
			Backlog        int64  `json:"backlog"`
			CountsPartial  bool   `json:"counts_partial"`
			BacklogPartial bool   `json:"backlog_partial"`
		} `json:"projects"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --format json: %v\n%s", err, r.stdout)
	}
	for _, p := range st.Projects {
		want := p.ProjectID == "big" || p.ProjectID == "c"
		if p.CountsPartial != want || p.BacklogPartial != want || p.ProjectID == "big" && (p.Triggers != admin.CountCap || p.Backlog != admin.CountCap-30) {
			t.Errorf("status json: %+v; want partial=%v (big: at the cap %d, 30 of its walk claimed)", p, want, admin.CountCap)
		}
	}

	r = run(t, append([]string{"project", "list"}, db...)...)
	if r.code != 0 {
		t.Fatalf("project list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	big = regexp.MustCompile(`(?m)^big\s+active\s+\d+\s+(\S+)\s+(\S+)\s+(\S+)\s`).FindStringSubmatch(r.stdout)
	if big == nil || big[1] != "1" || big[2] != capped || big[3] != capped {
		t.Errorf("project list: big's tasks, triggers, enabled %q; want 1, %s, %s\n%s", big, capped, capped, r.stdout)
	}
}
