package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/schedule"
)

// A serialization failure of the admit skips the claim it carries (the server skips to the
// Sync); the retry carries it again: the next row is claimed exactly once, by the retry, and
// the round trip's outcome is the retry's. A cancellation while the admit waits carries nothing:
// the next row stays unclaimed, and the pool's connections are usable after.
func TestTheCarriedClaimRunsOnceAcrossRetriesAndNotAfterACancel(t *testing.T) {
	t.Parallel()
	for _, cancel := range []bool{false, true} {
		ctx := context.Background()
		f, s := dueFixture(t, time.Second, "a", "b")
		c := must(s.Claim(ctx, "r1", 30*time.Second)).of(t)
		tx := must(f.su.Begin(ctx)).of(t)
		if _, err := tx.Exec(ctx, `UPDATE control_core.trigger_schedules SET state_version = state_version + 1 WHERE trigger_id = 'a'`); err != nil {
			t.Fatal(err)
		}
		actx, stop := context.WithCancel(ctx)
		type result struct {
			res      AdmitResult
			claims   []*Claim
			carried  bool
			claimErr error
		}
		done := make(chan result, 1)
		go func() {
			res, claims, carried, claimErr := s.AdmitThenClaim(actx, AdmitItem{Claim: c, ScheduledFor: *c.CursorMs, Next: c.ClaimedAtMs + 60_000, RunID: uuid.New()}, 2,
				NextClaim{Owner: "r1", Lease: 30 * time.Second, N: 1})
			done <- result{res, claims, carried, claimErr}
		}()
		for f.count(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND usename = 'ql_runtime'`) == 0 {
			select {
			case r := <-done:
				t.Fatalf("admit ended before it waited on the lock: %+v", r)
			case <-time.After(5 * time.Millisecond):
			}
		}
		var r result
		if cancel {
			stop()
			r = <-done
			// the backend was cancelled before the lock was released: nothing behind it ran
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if r.res.Err == nil || !errors.Is(r.res.Err, context.Canceled) && r.res.Outcome == Written || r.carried {
				t.Errorf("cancelled: %+v carried %v; want an error and nothing carried", r.res, r.carried)
			}
		} else {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			r = <-done
			if r.res.Err != nil || r.res.Outcome != Race || r.res.Retries != 1 || !r.carried || len(r.claims) != 1 || r.claims[0].TriggerID != "b" {
				t.Errorf("retried: %+v, carried %v, %d claims; want a race after 1 retry and b carried", r.res, r.carried, len(r.claims))
			}
		}
		if r.claimErr != nil {
			t.Errorf("cancel %v: the claim's own error %v; want none (it ran and committed, or did not run)", cancel, r.claimErr)
		}
		stop()
		want := 1
		if cancel {
			want = 0
		}
		if n := f.count(`SELECT claim_version FROM control_core.trigger_schedules WHERE trigger_id = 'b'`); n != want {
			t.Errorf("cancel %v: b claimed %d times; want %d", cancel, n, want)
		}
		for start := time.Now(); f.rt.Pool().Stat().AcquiredConns() != 0; {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("cancel %v: %d connections still acquired after 10 s", cancel, f.rt.Pool().Stat().AcquiredConns())
			}
			time.Sleep(10 * time.Millisecond)
		}
		var status string
		for _, conn := range f.rt.Pool().AcquireAllIdle(ctx) {
			if s := conn.Conn().PgConn().TxStatus(); s != 'I' {
				status += string(s)
			}
			conn.Release()
		}
		if status != "" {
			t.Errorf("cancel %v: idle connections in transaction states %q", cancel, status)
		}
		if _, err := s.Claim(ctx, "r2", 30*time.Second); err != nil {
			t.Fatalf("cancel %v: a claim after: %v", cancel, err)
		}
	}
}

// Three single-mode replicas at once behind one PgBouncer server connection (transaction
// pooling, default_pool_size 1), each admit carrying its next claim through the planned
// functions: every due row is admitted exactly once, nothing fails and no claim is left held.
func TestCarriedClaimsOfSeveralReplicasBehindOneServerConnection(t *testing.T) {
	t.Parallel()
	ids := make([]string, 30)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%02d", i)
	}
	f := newFixture(t)
	f.dueOnce(ids...)
	h := f.openThrough("transaction", "")
	var wg sync.WaitGroup
	cos := make([]*Coordinator, 3)
	claimed := make([]int, 3)
	for i := range cos {
		cos[i] = f.coordinator(fmt.Sprintf("r%d", i), h)
		wg.Add(1)
		go func() { defer wg.Done(); claimed[i] = cos[i].Round(context.Background(), nil) }()
	}
	wg.Wait()
	var admits, errs int64
	for _, co := range cos {
		st := co.Stats.Snapshot()
		admits, errs = admits+st.Admits, errs+st.Errors+st.Races
	}
	if admits != 30 || errs != 0 || claimed[0]+claimed[1]+claimed[2] != 30 {
		t.Errorf("admits %d, errors and races %d, claimed %v; want 30 admits, none failed", admits, errs, claimed)
	}
	if n := f.audit(); n != 30 {
		t.Errorf("audit: %d", n)
	}
	if n := f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE claim_token IS NOT NULL`); n != 0 {
		t.Errorf("%d claims left held", n)
	}
}

// A carried claim that comes back with a row waiting for initialisation (here an expired claim
// of another replica, taken over) is handled as a claim sent on its own: the round initialises
// it, then claims on in the ADR's order and admits the rest; nothing is left held.
func TestACarriedClaimOfAnUninitialisedRowInitialisesIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.dueOnce("a", "b")
	f.trigger("n", "* * * * *", schedule.MisfireSkip) // no cursor: waiting for initialisation
	f.exec(`UPDATE control_core.trigger_schedules SET claim_owner = 'x', claim_token = gen_random_uuid(), claim_version = claim_version + 1,
		claim_expires_at_ms = control_core.db_now_ms() + 60000 WHERE trigger_id = 'n'`)
	var calls, solo atomic.Int64
	co := f.coordinatorWith("r1", f.rt, []Option{WithObserver(Observer{Claim: func(time.Duration) { solo.Add(1) }}), WithRunIDs(func() uuid.UUID {
		if calls.Add(1) == 1 { // a's admit, before it is sent: n's claim expires, its next claim takes n over
			f.exec(`UPDATE control_core.trigger_schedules SET claim_expires_at_ms = control_core.db_now_ms() - 1 WHERE trigger_id = 'n'`)
		}
		return uuid.New()
	})})
	if n := co.Round(context.Background(), nil); n != 2 {
		t.Errorf("round claimed %d, want 2 (a and b; n spends no budget)", n)
	}
	if solo.Load() != 2 {
		t.Errorf("%d claims sent on their own; want 2 (a's, and b's after the initialisation: n and the last came behind admits)", solo.Load())
	}
	st := co.Stats.Snapshot()
	if st.Admits != 2 || st.Inits != 1 || st.Takeovers != 1 || st.Errors != 0 || st.Claims != 3 {
		t.Errorf("stats %+v; want a and b admitted, n taken over and initialised, 3 rows claimed", st)
	}
	if n := f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE claim_token IS NOT NULL OR next_fire_at_ms IS NULL`); n != 0 {
		t.Errorf("%d rows left claimed or uninitialised", n)
	}
}

// A claim statement that fails is counted (Stats.Errors, the observer's "claim" class), as a claim
// sent on its own always was, and ends the round as one. Here the claim of b fails once (an
// injected fault: a trigger that raises on the first claim of b), sent behind a's admit: before
// AdmitThenClaim returned the claim's own error its failure was dropped and the round claimed
// again on its own, so nothing counted it (errors 0). The store reports it too.
func TestACarriedClaimThatFailsIsCounted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.dueOnce("a", "b")
	f.exec(`CREATE SEQUENCE public.claim_b_faults`)
	f.exec(`CREATE FUNCTION public.fail_claim_of_b_once() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
		BEGIN
			IF NEW.trigger_id = 'b' AND NEW.claim_token IS DISTINCT FROM OLD.claim_token AND NEW.claim_token IS NOT NULL
				AND nextval('public.claim_b_faults') = 1 THEN
				RAISE EXCEPTION 'injected claim fault';
			END IF;
			RETURN NEW;
		END $$`)
	f.exec(`CREATE TRIGGER fail_claim_of_b_once BEFORE UPDATE ON control_core.trigger_schedules FOR EACH ROW EXECUTE FUNCTION public.fail_claim_of_b_once()`)
	var claimErrors atomic.Int64
	co := f.coordinatorWith("r1", f.rt, []Option{WithObserver(Observer{Error: func(class string) {
		if class == "claim" {
			claimErrors.Add(1)
		}
	}})})
	if n := co.Round(context.Background(), nil); n != 1 {
		t.Errorf("round claimed %d; want 1, ended by the failed claim", n)
	}
	if st := co.Stats.Snapshot(); st.Errors != 1 || claimErrors.Load() != 1 || st.Admits != 1 {
		t.Errorf("a failed claim: errors %d, observed as claim errors %d; want 1 and 1, a admitted (stats %+v)", st.Errors, claimErrors.Load(), st)
	}
	f.exec(`ALTER SEQUENCE public.claim_b_faults RESTART`) // the next claim of b fails again
	f.setCursor("a", -time.Hour)                           // due again, before b
	s := NewStore(f.rt)
	ctx := context.Background()
	c := must(s.Claim(ctx, "r1", 30*time.Second)).of(t)
	if c == nil || c.TriggerID != "a" {
		t.Fatalf("claimed %+v; want a", c)
	}
	res, claims, carried, claimErr := s.AdmitThenClaim(ctx, AdmitItem{Claim: c, ScheduledFor: *c.CursorMs, Next: c.ClaimedAtMs + 60_000, RunID: uuid.New()}, 3,
		NextClaim{Owner: "r1", Lease: 30 * time.Second, N: 1})
	if res.Err != nil || res.Outcome != Written || carried || len(claims) != 0 || claimErr == nil || !strings.Contains(claimErr.Error(), "injected claim fault") {
		t.Errorf("admit %s %v, carried %v with %d claims, claim error %v; want a written, the injected fault reported", res.Outcome, res.Err, carried, len(claims), claimErr)
	}
}

// The carried claims spend the round's budget as claims sent on their own: a budget of 3 over 5
// due rows claims and admits 3, and the last admit carries no claim (the rows after stay
// untouched).
func TestTheCarriedClaimsSpendTheBudget(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.dueOnce("a", "b", "c", "d", "e")
	var solo atomic.Int64
	co := f.coordinatorWith("r1", f.rt, []Option{WithObserver(Observer{Claim: func(time.Duration) { solo.Add(1) }})},
		func(c *Config) { c.Budget = 3 })
	if n := co.Round(context.Background(), nil); n != 3 {
		t.Errorf("round claimed %d, want 3", n)
	}
	if st := co.Stats.Snapshot(); st.Admits != 3 || st.Claims != 3 || solo.Load() != 1 {
		t.Errorf("stats %+v, claims sent alone %d; want 3 claimed and admitted, 1 claim sent alone", st, solo.Load())
	}
	if n := f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE trigger_id IN ('d', 'e') AND claim_version = 0`); n != 2 {
		t.Errorf("%d of d and e never claimed; want 2", n)
	}
}
