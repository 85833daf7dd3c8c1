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
