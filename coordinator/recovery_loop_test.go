package coordinator

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// The closed loop's shapes (pg-0022), written in plain SQL by the superuser as the dispatcher's
// transitions would, on the one admitted Run of admittedOnce. Each constant is one transaction
// (one simple-protocol Exec), so the deferred Run/Attempt agreement (I1) sees the finished pair.
const (
	loopToken   = "00000000-0000-0000-0000-0000000000a1"
	loopSession = "00000000-0000-0000-0000-0000000000b1"
	loopOffer   = "00000000-0000-0000-0000-0000000000c1"
	loopLease   = "00000000-0000-0000-0000-0000000000d1"
)

// offeredSQL: a token, a live session, and the newest Attempt offered to it (transition P).
var offeredSQL = fmt.Sprintf(`INSERT INTO control_core.worker_tokens (worker_token_id, name, token_hash)
	VALUES ('%[1]s', 'w', repeat('a', 64));
INSERT INTO control_core.worker_sessions (worker_session_id, worker_id, state, capacity, heartbeat_at_ms, expires_at_ms,
	created_at_ms, worker_token_id, protocol)
	VALUES ('%[2]s', 'w1', 'active', 4, control_core.db_now_ms(), control_core.db_now_ms() + 30000,
	        control_core.db_now_ms(), '%[1]s', 1);
INSERT INTO control_core.dispatch_offers (offer_id, attempt_id, worker_session_id, state, offered_at_ms, expires_at_ms)
	SELECT '%[3]s', a.attempt_id, '%[2]s', 'offered', control_core.db_now_ms(), control_core.db_now_ms() + 10000
	FROM control_core.attempts a ORDER BY a.attempt_no DESC LIMIT 1;
UPDATE control_core.attempts SET state = 'dispatching', worker_id = 'w1', worker_session_id = '%[2]s', offer_id = '%[3]s',
	callback_token_hash = repeat('b', 64)
	WHERE attempt_id = (SELECT attempt_id FROM control_core.dispatch_offers);
UPDATE control_core.runs SET state = 'dispatching'`, loopToken, loopSession, loopOffer)

// runningSQL: offered, then acknowledged: the lease granted, Run and Attempt running (A).
var runningSQL = offeredSQL + fmt.Sprintf(`;
UPDATE control_core.dispatch_offers SET state = 'acked', answered_at_ms = control_core.db_now_ms();
INSERT INTO control_core.run_leases (run_lease_id, run_id, attempt_id, worker_session_id, lease_version, state,
	granted_at_ms, expires_at_ms)
	SELECT '%[1]s', run_id, attempt_id, '%[2]s', 1, 'active', control_core.db_now_ms(), control_core.db_now_ms() + 30000
	FROM control_core.attempts WHERE offer_id IS NOT NULL;
UPDATE control_core.attempts SET state = 'running', run_lease_id = '%[1]s', started_at_ms = control_core.db_now_ms()
	WHERE offer_id IS NOT NULL;
UPDATE control_core.runs SET state = 'running', lease_version = 1`, loopLease, loopSession)

// thirdAttemptSQL: attempts 1 and 2 failed, attempt 3 claimed, the Run queued until its backoff
// ends (F′ twice).
const thirdAttemptSQL = `UPDATE control_core.attempts SET state = 'failed', finished_at_ms = control_core.db_now_ms(),
	error = '{"kind": "exit_status"}';
INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, finished_at_ms, error)
	SELECT gen_random_uuid(), run_id, 2, 'remote_worker', 'failed', control_core.db_now_ms(), '{"kind": "exit_status"}'
	FROM control_core.runs;
INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state)
	SELECT gen_random_uuid(), run_id, 3, 'remote_worker', 'claimed' FROM control_core.runs;
UPDATE control_core.runs SET retry_at_ms = control_core.db_now_ms() + 2000`

// I1: a plain-SQL write that leaves a Run and its newest Attempt disagreeing (or an older Attempt
// live) passes its statement and fails at COMMIT; a pair the loop writes commits. Deferred, so a
// transaction may pass through a disagreeing pair on its way.
func TestRunAndNewestAttemptAgreeAtCommit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, change string
		refused      bool
	}{
		{"Run dispatching, Attempt claimed", `UPDATE control_core.runs SET state = 'dispatching'`, true},
		{"Attempt running, Run queued", `UPDATE control_core.attempts SET state = 'running'`, true},
		{"Run running, Attempt dispatching", `UPDATE control_core.attempts SET state = 'dispatching';
			UPDATE control_core.runs SET state = 'running'`, true},
		{"Run succeeded, Attempt claimed", `UPDATE control_core.runs SET state = 'succeeded'`, true},
		{"Run succeeded, Attempt failed", `UPDATE control_core.attempts SET state = 'failed';
			UPDATE control_core.runs SET state = 'succeeded'`, true},
		{"Run queued, Attempt terminal", `UPDATE control_core.attempts SET state = 'succeeded'`, true},
		{"an older Attempt still live", `INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state)
			SELECT gen_random_uuid(), run_id, 2, 'remote_worker', 'claimed' FROM control_core.runs;
			UPDATE control_core.runs SET state = 'queued'`, true},
		{"both dispatching", `UPDATE control_core.attempts SET state = 'dispatching';
			UPDATE control_core.runs SET state = 'dispatching'`, false},
		{"both failed", `UPDATE control_core.attempts SET state = 'failed'; UPDATE control_core.runs SET state = 'failed'`, false},
		{"Run failed, Attempt expired", `UPDATE control_core.attempts SET state = 'expired'; UPDATE control_core.runs SET state = 'failed'`, false},
		{"Run cancelled, Attempt running (cancel pending)", `UPDATE control_core.attempts SET state = 'running';
			UPDATE control_core.runs SET state = 'cancelled'`, false},
		{"a retry: attempt 1 failed, attempt 2 claimed, Run queued", `UPDATE control_core.attempts SET state = 'failed';
			INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state)
			SELECT gen_random_uuid(), run_id, 2, 'remote_worker', 'claimed' FROM control_core.runs;
			UPDATE control_core.runs SET state = 'queued'`, false},
		{"disagreeing on the way, agreeing at commit", `UPDATE control_core.attempts SET state = 'running';
			UPDATE control_core.attempts SET state = 'claimed'`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := admittedOnce(t)
			tx, err := f.su.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			for _, stmt := range splitStatements(tc.change) {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					t.Fatalf("%s: %v; want the statement to pass (the check is at commit)", stmt, err)
				}
			}
			err = tx.Commit(ctx)
			var pgErr *pgconn.PgError
			refused := errors.As(err, &pgErr) && pgErr.Code == pgerrcode.IntegrityConstraintViolation
			if refused != tc.refused || (err != nil && !refused) {
				t.Fatalf("commit: %v; want refused = %v", err, tc.refused)
			}
		})
	}
}

// cancel_run (admin only): queued → the Attempt cancelled; dispatching → its offer expired and the
// Attempt cancelled; running → Attempt and lease left to the worker; each with one run.cancelled
// event and one run.cancel audit row. A terminal Run is returned unchanged with nothing written;
// an unknown id is no_data_found; the runtime role may not call it.
func TestCancelRun(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, shape, from    string
		attempt, offer       string // the newest Attempt's and the offer's state after the cancel
		lease                string
		terminalBeforeCancel bool
	}{
		{name: "queued", shape: "", from: "queued", attempt: "cancelled"},
		{name: "queued retry", shape: thirdAttemptSQL, from: "queued", attempt: "cancelled"},
		{name: "dispatching", shape: offeredSQL, from: "dispatching", attempt: "cancelled", offer: "expired"},
		{name: "running", shape: runningSQL, from: "running", attempt: "running", offer: "acked", lease: "active"},
		{name: "already succeeded", shape: runningSQL + `;
			UPDATE control_core.run_leases SET state = 'released', ended_at_ms = control_core.db_now_ms();
			UPDATE control_core.attempts SET state = 'succeeded', finished_at_ms = control_core.db_now_ms() WHERE attempt_no = 1;
			UPDATE control_core.runs SET state = 'succeeded', finished_at_ms = control_core.db_now_ms()`,
			from: "succeeded", attempt: "succeeded", offer: "acked", lease: "released", terminalBeforeCancel: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := admittedOnce(t)
			if tc.shape != "" {
				f.exec(tc.shape)
			}
			admin := f.d.Pool(t, "ql_admin")
			var runID string
			if err := f.su.QueryRow(ctx, `SELECT run_id::text FROM control_core.runs`).Scan(&runID); err != nil {
				t.Fatal(err)
			}
			want := "cancelled"
			if tc.terminalBeforeCancel {
				want = tc.from
			}
			for i := range 2 { // the second call finds the Run terminal: idempotent
				var from, state string
				if err := admin.QueryRow(ctx, `SELECT from_state, run_state FROM control_core.cancel_run($1, 'operator says so')`, runID).
					Scan(&from, &state); err != nil {
					t.Fatalf("cancel_run #%d: %v", i+1, err)
				}
				wantFrom := tc.from
				if i == 1 || tc.terminalBeforeCancel {
					wantFrom = want
				}
				if from != wantFrom || state != want {
					t.Errorf("cancel_run #%d = (%s, %s), want (%s, %s)", i+1, from, state, wantFrom, want)
				}
			}
			cancelled := 1
			if tc.terminalBeforeCancel {
				cancelled = 0
			}
			if n := f.count(`SELECT count(*) FROM control_core.run_events WHERE type = 'run.cancelled'
				AND detail->>'from' = $1 AND detail->>'reason' = 'operator says so'`, tc.from); n != cancelled {
				t.Errorf("%d run.cancelled events from %s, want %d", n, tc.from, cancelled)
			}
			if n := f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'run.cancel' AND subject = $1
				AND detail->>'from' = $2`, runID, tc.from); n != cancelled {
				t.Errorf("%d run.cancel audit rows, want %d", n, cancelled)
			}
			if n := f.count(`SELECT count(*) FROM control_core.runs WHERE state = $1
				AND (state <> 'cancelled' OR (cancel_requested_at_ms IS NOT NULL AND finished_at_ms IS NOT NULL))`, want); n != 1 {
				t.Errorf("the Run is not %s with its cancel times", want)
			}
			if n := f.count(`SELECT count(*) FROM control_core.attempts WHERE state = $1
				AND attempt_no = (SELECT max(attempt_no) FROM control_core.attempts)`, tc.attempt); n != 1 {
				t.Errorf("the newest Attempt is not %s", tc.attempt)
			}
			if tc.offer != "" && f.count(`SELECT count(*) FROM control_core.dispatch_offers WHERE state = $1`, tc.offer) != 1 {
				t.Errorf("the offer is not %s", tc.offer)
			}
			if tc.lease != "" && f.count(`SELECT count(*) FROM control_core.run_leases WHERE state = $1`, tc.lease) != 1 {
				t.Errorf("the lease is not %s", tc.lease)
			}
		})
	}

	t.Run("unknown id, and the runtime role", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		f := admittedOnce(t)
		var pgErr *pgconn.PgError
		_, err := f.d.Pool(t, "ql_admin").Exec(ctx, `SELECT control_core.cancel_run(gen_random_uuid(), '')`)
		if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.NoDataFound {
			t.Errorf("cancel_run of an unknown Run: %v, want no_data_found", err)
		}
		_, err = f.rt.Pool().Exec(ctx, `SELECT control_core.cancel_run(run_id, '') FROM control_core.runs`)
		if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.InsufficientPrivilege {
			t.Errorf("cancel_run as the runtime role: %v, want permission denied", err)
		}
		if n := f.count(`SELECT count(*) FROM control_core.runs WHERE state = 'queued'`); n != 1 {
			t.Error("a refused cancel changed the Run")
		}
	})
}

// The 7-argument task_digest is the 4-argument one for the defaults (1, 0, '{}'), so no digest
// written before pg-0022 changes, and differs as soon as any policy field does.
func TestTaskDigestWithPolicy(t *testing.T) {
	t.Parallel()
	f := admittedOnce(t)
	const four = `control_core.task_digest('k', 3, '00000000-0000-0000-0000-0000000000e1', repeat('c', 64))`
	seven := func(policy string) string {
		return `control_core.task_digest('k', 3, '00000000-0000-0000-0000-0000000000e1', repeat('c', 64), ` + policy + `)`
	}
	for _, c := range []struct {
		policy string
		equal  bool
	}{
		{`1, 0, '{}'`, true},
		{`2, 0, '{}'`, false},
		{`2, 1000, '{}'`, false},
		{`1, 0, '{"gpu": "true"}'`, false},
	} {
		if n := f.count(`SELECT count(*) WHERE ` + four + ` = ` + seven(c.policy)); (n == 1) != c.equal {
			t.Errorf("task_digest(…, %s) equal to the 4-argument digest: %v, want %v", c.policy, n == 1, c.equal)
		}
	}
	// every admitted revision still verifies under the 7-argument form over its own columns
	if n := f.count(`SELECT count(*) FROM control_core.task_revisions kr JOIN control_core.execution_revisions er USING (execution_revision_id)
		WHERE kr.content_digest <> control_core.task_digest(kr.task_id, kr.revision, er.execution_revision_id, er.digest,
		                                                    kr.max_attempts, kr.retry_backoff_ms, kr.worker_selector)`); n != 0 {
		t.Errorf("%d task revisions do not verify under the 7-argument digest", n)
	}
}

// attempt_live_shape and the predicate of attempts_recovery_drift_idx (as the catalog holds it) say
// the same thing over every live state and NULL pattern of the nine dispatch fields: the index
// holds exactly the live Attempts out of shape. Each live state has one shape; no other state has any.
func TestAttemptLiveShapeAgreesWithTheRecoveryIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := admittedOnce(t)
	var pred string
	if err := f.su.QueryRow(ctx, `SELECT pg_get_expr(indpred, indrelid) FROM pg_index
		WHERE indexrelid = 'control_core.attempts_recovery_drift_idx'::regclass`).Scan(&pred); err != nil {
		t.Fatal(err)
	}
	var shapes, live, disagree, rows int
	err := f.su.QueryRow(ctx, `WITH x AS (
		SELECT s.state,
		       CASE WHEN g & 1 <> 0 THEN 'w' END AS worker_id,
		       CASE WHEN g & 2 <> 0 THEN gen_random_uuid() END AS worker_session_id,
		       CASE WHEN g & 4 <> 0 THEN gen_random_uuid() END AS offer_id,
		       CASE WHEN g & 8 <> 0 THEN gen_random_uuid() END AS run_lease_id,
		       CASE WHEN g & 16 <> 0 THEN repeat('a', 64) END AS callback_token_hash,
		       CASE WHEN g & 32 <> 0 THEN 1::bigint END AS started_at_ms,
		       CASE WHEN g & 64 <> 0 THEN 2::bigint END AS finished_at_ms,
		       CASE WHEN g & 128 <> 0 THEN '{}'::jsonb END AS result,
		       CASE WHEN g & 256 <> 0 THEN '{}'::jsonb END AS error
		FROM unnest(ARRAY['claimed', 'dispatching', 'running', 'succeeded', 'failed', 'cancelled', 'expired']) AS s (state),
		     generate_series(0, 511) g),
	y AS (SELECT x.state, control_core.attempt_live_shape(x.state, x.worker_id, x.worker_session_id, x.offer_id, x.run_lease_id,
	                     x.callback_token_hash, x.started_at_ms, x.finished_at_ms, x.result, x.error) AS shape,
	             (`+pred+`) AS indexed
	      FROM x)
	SELECT count(*) FILTER (WHERE shape),
	       count(*) FILTER (WHERE shape AND state IN ('claimed', 'dispatching', 'running')),
	       count(*) FILTER (WHERE indexed IS DISTINCT FROM (state IN ('claimed', 'dispatching', 'running') AND NOT shape)),
	       count(*)
	FROM y`).Scan(&shapes, &live, &disagree, &rows)
	if err != nil {
		t.Fatalf("%v (predicate %s)", err, pred)
	}
	if shapes != 3 || live != 3 || disagree != 0 || rows != 7*512 {
		t.Errorf("%d rows: %d in a live shape (%d of a live state), %d where the index predicate disagrees; want 3, 3, 0 of %d",
			rows, shapes, live, disagree, 7*512)
	}
}
