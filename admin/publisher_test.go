package admin_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
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
	f := &fixture{t: t, d: d, pub: admin.NewPublisher(d.Handle(t, "ql_admin"))}
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

// A publish reads the heads of the triggers it names by their keys, however many triggers the
// project has: on one of 20,000, the read of 1 trigger (ChangeTrigger's) and of 20 runs no scan
// of a trigger table that is not bounded by trigger_id, in the publisher's own sessions
// (plan_cache_mode auto: custom plans, then maybe the generic one) and in either plan forced.
// Before, the generic plan of one trigger's read scanned all 20,000 (18 ms each). From about 100
// named triggers of these 20,000 the custom plan joins a scan of the project's schedule rows
// instead (the planner's cost choice, once per PublishTriggers call: 5 ms at 100, 9 ms at 1,000).
func TestTriggerHeadsAreReadByKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	const triggers = 20000
	f.d.Exec(t, fmt.Sprintf(`SET session_replication_role = replica;
		INSERT INTO control_core.triggers (project_id, trigger_id, head_revision, created_at_ms, updated_at_ms)
		    SELECT 'p', 'b' || g, 1, 1, 1 FROM generate_series(1, %[1]d) g;
		INSERT INTO control_core.trigger_revisions (project_id, trigger_id, revision, kind, cron_spec, timezone, misfire_policy,
		    misfire_grace_ms, enabled, task_id, task_revision, content_digest, created_at_ms)
		    SELECT 'p', 'b' || g, 1, 'cron', '* * * * *', 'UTC', 'skip', 60000, true, 'task', 1, repeat('a', 64), 1
		    FROM generate_series(1, %[1]d) g;
		INSERT INTO control_core.trigger_schedules (project_id, trigger_id, trigger_revision, state_version, claim_version, updated_at_ms)
		    SELECT 'p', 'b' || g, 1, 1, 0, 1 FROM generate_series(1, %[1]d) g;
		ANALYZE;`, triggers))
	conn, err := f.d.Pool(t, "ql_admin").Acquire(ctx) // the publisher's kind of session
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	query := testpg.Query(t, "GetTriggerHeads")
	for _, named := range []int{1, 20} {
		ids := make([]string, named)
		for i := range ids {
			ids[i] = fmt.Sprintf("b%d", 1+i*triggers/named)
		}
		execute := fmt.Sprintf("EXECUTE heads('p', '{%s}')", strings.Join(ids, ","))
		for _, mode := range []struct {
			name, set string
			runs      int
		}{
			{"auto", "RESET plan_cache_mode", 8},
			{"generic", "SET plan_cache_mode = force_generic_plan", 1},
			{"custom", "SET plan_cache_mode = force_custom_plan", 1},
		} {
			if _, err := conn.Exec(ctx, mode.set+"; PREPARE heads AS "+query); err != nil {
				t.Fatal(err)
			}
			for run := range mode.runs {
				plan, rows, unbounded := readsByKey(t, conn, execute)
				if unbounded != "" || rows != named {
					t.Errorf("%d of %d triggers, plan_cache_mode %s, run %d: %d rows; %s\n%s; want %d rows, every trigger table read by trigger_id",
						named, triggers, mode.name, run+1, rows, unbounded, plan, named)
					break
				}
			}
			if _, err := conn.Exec(ctx, "RESET plan_cache_mode; DEALLOCATE heads"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// readsByKey runs EXPLAIN ANALYZE of a statement and returns the plan (a line per node), the rows
// it returned and the first scan that ran on a trigger table unbounded by trigger_id ("" if none).
func readsByKey(t *testing.T, conn *pgxpool.Conn, statement string) (plan string, rows int, unbounded string) {
	t.Helper()
	var doc []struct{ Plan planNode }
	if err := conn.QueryRow(context.Background(), "EXPLAIN (ANALYZE, FORMAT JSON) "+statement).Scan(&doc); err != nil || len(doc) != 1 {
		t.Fatalf("EXPLAIN ANALYZE %s: %v", statement, err)
	}
	var lines []string
	var walk func(n planNode, depth int)
	walk = func(n planNode, depth int) {
		line := fmt.Sprintf("%s%s %s (loops %d) %s %s", strings.Repeat("  ", depth), n.NodeType, n.RelationName, n.Loops, n.IndexCond, n.Filter)
		lines = append(lines, line)
		keyed := strings.Contains(n.IndexCond, "trigger_id") || strings.Contains(n.RecheckCond, "trigger_id")
		if strings.HasPrefix(n.RelationName, "trigger") && n.Loops > 0 && !keyed && unbounded == "" {
			unbounded = strings.TrimSpace(line)
		}
		for _, c := range n.Plans {
			walk(c, depth+1)
		}
	}
	walk(doc[0].Plan, 0)
	return strings.Join(lines, "\n"), int(doc[0].Plan.Rows), unbounded
}

// planNode is what readsByKey reads of a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexCond    string     `json:"Index Cond"`
	RecheckCond  string     `json:"Recheck Cond"`
	IndexName    string     `json:"Index Name"`
	Filter       string     `json:"Filter"`
	Loops        int        `json:"Actual Loops"`
	Rows         float64    `json:"Actual Rows"` // PostgreSQL 18 writes it with two decimals
	Plans        []planNode `json:"Plans"`
}

// PublishTriggers reads the heads of the triggers it names in one statement, however many they
// are, and publishes each as PublishTrigger would: 300 new triggers get revision 1, the same list
// again writes nothing at all, and with every third cron changed only those 100 get revision 2.
// ChangeTrigger reads its one head once too.
func TestPublishTriggersReadsTheHeadsOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	reads := &headReads{}
	cfg := f.d.Config(t, "ql_admin")
	cfg.Pool.ConnConfig.Tracer = reads
	pool, err := cfg.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	pub := admin.NewPublisher(pool)
	list := func(changed func(i int) bool) []admin.TriggerSpec {
		specs := make([]admin.TriggerSpec, 300)
		for i := range specs {
			cron := "@hourly"
			if changed(i) {
				cron = "@daily"
			}
			specs[i] = spec("p", fmt.Sprintf("t%03d", i), "task", cron)
		}
		return specs
	}
	none := func(int) bool { return false }
	third := func(i int) bool { return i%3 == 0 }
	for _, tc := range []struct {
		name      string
		specs     []admin.TriggerSpec
		revision  func(i int) int64 // each trigger's revision after the call; 0: unchanged
		revisions int               // revisions written
	}{
		{"300 new", list(none), func(int) int64 { return 1 }, 300},
		{"the same again", list(none), func(int) int64 { return 0 }, 0},
		{"every third changed", list(third), func(i int) int64 {
			if third(i) {
				return 2
			}
			return 0
		}, 100},
	} {
		writes, before := f.writes(), reads.n.Load()
		out, err := pub.PublishTriggers(ctx, tc.specs)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if n := reads.n.Load() - before; n != 1 {
			t.Errorf("%s: %d head reads; want 1", tc.name, n)
		}
		written := 0
		for i, pub := range out {
			want := tc.revision(i)
			if (want == 0) != pub.Unchanged || (want != 0 && pub.Revision != want) || pub.TriggerID != tc.specs[i].Trigger {
				t.Errorf("%s: %s published %+v; want revision %d (0: unchanged)", tc.name, tc.specs[i].Trigger, pub, want)
			}
			if !pub.Unchanged {
				written++
			}
		}
		if written != tc.revisions || (tc.revisions == 0 && f.writes() != writes) {
			t.Errorf("%s: %d revisions, writes %d → %d; want %d revisions (none: nothing written)", tc.name, written, writes, f.writes(), tc.revisions)
		}
	}
	before := reads.n.Load()
	cron := "@weekly"
	if _, err := pub.ChangeTrigger(ctx, admin.TriggerChange{Project: "p", Trigger: "t001", Cron: &cron}); err != nil {
		t.Fatal(err)
	}
	if n := reads.n.Load() - before; n != 1 {
		t.Errorf("ChangeTrigger: %d head reads; want 1", n)
	}
}

// headReads counts the trigger head reads (GetTriggerHeads) a pool's sessions send.
type headReads struct{ n atomic.Int64 }

func (h *headReads) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "-- name: GetTriggerHeads ") {
		h.n.Add(1)
	}
	return ctx
}

func (h *headReads) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
