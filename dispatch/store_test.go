package dispatch_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/dispatch"
)

var bg = context.Background()

// The whole loop of one Run: offer, ACK, heartbeat, complete; every state and event in order.
func TestOfferAckHeartbeatComplete(t *testing.T) {
	f := newFx(t)
	run := f.queue("p", 1)[0]
	c := f.token("w")
	s := f.session(c, 2, map[string]string{"zone": "a"})
	offers := f.place(c, s, 2)
	if len(offers) != 1 || offers[0].RunID != run || offers[0].AttemptNo != 1 || offers[0].MaxAttempts != 1 {
		t.Fatalf("offers = %+v", offers)
	}
	o := offers[0]
	if !dispatch.WellFormed(o.CallbackToken, dispatch.CallbackTokenPrefix) || len(o.Spec) == 0 || o.ExpiresInMs != testConfig.OfferTTL.Milliseconds() {
		t.Fatalf("offer fields: %+v", o)
	}
	if got := f.state(run); got != "dispatching/dispatching/offered/-/3/0" {
		t.Fatalf("after offer: %s", got)
	}
	if n := f.count(`SELECT count(*) FROM control_core.attempts WHERE callback_token_hash = $1`, dispatch.HashToken(o.CallbackToken)); n != 1 {
		t.Fatalf("callback hash stored %d times", n)
	}
	l, err := f.store.Ack(bg, c, o.OfferID, s.ID, o.CallbackToken)
	if err != nil || l.LeaseVersion != 1 || l.LeaseExpiresInMs <= 0 {
		t.Fatalf("ack = %+v, %v", l, err)
	}
	if got := f.state(run); got != "running/running/acked/active/4/1" {
		t.Fatalf("after ack: %s", got)
	}
	hb, err := f.store.Heartbeat(bg, c, s.ID, []dispatch.LeaseRef{{AttemptID: o.AttemptID, LeaseVersion: 1}})
	if err != nil || len(hb.Leases) != 1 || hb.Leases[0].Status != dispatch.LeaseRenewed || hb.SessionExpiresInMs <= 0 {
		t.Fatalf("heartbeat = %+v, %v", hb, err)
	}
	code := 0
	comp, err := f.store.Complete(bg, c, o.AttemptID, dispatch.Report{SessionID: s.ID, CallbackToken: o.CallbackToken,
		LeaseVersion: 1, Outcome: dispatch.OutcomeSucceeded, ExitCode: &code, OutputTail: "ok\n", DurationMs: 12})
	if err != nil || comp.RunState != "succeeded" || comp.Replay {
		t.Fatalf("complete = %+v, %v", comp, err)
	}
	if got := f.state(run); got != "succeeded/succeeded/acked/released/5/1" {
		t.Fatalf("after complete: %s", got)
	}
	if got := f.events(run); got != "run.created run.queued run.dispatching run.running run.succeeded" {
		t.Fatalf("events: %s", got)
	}
	if err := f.store.Close(bg, c, s.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.store.Close(bg, c, s.ID); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// ACK with exactly one fence wrong writes nothing and names the fence.
func TestAckOneFenceWrong(t *testing.T) {
	cases := []struct {
		name    string
		arrange func(f *fx, c *dispatch.Credential, s dispatch.Session, o *dispatch.Offer)
		want    error
	}{
		{"token revoked", func(f *fx, c *dispatch.Credential, _ dispatch.Session, _ *dispatch.Offer) { f.revoke(*c) }, dispatch.ErrUnauthorized},
		{"another token", func(f *fx, c *dispatch.Credential, _ dispatch.Session, _ *dispatch.Offer) { *c = f.token("other") }, dispatch.ErrNotFound},
		{"session expired", func(f *fx, _ *dispatch.Credential, s dispatch.Session, _ *dispatch.Offer) { f.expireSession(s.ID) }, dispatch.ErrSessionGone},
		{"offer expired by one ms", func(f *fx, _ *dispatch.Credential, _ dispatch.Session, o *dispatch.Offer) { f.expireOffer(o.OfferID) }, dispatch.ErrOfferGone},
		{"wrong callback token", func(_ *fx, _ *dispatch.Credential, _ dispatch.Session, o *dispatch.Offer) {
			tok, _, _ := dispatch.NewCallbackToken()
			o.CallbackToken = tok
		}, dispatch.ErrNotFound},
		{"run cancelled", func(f *fx, _ *dispatch.Credential, _ dispatch.Session, o *dispatch.Offer) { f.cancel(o.RunID) }, dispatch.ErrRunCancelled},
		{"offer withdrawn", func(f *fx, _ *dispatch.Credential, _ dispatch.Session, o *dispatch.Offer) {
			if n, err := f.store.Withdraw(bg, []uuid.UUID{o.OfferID}); n != 1 || err != nil {
				f.t.Fatalf("withdraw: %d %v", n, err)
			}
		}, dispatch.ErrOfferGone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFx(t)
			run := f.queue("p", 1)[0]
			c := f.token("w")
			s := f.session(c, 1, nil)
			o := f.place(c, s, 1)[0]
			tc.arrange(f, &c, s, &o)
			before := f.state(run)
			_, err := f.store.Ack(bg, c, o.OfferID, s.ID, o.CallbackToken)
			if !errors.Is(err, tc.want) {
				t.Fatalf("ack: %v, want %v", err, tc.want)
			}
			if after := f.state(run); after != before || f.count(`SELECT count(*) FROM control_core.run_leases`) != 0 {
				t.Fatalf("ack wrote: %s → %s", before, after)
			}
		})
	}
}

// An ACK repeated (a lost response) returns the same lease; one lease, one event.
func TestAckReplay(t *testing.T) {
	f := newFx(t)
	run := f.queue("p", 1)[0]
	c := f.token("w")
	s, o, l := f.running(c)
	l2, err := f.store.Ack(bg, c, o.OfferID, s.ID, o.CallbackToken)
	if err != nil || l2.LeaseVersion != l.LeaseVersion {
		t.Fatalf("replayed ack = %+v, %v", l2, err)
	}
	if got := f.state(run); got != "running/running/acked/active/4/1" {
		t.Fatalf("after replay: %s", got)
	}
}

// A heartbeat renews only a lease that is active, held by the session, of its version and not
// past its expiry; a lease of a cancelled Run is renewed with status cancel.
func TestHeartbeatOneFenceWrong(t *testing.T) {
	cases := []struct {
		name    string
		arrange func(f *fx, c *dispatch.Credential, s *dispatch.Session, ref *dispatch.LeaseRef)
		want    error
		status  dispatch.LeaseStatus
	}{
		{"all hold", func(*fx, *dispatch.Credential, *dispatch.Session, *dispatch.LeaseRef) {}, nil, dispatch.LeaseRenewed},
		{"token revoked", func(f *fx, c *dispatch.Credential, _ *dispatch.Session, _ *dispatch.LeaseRef) { f.revoke(*c) }, dispatch.ErrUnauthorized, ""},
		{"another token", func(f *fx, c *dispatch.Credential, _ *dispatch.Session, _ *dispatch.LeaseRef) { *c = f.token("other") }, dispatch.ErrNotFound, ""},
		{"session expired", func(f *fx, _ *dispatch.Credential, s *dispatch.Session, _ *dispatch.LeaseRef) { f.expireSession(s.ID) }, dispatch.ErrSessionGone, ""},
		{"old lease version", func(_ *fx, _ *dispatch.Credential, _ *dispatch.Session, r *dispatch.LeaseRef) { r.LeaseVersion = 0 }, nil, dispatch.LeaseLost},
		{"lease expired, not swept", func(f *fx, _ *dispatch.Credential, _ *dispatch.Session, r *dispatch.LeaseRef) {
			f.expireLease(r.AttemptID)
		}, nil, dispatch.LeaseLost},
		{"lease swept", func(f *fx, _ *dispatch.Credential, _ *dispatch.Session, r *dispatch.LeaseRef) {
			f.expireLease(r.AttemptID)
			if n, err := f.store.ExpireLeases(bg, 10); n != 1 || err != nil {
				f.t.Fatalf("expire leases: %d %v", n, err)
			}
		}, nil, dispatch.LeaseLost},
		{"another session's lease", func(f *fx, c *dispatch.Credential, s *dispatch.Session, _ *dispatch.LeaseRef) {
			*s = f.session(*c, 1, nil)
		}, nil, dispatch.LeaseLost},
		{"run cancelled", func(f *fx, _ *dispatch.Credential, _ *dispatch.Session, r *dispatch.LeaseRef) {
			f.cancel(uuid.MustParse(f.str(`SELECT run_id::text FROM control_core.attempts WHERE attempt_id = $1`, r.AttemptID)))
		}, nil, dispatch.LeaseCancel},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFx(t)
			f.queue("p", 1)
			c := f.token("w")
			s, o, l := f.running(c)
			ref := dispatch.LeaseRef{AttemptID: o.AttemptID, LeaseVersion: l.LeaseVersion}
			tc.arrange(f, &c, &s, &ref)
			expiry := f.str(`SELECT expires_at_ms::text FROM control_core.run_leases WHERE attempt_id = $1`, o.AttemptID)
			hb, err := f.store.Heartbeat(bg, c, s.ID, []dispatch.LeaseRef{ref})
			if !errors.Is(err, tc.want) {
				t.Fatalf("heartbeat: %v, want %v", err, tc.want)
			}
			renewed := f.str(`SELECT expires_at_ms::text FROM control_core.run_leases WHERE attempt_id = $1`, o.AttemptID) != expiry
			if err != nil {
				if renewed {
					t.Fatal("a refused heartbeat renewed the lease")
				}
				return
			}
			if len(hb.Leases) != 1 || hb.Leases[0].Status != tc.status {
				t.Fatalf("heartbeat = %+v, want status %s", hb, tc.status)
			}
			if want := tc.status != dispatch.LeaseLost; renewed != want {
				t.Fatalf("lease renewed = %v, want %v", renewed, want)
			}
		})
	}
}

// A heartbeat one ms after the lease's expiry does not renew it, although the sweep has not yet
// ended it: the worker was obliged to treat it as lost, so the database must too.
func TestHeartbeatCannotResurrectExpiredLease(t *testing.T) {
	f := newFx(t)
	run := f.queue("p", 1)[0]
	c := f.token("w")
	s, o, l := f.running(c)
	f.expireLease(o.AttemptID)
	hb, err := f.store.Heartbeat(bg, c, s.ID, []dispatch.LeaseRef{{AttemptID: o.AttemptID, LeaseVersion: l.LeaseVersion}})
	if err != nil || len(hb.Leases) != 1 || hb.Leases[0].Status != dispatch.LeaseLost {
		t.Fatalf("heartbeat = %+v, %v", hb, err)
	}
	if n := f.count(`SELECT count(*) FROM control_core.run_leases WHERE attempt_id = $1 AND expires_at_ms > control_core.db_now_ms()`, o.AttemptID); n != 0 {
		t.Fatal("the expired lease was renewed")
	}
	if n, err := f.store.ExpireLeases(bg, 10); n != 1 || err != nil {
		t.Fatalf("expire leases: %d %v", n, err)
	}
	if got := f.events(run); got != "run.created run.queued run.dispatching run.running run.failed:lease_expired" {
		t.Fatalf("events: %s", got)
	}
}

// A completion with exactly one fence wrong writes nothing.
func TestCompleteOneFenceWrong(t *testing.T) {
	cases := []struct {
		name    string
		arrange func(f *fx, c *dispatch.Credential, r *dispatch.Report, attempt uuid.UUID)
		want    error
	}{
		{"token revoked", func(f *fx, c *dispatch.Credential, _ *dispatch.Report, _ uuid.UUID) { f.revoke(*c) }, dispatch.ErrUnauthorized},
		{"another token", func(f *fx, c *dispatch.Credential, _ *dispatch.Report, _ uuid.UUID) { *c = f.token("other") }, dispatch.ErrNotFound},
		{"wrong callback token", func(_ *fx, _ *dispatch.Credential, r *dispatch.Report, _ uuid.UUID) {
			r.CallbackToken, _, _ = dispatch.NewCallbackToken()
		}, dispatch.ErrNotFound},
		{"old lease version", func(_ *fx, _ *dispatch.Credential, r *dispatch.Report, _ uuid.UUID) { r.LeaseVersion-- }, dispatch.ErrLeaseLost},
		{"newer lease version", func(_ *fx, _ *dispatch.Credential, r *dispatch.Report, _ uuid.UUID) { r.LeaseVersion++ }, dispatch.ErrLeaseLost},
		{"another session", func(f *fx, c *dispatch.Credential, r *dispatch.Report, _ uuid.UUID) {
			r.SessionID = f.session(*c, 1, nil).ID
		}, dispatch.ErrLeaseLost},
		{"lease swept", func(f *fx, _ *dispatch.Credential, _ *dispatch.Report, a uuid.UUID) {
			f.expireLease(a)
			if n, err := f.store.ExpireLeases(bg, 10); n != 1 || err != nil {
				f.t.Fatalf("expire leases: %d %v", n, err)
			}
		}, dispatch.ErrLeaseLost},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFx(t)
			run := f.queue("p", 1)[0]
			c := f.token("w")
			s, o, l := f.running(c)
			rep := dispatch.Report{SessionID: s.ID, CallbackToken: o.CallbackToken, LeaseVersion: l.LeaseVersion, Outcome: dispatch.OutcomeSucceeded}
			tc.arrange(f, &c, &rep, o.AttemptID)
			before := f.state(run)
			_, err := f.store.Complete(bg, c, o.AttemptID, rep)
			if !errors.Is(err, tc.want) {
				t.Fatalf("complete: %v, want %v", err, tc.want)
			}
			if after := f.state(run); after != before {
				t.Fatalf("complete wrote: %s → %s", before, after)
			}
		})
	}
}

// A completion repeated with the same report answers replay; a different outcome is refused.
func TestCompleteReplay(t *testing.T) {
	f := newFx(t)
	run := f.queue("p", 1)[0]
	c := f.token("w")
	s, o, l := f.running(c)
	rep := dispatch.Report{SessionID: s.ID, CallbackToken: o.CallbackToken, LeaseVersion: l.LeaseVersion, Outcome: dispatch.OutcomeSucceeded}
	if comp, err := f.store.Complete(bg, c, o.AttemptID, rep); err != nil || comp.Replay {
		t.Fatalf("complete = %+v, %v", comp, err)
	}
	before := f.state(run)
	comp, err := f.store.Complete(bg, c, o.AttemptID, rep)
	if err != nil || !comp.Replay || comp.RunState != "succeeded" {
		t.Fatalf("replayed complete = %+v, %v", comp, err)
	}
	rep.Outcome = dispatch.OutcomeFailed
	if _, err := f.store.Complete(bg, c, o.AttemptID, rep); !errors.Is(err, dispatch.ErrLeaseLost) {
		t.Fatalf("complete with another outcome: %v", err)
	}
	if after := f.state(run); after != before {
		t.Fatalf("replays wrote: %s → %s", before, after)
	}
}

// max_attempts 3 with backoff 1 s: attempts 1–3 fail, the retries wait 1 s then 2 s (exponential),
// the third failure fails the Run; each retry is invisible to placement until its backoff ends.
func TestRetryLadder(t *testing.T) {
	f := newFx(t)
	f.policy("p", 3, 1000, "{}")
	run := f.queue("p", 1)[0]
	c := f.token("w")
	s := f.session(c, 1, nil)
	for no := 1; no <= 3; no++ {
		offers := f.place(c, s, 1)
		if len(offers) != 1 || offers[0].AttemptNo != no || offers[0].MaxAttempts != 3 {
			t.Fatalf("attempt %d: offers %+v", no, offers)
		}
		o := offers[0]
		l, err := f.store.Ack(bg, c, o.OfferID, s.ID, o.CallbackToken)
		if err != nil {
			t.Fatal(err)
		}
		code := 1
		comp, err := f.store.Complete(bg, c, o.AttemptID, dispatch.Report{SessionID: s.ID, CallbackToken: o.CallbackToken,
			LeaseVersion: l.LeaseVersion, Outcome: dispatch.OutcomeFailed, ExitCode: &code, ErrorKind: "exit_status"})
		want := "queued"
		if no == 3 {
			want = "failed"
		}
		if err != nil || comp.RunState != want {
			t.Fatalf("attempt %d: complete = %+v, %v", no, comp, err)
		}
		if no == 3 {
			break
		}
		delay := f.count(`SELECT (detail ->> 'retry_at_ms')::bigint - at_ms FROM control_core.run_events
			WHERE run_id = $1 ORDER BY seq DESC LIMIT 1`, run)
		if wantDelay := 1000 << (no - 1); delay != wantDelay {
			t.Fatalf("attempt %d: retry delay %d ms, want %d", no, delay, wantDelay)
		}
		if got := f.place(c, s, 1); len(got) != 0 {
			t.Fatalf("attempt %d: a retry in backoff was offered", no)
		}
		// the backoff ends: move the Run's retry time into the past (database time judges it)
		f.exec(`UPDATE control_core.runs SET retry_at_ms = control_core.db_now_ms() - 1 WHERE run_id = $1`, run)
	}
	if got := f.events(run); got != "run.created run.queued run.dispatching run.running run.queued:retry run.dispatching run.running run.queued:retry run.dispatching run.running run.failed:attempts_exhausted" {
		t.Fatalf("events: %s", got)
	}
	if got := f.str(`SELECT string_agg(attempt_no || ':' || state, ' ' ORDER BY attempt_no) FROM control_core.attempts WHERE run_id = $1`, run); got != "1:failed 2:failed 3:failed" {
		t.Fatalf("attempts: %s", got)
	}
}

// A running Run cancelled: the heartbeat says cancel, a succeeded report is refused (kept on the
// Attempt, never on the Run), the lease is released; a cancelled report is accepted.
func TestCancelRunningThenCompletionRefused(t *testing.T) {
	for _, outcome := range []dispatch.Outcome{dispatch.OutcomeSucceeded, dispatch.OutcomeCancelled} {
		t.Run(string(outcome), func(t *testing.T) {
			f := newFx(t)
			run := f.queue("p", 1)[0]
			c := f.token("w")
			s, o, l := f.running(c)
			f.cancel(run)
			hb, err := f.store.Heartbeat(bg, c, s.ID, []dispatch.LeaseRef{{AttemptID: o.AttemptID, LeaseVersion: l.LeaseVersion}})
			if err != nil || hb.Leases[0].Status != dispatch.LeaseCancel {
				t.Fatalf("heartbeat = %+v, %v", hb, err)
			}
			rep := dispatch.Report{SessionID: s.ID, CallbackToken: o.CallbackToken, LeaseVersion: l.LeaseVersion, Outcome: outcome}
			comp, err := f.store.Complete(bg, c, o.AttemptID, rep)
			if outcome == dispatch.OutcomeSucceeded && !errors.Is(err, dispatch.ErrRunCancelled) ||
				outcome == dispatch.OutcomeCancelled && err != nil || comp.RunState != "cancelled" {
				t.Fatalf("complete = %+v, %v", comp, err)
			}
			if got := f.state(run); got != "cancelled/cancelled/acked/released/5/1" {
				t.Fatalf("after complete: %s", got)
			}
			if got := f.str(`SELECT result ->> 'outcome' FROM control_core.attempts WHERE attempt_id = $1`, o.AttemptID); got != string(outcome) {
				t.Fatalf("report kept on the attempt: %q", got)
			}
			comp, err = f.store.Complete(bg, c, o.AttemptID, rep)
			if !comp.Replay || (outcome == dispatch.OutcomeCancelled) != (err == nil) {
				t.Fatalf("replay = %+v, %v", comp, err)
			}
		})
	}
}

// The lease sweep's statement ends only a lease past its expiry: a lease renewed after the sweep
// found it (or never due) is left alone, by the statement's own fence.
func TestExpirySweepSparesALiveLease(t *testing.T) {
	f := newFx(t)
	run := f.queue("p", 1)[0]
	c := f.token("w")
	_, o, _ := f.running(c)
	before := f.state(run)
	if n, err := f.store.ExpireAttemptLeases(bg, []uuid.UUID{o.AttemptID}); n != 0 || err != nil {
		t.Fatalf("expired %d live leases: %v", n, err)
	}
	if n, err := f.store.ExpireLeases(bg, 10); n != 0 || err != nil {
		t.Fatalf("sweep expired %d live leases: %v", n, err)
	}
	if after := f.state(run); after != before {
		t.Fatalf("sweep wrote: %s → %s", before, after)
	}
	f.expireLease(o.AttemptID)
	if n, err := f.store.ExpireAttemptLeases(bg, []uuid.UUID{o.AttemptID}); n != 1 || err != nil {
		t.Fatalf("expired %d due leases: %v", n, err)
	}
}

// A completion lands on a lease whose time passed but which the sweep has not yet ended: nothing
// was retried yet, so accepting the report loses nothing.
func TestCompleteAcceptsAnExpiredUnsweptLease(t *testing.T) {
	f := newFx(t)
	run := f.queue("p", 1)[0]
	c := f.token("w")
	s, o, l := f.running(c)
	f.expireLease(o.AttemptID)
	comp, err := f.store.Complete(bg, c, o.AttemptID, dispatch.Report{SessionID: s.ID, CallbackToken: o.CallbackToken,
		LeaseVersion: l.LeaseVersion, Outcome: dispatch.OutcomeSucceeded})
	if err != nil || comp.RunState != "succeeded" {
		t.Fatalf("complete = %+v, %v", comp, err)
	}
	if got := f.state(run); got != "succeeded/succeeded/acked/released/5/1" {
		t.Fatalf("after complete: %s", got)
	}
}

// Register needs a live token and writes nothing without one; Session reads a session of the
// token only, with its state judged against database time.
func TestRegisterAndSession(t *testing.T) {
	f := newFx(t)
	c := f.token("w")
	s := f.session(c, 4, map[string]string{"zone": "a"})
	if s.LeaseTTLMs != testConfig.LeaseTTL.Milliseconds() || s.HeartbeatIntervalMs != s.LeaseTTLMs/3 || s.ExpiresInMs != s.LeaseTTLMs {
		t.Fatalf("session = %+v", s)
	}
	got, err := f.store.Session(bg, c, s.ID)
	if err != nil || got.Capacity != 4 || got.Labels["zone"] != "a" || got.State != "active" {
		t.Fatalf("session read = %+v, %v", got, err)
	}
	if _, err := f.store.Session(bg, f.token("other"), s.ID); !errors.Is(err, dispatch.ErrNotFound) {
		t.Fatalf("another token's session: %v", err)
	}
	f.expireSession(s.ID)
	if _, err := f.store.Session(bg, c, s.ID); !errors.Is(err, dispatch.ErrSessionGone) {
		t.Fatalf("expired session: %v", err)
	}
	if n, err := f.store.ExpireSessions(bg, 10); n != 1 || err != nil {
		t.Fatalf("expire sessions: %d %v", n, err)
	}
	f.revoke(c)
	if _, err := f.store.Register(bg, c, dispatch.Registration{Name: "w1", Capacity: 1, Protocol: 1}); !errors.Is(err, dispatch.ErrUnauthorized) {
		t.Fatalf("register with a revoked token: %v", err)
	}
	if _, err := f.store.Session(bg, c, s.ID); !errors.Is(err, dispatch.ErrUnauthorized) {
		t.Fatalf("session read with a revoked token: %v", err)
	}
	if n := f.count(`SELECT count(*) FROM control_core.worker_sessions`); n != 1 {
		t.Fatalf("%d sessions, want 1", n)
	}
}
