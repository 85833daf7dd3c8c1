package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/schedule"
)

// A publish resets schedule rows in the order a batch admit locks them. The admit's rows are a
// batch claim's, in the claim's order: coalesce(next_fire_at_ms, -1) first, then project_id,
// trigger_id; due rows have their cursors, so "b" due before "a" comes first. A publish that
// orders by key alone resets "a" and then waits for "b", which the admit holds while it waits
// for "a": a deadlock cycle PostgreSQL breaks by aborting one side after deadlock_timeout. The
// test holds "b" as the admit does, lets the publish wait for it, and then asks for "a": the
// publish must not hold it.
func TestAPublishResetsDueRowsInTheAdmitsOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, f *fixture)
		publish func(f *fixture) error
	}{
		{"trigger publish", func(*testing.T, *fixture) {}, func(f *fixture) error {
			var specs []admin.TriggerSpec
			for _, id := range []string{"a", "b"} {
				specs = append(specs, admin.TriggerSpec{Project: "p", Trigger: id, Task: "task", Cron: "*/2 * * * *",
					TimeZone: "UTC", Misfire: schedule.MisfireSkip, Enabled: true})
			}
			_, err := f.admin.PublishTriggers(context.Background(), specs)
			return err
		}},
		{"task rollout", func(t *testing.T, f *fixture) {
			if _, err := f.admin.PublishTask(context.Background(), admin.TaskSpec{Project: "p", Task: "task",
				ExecutorSpec: []byte(`{"image":"example/job:2"}`)}); err != nil {
				t.Fatal(err)
			}
		}, func(f *fixture) error {
			_, err := f.admin.RolloutTask(context.Background(), "p", "task", false)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testPublishOrder(t, tc.prepare, tc.publish)
		})
	}
}

func testPublishOrder(t *testing.T, prepare func(*testing.T, *fixture), publish func(*fixture) error) {
	ctx := context.Background()
	f, s := dueFixture(t, time.Second, "a", "b")
	f.setCursor("a", -time.Second)
	f.setCursor("b", -2*time.Second) // due before a: the claim's order is b, a
	claims := must(s.ClaimBatch(ctx, "batcher", 30*time.Second, 10)).of(t)
	if len(claims) != 2 || claims[0].TriggerID != "b" {
		t.Fatalf("the batch claim's order: %v, want b first", claims)
	}
	prepare(t, f)

	admit, err := f.su.Begin(ctx) // the admit: the batch's first row locked, the second next
	if err != nil {
		t.Fatal(err)
	}
	defer admit.Rollback(ctx) //nolint:errcheck // released below
	lock := `SELECT 1 FROM control_core.trigger_schedules WHERE project_id = 'p' AND trigger_id = $1 FOR UPDATE`
	if _, err := admit.Exec(ctx, lock, "b"); err != nil {
		t.Fatal(err)
	}
	published := make(chan error, 1)
	go func() { published <- publish(f) }()
	eventually.True(t, 30*time.Second, "the publish waits for a schedule row", func() bool {
		var n int
		err := f.su.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
			AND query LIKE '%reset_schedule%' AND datname = current_database()`).Scan(&n)
		return err == nil && n == 1
	})
	_, err = admit.Exec(ctx, lock+" NOWAIT", "a")
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable {
		t.Errorf("the publish holds a while it waits for b: it resets due rows against the admit's order b, a (a deadlock cycle with a batch admit)")
	} else if err != nil {
		t.Fatal(err)
	}
	if err := admit.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-published; err != nil {
		t.Fatalf("the publish after the admit ended: %v", err)
	}
}
