package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/schedule"
)

// A batch admit never waits for a publish of its project (review of the lock order, checked
// sound): the publish holds the project's row (lock_project, FOR NO KEY UPDATE since pg-0026) and
// then resets schedule rows; the admit locks its schedule rows and checks the Runs' foreign key
// to the project (FOR KEY SHARE), which that lock does not block. Were it FOR UPDATE, the admit
// would wait for the project while holding rows the publish resets next: a lock cycle whatever
// the rows' order. The test stalls the publish between its project lock and its first reset
// (another session holds the task's row, which the publish reads FOR SHARE), admits the batch,
// which must commit meanwhile, then releases the publish and counts the database's deadlocks.
func TestABatchAdmitAndAPublishOfTheProjectDoNotDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, s := dueFixture(t, time.Second, "a", "b")
	claims := must(s.ClaimBatch(ctx, "batcher", 30*time.Second, 10)).of(t)
	if len(claims) != 2 {
		t.Fatalf("batch claimed %d rows, want 2", len(claims))
	}
	deadlocks := func() int {
		return f.count(`SELECT deadlocks::integer FROM pg_stat_database WHERE datname = current_database()`)
	}
	before := deadlocks()

	hold, err := f.su.Begin(ctx) // stalls the publish after lock_project, before its first reset
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx) //nolint:errcheck // released below
	if _, err := hold.Exec(ctx, `SELECT 1 FROM control_core.tasks WHERE project_id = 'p' AND task_id = 'task' FOR NO KEY UPDATE`); err != nil {
		t.Fatal(err)
	}
	published := make(chan error, 1)
	go func() {
		_, err := f.admin.PublishTriggers(ctx, []admin.TriggerSpec{
			{Project: "p", Trigger: "a", Task: "task", Cron: "*/2 * * * *", TimeZone: "UTC", Misfire: schedule.MisfireSkip, Enabled: true},
			{Project: "p", Trigger: "b", Task: "task", Cron: "*/2 * * * *", TimeZone: "UTC", Misfire: schedule.MisfireSkip, Enabled: true}})
		published <- err
	}()
	waiting := func(like string) func() bool {
		return func() bool {
			var n int
			err := f.su.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
				AND query LIKE $1 AND datname = current_database()`, like).Scan(&n)
			return err == nil && n == 1
		}
	}
	eventually.True(t, 30*time.Second, "the publish holds the project and waits for the task", waiting("%GetTaskHead%"))
	admitted := make(chan []AdmitResult, 1)
	go func() { admitted <- s.AdmitBatch(ctx, items(claims, 60_000), 3) }()
	select {
	case res := <-admitted:
		for i, r := range res {
			if r.Err != nil || r.Outcome != Written {
				t.Fatalf("admit %s while the publish holds the project: %v %v", claims[i].TriggerID, r.Outcome, r.Err)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the admit waits for the publish's project lock (it holds its schedule rows meanwhile: a lock cycle with the publish's resets)")
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-published; err != nil {
		t.Fatalf("publish: %v", err)
	}
	if n := deadlocks() - before; n != 0 {
		t.Errorf("%d deadlock(s) between the batch admit and the publish: the admit locks schedule rows before it waits for the project's row, which the publish holds while it resets them", n)
	}
}
