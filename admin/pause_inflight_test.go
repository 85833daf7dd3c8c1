package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
)

// insertRun is the admit's Run for trigger a of project p: its foreign key takes FOR KEY SHARE of
// the project row.
func insertRun(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision,
		        execution_revision_id, trigger_id, trigger_revision, scheduled_for_ms, idempotency_key, state, owner,
		        queued_at_ms, created_at_ms, updated_at_ms)
		SELECT $1, 'p', 'task', 1, kr.execution_revision_id, 'a', 1, 60000, 'ql3:cron:v1:a:1:60000', 'queued', 'runtime',
		       60250, 60250, 60250
		FROM control_core.task_revisions kr WHERE kr.project_id = 'p' AND kr.task_id = 'task' AND kr.revision = 1`,
		uuid.New())
	return err
}

// Once `project pause` has returned, no admit that read the project as active commits. An admit
// is one SERIALIZABLE transaction that reads the project's state and then inserts its Run, whose
// foreign key takes FOR KEY SHARE of the project row. The audited project lock is FOR NO KEY
// UPDATE since pg-0026, which that key check neither waits for nor is refused by, so without the
// pause's own FOR UPDATE of the row an admit whose snapshot predates the pause committed its Run
// after the pause returned. Both orders: the admit's Run before the pause (the pause waits for
// the admit) and after it (the admit fails with 40001 and would run again against "paused").
func TestAPauseLeavesNoAdmitInFlightThatReadTheFormerState(t *testing.T) {
	t.Parallel()
	for _, runFirst := range []bool{true, false} {
		name := "the Run inserted after the pause"
		if runFirst {
			name = "the Run inserted before the pause"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx := context.Background()
			if _, err := f.pub.PublishTrigger(ctx, spec("p", "a", "task", "* * * * *")); err != nil {
				t.Fatal(err)
			}
			admit, err := f.d.Pool(t, "").BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
			if err != nil {
				t.Fatal(err)
			}
			defer admit.Rollback(ctx)
			var state string // the admit's verified CTE reads the project in its snapshot
			if err := admit.QueryRow(ctx, `SELECT state FROM control_core.projects WHERE project_id = 'p'`).Scan(&state); err != nil || state != "active" {
				t.Fatalf("the admit's read: %q, %v", state, err)
			}
			if runFirst {
				if err := insertRun(ctx, admit); err != nil {
					t.Fatalf("the admit's Run before the pause: %v", err)
				}
			}
			paused := make(chan error, 1)
			go func() {
				_, err := f.pub.PauseProject(ctx, "p")
				paused <- err
			}()
			if runFirst {
				su := f.d.Pool(t, "")
				returned, early := false, error(nil)
				eventually.True(t, 30*time.Second, "the pause waits for the admit that holds the project's key share", func() bool {
					select {
					case early = <-paused:
						returned = true
						return true
					default:
					}
					var waiting int
					if err := su.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
					        AND query LIKE '%FOR UPDATE%' AND datname = current_database()`).Scan(&waiting); err != nil {
						t.Fatal(err)
					}
					return waiting == 1
				})
				if returned {
					t.Fatalf("the pause returned (%v) while an admit that read the project as active could still commit", early)
				}
				if err := admit.Commit(ctx); err != nil {
					t.Fatalf("admit commit: %v", err)
				}
				if err := <-paused; err != nil {
					t.Fatalf("the pause after the admit committed: %v", err)
				}
				return
			}
			if err := <-paused; err != nil {
				t.Fatalf("pause: %v", err)
			}
			err = insertRun(ctx, admit)
			if err == nil {
				err = admit.Commit(ctx)
			}
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
				t.Fatalf("the admit's Run after the pause returned: %v; want a serialization failure (40001), not a Run of a paused project", err)
			}
		})
	}
}
