package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
)

// A publish holding its project's lock never deadlocks with an admit of the same project (the
// PostgreSQL 17 matrix saw `trigger disable` fail with 40P01). The admit locks the schedule row
// (the verified CTE's FOR UPDATE OF s), then inserts the Run, whose foreign key on projects takes
// FOR KEY SHARE of the project row; the publish holds the project lock and then waits for the
// schedule row in reset_schedule. lock_project took the project FOR UPDATE, which a key-share
// waits for: a cycle. Since pg-0026 it takes FOR NO KEY UPDATE, which still serialises publishes
// and pauses of a project but lets the admits' key checks through. The test builds the exact
// interleaving: the schedule row locked first, the publish waiting on it, then the Run inserted.
func TestAPublishWaitingOnAnAdmitDoesNotDeadlockIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.pub.PublishTrigger(ctx, spec("p", "a", "task", "* * * * *")); err != nil {
		t.Fatal(err)
	}

	admit, err := f.d.Pool(t, "").Begin(ctx) // as the admit does: the schedule row first
	if err != nil {
		t.Fatal(err)
	}
	defer admit.Rollback(ctx)
	if _, err := admit.Exec(ctx, `SELECT 1 FROM control_core.trigger_schedules WHERE project_id = 'p' AND trigger_id = 'a' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	disabled := make(chan error, 1) // a real publish: the project lock, the head, then the schedule row
	go func() {
		_, err := f.pub.DisableTrigger(ctx, "p", "a")
		disabled <- err
	}()
	eventually.True(t, 30*time.Second, "the publish waits for the schedule row", func() bool {
		return f.count(`SELECT count(*) FROM pg_stat_activity
		                 WHERE wait_event_type = 'Lock' AND query LIKE '%reset_schedule%' AND datname = current_database()`) == 1
	})

	// The admit's Run: its key check on projects must not wait for the publish's lock.
	if _, err := admit.Exec(ctx, `INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision,
		        execution_revision_id, trigger_id, trigger_revision, scheduled_for_ms, idempotency_key, state, owner,
		        queued_at_ms, created_at_ms, updated_at_ms)
		SELECT $1, 'p', 'task', 1, kr.execution_revision_id, 'a', 1, 60000, 'ql3:cron:v1:a:1:60000', 'queued', 'runtime',
		       60250, 60250, 60250
		FROM control_core.task_revisions kr WHERE kr.project_id = 'p' AND kr.task_id = 'task' AND kr.revision = 1`,
		uuid.New()); err != nil {
		t.Fatalf("the admit's Run while a publish holds the project lock: %v", err)
	}
	if err := admit.Commit(ctx); err != nil {
		t.Fatalf("admit commit: %v", err)
	}
	if err := <-disabled; err != nil {
		t.Fatalf("the publish after the admit committed: %v", err)
	}
}
