package coordinator

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
)

// AdmitThenClaim sends the next claim behind the admit's COMMIT in the same round trip: it runs
// after the admit committed and in a transaction of its own, so it takes the next row in the
// ADR's order with its own fence, whatever the admit's outcome (a Race commits too), and does
// not run at all when the admit's transaction fails (the server skips to the Sync), leaving the
// rest unclaimed. Directly and behind a transaction pooler (pg-0027's function calls).
func TestAdmitThenClaimSendsTheNextClaimBehindTheAdmit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		rows    []string
		pooled  bool
		tamper  string // after the first claim
		outcome Outcome
		fails   bool
		carried bool
		next    []string
	}{
		{"written, the next row claimed", []string{"a", "b", "c"}, false, "", Written, false, true, []string{"b"}},
		{"written, nothing left to claim", []string{"a"}, false, "", Written, false, true, nil},
		{"written, behind a transaction pooler", []string{"a", "b"}, true, "", Written, false, true, []string{"b"}},
		{"a race commits, the claim runs", []string{"a", "b"}, false,
			`UPDATE control_core.trigger_schedules SET claim_version = claim_version + 1 WHERE trigger_id = 'a'`, Race, false, true, []string{"b"}},
		{"the admit fails, the claim does not run", []string{"a", "b"}, false,
			`ALTER TABLE control_core.run_events ADD CONSTRAINT injected_fault CHECK (type <> 'run.queued')`, "", true, false, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f, s := dueFixture(t, time.Second, tc.rows...)
			if tc.pooled {
				s = NewStore(f.openThrough("transaction", ""))
			}
			c := must(s.Claim(ctx, "r1", 30*time.Second)).of(t)
			if tc.tamper != "" {
				f.exec(tc.tamper)
			}
			res, claims, carried, claimErr := s.AdmitThenClaim(ctx, AdmitItem{Claim: c, ScheduledFor: *c.CursorMs, Next: *c.CursorMs + 60_000, RunID: uuid.New()}, 3,
				NextClaim{Owner: "r1", Lease: 30 * time.Second, N: 1})
			if (res.Err != nil) != tc.fails || (!tc.fails && res.Outcome != tc.outcome) {
				t.Fatalf("admit: %s, %v; want %s (fails %v)", res.Outcome, res.Err, tc.outcome, tc.fails)
			}
			var got []string
			for _, n := range claims {
				got = append(got, n.TriggerID)
				if n.Fence.Owner != "r1" || n.ClaimedAtMs < c.ClaimedAtMs || n.Fence.ExpiresAtMs <= n.ClaimedAtMs {
					t.Errorf("carried claim of %s: fence %+v claimed at %d; want r1's live fence after %d", n.TriggerID, n.Fence, n.ClaimedAtMs, c.ClaimedAtMs)
				}
			}
			if claimErr != nil {
				t.Errorf("the claim's own error: %v; want none (it committed, or did not run)", claimErr)
			}
			if carried != tc.carried || len(got) != len(tc.next) || (len(got) == 1 && got[0] != tc.next[0]) {
				t.Fatalf("carried %v, claimed %v; want %v, %v", carried, got, tc.carried, tc.next)
			}
			// what the database holds: a live claim exactly on the carried rows
			held := f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE claim_owner = 'r1'
				AND trigger_id <> 'a' AND claim_expires_at_ms > control_core.db_now_ms()`)
			if held != len(tc.next) {
				t.Errorf("%d rows besides a hold r1's claim; want %d", held, len(tc.next))
			}
			if tc.outcome == Written && !tc.fails && f.audit() != 1 {
				t.Error("want exactly the one Run admitted")
			}
			// the handle is still usable: the pipeline was read to its end
			if _, err := s.Claim(ctx, "r2", 30*time.Second); err != nil {
				t.Fatalf("a claim after: %v", err)
			}
		})
	}
}

// The one-row mode pays one round trip per admission: a round over five due rows sends one claim
// of its own and carries each following claim behind an admit, so the claim latency is observed
// once and the admit call five times. An admit that fails carries nothing: the round then claims
// on its own and goes on with the rows after it.
func TestTheOneRowModeCarriesEachNextClaimInTheAdmitsRoundTrip(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                   string
		fault                  string
		admits, errors, claims int64
	}{
		{"every admit carries the next claim", "", 5, 0, 1},
		{"a failed admit carries nothing", `ALTER TABLE control_core.runs ADD CONSTRAINT injected_fault CHECK (trigger_id <> 'c')`, 4, 1, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// fire_once @yearly: each row due once, so the round's claims count exactly whatever the
			// clock (every-minute rows fall due again when the round crosses a minute boundary)
			f := newFixture(t)
			f.dueOnce("a", "b", "c", "d", "e")
			if tc.fault != "" {
				f.exec(tc.fault)
			}
			var claims, admitCalls atomic.Int64
			co := f.coordinatorWith("r1", f.rt, []Option{WithObserver(Observer{
				Claim:     func(time.Duration) { claims.Add(1) },
				AdmitCall: func(time.Duration) { admitCalls.Add(1) },
			})})
			if n := co.Round(context.Background(), nil); n != 5 {
				t.Fatalf("round claimed %d, want 5", n)
			}
			st := co.Stats.Snapshot()
			if st.Admits != tc.admits || st.Errors != tc.errors || claims.Load() != tc.claims || admitCalls.Load() != 5 {
				t.Errorf("admits %d, errors %d, claims observed %d, admit calls %d; want %d, %d, %d, 5",
					st.Admits, st.Errors, claims.Load(), admitCalls.Load(), tc.admits, tc.errors, tc.claims)
			}
			if n := f.audit(); int64(n) != tc.admits {
				t.Errorf("%d Runs, want %d", n, tc.admits)
			}
		})
	}
}
