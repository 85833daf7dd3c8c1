package coordinator

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
)

// stepped is a lifecycle on a simulated clock: the loop blocks in each wait until the test has
// read the delay it chose and called next, and the clock moves by exactly the delays waited.
type stepped struct {
	lc      *Lifecycle
	co      *Coordinator
	log     *lockedBuffer
	waits   chan time.Duration
	proceed chan struct{}
}

func newStepped(t *testing.T, f *fixture, cfg Config) *stepped {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := &stepped{log: &lockedBuffer{}, waits: make(chan time.Duration), proceed: make(chan struct{})}
	s.co = New(cfg, NewStore(f.rt), WithLogger(slog.New(slog.NewTextHandler(s.log, nil))))
	s.lc = NewLifecycle(s.co, cfg)
	var clock atomic.Int64
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.lc.now = func() time.Time { return base.Add(time.Duration(clock.Load())) }
	s.lc.wait = func(d time.Duration, stop <-chan struct{}) bool {
		select {
		case s.waits <- d:
		case <-stop:
			return false
		}
		select {
		case <-s.proceed:
			clock.Add(int64(d))
			return true
		case <-stop:
			return false
		}
	}
	if err := s.lc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.lc.Stop(context.Background()) })
	if d := <-s.waits; d != 0 {
		t.Fatalf("first wait %s, want 0 (the first round at once)", d)
	}
	return s
}

// round lets the next round run and returns the delay the loop chose after it.
func (s *stepped) round() time.Duration {
	s.proceed <- struct{}{}
	return <-s.waits
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *lockedBuffer) count(msg string) int { return strings.Count(b.String(), `msg="`+msg) }

// A round whose claim statement fails (here the runtime lost UPDATE on the schedules) is followed
// by a wait of the cadence doubled per failure in a row, up to the cap, instead of the next due
// time (which, with a due row, is at once: the loop spun at 100 rounds a second, logging each).
// Health turns not ready at the third failure in a row and ready again at the first success;
// the log holds one line when failing starts, one when readiness is lost, one on recovery.
func TestFailingRoundsBackOffToTheCapAndRecover(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.dueOnce("a")
	f.exec("REVOKE UPDATE ON control_core.trigger_schedules FROM ql_runtime")
	cfg := DefaultConfig("r1")
	cfg.BackoffCap = 8 * time.Second
	s := newStepped(t, f, cfg)
	for i, want := range []time.Duration{1, 2, 4, 8, 8, 8} {
		failed := int64(i + 1)
		if d := s.round(); d != want*time.Second {
			t.Errorf("after %d failed rounds: wait %s, want %s", failed, d, want*time.Second)
		}
		h := s.lc.Health()
		if h.FailedRounds != failed || h.Ready != (failed < 3) || h.Err == nil || s.co.Stats.FailingRounds.Load() != failed {
			t.Errorf("after %d failed rounds: health %+v, gauge %d; want %d failed, ready %v, the error",
				failed, h, s.co.Stats.FailingRounds.Load(), failed, failed < 3)
		}
	}
	if h := s.lc.Health(); h.Err == nil || !strings.Contains(h.Err.Error(), "42501") {
		t.Errorf("health error %v, want the claim's permission denied (SQLSTATE 42501)", h.Err)
	}
	f.exec("GRANT UPDATE ON control_core.trigger_schedules TO ql_runtime")
	if d := s.round(); d != cfg.Cadence {
		t.Errorf("after a round that succeeded: wait %s, want the cadence %s", d, cfg.Cadence)
	}
	if h := s.lc.Health(); h.FailedRounds != 0 || !h.Ready || h.Err != nil {
		t.Errorf("after a round that succeeded: health %+v, want ready with no failure", h)
	}
	st := s.co.Stats.Snapshot()
	if st.FailingRounds != 0 || st.FailedRounds != 6 || st.Errors != 6 || st.Admits != 1 {
		t.Errorf("stats %+v; want 0 failing, 6 failed rounds, 6 errors, 1 admit", st)
	}
	out := s.log.String()
	for msg, want := range map[string]int{"round failed; backing off": 1, "not ready: rounds failed in a row": 1,
		"rounds recovered": 1, "rounds still failing": 0, "claim failed": 0} {
		if n := s.log.count(msg); n != want {
			t.Errorf("%q logged %d times, want %d:\n%s", msg, n, want, out)
		}
	}
	// the first round failed at 0 s, the one that succeeded began after 1+2+4+8+8+8 s
	if !strings.Contains(out, "failed_rounds=6 failed_for=31s") {
		t.Errorf("the recovery line lacks failed_rounds=6 failed_for=31s:\n%s", out)
	}
	f.audit()
}

// While rounds keep failing, the wait stays at the cap (30 s by default), and the log repeats the
// count and the latest error at most every failingReminder (10 minutes of the lifecycle's clock),
// never per round; with NotReadyAfter 1 the first failure is the readiness change, logged once.
func TestFailingRoundsRemindAtMostEveryTenMinutes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.exec("REVOKE UPDATE ON control_core.trigger_schedules FROM ql_runtime")
	cfg := DefaultConfig("r1")
	cfg.NotReadyAfter = 1
	s := newStepped(t, f, cfg)
	// rounds begin at 0, 1, 3, 7, 15, 31 s, then every 30 s: round 25 at 601 s is the first
	// 10 minutes after the first line, round 45 at 1201 s would be the next
	for i := range 44 {
		// the cap holds however long the failures last (doubling the cadence 34 times overflows)
		want := 30 * time.Second
		if i < 5 {
			want = time.Second << i
		}
		if d := s.round(); d != want {
			t.Errorf("after %d failed rounds: wait %s, want %s", i+1, d, want)
		}
		if h := s.lc.Health(); h.Ready {
			t.Fatalf("ready after a failed round with NotReadyAfter 1: %+v", h)
		}
	}
	out := s.log.String()
	for msg, want := range map[string]int{"round failed; backing off": 1, "not ready: rounds failed in a row": 0,
		"rounds still failing": 1, "claim failed": 0} {
		if n := s.log.count(msg); n != want {
			t.Errorf("%q logged %d times, want %d:\n%s", msg, n, want, out)
		}
	}
	if !strings.Contains(out, "failed_rounds=25 ready=false next_round_in=30s failing_for=10m1s") {
		t.Errorf("the reminder lacks the 25th round's count and duration:\n%s", out)
	}
}

// A round whose claim Stop cancels (the drain bound) did not fail: no failed round, no error, no
// line, still ready.
func TestARoundCutByStopIsNoFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.dueOnce("a")
	blocker := must(f.su.Begin(ctx)).of(t)
	defer blocker.Rollback(ctx)
	if _, err := blocker.Exec(ctx, "LOCK TABLE control_core.trigger_schedules IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var log lockedBuffer
	cfg := DefaultConfig("r1")
	cfg.DrainTimeout = time.Second
	co := New(cfg, NewStore(f.rt), WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	lc := NewLifecycle(co, cfg)
	if err := lc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "the round's claim to block on the locked table", func() bool {
		return f.count(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND usename = 'ql_runtime' AND wait_event_type = 'Lock'`) > 0
	})
	if err := lc.Stop(ctx); !errors.Is(err, ErrDrainTimeout) {
		t.Fatalf("stop: %v, want ErrDrainTimeout", err)
	}
	if h, st := lc.Health(), co.Stats.Snapshot(); h.FailedRounds != 0 || !h.Ready || st.FailedRounds != 0 || st.Errors != 0 {
		t.Errorf("health %+v, stats %+v; want no failed round and no error", h, st)
	}
	if out := log.String(); strings.Contains(out, "level=ERROR") {
		t.Errorf("a stop logged an error:\n%s", out)
	}
}
