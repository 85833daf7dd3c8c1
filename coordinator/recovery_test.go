package coordinator

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Startup recovery leaves the pristine admitted shape alone and fails every drifted shape closed.
func TestStartupRecoveryExcludesExactlyThePristineShape(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		drift  string // applied to the one admitted run/attempt; "" keeps it pristine
		failed bool
	}{
		{"pristine queued/claimed", "", false},
		{"worker assigned", `UPDATE control_core.attempts SET worker_id = 'w1'`, true},
		{"callback token set", `UPDATE control_core.attempts SET callback_token_hash = repeat('a', 64)`, true},
		{"started", `UPDATE control_core.attempts SET started_at_ms = 1`, true},
		{"error recorded", `UPDATE control_core.attempts SET error = '{}'`, true},
		{"attempt dispatching", `UPDATE control_core.attempts SET state = 'dispatching'`, true},
		{"run dispatching", `UPDATE control_core.runs SET state = 'dispatching'`, true},
		{"cancel requested", `UPDATE control_core.runs SET cancel_requested_at_ms = 1`, true},
		{"a newer attempt", `INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state)
			SELECT gen_random_uuid(), run_id, 2, 'remote_worker', 'claimed' FROM control_core.runs`, true},
		{"operator-owned run", `UPDATE control_core.runs SET owner = 'operator', state = 'dispatching'`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFixture(t)
			f.trigger("a", "* * * * *", MisfireSkip)
			f.setCursor("a", -time.Second)
			if _, _, out := fireOnce(t, NewStore(f.rt), "r1"); out != Written {
				t.Fatalf("admit: %s", out)
			}
			if tc.drift != "" {
				f.exec(tc.drift)
			}
			rep, err := Recover(ctx, f.rt, testLogger())
			if err != nil {
				t.Fatal(err)
			}
			failed := f.count("SELECT count(*) FROM control_core.runs WHERE state = 'failed'")
			events := f.count("SELECT count(*) FROM control_core.run_events WHERE type = 'run.recovery_failed'")
			if tc.failed != (failed == 1) || failed != events || rep.FailedClosed != failed {
				t.Errorf("report %+v, failed runs %d, recovery events %d; want failed closed = %v", rep, failed, events, tc.failed)
			}
			if !tc.failed && f.count("SELECT count(*) FROM control_core.attempts WHERE state = 'failed'") != 0 {
				t.Error("recovery touched an attempt it must leave alone")
			}
			if tc.failed {
				var reason string
				if err := f.su.QueryRow(ctx, `SELECT a.error->>'reason' FROM control_core.attempts a
					ORDER BY attempt_no DESC LIMIT 1`).Scan(&reason); err != nil || reason != "startup_recovery_failed_closed" {
					t.Errorf("newest attempt's error reason %q (%v)", reason, err)
				}
			}
			// Recovery is idempotent: a second pass finds nothing more to do.
			if again, err := Recover(ctx, f.rt, testLogger()); err != nil || again.FailedClosed != 0 {
				t.Errorf("second recovery: %+v, %v", again, err)
			}
		})
	}
}

// With 1,000,000 schedule rows the claim is an index range scan on trigger_schedules_claim_idx,
// not a sequential scan.
func TestClaimUsesTheIndexAtOneMillionSchedules(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: skipping the 1,000,000-row plan test")
	}
	ctx := context.Background()
	f := newFixture(t)
	// The rows are consistent; replica mode only skips the per-row foreign-key triggers, which
	// would make this set-up take minutes.
	f.d.Exec(t, `SET session_replication_role = replica;
		BEGIN;
		INSERT INTO control_core.triggers (project_id, trigger_id, head_revision)
		    SELECT 'p', 't' || g, 1 FROM generate_series(1, 1000000) g;
		INSERT INTO control_core.trigger_revisions (project_id, trigger_id, revision, kind, cron_spec, timezone,
		        misfire_policy, enabled, task_id, task_revision, content_digest)
		    SELECT 'p', 't' || g, 1, 'cron', '* * * * *', 'UTC', 'skip', true, 'task', 1, repeat('a', 64)
		    FROM generate_series(1, 1000000) g;
		INSERT INTO control_core.trigger_schedules (project_id, trigger_id, trigger_revision, next_fire_at_ms,
		        state_version, claim_version, updated_at_ms)
		    SELECT 'p', 't' || g, 1, control_core.db_now_ms() + (g % 3600) * 1000 - 600000, 1, 0, control_core.db_now_ms()
		    FROM generate_series(1, 1000000) g;
		COMMIT;
		ANALYZE control_core.trigger_schedules, control_core.trigger_revisions, control_core.projects;`)
	conn := must(f.rt.Acquire(ctx)).of(t)
	defer conn.Release()
	// The claim, and the idle coordinator's next-due probe, in the custom plans a prepared
	// statement starts with and in the generic plan it may settle on.
	for _, q := range []struct{ name, execute string }{
		{"ClaimDue", "EXECUTE q(1, 'explain', 30000)"}, // max_rows, owner, lease_ms
		{"NextDueIn", "EXECUTE q"},
	} {
		if _, err := conn.Exec(ctx, "DEALLOCATE ALL; PREPARE q AS "+namedQuery(t, q.name)); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			plan := explain(t, conn, "EXPLAIN "+q.execute)
			if !strings.Contains(plan, "Index Scan using trigger_schedules_claim_idx") || strings.Contains(plan, "Seq Scan on trigger_schedules") ||
				strings.Contains(plan, "Sort") {
				t.Errorf("%s, %s: does not walk trigger_schedules_claim_idx in order:\n%s", q.name, mode, plan)
			}
		}
	}
	if _, err := conn.Exec(ctx, "RESET plan_cache_mode; DEALLOCATE ALL"); err != nil {
		t.Fatal(err)
	}
	if c := must(NewStore(f.rt).Claim(ctx, "r1", 30*time.Second)).of(t); c == nil {
		t.Error("nothing claimed among 1,000,000 rows")
	}
}
