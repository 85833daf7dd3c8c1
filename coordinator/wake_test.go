package coordinator

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
)

// A committed admit notifies the dispatchers (qlsched_runs_queued, dispatch.WakeChannel) once
// when it admitted a Run, and not when it admitted none: a race (the claim taken over) is
// followed by a sentinel, which must be the next notification.
func TestAdmitNotifiesTheDispatchersOnlyWhenItWrote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, s := dueFixture(t, time.Second, "a", "b")
	f.d.WorkerSession(t, "active", 30_000)
	conn, err := pgx.Connect(ctx, f.d.URL("ql_runtime"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN qlsched_runs_queued"); err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return n.Payload
	}
	claims := must(s.ClaimBatch(ctx, "batcher", 30*time.Second, 10)).of(t)
	if len(claims) != 2 {
		t.Fatalf("claimed %d rows, want 2", len(claims))
	}
	if res := s.AdmitBatch(ctx, items(claims[:1], 60_000), 3); res[0].Err != nil || res[0].Outcome != Written {
		t.Fatalf("admit: %+v", res[0])
	}
	if p := next(); p != "" {
		t.Fatalf("payload %q, want empty", p)
	}
	f.expireClaim(claims[1].TriggerID)
	if c := must(s.Claim(ctx, "other", 30*time.Second)).of(t); c == nil {
		t.Fatal("no takeover")
	}
	if res := s.AdmitBatch(ctx, items(claims[1:], 60_000), 3); res[0].Err != nil || res[0].Outcome != Race {
		t.Fatalf("admit after the takeover: %+v", res[0])
	}
	f.exec(`SELECT pg_notify('qlsched_runs_queued', 'sentinel')`)
	if p := next(); p != "sentinel" {
		t.Fatalf("notification %q after an admit that wrote nothing, want the sentinel", p)
	}
}

// The wake-up is no part of the admit: it is sent in a transaction of its own once the admit
// committed. Were it in the admit's transaction, every notifying commit would wait for the one
// before it to be flushed (PostgreSQL's one notification queue lock, held through the commit),
// and a NOTIFY that fails (a full notification queue, say; here: pg_notify refused to the
// runtime role, in this database only) would roll back the admit and lose its Run.
func TestAdmitDoesNotDependOnItsWakeUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, s := dueFixture(t, time.Second, "a")
	f.exec(`REVOKE EXECUTE ON FUNCTION pg_catalog.pg_notify(text, text) FROM PUBLIC`)
	claims := must(s.ClaimBatch(ctx, "batcher", 30*time.Second, 10)).of(t)
	if len(claims) != 1 {
		t.Fatalf("claimed %d rows, want 1", len(claims))
	}
	if res := s.AdmitBatch(ctx, items(claims, 60_000), 3); res[0].Err != nil || res[0].Outcome != Written {
		t.Fatalf("admit with the wake-up refused: %+v", res[0])
	}
	if n := f.count(`SELECT count(*) FROM control_core.runs WHERE trigger_id = 'a'`); n != 1 {
		t.Fatalf("%d Runs, want 1", n)
	}
}

// listen starts an active worker session (a dispatcher with somebody to place for: the sender
// sends nothing without one) and listenOnly.
func listen(t *testing.T, f *fixture) (next func() string) {
	t.Helper()
	f.d.WorkerSession(t, "active", 30_000)
	return listenOnly(t, f)
}

// listenOnly connects as the runtime role and LISTENs on the dispatchers' channel; next waits
// for the next notification's payload (failing the test after 10 s).
func listenOnly(t *testing.T, f *fixture) (next func() string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, f.d.URL("ql_runtime"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(ctx) })
	if _, err := conn.Exec(ctx, "LISTEN qlsched_runs_queued"); err != nil {
		t.Fatal(err)
	}
	return func() string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return n.Payload
	}
}

// admitEach claims and admits every due row one admit at a time (each its own committed admit).
func admitOneByOne(t *testing.T, s *Store, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		c := must(s.Claim(ctx, "one", 30*time.Second)).of(t)
		if c == nil {
			t.Fatalf("admit %d: nothing to claim", i)
		}
		if res := s.AdmitBatch(ctx, items([]*Claim{c}, 60_000), 3); res[0].Err != nil || res[0].Outcome != Written {
			t.Fatalf("admit %d: %+v", i, res[0])
		}
	}
}

// The admits that commit while a wake-up is in flight share the one notification sent after it:
// with the first notification held in the sender, eight admits that wrote produce two
// notifications, the second sent after the last admit (the last wake-up is never lost), and the
// admits return without waiting for either.
func TestAdmitWakeUpsCoalesce(t *testing.T) {
	t.Parallel()
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	f, s := dueFixture(t, time.Second, ids...)
	next := listen(t, f)
	held, release := make(chan struct{}), make(chan struct{})
	var sends atomic.Int32
	s.wake.beforeSend = func() {
		if sends.Add(1) == 1 {
			close(held)
			<-release
		}
	}
	admitOneByOne(t, s, 1)
	<-held // the first notification is in flight (held before it is sent)
	admitOneByOne(t, s, len(ids)-1)
	if st := s.WakeStats(); st.Marked != int64(len(ids)) || st.Sent != 0 {
		t.Fatalf("before the release: %+v, want %d marked and none sent", st, len(ids))
	}
	close(release)
	for range 2 {
		if p := next(); p != "" {
			t.Fatalf("payload %q, want empty", p)
		}
	}
	waitSenderIdle(t, s)
	if st := s.WakeStats(); st != (WakeStats{Marked: int64(len(ids)), Sent: 2}) {
		t.Fatalf("%+v, want %d marked, 2 sent", st, len(ids))
	}
	f.exec(`SELECT pg_notify('qlsched_runs_queued', 'sentinel')`)
	if p := next(); p != "sentinel" {
		t.Fatalf("notification %q after the two, want the sentinel", p)
	}
}

// Admits from several goroutines at once: never more notifications than admits that wrote, and
// once the admits have returned a notification still follows (the sender ends idle with every
// mark sent).
func TestAdmitWakeUpsInABurst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const writers, each = 4, 6
	ids := make([]string, writers*each)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%02d", i)
	}
	f, s := dueFixture(t, time.Second, ids...)
	next := listen(t, f)
	claims := must(s.ClaimBatch(ctx, "burst", 30*time.Second, len(ids))).of(t)
	if len(claims) != len(ids) {
		t.Fatalf("claimed %d rows, want %d", len(claims), len(ids))
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for _, c := range claims[w*each : (w+1)*each] {
				if res := s.AdmitBatch(ctx, items([]*Claim{c}, 60_000), 10); res[0].Err != nil || res[0].Outcome != Written {
					t.Errorf("admit %s: %+v", c.TriggerID, res[0])
				}
			}
		})
	}
	wg.Wait()
	afterAdmits := s.WakeStats().Sent
	waitSenderIdle(t, s)
	st := s.WakeStats()
	t.Logf("%d admits that wrote, %d notifications sent (%d by the time the admits returned)", st.Marked, st.Sent, afterAdmits)
	if st.Marked != int64(len(ids)) || st.Sent < 1 || st.Sent > st.Marked || st.Failed != 0 {
		t.Fatalf("%+v: want %d marked, 1 … %[2]d sent, none failed", st, len(ids))
	}
	for range st.Sent {
		next()
	}
	f.exec(`SELECT pg_notify('qlsched_runs_queued', 'sentinel')`)
	if p := next(); p != "sentinel" {
		t.Fatalf("notification %q after the %d sent, want the sentinel", p, st.Sent)
	}
}

// Close with a wake-up pending sends it, ends the sender, and a later admit wakes nobody; a
// notification cut by Close's bound is dropped and counted, never left running.
func TestStoreClosesWithAWakeUpPending(t *testing.T) {
	t.Parallel()
	f, s := dueFixture(t, time.Second, "a", "b", "c")
	next := listen(t, f)
	held, release := make(chan struct{}), make(chan struct{})
	var sends atomic.Int32
	s.wake.beforeSend = func() {
		if sends.Add(1) == 1 {
			close(held)
			<-release
		}
	}
	admitOneByOne(t, s, 1)
	<-held
	admitOneByOne(t, s, 1) // pending behind the one in flight
	closed := make(chan struct{})
	go func() { s.Close(context.Background()); close(closed) }()
	eventually.True(t, 10*time.Second, "Close refusing new wake-ups", func() bool {
		s.wake.mu.Lock()
		defer s.wake.mu.Unlock()
		return s.wake.closed
	})
	close(release)
	<-closed
	if st := s.WakeStats(); st != (WakeStats{Marked: 2, Sent: 2}) {
		t.Fatalf("after Close: %+v, want 2 marked, 2 sent", st)
	}
	next()
	next()
	admitOneByOne(t, s, 1) // after Close: counted, not sent
	s.wake.mu.Lock()
	running := s.wake.running
	s.wake.mu.Unlock()
	if st := s.WakeStats(); running || st != (WakeStats{Marked: 3, Sent: 2}) {
		t.Fatalf("an admit after Close: %+v, sender running %v", st, running)
	}
	f.exec(`SELECT pg_notify('qlsched_runs_queued', 'sentinel')`)
	if p := next(); p != "sentinel" {
		t.Fatalf("notification %q after Close, want the sentinel", p)
	}

	// a bound that ends while the notification is held: it is cancelled and counted as failed
	_, s2 := dueFixture(t, time.Second, "x")
	held2, release2 := make(chan struct{}), make(chan struct{})
	s2.wake.beforeSend = func() { close(held2); <-release2 }
	admitOneByOne(t, s2, 1)
	<-held2
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	closed2 := make(chan struct{})
	go func() { s2.Close(ctx); close(closed2) }()
	eventually.True(t, 10*time.Second, "the store's context cancelled", func() bool { return s2.wake.ctx.Err() != nil })
	close(release2)
	<-closed2
	if st := s2.WakeStats(); st != (WakeStats{Marked: 1, Failed: 1}) {
		t.Fatalf("Close past its bound: %+v, want 1 marked, 1 failed", st)
	}
}

// waitSenderIdle waits until the Store's wake-up sender has ended (nothing pending).
func waitSenderIdle(t *testing.T, s *Store) {
	t.Helper()
	eventually.True(t, 10*time.Second, "the sender idle", func() bool {
		s.wake.mu.Lock()
		defer s.wake.mu.Unlock()
		return !s.wake.running
	})
}

// The sender sends a wake-up only while a worker session is active and unexpired (WakeWanted):
// with none, a placement pass would find no poll to answer, and a session's first poll starts
// a pass of its own. It reads that at most once per wakeRecheck: a session that appears within
// it is seen at the next reading.
func TestWakeUpOnlyWhileAWorkerSessionIsActive(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		state   string // "": no session
		expires int64  // ms after now
		sent    bool
	}{
		{"no session", "", 0, false},
		{"active", "active", 30_000, true},
		{"active, expired", "active", -1, false},
		{"draining", "draining", 30_000, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f, s := dueFixture(t, time.Second, "a", "b", "c")
			if c.state != "" {
				f.d.WorkerSession(t, c.state, c.expires)
			}
			next := listenOnly(t, f)
			admitOneByOne(t, s, 1)
			waitSenderIdle(t, s)
			want := WakeStats{Marked: 1, Skipped: 1}
			if c.sent {
				want = WakeStats{Marked: 1, Sent: 1}
				if p := next(); p != "" {
					t.Fatalf("payload %q, want empty", p)
				}
			}
			if st := s.WakeStats(); st != want {
				t.Fatalf("%+v, want %+v", st, want)
			}
			f.exec(`SELECT pg_notify('qlsched_runs_queued', 'sentinel')`)
			if p := next(); p != "sentinel" {
				t.Fatalf("notification %q, want only the sentinel", p)
			}
			if c.sent {
				return
			}
			// a session that appears is not seen before the reading is wakeRecheck old ...
			f.d.WorkerSession(t, "active", 30_000)
			admitOneByOne(t, s, 1)
			waitSenderIdle(t, s)
			if st := s.WakeStats(); st != (WakeStats{Marked: 2, Skipped: 2}) {
				t.Fatalf("within wakeRecheck of the reading: %+v, want 2 marked, 2 skipped", st)
			}
			// ... and is seen once it is
			ageWakeReading(s)
			admitOneByOne(t, s, 1)
			if p := next(); p != "" {
				t.Fatalf("payload %q, want empty", p)
			}
			waitSenderIdle(t, s)
			if st := s.WakeStats(); st != (WakeStats{Marked: 3, Sent: 1, Skipped: 2}) {
				t.Fatalf("after wakeRecheck: %+v, want 3 marked, 1 sent, 2 skipped", st)
			}
		})
	}
}

// ageWakeReading makes s's last WakeWanted reading wakeRecheck old, so the next wake-up reads again.
func ageWakeReading(s *Store) {
	s.wake.mu.Lock()
	s.wake.checkedAt = s.wake.checkedAt.Add(-wakeRecheck)
	s.wake.mu.Unlock()
}
