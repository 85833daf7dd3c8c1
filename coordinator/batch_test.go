package coordinator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/admin"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/schedule"
)

func items(claims []*Claim, period int64) []AdmitItem {
	out := make([]AdmitItem, len(claims))
	for i, c := range claims {
		out[i] = AdmitItem{Claim: c, ScheduledFor: *c.CursorMs, Next: *c.CursorMs + period, RunID: uuid.New()}
	}
	return out
}

// In one batch, every row is verified on its own: a good row commits, a corrupt one and one whose
// fence was lost write nothing and are classified each on its own.
func TestBatchAdmitVerifiesEachRowOnItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, s := dueFixture(t, time.Second, "a", "b", "c")
	claims := must(s.ClaimBatch(ctx, "batcher", 30*time.Second, 10)).of(t)
	if len(claims) != 3 {
		t.Fatalf("batch claimed %d rows, want 3", len(claims))
	}
	tokens := map[uuid.UUID]bool{}
	for _, c := range claims {
		tokens[c.Fence.Token] = true
	}
	if len(tokens) != 3 {
		t.Errorf("%d distinct claim tokens for 3 rows: each row needs its own fence", len(tokens))
	}
	f.exec(`UPDATE control_core.trigger_revisions SET cron_spec = '*/2 * * * *' WHERE trigger_id = 'b'`) // behind its digest
	f.expireClaim("c")
	if c := must(s.Claim(ctx, "other", 30*time.Second)).of(t); c == nil || c.TriggerID != "c" {
		t.Fatalf("takeover of c: %v", c)
	}
	res := s.AdmitBatch(ctx, items(claims, 60_000), 3)
	got := map[string]Outcome{}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("%s: %v", claims[i].TriggerID, r.Err)
		}
		got[claims[i].TriggerID] = r.Outcome
	}
	if got["a"] != Written || got["b"] != Corrupt || got["c"] != Race {
		t.Errorf("outcomes %v, want a written, b corrupt, c race", got)
	}
	if n := f.audit(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}

// The admit reads the project, task and execution revisions once per batch (Admit's project,
// execution and task sets); every item is still checked against its own. A batch over two
// projects and three tasks, one task's execution spec edited behind its digest: that task's row
// is refused as corrupt, the rows of the other tasks, in both projects, are written.
func TestBatchAdmitChecksEachItemsOwnRevisionsAcrossProjectsAndTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	if _, err := f.admin.CreateProject(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	for _, tk := range []struct{ project, task, image string }{{"p", "other", "example/other:1"}, {"q", "task", "example/q:1"}} {
		if _, err := f.admin.PublishTask(ctx, admin.TaskSpec{Project: tk.project, Task: tk.task,
			ExecutorSpec: []byte(`{"image":"` + tk.image + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tr := range []struct{ project, trigger, task string }{{"p", "a", "task"}, {"p", "b", "other"}, {"q", "c", "task"}} {
		if _, err := f.admin.PublishTrigger(ctx, admin.TriggerSpec{Project: tr.project, Trigger: tr.trigger, Task: tr.task,
			Cron: "* * * * *", TimeZone: "UTC", Misfire: schedule.MisfireSkip, Enabled: true}); err != nil {
			t.Fatal(err)
		}
	}
	f.exec(`UPDATE control_core.trigger_schedules SET next_fire_at_ms = control_core.db_now_ms() / 60000 * 60000,
		state_version = state_version + 1`)
	s := NewStore(f.rt)
	claims := claimAll(t, s, "batcher", 30*time.Second, 3)
	f.exec(`UPDATE control_core.execution_revisions SET spec = spec || '{"tampered": true}' WHERE execution_revision_id =
		(SELECT execution_revision_id FROM control_core.task_revisions WHERE project_id = 'p' AND task_id = 'other')`)
	got := map[string]Outcome{}
	for i, r := range s.AdmitBatch(ctx, items(claims, 60_000), 3) {
		if r.Err != nil {
			t.Fatalf("%s/%s: %v", claims[i].ProjectID, claims[i].TriggerID, r.Err)
		}
		got[claims[i].ProjectID+"/"+claims[i].TriggerID] = r.Outcome
	}
	if got["p/a"] != Written || got["p/b"] != Corrupt || got["q/c"] != Written {
		t.Errorf("outcomes %v, want p/a written, p/b corrupt, q/c written", got)
	}
}

// A write fault on one row aborts the batch's transaction; the rows are then admitted one by one,
// so the others commit and the faulty one writes nothing and keeps its claim.
func TestBatchAdmitIsolatesAWriteFault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, s := dueFixture(t, time.Second, "a", "b", "c")
	f.exec(`ALTER TABLE control_core.runs ADD CONSTRAINT injected_fault CHECK (trigger_id <> 'b')`)
	claims := must(s.ClaimBatch(ctx, "batcher", 30*time.Second, 3)).of(t)
	res := s.AdmitBatch(ctx, items(claims, 60_000), 3)
	for i, r := range res {
		bad := claims[i].TriggerID == "b"
		if bad != (r.Err != nil) || (!bad && r.Outcome != Written) {
			t.Errorf("%s: outcome %q err %v", claims[i].TriggerID, r.Outcome, r.Err)
		}
	}
	if n := f.audit(); n != 2 {
		t.Errorf("%d runs, want 2 (a and c)", n)
	}
	if f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE trigger_id = 'b' AND claim_owner = 'batcher'`) != 1 {
		t.Error("b's claim did not survive its failed admit")
	}
}

// The coordinator-level guarantees hold in batch mode too: one claim per row at initialisation,
// exactly one Run per occurrence across two replicas, Run identities only for admits, the budget.
func TestBatchModeReplicasAdmitEachOccurrenceOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	const n = 40
	for i := range n {
		// yearly, months away (farYearly): an admitted row's next occurrence cannot come due
		// while the test runs, so "every row claimed once" is exact even across a minute boundary
		// (and across New Year's midnight, which made @yearly rows due again)
		f.trigger(fmt.Sprintf("t%02d", i), farYearly(), schedule.MisfireFireOnce)
	}
	batch := func(c *Config) { c.Budget, c.AdmitBatch = 16, 8 }
	var allocated sync.Map
	ids := []Option{WithRunIDs(func() uuid.UUID { id := uuid.New(); allocated.Store(id, true); return id })}
	a, b := f.coordinatorWith("replica-a", f.d.Handle(t, "ql_runtime"), ids, batch), f.coordinatorWith("replica-b", f.d.Handle(t, "ql_runtime"), ids, batch)
	rounds := func() {
		for a.Stats.Claims.Load()+b.Stats.Claims.Load() < n {
			var wg sync.WaitGroup
			for _, co := range []*Coordinator{a, b} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if got := co.Round(ctx, nil); got > 16 {
						t.Errorf("a round claimed %d, budget 16", got)
					}
				}()
			}
			wg.Wait()
		}
	}
	rounds()
	if claims := a.Stats.Claims.Load() + b.Stats.Claims.Load(); claims != n {
		t.Errorf("initialisation: %d claims for %d rows", claims, n)
	}
	f.exec(`UPDATE control_core.trigger_schedules SET next_fire_at_ms = control_core.db_now_ms() - 1000`) // all due now
	a.Stats.Claims.Store(0)
	b.Stats.Claims.Store(0)
	rounds()
	admits := a.Stats.Admits.Load() + b.Stats.Admits.Load()
	count := 0
	allocated.Range(func(any, any) bool { count++; return true })
	if admits != n || int64(count) != admits {
		t.Errorf("%d admits, %d run identities allocated; want %d each", admits, count, n)
	}
	if runs := f.audit(); runs != n {
		t.Errorf("%d runs, want %d", runs, n)
	}
}

// The admission statement reaches every schedule row by its ctid (a TID scan takes no predicate
// lock on an index page under SERIALIZABLE, see Admit), in the generic plan a prepared statement
// settles on and in the custom plans before it, for a full batch and for the single row.
func TestAdmitAddressesRowsByTID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	for i := range 300 {
		f.trigger(fmt.Sprintf("t%03d", i), "* * * * *", schedule.MisfireSkip)
	}
	f.exec(`ANALYZE`)
	conn := must(f.rt.Pool().Acquire(ctx)).of(t)
	defer conn.Release()
	if _, err := conn.Exec(ctx, "PREPARE admit AS "+testpg.Query(t, "Admit")); err != nil {
		t.Fatal(err)
	}
	statements := map[string]string{"batch of 256": executeAdmitOfNulls(256), "single row": executeAdmitOfNulls(1)}
	tidOnly := func(plan string) bool {
		return strings.Count(plan, "Tid Scan on trigger_schedules") == 2 && !strings.Contains(plan, "Index Scan using trigger_schedules") &&
			!strings.Contains(plan, "Seq Scan on trigger_schedules")
	}
	for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		for name, execute := range statements {
			if plan := explain(t, conn, "EXPLAIN "+execute); !tidOnly(plan) {
				t.Errorf("%s: the admit of a %s does not reach trigger_schedules by TID scans only:\n%s", mode, name, plan)
			}
		}
	}
	// and under the settings the store runs it with (joins in the written order)
	if _, err := conn.Exec(ctx, "RESET plan_cache_mode; BEGIN; "+admitSettings); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(ctx, "ROLLBACK") }()
	for name, execute := range statements {
		if plan := explain(t, conn, "EXPLAIN "+execute); !tidOnly(plan) {
			t.Errorf("store's settings: the admit of a %s does not reach trigger_schedules by TID scans only:\n%s", name, plan)
		}
	}
}

// executeAdmitOfNulls executes the prepared statement admit with n placeholder items (every
// array n NULLs of its type): a plan's shape depends on the batch size, not on the values.
func executeAdmitOfNulls(n int) string {
	var args []string
	for _, typ := range []string{"text", "text", "text", "text", "uuid", "bigint", "bigint", "bigint", "bigint",
		"bigint", "bigint", "bigint", "bigint", "text", "text", "text", "uuid", "text", "text", "bigint", "uuid", "bigint", "bigint"} {
		args = append(args, fmt.Sprintf("array_fill(NULL::%s, ARRAY[%d])", typ, n))
	}
	return "EXECUTE admit(" + strings.Join(args, ", ") + ")"
}

func explain(t *testing.T, conn *pgxpool.Conn, sql string) string {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
