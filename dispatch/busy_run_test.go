package dispatch_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/dispatch"
)

// A report whose every fence holds is never answered lease_lost because the Run's row stayed
// locked past the store's tries (a slow cancel_run, a sweep): it is ErrBusy (503, the worker
// retries), and the same report is kept once the lock is gone. It was once ErrLeaseLost (409):
// the worker dropped its report, and a cancelled Run kept a running Attempt with an active lease.
func TestAReportAgainstALockedRunIsBusyNotLost(t *testing.T) {
	for _, tc := range []struct {
		name, lock, runAfter string
	}{
		{"row lock", `SELECT 1 FROM control_core.runs WHERE run_id = $1 FOR UPDATE`, "succeeded/succeeded"},
		{"slow cancel", `SELECT * FROM control_core.cancel_run($1, 'slow')`, "cancelled/cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFx(t)
			f.queue("p", 1)
			c := f.token("w")
			s, o, l := f.running(c)
			rep := dispatch.Report{SessionID: s.ID, CallbackToken: o.CallbackToken, LeaseVersion: l.LeaseVersion, Outcome: dispatch.OutcomeSucceeded}
			tx, err := f.su.Begin(bg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(bg, tc.lock, o.RunID); err != nil {
				t.Fatal(err)
			}
			_, busy := f.store.Complete(bg, c, o.AttemptID, rep)
			if err := tx.Commit(bg); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(busy, dispatch.ErrBusy) {
				t.Errorf("a report against a locked Run: %v; want ErrBusy (retryable)", busy)
			}
			_, err = f.store.Complete(bg, c, o.AttemptID, rep)
			if tc.name == "slow cancel" && !errors.Is(err, dispatch.ErrRunCancelled) || tc.name != "slow cancel" && err != nil {
				t.Errorf("the same report once the lock is gone: %v", err)
			}
			if got := f.state(o.RunID); !strings.HasPrefix(got, tc.runAfter+"/") {
				t.Errorf("Run %s after the retried report; want %s/… (the report kept, the lease ended)", got, tc.runAfter)
			}
		})
	}
}

// The largest tail the protocol allows, at its worst escaping as jsonb text (8192 control
// characters, \u001b each), is kept: the store's size backstop was once below it, so such a
// report (a coloured log) wrote nothing while every fence held, and was retried until it was lost.
func TestAReportWithTheWorstEscapedTailIsKept(t *testing.T) {
	f := newFx(t)
	f.queue("p", 1)
	c := f.token("w")
	s, o, l := f.running(c)
	tail := strings.Repeat("\x1b", 8192)
	got, err := f.store.Complete(bg, c, o.AttemptID, dispatch.Report{SessionID: s.ID, CallbackToken: o.CallbackToken,
		LeaseVersion: l.LeaseVersion, Outcome: dispatch.OutcomeSucceeded, OutputTail: tail})
	if err != nil || got.RunState != "succeeded" {
		t.Fatalf("a report with 8192 escape characters: %+v, %v; want the Run succeeded", got, err)
	}
	if n := f.str(`SELECT length(result->>'output_tail')::text FROM control_core.attempts WHERE attempt_id = $1`, o.AttemptID); n != "8192" {
		t.Errorf("stored tail of %s characters, want 8192", n)
	}
}
