package dispatch_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/dispatch"
)

// lockRun holds a Run's row lock in a transaction of its own (as an ACK, a report, a cancel or
// another dispatcher's offer in flight does) until the returned release commits it; release is
// also the test's cleanup, a no-op once it ran.
func (f *fx) lockRun(run uuid.UUID) (release func()) {
	f.t.Helper()
	tx, err := f.su.Begin(bg)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := tx.Exec(bg, `SELECT 1 FROM control_core.runs WHERE run_id = $1 FOR UPDATE`, run); err != nil {
		f.t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			if err := tx.Commit(bg); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
				f.t.Errorf("release the Run's lock: %v", err)
			}
		}
	}
	f.t.Cleanup(release)
	return release
}

// oneOffer queues one Run and offers it to a new session of one slot.
func (f *fx) oneOffer() (uuid.UUID, dispatch.Credential, dispatch.Session, dispatch.Offer) {
	f.t.Helper()
	run := f.queue("p", 1)[0]
	c := f.token("w")
	s := f.session(c, 1, nil)
	return run, c, s, f.place(c, s, 1)[0]
}

// A withdrawal of an undelivered offer whose Run another transaction holds locked at that moment
// is tried again once the lock is gone: the offer is withdrawn and the Run queued at once. It
// was once skipped for good (SKIP LOCKED, 0 withdrawn, and the placer ignored the count): the
// offer stayed 'offered', holding the Run and a slot of the session until the offer sweep
// expired it, the offer TTL later (10 s by default). An offer that the lock holder answered
// (an ACK in flight) is no longer withdrawn, and that is no error.
func TestAWithdrawalTriesAgainTheOffersWhoseRunWasLocked(t *testing.T) {
	for _, tc := range []struct {
		name      string
		withdrawn int
		state     string // f.state's prefix after the withdrawal
		events    string
	}{
		{"row lock", 1, "queued/claimed/expired/-/", "run.created run.queued run.dispatching run.queued:offer_withdrawn"},
		{"ack in flight", 0, "running/running/acked/active/", "run.created run.queued run.dispatching run.running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFx(t)
			run, c, s, o := f.oneOffer()
			var release func()
			if tc.name == "row lock" {
				release = f.lockRun(run)
			} else {
				acked, commit, err := f.store.AckHeld(bg, c, o.OfferID, s.ID, o.CallbackToken)
				if err != nil || !acked {
					t.Fatalf("the ACK held open: %v, %v; want a lease", acked, err)
				}
				done := false
				release = func() {
					if !done {
						done = true
						if err := commit(); err != nil {
							t.Errorf("commit the ACK: %v", err)
						}
					}
				}
				t.Cleanup(release)
			}
			var tries []string
			f.store.OnWithdrawSkipped(func(try int, skipped []uuid.UUID) {
				tries = append(tries, skipped[0].String())
				if try == 1 {
					release() // the first statement came back short: the lock goes now
				}
			})
			n, err := f.store.Withdraw(bg, []uuid.UUID{o.OfferID})
			if len(tries) != 1 || tries[0] != o.OfferID.String() {
				t.Errorf("statements that skipped the offer: %v; want the first one only", tries)
			}
			if err != nil || n != tc.withdrawn {
				t.Fatalf("Withdraw of an offer whose Run was locked: %d, %v; want %d, no error", n, err, tc.withdrawn)
			}
			if got := f.state(run); !strings.HasPrefix(got, tc.state) {
				t.Errorf("Run %s after the withdrawal; want %s…", got, tc.state)
			}
			if got := f.events(run); got != tc.events {
				t.Errorf("events: %s; want %s", got, tc.events)
			}
		})
	}
}

// A drain withdraws every offer of the session, also one whose Run was locked when it began: it
// was once reported as withdrawn_offers 1 of 2, the other offer left to the offer sweep.
func TestADrainTriesAgainTheOffersWhoseRunWasLocked(t *testing.T) {
	f := newFx(t)
	runs := f.queue("p", 2)
	c := f.token("w")
	s := f.session(c, 2, nil)
	if offers := f.place(c, s, 2); len(offers) != 2 {
		t.Fatalf("placed %d offers, want 2", len(offers))
	}
	release := f.lockRun(runs[1])
	tries := 0
	f.store.OnWithdrawSkipped(func(try int, skipped []uuid.UUID) {
		tries++
		if len(skipped) != 1 {
			t.Errorf("statement %d skipped %d offers; want 1 (the locked Run's)", try, len(skipped))
		}
		release()
	})
	d, err := f.store.Drain(bg, c, s.ID)
	if err != nil || d.WithdrawnOffers != 2 || d.AlreadyDraining {
		t.Fatalf("drain with one Run locked: %+v, %v; want 2 offers withdrawn", d, err)
	}
	if tries != 1 {
		t.Errorf("%d statements skipped an offer; want 1", tries)
	}
	for _, run := range runs {
		if got := f.state(run); !strings.HasPrefix(got, "queued/claimed/expired/-/") {
			t.Errorf("Run %s after the drain: %s; want queued, its offer expired", run, got)
		}
	}
}

// The tries are bounded: a Run locked throughout costs withdrawTries statements, and its offer
// is then left to the offer sweep and said so (ErrBusy); a context that ends stops them at once.
func TestAWithdrawalOfALockedRunGivesUpAfterItsTries(t *testing.T) {
	t.Run("locked throughout", func(t *testing.T) {
		f := newFx(t)
		run, _, _, o := f.oneOffer()
		release := f.lockRun(run)
		tries := 0
		f.store.OnWithdrawSkipped(func(int, []uuid.UUID) { tries++ })
		n, err := f.store.Withdraw(bg, []uuid.UUID{o.OfferID})
		if n != 0 || !errors.Is(err, dispatch.ErrBusy) || tries != dispatch.WithdrawTries {
			t.Fatalf("Withdraw of a Run locked throughout: %d, %v after %d statements; want 0, ErrBusy after %d",
				n, err, tries, dispatch.WithdrawTries)
		}
		release()
		if got := f.state(run); !strings.HasPrefix(got, "dispatching/dispatching/offered/-/") {
			t.Errorf("Run %s; want its offer left as it was", got)
		}
		f.expireOffer(o.OfferID)
		if n, err := f.store.ExpireOffers(bg, 16); n != 1 || err != nil {
			t.Errorf("the offer sweep after the lock went: %d, %v; want 1", n, err)
		}
	})
	t.Run("context ends", func(t *testing.T) {
		f := newFx(t)
		run, _, _, o := f.oneOffer()
		f.lockRun(run)
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		tries := 0
		f.store.OnWithdrawSkipped(func(int, []uuid.UUID) { tries++; cancel() })
		if n, err := f.store.Withdraw(ctx, []uuid.UUID{o.OfferID}); n != 0 || !errors.Is(err, context.Canceled) || tries != 1 {
			t.Fatalf("Withdraw whose context ended after a short statement: %d, %v after %d statements; want 0, context.Canceled after 1", n, err, tries)
		}
	})
}

// The offer sweep (X) keeps SKIP LOCKED: it never waits for a busy Run and never tries again;
// the offer whose Run is locked is left to a later sweep, the others expire.
func TestTheOfferSweepPassesOverALockedRun(t *testing.T) {
	f := newFx(t)
	runs := f.queue("p", 2)
	c := f.token("w")
	s := f.session(c, 2, nil)
	offers := f.place(c, s, 2)
	if len(offers) != 2 {
		t.Fatalf("placed %d offers, want 2", len(offers))
	}
	for _, o := range offers {
		f.expireOffer(o.OfferID)
	}
	release := f.lockRun(runs[0])
	f.store.OnWithdrawSkipped(func(int, []uuid.UUID) { t.Error("the offer sweep tried a skipped offer again") })
	ctx, cancel := context.WithTimeout(bg, 10*time.Second) // a sweep that waited for the lock fails here, not hangs
	defer cancel()
	if n, err := f.store.ExpireOffers(ctx, 16); n != 1 || err != nil {
		t.Fatalf("sweep with one Run locked: %d, %v; want 1 (the other offer), at once", n, err)
	}
	release()
	if n, err := f.store.ExpireOffers(bg, 16); n != 1 || err != nil {
		t.Fatalf("the next sweep: %d, %v; want 1 (the offer it passed over)", n, err)
	}
	for _, run := range runs {
		if got := f.state(run); !strings.HasPrefix(got, "queued/claimed/expired/-/") {
			t.Errorf("Run %s after the sweeps: %s; want queued, its offer expired", run, got)
		}
	}
}

// A rejection (R) whose Run another transaction holds locked at that moment is tried again once
// the lock is gone, and recorded: the Run is queued and never re-offered to this session. It was
// once skipped and answered ErrOfferGone: the worker dropped the offer, which stayed 'offered'
// until the offer TTL, and the rejection was never recorded. Locked past the tries, it is
// ErrBusy (503: the worker asks again), the offer still offered.
func TestARejectionTriesAgainWhenItsRunWasLocked(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release bool // the lock goes after the first short statement
		want    error
		state   string
	}{
		{"lock released", true, nil, "queued/claimed/rejected/-/"},
		{"locked throughout", false, dispatch.ErrBusy, "dispatching/dispatching/offered/-/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFx(t)
			run, c, s, o := f.oneOffer()
			release := f.lockRun(run)
			tries := 0
			f.store.OnWithdrawSkipped(func(int, []uuid.UUID) {
				tries++
				if tc.release {
					release()
				}
			})
			err := f.store.Reject(bg, c, o.OfferID, s.ID, o.CallbackToken, "no room")
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("Reject of an offer whose Run was locked: %v; want %v", err, tc.want)
			}
			if want := map[bool]int{true: 1, false: dispatch.WithdrawTries}[tc.release]; tries != want {
				t.Errorf("%d statements skipped the offer; want %d", tries, want)
			}
			release()
			if got := f.state(run); !strings.HasPrefix(got, tc.state) {
				t.Errorf("Run %s after the rejection; want %s…", got, tc.state)
			}
			if tc.release {
				if got := f.place(c, s, 1); len(got) != 0 {
					t.Errorf("the rejected Run was offered again to the session that rejected it: %d offers", len(got))
				}
			}
		})
	}
}

// A rejection that is refused (a callback token that is not the offer's) is answered at once by
// its fence, never taken for a locked Run: no statement is tried again and it is not ErrBusy
// (503, which the worker would send again and again). The offer stays offered, the Run with it.
func TestARefusedRejectionIsNotTriedAgain(t *testing.T) {
	f := newFx(t)
	run, c, s, o := f.oneOffer()
	tries := 0
	f.store.OnWithdrawSkipped(func(int, []uuid.UUID) { tries++ })
	wrong, _, err := dispatch.NewCallbackToken()
	if err != nil {
		t.Fatal(err)
	}
	err = f.store.Reject(bg, c, o.OfferID, s.ID, wrong, "no room")
	if err == nil || errors.Is(err, dispatch.ErrBusy) || tries != 0 {
		t.Fatalf("Reject with another callback token: %v after %d statements tried again; want its fence's error at once", err, tries)
	}
	if got := f.state(run); !strings.HasPrefix(got, "dispatching/dispatching/offered/-/") {
		t.Errorf("Run %s after a refused rejection; want its offer as it was", got)
	}
}
