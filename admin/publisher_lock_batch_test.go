package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
)

// A publish of several triggers resets their schedule rows one by one, in the order of the specs;
// a batch admit (--admit-batch) locks its rows in the order of its items (the claim's order).
// Both orders are arbitrary with respect to each other, so a publish of [b, a] and an admit of
// [a, b] can each hold one row and wait for the other: PostgreSQL aborts one with 40P01. The admit
// retries a deadlock (coordinator.isSerializationFailure); a publish retried nothing, so `qlsched
// apply` or a multi-trigger publish failed beside a running replica. The test builds the exact
// interleaving: the admit holds a, the publish resets b and waits for a, then the admit locks b.
// The publish waits first, so its deadlock check fires first and it is the one aborted; it must
// come back with its triggers published once the admit has committed.
func TestAMultiTriggerPublishDoesNotFailOnABatchAdmitsLockOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		publish func(f *fixture) error
	}{
		{"publish triggers", func(f *fixture) error {
			_, err := f.pub.PublishTriggers(context.Background(),
				[]admin.TriggerSpec{spec("p", "b", "task", "*/2 * * * *"), spec("p", "a", "task", "*/2 * * * *")})
			return err
		}},
		{"apply", func(f *fixture) error {
			s, err := admin.ParseSchedules("s.yaml", []byte(`schema: qlsched.schedules/v1
projects:
  - id: p
    tasks:
      - id: task
        executor_spec: {image: "example/job:1"}
    triggers:
      - {id: b, task: task, cron: "*/2 * * * *"}
      - {id: a, task: task, cron: "*/2 * * * *"}
`))
			if err != nil {
				return err
			}
			_, err = f.pub.Apply(context.Background(), s, admin.ApplyOptions{})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx := context.Background()
			if _, err := f.pub.PublishTriggers(ctx, []admin.TriggerSpec{spec("p", "a", "task", "* * * * *"), spec("p", "b", "task", "* * * * *")}); err != nil {
				t.Fatal(err)
			}
			lock := func(tx interface {
				Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
			}, trigger string) error {
				_, err := tx.Exec(ctx, `SELECT 1 FROM control_core.trigger_schedules WHERE project_id = 'p' AND trigger_id = $1 FOR UPDATE`, trigger)
				return err
			}
			admit, err := f.d.Pool(t, "").Begin(ctx) // the batch admit's first item: row a
			if err != nil {
				t.Fatal(err)
			}
			defer admit.Rollback(ctx)
			if err := lock(admit, "a"); err != nil {
				t.Fatal(err)
			}
			published := make(chan error, 1) // b reset, then waiting for a
			go func() { published <- tc.publish(f) }()
			eventually.True(t, 30*time.Second, "the publish waits for row a", func() bool {
				return f.count(`SELECT count(*) FROM pg_stat_activity
				                 WHERE wait_event_type = 'Lock' AND query LIKE '%reset_schedule%' AND datname = current_database()`) == 1
			})
			// the admit's second item: row b, which the publish holds
			if err := lock(admit, "b"); err != nil {
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
					t.Fatalf("the admit's second row: %v", err)
				}
				_ = admit.Rollback(ctx) // the admit was the victim: it retries (not this test's subject)
			} else if err := admit.Commit(ctx); err != nil {
				t.Fatalf("admit commit: %v", err)
			}
			if err := <-published; err != nil {
				t.Fatalf("the publish beside a batch admit: %v", err)
			}
			if n := f.count(`SELECT count(*) FROM control_core.trigger_revisions tr JOIN control_core.triggers t USING (project_id, trigger_id)
			                  WHERE tr.project_id = 'p' AND tr.revision = t.head_revision AND tr.cron_spec = '*/2 * * * *'`); n != 2 {
				t.Fatalf("%d triggers at the new spec, want 2", n)
			}
		})
	}
}
