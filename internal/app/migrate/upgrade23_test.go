package migrate_test

import (
	"context"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// v21LoopRows writes, at v21, two queued Runs with their Attempts, a worker token and session, and
// one active lease for the first Run's Attempt that names leaseRun (1: its own Run; 2: the other).
const v21LoopRows = `
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
kr AS (SELECT kr.project_id, kr.task_id, kr.revision, kr.execution_revision_id FROM control_core.task_revisions kr),
g AS (SELECT i, ('00000000-0000-0000-0000-00000000000' || i)::uuid AS run_id,
             ('00000000-0000-0000-0000-0000000000a' || i)::uuid AS attempt_id FROM generate_series(1, 2) i),
r AS (INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id,
              idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
      SELECT g.run_id, kr.project_id, kr.task_id, kr.revision, kr.execution_revision_id, 'test:' || g.run_id,
             'queued', 'runtime', obs.now_ms, obs.now_ms, obs.now_ms FROM g, kr, obs RETURNING run_id)
INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, created_at_ms, updated_at_ms)
SELECT g.attempt_id, r.run_id, 1, 'remote_worker', 'claimed', obs.now_ms, obs.now_ms FROM g JOIN r USING (run_id), obs;
INSERT INTO control_core.worker_tokens (worker_token_id, name, token_hash)
VALUES ('00000000-0000-0000-0000-0000000000b1', 'w', repeat('a', 64));
INSERT INTO control_core.worker_sessions (worker_session_id, worker_id, state, capacity, heartbeat_at_ms, expires_at_ms,
	created_at_ms, worker_token_id, protocol)
VALUES ('00000000-0000-0000-0000-0000000000c1', 'w1', 'active', 4, control_core.db_now_ms(),
        control_core.db_now_ms() + 30000, control_core.db_now_ms(), '00000000-0000-0000-0000-0000000000b1', 1);
INSERT INTO control_core.run_leases (run_lease_id, run_id, attempt_id, worker_session_id, lease_version, state,
	granted_at_ms, expires_at_ms)
VALUES ('00000000-0000-0000-0000-0000000000d1', ('00000000-0000-0000-0000-00000000000' || $1::integer)::uuid,
        '00000000-0000-0000-0000-0000000000a1', '00000000-0000-0000-0000-0000000000c1', 1, 'active',
        control_core.db_now_ms(), control_core.db_now_ms() + 30000)`

// pg-0023 on a v21 database with rows: leases that name their Attempt's Run pass and the foreign
// key is validated; a lease naming another Run stops the upgrade with a message naming the lease,
// and nothing of pg-0023 is applied.
func TestPg0023UpgradesADatabaseWithLoopRows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		leaseRun int
		refused  bool
	}{{"every lease names its Attempt's Run", 1, false}, {"a lease names another Run", 2, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := testpg.NewEmpty(t)
			r := open(t, d, "", nil)
			if _, err := r.Up(ctx, 22); err != nil {
				t.Fatalf("up --to 22: %v", err)
			}
			pub := admin.NewPublisher(d.Handle(t, "ql_admin"))
			if _, err := pub.CreateProject(ctx, "p"); err != nil {
				t.Fatal(err)
			}
			if _, err := pub.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "task",
				ExecutorSpec: []byte(`{"image":"example/job:1"}`)}); err != nil {
				t.Fatal(err)
			}
			su := d.Pool(t, "")
			for _, stmt := range strings.Split(v21LoopRows, ";\n") {
				var args []any
				if strings.Contains(stmt, "$1") {
					args = append(args, tc.leaseRun)
				}
				if _, err := su.Exec(ctx, stmt, args...); err != nil {
					t.Fatalf("arrange v21 rows: %v\n%s", err, stmt)
				}
			}
			_, err := r.Up(ctx, 0)
			if tc.refused {
				if err == nil || !strings.Contains(err.Error(), "lease 00000000-0000-0000-0000-0000000000d1 names a Run other than its Attempt's") {
					t.Fatalf("up: %v; want pg-0023 refused naming the lease", err)
				}
				if n := count(t, su, `SELECT count(*) FROM pg_constraint WHERE conname = 'run_leases_attempt_run_fkey'`); n != 0 {
					t.Errorf("the refused upgrade left the foreign key behind")
				}
				return
			}
			if err != nil {
				t.Fatalf("up: %v", err)
			}
			if n := count(t, su, `SELECT count(*) FROM pg_constraint WHERE conname = 'run_leases_attempt_run_fkey' AND convalidated`); n != 1 {
				t.Errorf("run_leases_attempt_run_fkey is not there validated (%d)", n)
			}
		})
	}
}
