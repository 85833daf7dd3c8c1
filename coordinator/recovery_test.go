package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// replica runs sql with the foreign-key triggers off (superuser test set-up).
func replica(sql string) string {
	return "SET session_replication_role = replica; " + sql + "; RESET session_replication_role"
}

// admittedOnce is a database holding one admitted occurrence: a pristine queued Run and its
// claimed Attempt.
func admittedOnce(t testing.TB) *fixture {
	t.Helper()
	f, s := dueFixture(t, time.Second, "a")
	if _, _, out := fireOnce(t, s, "r1"); out != Written {
		t.Fatalf("admit: %s", out)
	}
	return f
}

// Startup recovery leaves the dispatcher's shapes alone (pg-0022: a queued Run whose newest Attempt
// is claimed in shape, whatever its attempt_no; an offered Run; a running or cancel-pending one)
// and fails every drifted shape closed. shape is committed first, as the loop writes it; drift
// then changes it (replica mode where I1 would refuse the change at commit).
func TestStartupRecoveryExcludesExactlyTheDispatchersShapes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		shape  string // the loop's writes, in one transaction; "" keeps the admitted shape
		drift  string // applied to the one admitted run/attempt; "" keeps the shape
		failed bool
	}{
		{"pristine queued/claimed", "", "", false},
		{"queued, attempt 3 claimed after two failures", thirdAttemptSQL, "", false},
		{"offered (dispatching)", offeredSQL, "", false},
		{"running", runningSQL, "", false},
		{"cancel pending (cancelled, attempt running)", runningSQL + `;
			SELECT control_core.cancel_run(run_id, 'test') FROM control_core.runs`, "", false},
		{"worker assigned", "", `UPDATE control_core.attempts SET worker_id = 'w1'`, true},
		{"callback token set", "", `UPDATE control_core.attempts SET callback_token_hash = repeat('a', 64)`, true},
		{"started", "", `UPDATE control_core.attempts SET started_at_ms = 1`, true},
		{"error recorded", "", `UPDATE control_core.attempts SET error = '{}'`, true},
		{"result recorded", "", `UPDATE control_core.attempts SET result = '{}'`, true},
		{"finished", "", `UPDATE control_core.attempts SET finished_at_ms = 1`, true},
		// session, lease and offer ids as the dispatcher would write them; replica mode skips the
		// foreign-key checks, so the drifted field is the only difference from the claimed shape
		{"worker session assigned", "", replica(`UPDATE control_core.attempts SET worker_session_id = gen_random_uuid()`), true},
		{"run lease issued", "", replica(`UPDATE control_core.attempts SET run_lease_id = gen_random_uuid()`), true},
		{"offer made", "", replica(`UPDATE control_core.attempts SET offer_id = gen_random_uuid()`), true},
		{"attempt 3 with a worker assigned", thirdAttemptSQL, `UPDATE control_core.attempts SET worker_id = 'w1' WHERE attempt_no = 3`, true},
		{"offered without its callback hash", offeredSQL, `UPDATE control_core.attempts SET callback_token_hash = NULL`, true},
		{"offered and started", offeredSQL, `UPDATE control_core.attempts SET started_at_ms = 1`, true},
		{"offered with a lease", offeredSQL, replica(`UPDATE control_core.attempts SET run_lease_id = gen_random_uuid()`), true},
		// A queued Run whose newest Attempt is dispatching in shape is in neither index: I1 refuses
		// the pair at commit, and past I1 (replica mode, a disabled trigger) recovery cannot see it.
		{"offered, then the Run queued again (past I1)", offeredSQL, replica(`UPDATE control_core.runs SET state = 'queued'`), false},
		// A live Run's Attempt cannot be deleted (TestALiveRunsAttemptCannotBeRemoved); past the
		// trigger (replica mode), a Run without one is a candidate once its own row drifts.
		{"dispatching, no attempt", "", replica(`DELETE FROM control_core.attempts`) + `; UPDATE control_core.runs SET state = 'dispatching'`, true},
		{"attempt dispatching, Run queued (past I1)", "", replica(`UPDATE control_core.attempts SET state = 'dispatching'`), true},
		{"run dispatching, attempt claimed (past I1)", "", replica(`UPDATE control_core.runs SET state = 'dispatching'`), true},
		{"cancel requested", "", `UPDATE control_core.runs SET cancel_requested_at_ms = 1`, true},
		// A newer claimed Attempt beside a live older one is in no recovery index: the newest is
		// in the dispatcher's shape. I1 refuses the insert at commit (pg-0023) and the pair's next
		// state change (TestRunAndNewestAttemptAgreeAtCommit); past I1, recovery leaves it alone.
		{"a newer attempt beside a live one (past I1)", "", replica(`INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state)
			SELECT gen_random_uuid(), run_id, 2, 'remote_worker', 'claimed' FROM control_core.runs`), false},
		{"operator-owned run, drifted", "", `UPDATE control_core.runs SET owner = 'operator'; UPDATE control_core.attempts SET worker_id = 'w1'`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := admittedOnce(t)
			if tc.shape != "" {
				f.exec(tc.shape)
			}
			if tc.drift != "" {
				f.exec(tc.drift)
			}
			failedAttempts := f.count("SELECT count(*) FROM control_core.attempts WHERE state = 'failed'")
			rep, err := Recover(ctx, f.rt, testLogger())
			if err != nil {
				t.Fatal(err)
			}
			failed := f.count("SELECT count(*) FROM control_core.runs WHERE state = 'failed'")
			events := f.count("SELECT count(*) FROM control_core.run_events WHERE type = 'run.recovery_failed'")
			if tc.failed != (failed == 1) || failed != events || rep.FailedClosed != failed {
				t.Errorf("report %+v, failed runs %d, recovery events %d; want failed closed = %v", rep, failed, events, tc.failed)
			}
			if !tc.failed && f.count("SELECT count(*) FROM control_core.attempts WHERE state = 'failed'") != failedAttempts {
				t.Error("recovery touched an attempt it must leave alone")
			}
			if tc.failed && f.count("SELECT count(*) FROM control_core.attempts") > 0 {
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

// The one shape no index of the recovery source finds is a live Run with no Attempt at all, so
// pg-0020 refuses removing the Attempt of a runtime-owned queued or dispatching Run, even for the
// owner or a superuser: by DELETE, by moving it to another Run, or by TRUNCATE. Once the Run has
// left those states its Attempts are history the trigger leaves alone, but such a Run cannot be
// made live again without an Attempt (runs_keep_live_attempt, pg-0020 and pg-0021): the pg-0016 source found that
// Run, the pg-0020 one would not.
func TestALiveRunsAttemptCannotBeRemoved(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, runState, change string
		refused                bool
	}{
		{"delete, run queued", "queued", `DELETE FROM control_core.attempts`, true},
		{"delete, run dispatching", "dispatching", `DELETE FROM control_core.attempts`, true},
		{"move to another run", "queued", `UPDATE control_core.attempts SET run_id = gen_random_uuid()`, true},
		{"truncate", "queued", `TRUNCATE control_core.attempts CASCADE`, true},
		{"delete, run failed", "failed", `DELETE FROM control_core.attempts`, false},
		{"truncate, run failed", "failed", `TRUNCATE control_core.attempts CASCADE`, false},
		{"delete, operator-owned run", "operator", `DELETE FROM control_core.attempts`, false},
		{"other columns still update", "queued", `UPDATE control_core.attempts SET worker_id = 'w1'`, false},
		// the other door: the Attempt removed while the Run is not live, then the Run made live
		{"delete while failed, then queued again", "failed",
			`DELETE FROM control_core.attempts; UPDATE control_core.runs SET state = 'queued'`, true},
		{"delete while operator-owned, then runtime again", "operator",
			`DELETE FROM control_core.attempts; UPDATE control_core.runs SET owner = 'runtime'`, true},
		{"queued again with its Attempt", "failed", `UPDATE control_core.attempts SET state = 'claimed'; UPDATE control_core.runs SET state = 'queued'`, false},
		{"a live Run changes state with its Attempt", "queued",
			`UPDATE control_core.attempts SET state = 'dispatching'; UPDATE control_core.runs SET state = 'dispatching'`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := admittedOnce(t)
			switch tc.runState {
			case "operator":
				f.exec(`UPDATE control_core.runs SET owner = 'operator'`)
			case "queued":
			default: // the Run and its Attempt together, as I1 (pg-0022) wants them at commit
				f.exec(`WITH a AS (UPDATE control_core.attempts SET state = $1) UPDATE control_core.runs SET state = $1`, tc.runState)
			}
			_, err := f.su.Exec(context.Background(), tc.change)
			var pgErr *pgconn.PgError
			refused := errors.As(err, &pgErr) && pgErr.Code == pgerrcode.IntegrityConstraintViolation
			if refused != tc.refused || (err != nil && !refused) {
				t.Fatalf("%s: %v; want refused = %v", tc.change, err, tc.refused)
			}
			if tc.refused && f.count(`SELECT count(*) FROM control_core.attempts a JOIN control_core.runs r USING (run_id)`) != 1 {
				t.Error("the refused change removed the Attempt anyway")
			}
		})
	}
}

// Candidates recovery must leave alone (here: a trigger suppresses the attempt update, as if the
// dispatcher had changed them first) stay in the source; a full batch of them must not hide the
// candidates behind it.
func TestRecoveryReachesCandidatesBehindSkippedOnes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := admittedOnce(t)
	held, behind := recoveryBatch, 100
	// held+behind copies of the admitted run, queued at 1 … n ms (before the pristine original),
	// each with a dispatching Attempt: candidates all
	f.exec(`INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
			trigger_revision, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
		SELECT gen_random_uuid(), project_id, task_id, task_revision, execution_revision_id, trigger_id, trigger_revision,
			scheduled_for_ms + g * 1000, 'ql3:cron:v1:' || trigger_id || ':' || trigger_revision || ':' || (scheduled_for_ms + g * 1000),
			'queued', 'runtime', g, created_at_ms, updated_at_ms
		FROM control_core.runs, generate_series(1, $1::integer) g`, held+behind)
	// a queued Run with a dispatching Attempt disagrees (I1 refuses it at commit since pg-0023): drift
	// written past I1, as recovery finds it
	f.exec(replica(fmt.Sprintf(`INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state)
		SELECT gen_random_uuid(), run_id, 1, 'remote_worker', 'dispatching' FROM control_core.runs WHERE queued_at_ms <= %d`, held+behind)))
	f.exec(fmt.Sprintf(`CREATE FUNCTION control_core.test_hold() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF (SELECT queued_at_ms FROM control_core.runs WHERE run_id = OLD.run_id) <= %d THEN RETURN NULL; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER test_hold BEFORE UPDATE ON control_core.attempts FOR EACH ROW EXECUTE FUNCTION control_core.test_hold()`, held))

	rep, err := Recover(ctx, f.rt, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Candidates != held+behind || rep.Skipped != held || rep.FailedClosed != behind {
		t.Errorf("report %+v; want %d candidates: %d skipped, %d failed closed", rep, held+behind, held, behind)
	}
	if n := f.count(`SELECT count(*) FROM control_core.runs WHERE state = 'failed' AND queued_at_ms > $1`, held); n != behind {
		t.Errorf("%d of the candidates behind the held ones failed closed; want %d", n, behind)
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
	f.bulkSchedules(1_000_000, 3600, 600)
	conn := must(f.rt.Pool().Acquire(ctx)).of(t)
	defer conn.Release()
	// The claim, and the idle coordinator's next-due probe, in the custom plans a prepared
	// statement starts with and in the generic plan it may settle on.
	for _, q := range []struct{ name, stmt, args string }{
		{"ClaimDue", "claim_due", "(-1, 1, 'explain', 30000)"},     // from_key, max_rows, owner, lease_ms
		{"ClaimDue", "claim_due_past", "(0, 1, 'explain', 30000)"}, // past the uninitialised rows
		{"NextDueIn", "next_due_in", ""},
	} {
		if _, err := conn.Exec(ctx, "PREPARE "+q.stmt+" AS "+testpg.Query(t, q.name)); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			if plan := explain(t, conn, "EXPLAIN EXECUTE "+q.stmt+q.args); !walksClaimIndex(plan) {
				t.Errorf("%s, %s: does not walk trigger_schedules_claim_idx in order:\n%s", q.name, mode, plan)
			}
		}
	}
	// The claim as the store runs it, under its transaction-local settings: the same generic
	// plan, and no JIT (at this size its generic cost estimate is past the JIT thresholds).
	if _, err := conn.Exec(ctx, "RESET plan_cache_mode; BEGIN; "+claimSettings); err != nil {
		t.Fatal(err)
	}
	if plan := explain(t, conn, "EXPLAIN EXECUTE claim_due(-1, 1, 'explain', 30000)"); strings.Contains(plan, "JIT:") ||
		!strings.Contains(plan, "Index Scan using trigger_schedules_claim_idx") {
		t.Errorf("the claim under the store's settings is JIT-compiled or does not walk the claim's index:\n%s", plan)
	}
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "RESET plan_cache_mode; DEALLOCATE ALL"); err != nil {
		t.Fatal(err)
	}
	if c := must(NewStore(f.rt).Claim(ctx, "r1", 30*time.Second)).of(t); c == nil {
		t.Error("nothing claimed among 1,000,000 rows")
	}
}

// walksClaimIndex reports whether a claim plan reads trigger_schedules in the claim's order
// through trigger_schedules_claim_idx, stopping at its LIMIT, rather than scanning and sorting.
func walksClaimIndex(plan string) bool {
	return strings.Contains(plan, "Index Scan using trigger_schedules_claim_idx") &&
		!strings.Contains(plan, "Seq Scan on trigger_schedules") && !strings.Contains(plan, "Sort")
}

// The claim keeps walking its index when every row is due and the index is churned, as it is in
// production, where every claim and advance moves a row's key (next_fire_at_ms). That is where a
// claim that looked up the trigger revision twice per row (once for its kind, once for enabled)
// went wrong: the planner estimates an equality on a subquery's result (kind = 'cron') at 0.5 %,
// so it expected one qualifying row, the LIMIT saved the index scan nothing, and a sequential scan
// plus a sort of the whole backlog looked cheaper (180 ms against 4 ms for 128 of 20,000 due rows
// in the batch bench). With that form in ClaimDue, this test gets the sort, at 1 row and at 128.
func TestClaimWalksItsIndexWhenEveryRowIsDueAndTheIndexIsChurned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.bulkSchedules(20_000, 1, 1) // all due a second ago
	for range 7 {                 // seven claim-and-advance cycles' worth of index churn
		f.exec(`UPDATE control_core.trigger_schedules SET next_fire_at_ms = next_fire_at_ms - 1, state_version = state_version + 1`)
	}
	f.exec(`ANALYZE control_core.trigger_schedules`)
	conn := must(f.rt.Pool().Acquire(ctx)).of(t)
	defer conn.Release()
	if _, err := conn.Exec(ctx, "PREPARE claim_due AS "+testpg.Query(t, "ClaimDue")); err != nil {
		t.Fatal(err)
	}
	// the generic plan with sorting allowed (hotSettings, not the store's claimSettings): the
	// statement's own form must keep the walk cheapest
	if _, err := conn.Exec(ctx, "BEGIN; "+hotSettings); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(ctx, "ROLLBACK") }()
	for _, rows := range []int{1, 128} {
		if plan := explain(t, conn, fmt.Sprintf("EXPLAIN EXECUTE claim_due(-1, %d, 'explain', 30000)", rows)); !walksClaimIndex(plan) {
			t.Errorf("a claim of %d rows does not walk trigger_schedules_claim_idx in order:\n%s", rows, plan)
		}
	}
}

// The claim keeps walking its index when the statistics say the whole table is due at a few
// cursors, scattered over the heap, as an autoanalyze sees an every-minute backlog after the
// replicas have churned it (bench-pooler's direct runs: 30,000 rows, two cursors, correlation
// 0.23). The generic plan cannot know its LIMIT, so the index walk's random heap reads looked
// dearer than a bitmap scan and a sort of the whole due range: 300 ms a claim, against 0.8 ms
// walking the index. The store's claim settings (claimSettings) rule the sort out.
func TestClaimWalksItsIndexOverAScatteredBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	// two cursors a minute apart, one row in five at the older one: interleaved in the heap
	f.bulk("t", 30_000, "control_core.db_now_ms() - 60000 - (g % 5 = 0)::int * 60000")
	conn := must(f.rt.Pool().Acquire(ctx)).of(t)
	defer conn.Release()
	for _, q := range []struct{ name, stmt, args string }{
		{"ClaimDue", "claim_due", "(-1, %d, 'explain', 30000)"},  // from_key, max_rows, owner, lease_ms
		{"ClaimInit", "claim_init", "(0, %d, 'explain', 30000)"}, // below_key, max_rows, owner, lease_ms
	} {
		if _, err := conn.Exec(ctx, "PREPARE "+q.stmt+" AS "+testpg.Query(t, q.name)); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "BEGIN; "+claimSettings); err != nil { // the store's generic plan
			t.Fatal(err)
		}
		for _, rows := range []int{1, 128} {
			if plan := explain(t, conn, "EXPLAIN EXECUTE "+q.stmt+fmt.Sprintf(q.args, rows)); !walksClaimIndex(plan) {
				t.Errorf("%s of %d rows does not walk trigger_schedules_claim_idx in order:\n%s", q.name, rows, plan)
			}
		}
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkClaim measures the claim statement (with its commit) at 10,000 and at 1,000,000
// schedule rows: two databases on the same server, every row due, claimed in alternation (which
// size goes first alternates too), so both sizes share the same seconds of the server and its
// background work (checkpoints, autovacuum) instead of each having its own. Each claimed row is
// then released an hour ahead, so every claim walks the index past the churn of the ones before
// it, as in production. It reports each size's p50/p99 and the p99 ratio (target: at most 1.5).
// Run: go test -run '^$' -bench BenchmarkClaim ./coordinator/
func BenchmarkClaim(b *testing.B) {
	ctx := context.Background()
	sizes := []struct {
		rows int
		name string
	}{{10_000, "10k"}, {1_000_000, "1M"}}
	stores := make([]*Store, len(sizes))
	for i, size := range sizes {
		f := newFixture(b)
		f.bulkSchedules(size.rows, size.rows, size.rows) // cursors one a second over the past, all due
		stores[i] = NewStore(f.rt)
	}
	lat := make([][]time.Duration, len(sizes))
	for n := 0; b.Loop(); n++ {
		for k := range sizes {
			i := (n + k) % len(sizes)
			start := time.Now()
			c, err := stores[i].Claim(ctx, "bench", 30*time.Second)
			lat[i] = append(lat[i], time.Since(start))
			if err != nil || c == nil {
				b.Fatalf("claim %d of %d rows: %v, %v (a shorter -benchtime keeps every row due)", len(lat[i]), sizes[i].rows, c, err)
			}
			if out, err := stores[i].Advance(ctx, c, c.ClaimedAtMs+3_600_000); err != nil || out != Written {
				b.Fatalf("release: %v, %v", out, err)
			}
		}
	}
	p99 := make([]time.Duration, len(sizes))
	for i, l := range lat {
		slices.Sort(l)
		p99[i] = l[len(l)*99/100]
		b.ReportMetric(float64(l[len(l)/2].Microseconds())/1000, "p50-ms-"+sizes[i].name)
		b.ReportMetric(float64(p99[i].Microseconds())/1000, "p99-ms-"+sizes[i].name)
	}
	b.ReportMetric(float64(p99[1])/float64(p99[0]), "p99-1M/10k")
}
