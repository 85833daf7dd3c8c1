package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// A publish locks its schedule rows in the claim's order under the database's collation, not in
// Go's byte order. The claim (ClaimInit, ClaimDue) sorts by project_id, trigger_id in the
// database's collation; under en-US "a_1" comes before "a-1", in bytes after. Sorted in Go, the
// publish resets "a-1" first and then waits for "a_1", which a batch claim holds while it waits
// for "a-1": a deadlock cycle. The test holds the claim's first row as a claim does, lets the
// publish wait for it, and then asks for the second row: the publish must not hold it.
func TestAPublishLocksRowsInTheDatabasesCollationOrder(t *testing.T) {
	t.Parallel()
	d := testpg.NewCollated(t, "en-US")
	ctx := context.Background()
	pub := admin.NewPublisher(d.Handle(t, "ql_admin"))
	if _, err := pub.CreateProject(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "task", ExecutorSpec: []byte(`{"image":"example/job:1"}`)}); err != nil {
		t.Fatal(err)
	}
	ids := []string{"a-1", "a_1"} // byte order; en-US: a_1 first
	var specs []admin.TriggerSpec
	for _, id := range ids {
		specs = append(specs, spec("p", id, "task", "* * * * *"))
	}
	if _, err := pub.PublishTriggers(ctx, specs); err != nil {
		t.Fatal(err)
	}
	su := d.Pool(t, "")
	order := func() []string {
		rows, err := su.Query(ctx, `SELECT trigger_id FROM control_core.trigger_schedules
			ORDER BY coalesce(next_fire_at_ms, -1), project_id, trigger_id`)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			out = append(out, id)
		}
		return out
	}
	claimOrder := order()
	if len(claimOrder) != 2 || claimOrder[0] != "a_1" {
		t.Skipf("the claim's order under en-US is %v; this test needs a_1 before a-1", claimOrder)
	}

	claim, err := su.Begin(ctx) // a batch claim: the first row of its order locked, the second next
	if err != nil {
		t.Fatal(err)
	}
	defer claim.Rollback(ctx)
	lock := `SELECT 1 FROM control_core.trigger_schedules WHERE project_id = 'p' AND trigger_id = $1 FOR UPDATE`
	if _, err := claim.Exec(ctx, lock, claimOrder[0]); err != nil {
		t.Fatal(err)
	}
	for i := range specs {
		specs[i].Cron = "*/2 * * * *" // a change: every schedule row is reset
	}
	published := make(chan error, 1)
	go func() {
		_, err := pub.PublishTriggers(ctx, specs)
		published <- err
	}()
	eventually.True(t, 30*time.Second, "the publish waits for a schedule row", func() bool {
		var n int
		err := su.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
			AND query LIKE '%reset_schedule%' AND datname = current_database()`).Scan(&n)
		return err == nil && n == 1
	})
	_, err = claim.Exec(ctx, lock+" NOWAIT", claimOrder[1])
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable {
		t.Errorf("the publish holds %s while it waits for %s: it locks against the claim's order %v (a deadlock cycle with a batch claim)",
			claimOrder[1], claimOrder[0], claimOrder)
	} else if err != nil {
		t.Fatal(err)
	}
	if err := claim.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-published; err != nil {
		t.Fatalf("the publish after the claim ended: %v", err)
	}
}
