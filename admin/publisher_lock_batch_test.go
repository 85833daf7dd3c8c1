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

// A publish of several triggers resets their schedule rows one by one; a batch admit
// (--admit-batch) locks its rows in the claim's order, cursor first (next_fire_at_ms, project_id,
// trigger_id). No fixed order of the publish matches cursors that differ, so a publish of a then b
// and an admit of b (the earlier cursor) then a can each hold one row and wait for the other:
// PostgreSQL aborts one with 40P01. The admit retries a deadlock (coordinator); a publish retried
// nothing, so `qlsched apply` or a multi-trigger publish failed beside a running replica. The test
// builds the exact interleaving: the admit holds b, the publish resets a and waits for b, then the
// admit locks a. The publish waits first, so its deadlock check fires first and it is the one
// aborted; it must come back with its triggers published once the admit has committed.
func TestAMultiTriggerPublishDoesNotFailOnABatchAdmitsLockOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range multiPublishes {
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
			admit, err := f.d.Pool(t, "").Begin(ctx) // the batch admit's first item: row b
			if err != nil {
				t.Fatal(err)
			}
			defer admit.Rollback(ctx)
			if err := lock(admit, "b"); err != nil {
				t.Fatal(err)
			}
			published := make(chan error, 1) // a reset, then waiting for b
			go func() { published <- tc.publish(f) }()
			eventually.True(t, 30*time.Second, "the publish waits for row b", func() bool {
				return f.count(`SELECT count(*) FROM pg_stat_activity
				                 WHERE wait_event_type = 'Lock' AND query LIKE '%reset_schedule%' AND datname = current_database()`) == 1
			})
			// the admit's second item: row a, which the publish holds
			if err := lock(admit, "a"); err != nil {
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

// The other interleaving of the same two orders, where the runtime's side is aborted: the publish
// resets b, the initialisation (InitClaimed, not retried: its claims are lost for a lease) locks a
// and waits for b, then the publish reaches a. The initialisation waited first, so it is the one
// PostgreSQL aborts. Publishing the triggers in the claim's order of one cursor (by trigger id;
// a reset row's cursor is NULL) takes a before b, so the publish never holds b while a is locked
// by the runtime. A third transaction holds trigger a's head row (as archive_trigger does) to stop
// the publish between its two triggers.
func TestAMultiTriggerPublishLocksScheduleRowsInTheClaimsOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range multiPublishes {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testPublishInClaimOrder(t, tc.publish)
		})
	}
}

func testPublishInClaimOrder(t *testing.T, publish func(f *fixture) error) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.pub.PublishTriggers(ctx, []admin.TriggerSpec{spec("p", "a", "task", "* * * * *"), spec("p", "b", "task", "* * * * *")}); err != nil {
		t.Fatal(err)
	}
	pool := f.d.Pool(t, "")
	blocker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx)
	if _, err := blocker.Exec(ctx, `SELECT 1 FROM control_core.triggers WHERE project_id = 'p' AND trigger_id = 'a' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	published := make(chan error, 1)
	go func() { published <- publish(f) }()
	eventually.True(t, 30*time.Second, "the publish waits for trigger a's head", func() bool {
		return f.count(`SELECT count(*) FROM pg_stat_activity
		                 WHERE wait_event_type = 'Lock' AND query LIKE '%BumpTriggerHead%' AND datname = current_database()`) == 1
	})
	init, err := pool.Begin(ctx) // the initialisation's items in claim order: a, then b
	if err != nil {
		t.Fatal(err)
	}
	defer init.Rollback(ctx)
	if _, err := init.Exec(ctx, `UPDATE control_core.trigger_schedules SET updated_at_ms = updated_at_ms WHERE project_id = 'p' AND trigger_id = 'a'`); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		_, err := init.Exec(ctx, `UPDATE control_core.trigger_schedules SET updated_at_ms = updated_at_ms /* init b */ WHERE project_id = 'p' AND trigger_id = 'b'`)
		second <- err
	}()
	var initErr error
	done := false
	eventually.True(t, 30*time.Second, "the initialisation has row b or waits for it", func() bool {
		select {
		case initErr = <-second:
			done = true
			return true
		default:
			return f.count(`SELECT count(*) FROM pg_stat_activity
			                 WHERE wait_event_type = 'Lock' AND query LIKE '%init b%' AND datname = current_database()`) == 1
		}
	})
	if err := blocker.Commit(ctx); err != nil { // the publish goes on to trigger a
		t.Fatal(err)
	}
	if !done {
		initErr = <-second
	}
	if initErr != nil {
		t.Fatalf("the initialisation beside a publish: %v", initErr)
	}
	if err := init.Commit(ctx); err != nil {
		t.Fatalf("initialisation commit: %v", err)
	}
	if err := <-published; err != nil {
		t.Fatalf("the publish: %v", err)
	}
}

// multiPublishes publish triggers b then a of project p at "*/2 * * * *", as a list and as a file.
var multiPublishes = []struct {
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
}
