package coordinator

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/schedule"
)

// Under the store's settings (generic plan, joins in written order) and with large projects,
// task_revisions and execution_revisions tables, the admit's project/execution/task sets reach
// their rows by primary key, not by a scan of the whole table (which would recompute every row's
// digest on every admit).
func TestAdmitSetsUseKeysOnLargeTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	for i := range 50 {
		f.trigger(fmt.Sprintf("t%03d", i), "* * * * *", schedule.MisfireSkip)
	}
	const n = 50000
	f.d.Exec(t, fmt.Sprintf(`SET session_replication_role = replica;
		INSERT INTO control_core.projects (project_id, state, revision, content_digest, created_at_ms, updated_at_ms)
		    SELECT 'x' || g, 'active', 1, control_core.project_digest('x' || g, 'active', 1), 1, 1 FROM generate_series(1, %[1]d) g;
		INSERT INTO control_core.execution_revisions (execution_revision_id, project_id, executor_kind, spec, digest, created_at_ms)
		    SELECT gen_random_uuid(), 'x' || g, 'remote_worker', jsonb_build_object('g', g), control_core.execution_digest(jsonb_build_object('g', g)), 1
		    FROM generate_series(1, %[1]d) g;
		INSERT INTO control_core.task_revisions (project_id, task_id, revision, execution_revision_id, content_digest, created_at_ms)
		    SELECT er.project_id, 'k', 1, er.execution_revision_id, repeat('a', 64), 1 FROM control_core.execution_revisions er WHERE er.project_id LIKE 'x%%';
		ANALYZE;`, n))
	conn := must(f.rt.Pool().Acquire(ctx)).of(t)
	defer conn.Release()
	if _, err := conn.Exec(ctx, "PREPARE admit AS "+testpg.Query(t, "Admit")); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "BEGIN; "+admitSettings); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(ctx, "ROLLBACK") }()
	for _, size := range []int{1, 128, 256} {
		plan := explain(t, conn, "EXPLAIN "+executeAdmitOfNulls(size))
		for _, table := range []string{"projects", "task_revisions", "execution_revisions"} {
			if strings.Contains(plan, "Seq Scan on "+table) {
				t.Errorf("batch of %d: a sequential scan of %s (%d rows):\n%s", size, table, n, plan)
			}
		}
		t.Logf("batch of %d:\n%s", size, plan)
	}
}

// The same claim twice in one batch (a second project with its own task "task" revision 1 on
// another execution revision alongside): one Run, the duplicate a race, as before the sets.
func TestBatchAdmitOfTheSameClaimTwiceWritesOneRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	if _, err := f.admin.CreateProject(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.PublishTask(ctx, admin.TaskSpec{Project: "q", Task: "task",
		ExecutorSpec: []byte(`{"image":"example/job:2"}`)}); err != nil {
		t.Fatal(err)
	}
	f.trigger("a", "* * * * *", schedule.MisfireSkip)
	f.setCursor("a", -2*time.Second)
	s := NewStore(f.rt)
	claims := claimAll(t, s, "replica", 30*time.Second, 1)
	its := items(claims, 60_000)
	dup := its[0]
	dup.RunID = RunIDs()()
	res := s.AdmitBatch(ctx, append(its, dup), 3)
	if res[0].Outcome != Written || res[1].Outcome != Race || res[0].Err != nil || res[1].Err != nil {
		t.Errorf("the claim and its duplicate: %+v; want written, then race", res)
	}
	if n := f.audit(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}

// Many task revisions share one execution revision (execution_revisions are unique per
// (project, digest), so every task of a project with the same executor spec shares one). The
// admit's task set starts from the items' task keys, so it reads, and recomputes the digest of,
// the items' task revisions only: built from task_revisions JOIN execution instead (the written
// order join_collapse_limit=1 keeps), it read every task revision on the items' execution
// revision, on every admit (found by a hostile review: 20× slower at 100,000 task revisions).
func TestAdmitTaskSetReadsOnlyTheItemsTaskRevisions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	for i := range 300 {
		f.trigger(fmt.Sprintf("t%03d", i), "* * * * *", schedule.MisfireSkip)
	}
	const n = 20000
	f.d.Exec(t, fmt.Sprintf(`SET session_replication_role = replica;
		INSERT INTO control_core.tasks (project_id, task_id, head_revision, created_at_ms, updated_at_ms)
		    SELECT 'p', 'k' || g, 1, 1, 1 FROM generate_series(1, %[1]d) g;
		INSERT INTO control_core.task_revisions (project_id, task_id, revision, execution_revision_id, content_digest, created_at_ms)
		    SELECT 'p', 'k' || g, 1, er.execution_revision_id, control_core.task_digest('k' || g, 1, er.execution_revision_id, er.digest), 1
		    FROM generate_series(1, %[1]d) g, control_core.execution_revisions er;
		ANALYZE;`, n))
	f.exec(`UPDATE control_core.trigger_schedules SET next_fire_at_ms = control_core.db_now_ms() - 2000, state_version = state_version + 1`)
	s := NewStore(f.rt)
	claims := claimAll(t, s, "replica", 60*time.Second, 128)
	its := items(claims, 60_000)
	conn := must(f.rt.Pool().Acquire(ctx)).of(t)
	defer conn.Release()
	if _, err := conn.Exec(ctx, "PREPARE admit AS "+testpg.Query(t, "Admit")); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL SERIALIZABLE; "+admitSettings); err != nil {
		t.Fatal(err)
	}
	plan := explain(t, conn, admitExplainStatement(admitParams(its)))
	_, _ = conn.Exec(ctx, "ROLLBACK")
	if read := taskSetRead(t, plan); read != 1 {
		t.Errorf("one admit of 128 items, all naming 1 task revision, read %d task revisions and recomputed their digests:\n%s",
			read, plan[strings.Index(plan, "CTE task"):strings.Index(plan, "CTE verified")])
	}
}

// admitExplainStatement is EXPLAIN ANALYZE of the prepared statement admit with p's arrays
// written out as literals (EXPLAIN EXECUTE takes no bind parameters), so the plan is the one the
// store's settings give the prepared statement.
func admitExplainStatement(p db.AdmitParams) string {
	lit := func(typ string, vs any) string {
		var el []string
		switch v := vs.(type) {
		case []string:
			for _, x := range v {
				el = append(el, "'"+strings.ReplaceAll(x, "'", "''")+"'")
			}
		case []int64:
			for _, x := range v {
				el = append(el, fmt.Sprint(x))
			}
		case []uuid.UUID:
			for _, x := range v {
				el = append(el, "'"+x.String()+"'")
			}
		}
		return "ARRAY[" + strings.Join(el, ",") + "]::" + typ + "[]"
	}
	exec := "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY ON) EXECUTE admit(" + strings.Join([]string{
		lit("text", p.RowCtids), lit("text", p.ProjectIds), lit("text", p.TriggerIds), lit("text", p.ClaimOwners), lit("uuid", p.ClaimTokens),
		lit("bigint", p.ClaimVersions), lit("bigint", p.TriggerRevisions), lit("bigint", p.StateVersions), lit("bigint", p.CursorsMs),
		lit("bigint", p.ScheduledForMs), lit("bigint", p.NextFireAtMs), lit("bigint", p.ClaimedAtMs), lit("bigint", p.ProjectRevisions),
		lit("text", p.ProjectDigests), lit("text", p.TriggerDigests), lit("text", p.TaskDigests), lit("uuid", p.ExecutionRevisionIds),
		lit("text", p.ExecutionDigests), lit("text", p.TaskIds), lit("bigint", p.TaskRevisions), lit("uuid", p.RunIds),
		lit("bigint", p.Missed), lit("bigint", p.LastMissedMs)}, ", ") + ")"
	return exec
}

// taskSetRead is how many task_revisions rows the admit's task set read (EXPLAIN ANALYZE).
func taskSetRead(t *testing.T, plan string) int {
	t.Helper()
	from, to := strings.Index(plan, "CTE task"), strings.Index(plan, "CTE verified")
	if from < 0 || to < from {
		t.Fatalf("no task set in the plan:\n%s", plan)
	}
	m := regexp.MustCompile(`(?:Seq Scan on|Index Scan using \S+ on|Bitmap Heap Scan on) task_revisions kr \(actual rows=(\d+)`).FindStringSubmatch(plan[from:to])
	if m == nil {
		t.Fatalf("no read of task_revisions in the task set:\n%s", plan[from:to])
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
