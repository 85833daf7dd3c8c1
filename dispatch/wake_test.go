package dispatch_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
)

// admitted queues one Run and then sends the admission's wake-up statement (db.WakeOnAdmit), as
// the coordinator's admit does once it committed.
func (f *fx) admitted() {
	f.t.Helper()
	f.queue("p", 1)
	if err := db.New(f.su).WakeOnAdmit(bg); err != nil {
		f.t.Fatal(err)
	}
}

// startPlacer starts a Placer on f's store; it is stopped when the test ends.
func (f *fx) startPlacer() *dispatch.Placer {
	f.t.Helper()
	pl := dispatch.NewPlacer(f.store, nil)
	if err := pl.Start(bg); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = pl.Stop(bg) })
	return pl
}

// listeningWaker starts a Waker for pl that connects with connect (nil: pgx.Connect as
// ql_runtime), stopped when the test ends, and waits until it listens.
func (f *fx) listeningWaker(pl *dispatch.Placer, connect func(context.Context) (*pgx.Conn, error)) *dispatch.Waker {
	f.t.Helper()
	if connect == nil {
		url := f.d.URL("ql_runtime")
		connect = func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, url) }
	}
	w := dispatch.NewWaker(connect, pl, nil)
	if err := w.Start(bg); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(w.Stop)
	eventually.True(f.t, 10*time.Second, "the waker listening", w.Listening)
	return w
}

// A dispatcher whose poll waits, with the longest probe interval (1s): a Run admitted with the
// wake-up is offered by a pass the notification started (the woken counter), well before the
// probe. Without the Waker the counter stays 0 and the offer comes from the probe.
func TestWakeOnAdmissionPlacesAtOnce(t *testing.T) {
	f := newFx(t, dispatch.Config{OfferTTL: time.Minute, LeaseTTL: time.Minute, PlacementInterval: time.Second})
	c := f.token("w")
	s := f.session(c, 1, nil)
	pl := f.startPlacer()
	w := f.listeningWaker(pl, nil)

	for round := 1; round <= 3; round++ {
		got := make(chan []dispatch.Offer, 1)
		go func() {
			offers, err := pl.Poll(bg, c, s.ID, 1, 30*time.Second)
			if err != nil {
				t.Error(err)
			}
			got <- offers
		}()
		eventually.True(t, 10*time.Second, "the poll waiting", func() bool { return pl.WaitingPolls() == 1 })
		before := pl.WokenPlacements()
		began := time.Now()
		f.admitted()
		offers := <-got
		took := time.Since(began)
		if len(offers) != 1 {
			t.Fatalf("round %d: %d offers, want 1", round, len(offers))
		}
		if pl.WokenPlacements() != before+1 {
			t.Fatalf("round %d: the offer came from a pass the notification did not start (woken %d → %d, %s)",
				round, before, pl.WokenPlacements(), took)
		}
		t.Logf("round %d: offered %s after the admit (probe interval 1s)", round, took)
		if _, err := f.store.Withdraw(bg, []uuid.UUID{offers[0].OfferID}); err != nil {
			t.Fatal(err)
		}
		f.cancel(offers[0].RunID)
	}
	if n := w.Notifications(); n < 3 {
		t.Fatalf("notifications %d, want at least 3", n)
	}
}

// With LISTEN unavailable the Waker is not listening, keeps retrying, and the placer still finds
// the Run by its probe.
func TestWakeFallsBackToTheProbe(t *testing.T) {
	f := newFx(t, dispatch.Config{OfferTTL: time.Minute, LeaseTTL: time.Minute, PlacementInterval: 50 * time.Millisecond})
	c := f.token("w")
	s := f.session(c, 1, nil)
	pl := f.startPlacer()
	tries := make(chan struct{}, 100)
	w := dispatch.NewWaker(func(context.Context) (*pgx.Conn, error) {
		tries <- struct{}{}
		return nil, errors.New("LISTEN refused")
	}, pl, nil)
	w.MinBackoff, w.MaxBackoff = time.Millisecond, 5*time.Millisecond
	if err := w.Start(bg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	eventually.True(t, 10*time.Second, "the waker retrying", func() bool { return len(tries) >= 3 })
	if w.Listening() {
		t.Fatal("listening without a connection")
	}
	got := make(chan []dispatch.Offer, 1)
	go func() {
		offers, _ := pl.Poll(bg, c, s.ID, 1, 30*time.Second)
		got <- offers
	}()
	eventually.True(t, 10*time.Second, "the poll waiting", func() bool { return pl.WaitingPolls() == 1 })
	f.admitted()
	if offers := <-got; len(offers) != 1 {
		t.Fatalf("%d offers by the probe, want 1", len(offers))
	}
	if pl.WokenPlacements() != 0 {
		t.Fatalf("woken placements %d without a listener", pl.WokenPlacements())
	}
}

// BenchmarkWakeLatencyAB measures admitted → offered with a poll waiting, at the default 25ms
// probe, with the wake-up and without it, alternating one Run at a time in one sitting
// (docs/performance.md, the loop's wake-up): b.N Runs a side, e.g.
// go test ./dispatch -run '^$' -bench WakeLatencyAB -benchtime 300x.
func BenchmarkWakeLatencyAB(b *testing.B) {
	t, rounds := b, b.N
	f := newFx(t, dispatch.Config{OfferTTL: time.Minute, LeaseTTL: time.Minute})
	c := f.token("w")
	sessions := map[bool]dispatch.Session{false: f.session(c, 1, nil), true: f.session(c, 1, nil)}
	placers := map[bool]*dispatch.Placer{}
	for _, wake := range []bool{false, true} {
		// two placers on one store: each serves only its own session's polls
		placers[wake] = f.startPlacer()
	}
	f.listeningWaker(placers[true], nil)
	took := map[bool][]time.Duration{}
	for i := range 2 * rounds {
		wake := i%2 == 1
		pl, s := placers[wake], sessions[wake]
		got := make(chan []dispatch.Offer, 1)
		go func() { offers, _ := pl.Poll(bg, c, s.ID, 1, 30*time.Second); got <- offers }()
		eventually.True(t, 10*time.Second, "the poll waiting", func() bool { return pl.WaitingPolls() == 1 })
		began := time.Now()
		f.admitted()
		offers := <-got
		took[wake] = append(took[wake], time.Since(began))
		if len(offers) != 1 {
			t.Fatalf("%d offers", len(offers))
		}
		if _, err := f.store.Withdraw(bg, []uuid.UUID{offers[0].OfferID}); err != nil {
			t.Fatal(err)
		}
		f.cancel(offers[0].RunID)
	}
	for _, wake := range []bool{false, true} {
		d := took[wake]
		slices.Sort(d)
		q := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
		side := map[bool]string{false: "probe", true: "wake"}[wake]
		b.ReportMetric(ms(q(0.5)), side+"-p50-ms")
		b.ReportMetric(ms(q(0.99)), side+"-p99-ms")
		b.Logf("wake %v: admitted → offered over %d Runs: p50 %.1f ms, p99 %.1f ms, max %.1f ms (woken passes %d)", wake, len(d),
			ms(q(0.5)), ms(q(0.99)), ms(d[len(d)-1]), placers[wake].WokenPlacements())
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// A quiet channel outlasting the connection's response bound (dbconn: statement timeout +
// margin) keeps its one connection: the timeout is told from a dead connection by a ping, and a
// notification after it still wakes the placer.
func TestWakeOutlastsTheResponseBound(t *testing.T) {
	f := newFx(t)
	cfg := f.d.Config(t, "ql_runtime")
	tm := dbconn.DefaultTimeouts()
	tm.Statement, tm.Response = time.Second, 1500*time.Millisecond
	cfg.SetTimeouts(tm)
	pl := dispatch.NewPlacer(f.store, nil)
	var connects atomic.Int32
	w := f.listeningWaker(pl, func(ctx context.Context) (*pgx.Conn, error) {
		connects.Add(1)
		c, err := cfg.Connect(ctx)
		if err != nil {
			return nil, err
		}
		return c.Conn, nil
	})
	time.Sleep(4 * time.Second) // the quiet channel itself: more than twice the response bound
	f.exec(`SELECT pg_notify($1, '')`, dispatch.WakeChannel)
	eventually.True(t, 10*time.Second, "the notification received", func() bool { return w.Notifications() == 1 })
	if n := connects.Load(); n != 1 || !w.Listening() {
		t.Fatalf("%d connections, listening %v: want the first one kept", n, w.Listening())
	}
}

// A storm of notifications (admits in a burst, no Run for the waiting poll) coalesces: the
// placer runs at most one woken pass per WakeGap, not one after the other for as long as the
// storm lasts, each reading the queue for every waiting poll.
func TestWakeStormCoalesces(t *testing.T) {
	f := newFx(t, dispatch.Config{OfferTTL: time.Minute, LeaseTTL: time.Minute, PlacementInterval: time.Second})
	c := f.token("w")
	s := f.session(c, 1, nil)
	pl := f.startPlacer()
	go func() { _, _ = pl.Poll(bg, c, s.ID, 1, 30*time.Second) }()
	eventually.True(t, 10*time.Second, "the poll waiting", func() bool { return pl.WaitingPolls() == 1 })
	w := f.listeningWaker(pl, nil)
	// four notifiers, each its own connection, for one second
	const storm = time.Second
	began, p0 := time.Now(), pl.Passes()
	var notifiers sync.WaitGroup
	for range 4 {
		notifiers.Go(func() {
			for time.Since(began) < storm {
				if _, err := f.su.Exec(bg, `SELECT pg_notify($1, '')`, dispatch.WakeChannel); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	notifiers.Wait()
	took, passes, sent := time.Since(began), pl.Passes()-p0, w.Notifications()
	// one pass per WakeGap, one probe per interval, the poll's own, and slack for a loaded machine
	most := int64(took/dispatch.WakeGap) + int64(took/time.Second) + 10
	t.Logf("%d notifications received, %d passes in %s (at most %d)", sent, passes, took, most)
	if passes > most {
		t.Fatalf("%d passes in %s for %d notifications, want at most %d: the storm was not coalesced", passes, took, sent, most)
	}
}
