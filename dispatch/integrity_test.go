package dispatch_test

// The loop's database facts that hold against the dispatcher's own role (pg-0023, from the
// hostile review of branch s6-hostile): what a buggy or compromised dispatcher can write in plain
// SQL as ql_runtime, and what a hand-back costs a Run.

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// runtimeFx is newFx without the loop audit (each test arranges, or tries to arrange, a state the
// audit refuses), plus a pool connected as ql_runtime: the dispatcher's own role.
func runtimeFx(t *testing.T) (*fx, *pgxpool.Pool) {
	t.Helper()
	d := testpg.New(t)
	f := &fx{t: t, d: d, su: d.Pool(t, ""), pub: admin.NewPublisher(d.Handle(t, "ql_admin")),
		store: dispatch.NewStore(d.Handle(t, "ql_runtime"), testConfig)}
	f.project("p")
	return f, d.Pool(t, "ql_runtime")
}

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// I1 holds on insert: a newer Attempt that disagrees with its Run, inserted by the runtime role, is
// refused at commit, whatever the Run's state (pg-0022 checked only UPDATE OF state).
func TestANewerAttemptInsertedByTheRuntimeRoleMustAgreeWithItsRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, runState, attemptState string }{
		{"succeeded Attempt 2 under a running Run", "running", "succeeded"},
		{"claimed Attempt 2 under a succeeded Run", "succeeded", "claimed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, rt := runtimeFx(t)
			ctx := context.Background()
			run := f.queue("p", 1)[0]
			c := f.token("w")
			s, o, l := f.running(c)
			if tc.runState == "succeeded" {
				if _, err := f.store.Complete(ctx, c, o.AttemptID, dispatch.Report{SessionID: s.ID, CallbackToken: o.CallbackToken,
					LeaseVersion: l.LeaseVersion, Outcome: dispatch.OutcomeSucceeded}); err != nil {
					t.Fatal(err)
				}
			}
			before := f.state(run)
			_, err := rt.Exec(ctx, `INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, finished_at_ms)
				VALUES (gen_random_uuid(), $1, 2, 'remote_worker', $2,
				        CASE WHEN $2 = 'claimed' THEN NULL ELSE control_core.db_now_ms() END)`, run, tc.attemptState)
			if pgCode(err) != pgerrcode.IntegrityConstraintViolation {
				t.Fatalf("as ql_runtime, a %s Attempt 2 under a %s Run: %v; want refused at commit (23000)", tc.attemptState, before, err)
			}
			if after := f.state(run); after != before {
				t.Errorf("the refused insert changed the Run: %s → %s", before, after)
			}
		})
	}
}

// I1 holds when an Attempt is renumbered: an old failed Attempt moved above the running one is
// refused at commit (the newest Attempt would be failed under a running Run).
func TestAnAttemptRenumberedByTheRuntimeRoleMustAgreeWithItsRun(t *testing.T) {
	t.Parallel()
	f, rt := runtimeFx(t)
	ctx := context.Background()
	f.policy("p", 3, 0, "{}")
	run := f.queue("p", 1)[0]
	c := f.token("w")
	s, o, l := f.running(c)
	code := 1
	if _, err := f.store.Complete(ctx, c, o.AttemptID, dispatch.Report{SessionID: s.ID, CallbackToken: o.CallbackToken,
		LeaseVersion: l.LeaseVersion, Outcome: dispatch.OutcomeFailed, ExitCode: &code}); err != nil {
		t.Fatal(err)
	}
	f.running(c) // attempt 2 running
	_, err := rt.Exec(ctx, `UPDATE control_core.attempts SET attempt_no = 3 WHERE run_id = $1 AND attempt_no = 1`, run)
	if pgCode(err) != pgerrcode.IntegrityConstraintViolation {
		t.Fatalf("as ql_runtime, failed Attempt 1 renumbered 3 above the running Attempt 2: %v; want refused at commit (23000)", err)
	}
}

// A lease's Run is its Attempt's Run: the runtime role cannot grant Run A's Attempt a lease that
// names Run B (it would count as B's one active lease, run_leases_live_run_idx), nor move a lease
// to another Run. The same lease naming A is accepted, so the refusal is about run_id.
func TestALeaseNamesItsAttemptsRun(t *testing.T) {
	t.Parallel()
	f, rt := runtimeFx(t)
	ctx := context.Background()
	runs := f.queue("p", 3)
	c := f.token("w")
	sess := f.session(c, 1, nil)
	attemptOf := func(run any) string {
		return f.str(`SELECT attempt_id::text FROM control_core.attempts WHERE run_id = $1`, run)
	}
	insert := func(tx pgx.Tx, attempt string, run any) error {
		_, err := tx.Exec(ctx, `INSERT INTO control_core.run_leases (run_lease_id, run_id, attempt_id, worker_session_id,
			lease_version, state, granted_at_ms, expires_at_ms)
			VALUES (gen_random_uuid(), $1, $2, $3, 1, 'active', control_core.db_now_ms(), control_core.db_now_ms() + 60000)`,
			run, attempt, sess.ID)
		return err
	}
	for _, tc := range []struct {
		name string
		run  any
		want string
	}{{"naming another Run", runs[1], pgerrcode.ForeignKeyViolation}, {"naming its own Run", runs[0], ""}} {
		err := pgx.BeginFunc(ctx, rt, func(tx pgx.Tx) error {
			if err := insert(tx, attemptOf(runs[0]), tc.run); err != nil {
				return err
			}
			return errors.New("roll back")
		})
		if got := pgCode(err); got != tc.want {
			t.Errorf("as ql_runtime, an active lease for Run %s's Attempt %s: %v; want code %q", runs[0], tc.name, err, tc.want)
		}
	}
	// a lease of Run 3's Attempt, then its run_id moved to Run 2
	err := pgx.BeginFunc(ctx, rt, func(tx pgx.Tx) error {
		if err := insert(tx, attemptOf(runs[2]), runs[2]); err != nil {
			return fmt.Errorf("arrange: %w", err)
		}
		_, err := tx.Exec(ctx, `UPDATE control_core.run_leases SET run_id = $1 WHERE attempt_id = $2`, runs[1], attemptOf(runs[2]))
		return err
	})
	if pgCode(err) != pgerrcode.ForeignKeyViolation {
		t.Errorf("as ql_runtime, a lease moved to another Run: %v; want a foreign key violation", err)
	}
}

// handBack places the Run's next Attempt on s, acknowledges it and hands it back (a draining
// worker's report), returning the Run's state after.
func (f *fx) handBack(c dispatch.Credential, s dispatch.Session) string {
	f.t.Helper()
	offers := f.place(c, s, 1)
	if len(offers) != 1 {
		f.t.Fatalf("placed %d offers, want 1", len(offers))
	}
	o := offers[0]
	l, err := f.store.Ack(context.Background(), c, o.OfferID, s.ID, o.CallbackToken)
	if err != nil {
		f.t.Fatal(err)
	}
	comp, err := f.store.Complete(context.Background(), c, o.AttemptID, dispatch.Report{SessionID: s.ID,
		CallbackToken: o.CallbackToken, LeaseVersion: l.LeaseVersion, Outcome: dispatch.OutcomeHandedBack, ErrorKind: "drain"})
	if err != nil {
		f.t.Fatalf("hand back attempt %d: %v", o.AttemptNo, err)
	}
	return comp.RunState
}

// A hand-back does not use up an attempt: with the default max_attempts 1 (run once), a Run handed
// back twice by draining workers is queued at once each time and its third Attempt succeeds. With
// max_attempts 2, a Run handed back once still has two failures to spend.
func TestAHandBackIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	runs := f.queue("p", 1)
	c := f.token("w")
	s := f.session(c, 1, nil)
	for i := 1; i <= 2; i++ {
		if got := f.handBack(c, s); got != "queued" {
			t.Fatalf("hand-back %d: the Run is %s, want queued (max_attempts 1, a hand-back is not an attempt)", i, got)
		}
	}
	offers := f.place(c, s, 1)
	if len(offers) != 1 || offers[0].RunID != runs[0] || offers[0].AttemptNo != 3 {
		t.Fatalf("after two hand-backs: offers %+v, want Run %s's attempt 3", offers, runs[0])
	}
	l, err := f.store.Ack(bg, c, offers[0].OfferID, s.ID, offers[0].CallbackToken)
	if err != nil {
		t.Fatal(err)
	}
	comp, err := f.store.Complete(bg, c, offers[0].AttemptID, dispatch.Report{SessionID: s.ID, CallbackToken: offers[0].CallbackToken,
		LeaseVersion: l.LeaseVersion, Outcome: dispatch.OutcomeSucceeded})
	if err != nil || comp.RunState != "succeeded" {
		t.Fatalf("attempt 3: complete = %+v, %v; want succeeded", comp, err)
	}
	if got := f.events(runs[0]); got != "run.created run.queued run.dispatching run.running run.queued:handed_back "+
		"run.dispatching run.running run.queued:handed_back run.dispatching run.running run.succeeded" {
		t.Errorf("events: %s", got)
	}
	// Run 2, max_attempts 2: handed back, then two failures: the first is retried (one attempt
	// counted of two), the second fails the Run.
	f.policy("p", 2, 0, "{}")
	runs = append(runs, f.queue("p", 1)...)
	if got := f.handBack(c, s); got != "queued" {
		t.Fatalf("Run 2's hand-back: the Run is %s, want queued", got)
	}
	for _, want := range []string{"queued", "failed"} {
		s2, o, l := f.running(c)
		code := 1
		comp, err = f.store.Complete(bg, c, o.AttemptID, dispatch.Report{SessionID: s2.ID, CallbackToken: o.CallbackToken,
			LeaseVersion: l.LeaseVersion, Outcome: dispatch.OutcomeFailed, ExitCode: &code})
		if err != nil || comp.RunState != want || o.RunID != runs[1] {
			t.Fatalf("Run 2's attempt %d (Run %s) failed: complete = %+v, %v; want the Run %s", o.AttemptNo, o.RunID, comp, err, want)
		}
	}
	if got := f.events(runs[1]); got != "run.created run.queued run.dispatching run.running run.queued:handed_back "+
		"run.dispatching run.running run.queued:retry run.dispatching run.running run.failed:attempts_exhausted" {
		t.Errorf("Run 2's events: %s", got)
	}
}

// Hand-backs are bounded: a Run handed back max_hand_backs() times runs again each time; the next
// hand-back fails it, with reason hand_backs_exhausted (a worker that hands every job back cannot
// loop a Run for ever).
func TestHandBacksPastTheCapFailTheRun(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.policy("p", 3, 0, "{}")
	run := f.queue("p", 1)[0]
	c := f.token("w")
	s := f.session(c, 1, nil)
	limit := f.count(`SELECT control_core.max_hand_backs()`)
	if limit < 1 || limit > 64 {
		t.Fatalf("max_hand_backs() = %d, want a small positive cap", limit)
	}
	for i := 1; i <= limit; i++ {
		if got := f.handBack(c, s); got != "queued" {
			t.Fatalf("hand-back %d of %d: the Run is %s, want queued", i, limit, got)
		}
	}
	if got := f.handBack(c, s); got != "failed" {
		t.Fatalf("hand-back %d (past the cap %d): the Run is %s, want failed", limit+1, limit, got)
	}
	if got := f.str(`SELECT detail ->> 'reason' FROM control_core.run_events WHERE run_id = $1 ORDER BY seq DESC LIMIT 1`, run); got != "hand_backs_exhausted" {
		t.Errorf("the Run failed with reason %q, want hand_backs_exhausted", got)
	}
	if n := f.count(`SELECT count(*) FROM control_core.attempts WHERE run_id = $1`, run); n != limit+1 {
		t.Errorf("the Run has %d Attempts, want %d", n, limit+1)
	}
}
