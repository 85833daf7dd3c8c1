//go:build faults

package faults

import (
	"context"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/faultproxy"
)

// Gate 4: network partition. Replica A reaches the server through the fault proxy, replica B
// directly. The proxy black-holes A's traffic (no RST, no FIN: bytes are held as TCP would keep
// retransmitting them) at an exact point of A's protocol while A holds a claim. The admit goes
// out as one pipeline (Bind/Execute of BEGIN, the admit and COMMIT, then Sync, in one write);
// the proxy can cut before it, inside it, or after the server ran it.
//
// The cases run in parallel: each has its own database, proxy and replicas (in this process),
// and most of each is waiting out a lease or a timeout, whose bounds they check from below.
func TestGatePartition(t *testing.T) {
	for _, c := range []struct {
		name string
		test func(*testing.T)
	}{
		{"timeouts reach the server", testTimeoutsReachTheServer},
		{"late admit after the heal is a race", testPartitionLateAdmitIsARace},
		{"a partitioned replica notices within its bounds", testPartitionNoticedWithinBounds},
		{"the reply to a committed admit is lost", testPartitionLosesTheReply},
		{"a pipeline cut before its COMMIT keeps the row", testPartitionInsideThePipeline},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.test(t)
		})
	}
}

const partitionLease = 2 * time.Second

// partitionTimeouts are replica A's bounds, shortened from the defaults so the gate runs in
// seconds: statement 3 s (so a reply is awaited at most 3 s + 5 s = 8 s), connect 2 s, idle in
// transaction 2 s.
func partitionTimeouts() dbconn.Timeouts {
	to := dbconn.DefaultTimeouts()
	to.Connect = 2 * time.Second
	to.Statement = 3 * time.Second
	to.Response = to.Statement + dbconn.ResponseMargin
	to.IdleInTransaction = 2 * time.Second
	return to
}

type partitionSetup struct {
	tg    *target
	proxy *faultproxy.Proxy
	a, b  *coordinator.Coordinator
	// round runs one round of A in the background; the channel closes when it returns.
	round func() <-chan struct{}
	heal  func()
}

func newPartitionSetup(t *testing.T, app string) *partitionSetup {
	t.Helper()
	tg := newTarget(t)
	proxy := tg.proxy()
	to := partitionTimeouts()
	a := coordinatorFor(t, "replica-a", tg.pool(replicaOptions{app: app, proxy: proxy, timeouts: &to}), partitionLease)
	b := coordinatorFor(t, "replica-b", tg.pool(replicaOptions{app: app + "-b"}), partitionLease)
	s := &partitionSetup{tg: tg, proxy: proxy, a: a, b: b, heal: proxy.Heal}
	s.round = func() <-chan struct{} {
		done := make(chan struct{})
		go func() { defer close(done); a.Round(context.Background(), nil) }()
		return done
	}
	t.Cleanup(proxy.Heal) // let A's goroutine finish before the pools close
	return s
}

func wait(t *testing.T, ch <-chan struct{}, within time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-ch:
		return time.Since(start)
	case <-time.After(within):
		t.Fatalf("%s: not within %s", what, within)
		return 0
	}
}

// takeOver runs B's rounds until it has admitted the occurrence, checking that B claims nothing
// while the database's time is before the stuck claim's expiry. It returns the admission time.
func (s *partitionSetup) takeOver(t *testing.T, trigger string, occurrence, expires int64) int64 {
	t.Helper()
	ctx := context.Background()
	rounds := 0
	for s.tg.runsOf(trigger, occurrence) == 0 {
		claimsBefore := s.b.Stats.Claims.Load()
		s.b.Round(ctx, nil)
		rounds++
		if s.tg.dbNow() < expires && s.b.Stats.Claims.Load() != claimsBefore {
			t.Fatalf("replica B claimed before the stuck claim expired at %d", expires)
		}
		if rounds > 500 {
			t.Fatalf("replica B did not take over within %d rounds", rounds)
		}
		// not synchronisation: B's cadence, its rounds spread over the stuck claim's lease, each
		// checked above (waiting out the lease is what is tested; rounds > 500 is the deadline)
		time.Sleep(50 * time.Millisecond)
	}
	var admittedAt int64
	if err := s.tg.su.QueryRow(ctx, `SELECT queued_at_ms FROM control_core.runs WHERE trigger_id = $1 AND scheduled_for_ms = $2`,
		trigger, occurrence).Scan(&admittedAt); err != nil {
		t.Fatal(err)
	}
	if admittedAt < expires {
		t.Errorf("B admitted at db time %d, before A's claim expired at %d", admittedAt, expires)
	}
	t.Logf("B ran %d rounds; took over after expiry (claim expired %d, admitted %d)", rounds, expires, admittedAt)
	return admittedAt
}

// A claims, then its admit's BEGIN is black-holed. B takes the claim over after it expires in
// database time and admits. When the partition heals the held BEGIN and A's admit reach the
// server: the admit fails its fence and A counts a race; nothing is written twice.
func testPartitionLateAdmitIsARace(t *testing.T) {
	s := newPartitionSetup(t, "gate4-race")
	occ := s.tg.due("a")
	fired := s.proxy.PartitionOnQuery("begin")
	done := s.round()
	wait(t, fired, 10*time.Second, "A's admit to reach the partition")
	held := s.tg.schedule("a")
	if !held.Claimed || held.Owner != "replica-a" {
		t.Fatalf("schedule %+v; want A's claim", held)
	}
	s.takeOver(t, "a", occ, held.ClaimExpires)
	if st := s.b.Stats.Snapshot(); st.Takeovers != 1 || st.Admits != 1 {
		t.Errorf("B %+v; want 1 takeover, 1 admit", st)
	}
	select {
	case <-done:
		t.Fatal("A's round returned during the partition")
	default:
	}
	s.heal()
	wait(t, done, 10*time.Second, "A's round after the heal")
	st := s.a.Stats.Snapshot()
	t.Logf("A after the heal: %+v", st)
	if st.Races != 1 || st.Admits != 0 || st.Errors != 0 {
		t.Errorf("A %+v; want its late admit counted as 1 race, 0 admits, 0 errors", st)
	}
	if final := s.tg.schedule("a"); final.ClaimVersion != held.ClaimVersion+1 {
		t.Errorf("claim version %d → %d, want +1 (B's takeover)", held.ClaimVersion, final.ClaimVersion)
	}
	requireAudit(t, s.tg.su, 1)
}

// The partition outlasts A's response bound: A's admit fails after at most Statement + margin
// (8 s) and its pool drops the connection; a round during the partition fails after the connect
// bound (2 s); after the heal A works again. B admits the stuck occurrence after expiry.
func testPartitionNoticedWithinBounds(t *testing.T) {
	s := newPartitionSetup(t, "gate4-bounds")
	to := partitionTimeouts()
	occ := s.tg.due("a")
	fired := s.proxy.PartitionOnQuery("begin")
	done := s.round()
	wait(t, fired, 10*time.Second, "A's admit to reach the partition")
	held := s.tg.schedule("a")
	partitioned := time.Now()
	eventually.True(t, to.Response+5*time.Second, "A to notice the partition", func() bool { return s.a.Stats.Errors.Load() >= 1 })
	noticed := time.Since(partitioned)
	t.Logf("A's admit failed %s into the partition (response bound %s)", noticed.Round(time.Millisecond), to.Response)
	if noticed < to.Response-time.Second {
		t.Errorf("A gave up after %s, before its response bound %s", noticed, to.Response)
	}
	// the round goes on claiming: the pool needs a new connection, which cannot be established
	wait(t, done, to.Connect+5*time.Second, "A's round to end")
	t.Logf("A's round ended %s into the partition: its next claim could not connect (connect bound %s)",
		time.Since(partitioned).Round(time.Millisecond), to.Connect)
	if st := s.a.Stats.Snapshot(); st.Errors != 2 || st.Admits != 0 || st.Races != 0 {
		t.Errorf("A %+v; want 2 errors (the admit, then the claim's connection)", st)
	}
	start := time.Now()
	wait(t, s.round(), to.Connect+5*time.Second, "A's next round during the partition")
	t.Logf("a whole round during the partition failed after %s", time.Since(start).Round(time.Millisecond))
	if st := s.a.Stats.Snapshot(); st.Errors != 3 {
		t.Errorf("A %+v; want the connect failure counted (3 errors)", st)
	}
	s.takeOver(t, "a", occ, held.ClaimExpires)
	s.heal()
	// The heal delivers A's held pipeline: its admit (a race now) and, in single mode, the claim
	// behind its COMMIT, which would take b for a connection A gave up long ago (held until the
	// lease expires, as a claim sent alone and delivered late would be). b exists only once that
	// backend has run it and gone.
	eventually.True(t, 30*time.Second, "A's partitioned backend to end after the heal", func() bool {
		var n int
		if err := s.tg.su.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'gate4-bounds'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	occB := s.tg.due("b")
	wait(t, s.round(), 10*time.Second, "A's round after the heal")
	st := s.a.Stats.Snapshot()
	t.Logf("A after the heal: %+v", st)
	if st.Admits != 1 || st.Errors != 3 || s.tg.runsOf("b", occB) != 1 {
		t.Errorf("A %+v; want it working again: the next occurrence admitted, no new error", st)
	}
	requireAudit(t, s.tg.su, 2)
}

// The server ran A's whole admit pipeline and committed; the partition swallows the reply. A
// gives up after its response bound (an error: it cannot know the outcome); the database has
// exactly the one Run, the claim is cleared, so B finds nothing to take over; after the heal the
// held reply goes nowhere.
func testPartitionLosesTheReply(t *testing.T) {
	s := newPartitionSetup(t, "gate4-reply")
	to := partitionTimeouts()
	occ := s.tg.due("a")
	fired := s.proxy.PartitionOnCommandTag("COMMIT")
	done := s.round()
	wait(t, fired, 10*time.Second, "the server's COMMIT reply to reach the partition")
	if n, sch := s.tg.runsOf("a", occ), s.tg.schedule("a"); n != 1 || sch.Claimed {
		t.Fatalf("%d runs, schedule %+v; want the admit committed and the claim cleared", n, sch)
	}
	for range 3 {
		s.b.Round(context.Background(), nil)
	}
	eventually.True(t, to.Response+5*time.Second, "A to give up", func() bool { return s.a.Stats.Errors.Load() >= 1 })
	s.heal()
	wait(t, done, 15*time.Second, "A's round after the heal")
	st, bs := s.a.Stats.Snapshot(), s.b.Stats.Snapshot()
	t.Logf("A %+v; B %+v", st, bs)
	if st.Admits != 0 || st.Errors < 1 || st.Races != 0 {
		t.Errorf("A %+v; want the lost reply counted as an error, no admit, no race", st)
	}
	if bs.Claims != 0 || bs.Admits != 0 {
		t.Errorf("B %+v; want nothing to take over", bs)
	}
	requireAudit(t, s.tg.su, 1)
}

// The partition cuts A's pipeline between the admit and its COMMIT: the server ran BEGIN and the
// admit, holds the schedule row locked, and waits for the rest of the pipeline. That backend is
// "active" (waiting to read the client), so neither statement_timeout nor
// idle_in_transaction_session_timeout ends it: only the connection's end does (TCP keepalive or
// TCP_USER_TIMEOUT on a real network, where the pipeline is one write and cannot be split this
// way). B's claim skips the locked row even after the lease expired: no takeover, no duplicate.
// When the partition heals within A's response bound, the COMMIT arrives and A's admit counts.
func testPartitionInsideThePipeline(t *testing.T) {
	s := newPartitionSetup(t, "gate4-pipeline")
	occ := s.tg.due("a")
	fired := s.proxy.PartitionOnQuery("commit")
	done := s.round()
	wait(t, fired, 10*time.Second, "A's COMMIT to reach the partition")
	held := s.tg.schedule("a")
	var state string
	eventually.True(t, 5*time.Second, "A's backend to wait for the rest of its pipeline", func() bool {
		return s.tg.su.QueryRow(context.Background(), `SELECT state || '/' || coalesce(wait_event, '') FROM pg_stat_activity
			WHERE application_name = 'gate4-pipeline' AND backend_xid IS NOT NULL`).Scan(&state) == nil
	})
	t.Logf("A's backend: %s, holding a transaction; claim expires at %d", state, held.ClaimExpires)
	eventually.True(t, 10*time.Second, "the lease to expire in database time", func() bool { return s.tg.dbNow() > held.ClaimExpires+500 })
	for range 3 {
		s.b.Round(context.Background(), nil)
	}
	if bs := s.b.Stats.Snapshot(); bs.Claims != 0 {
		t.Fatalf("B %+v; want the locked row skipped", bs)
	}
	if n := s.tg.runsOf("a", occ); n != 0 {
		t.Fatalf("%d runs visible before the COMMIT, want 0", n)
	}
	s.heal()
	wait(t, done, 10*time.Second, "A's round after the heal")
	st := s.a.Stats.Snapshot()
	t.Logf("A after the heal: %+v", st)
	if st.Admits != 1 || st.Errors != 0 || st.Races != 0 {
		t.Errorf("A %+v; want its admit committed once the pipeline completed", st)
	}
	requireAudit(t, s.tg.su, 1)
}

// The bounds of dbconn reach the server as the session's settings.
func testTimeoutsReachTheServer(t *testing.T) {
	tg := newTarget(t)
	pool := tg.pool(replicaOptions{app: "gate4-settings"})
	want := map[string]string{
		"statement_timeout": "15s", "idle_in_transaction_session_timeout": "15s",
		"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3",
		"tcp_user_timeout": "20000", // shown in ms: the setting has no larger unit
	}
	for name, v := range want {
		var got string
		if err := pool.Pool().QueryRow(context.Background(), "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != v {
			t.Errorf("%s = %s on the server, want %s", name, got, v)
		}
	}
	t.Logf("server session settings of a default pool: %v", want)
}
