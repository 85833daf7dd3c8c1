//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/coordinator"
	qlreplica "github.com/qlcontrol/controlcore/internal/app/replica"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/faultproxy"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/roles"
)

// Gate 7: faults with PgBouncer in the path. Two replicas start as `qlsched run` does (readiness,
// startup recovery, lifecycle, through internal/app/replica) on pools through a PgBouncer the test
// starts; while they claim and admit, the fault hits; afterwards more occurrences fall due. Each
// ends with the exactly-once audit: one Run, one Attempt and two Events per occurrence, no claim
// left, no duplicate. Transaction pooling for every fault; session pooling for the restart and
// KILL too (RECONNECT and a terminated backend are the same there as a direct connection's).
func TestGatePooler(t *testing.T) {
	faults := []struct {
		name  string
		modes []string
		hit   func(t *testing.T, pt *pooledTarget)
	}{
		{"PgBouncer restarted", []string{"transaction", "session"}, func(t *testing.T, pt *pooledTarget) { pt.bouncer.Restart(t) }},
		{"RECONNECT on the console", []string{"transaction"}, func(t *testing.T, pt *pooledTarget) {
			pt.bouncer.Console(t, "RECONNECT "+pt.database)
		}},
		{"KILL on the console, then RESUME", []string{"transaction", "session"}, func(t *testing.T, pt *pooledTarget) {
			pt.bouncer.Console(t, "KILL "+pt.database) // drops every client and server connection; new clients wait
			pt.bouncer.Console(t, "RESUME "+pt.database)
		}},
		{"server backend terminated", []string{"transaction"}, func(t *testing.T, pt *pooledTarget) {
			n := pt.scalar(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE usename = 'ql_runtime' AND datname = current_database()`)
			t.Logf("terminated %d server backends of ql_runtime behind PgBouncer", n)
		}},
	}
	for _, f := range faults {
		for _, mode := range f.modes {
			t.Run(f.name+"/"+mode, func(t *testing.T) {
				// in parallel: each case has its own database, PgBouncer and replicas
				t.Parallel()
				start := time.Now()
				pt := newPooledTarget(t, mode)
				r1, r2 := pt.startReplica("pooled-1", nil), pt.startReplica("pooled-2", nil)
				before := pt.dueMany("before", 8)
				f.hit(t, pt) // the replicas are claiming and admitting the 8 occurrences
				after := pt.dueMany("after", 8)
				pt.waitAllAdmitted(before + after)
				t.Logf("replica stats after the fault: %+v and %+v", r1.Coordinator.Stats.Snapshot(), r2.Coordinator.Stats.Snapshot())
				pt.stop(r1, r2)
				requireAudit(t, pt.su, int64(before+after))
				t.Logf("%s, %s pooling: %s", f.name, mode, time.Since(start).Round(time.Millisecond))
			})
		}
	}
}

// Gate 7, COMMIT-response loss with PgBouncer in the path: the fault proxy sits between the
// replica and PgBouncer and swallows the CommandComplete "COMMIT" of an admit, then resets the
// client connection. The admit committed on the server and PgBouncer saw it end (its server
// connection goes back to the pool clean); only the replica lost the answer. Between PgBouncer
// and the server the same loss reaches the replica as an error too (PgBouncer closes the client
// whose server connection died mid-transaction), so this hop is the one where the outcome is
// exactly a committed admit reported as failed. The coordinator's round counts an error; the
// same admit retried under the same claim is a race; a fresh replica's readiness and recovery
// through PgBouncer leave the pristine Runs alone; the audit holds.
func TestGatePoolerCommitResponseLoss(t *testing.T) {
	start := time.Now()
	ctx := context.Background()
	pt := newPooledTarget(t, "transaction")
	proxy, err := faultproxy.Start(net.JoinHostPort("127.0.0.1", pt.bouncer.Port()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	pool := pt.open("pooled-1", proxy)

	// 1. One round of the coordinator (claim: the pipeline's implicit transaction, no COMMIT;
	// admit: BEGIN … COMMIT, whose answer is lost).
	occA := pt.due("a")
	dropped := proxy.DropNextCommit()
	cc := coordinator.DefaultConfig("pooled-1")
	cc.Cadence = 100 * time.Millisecond
	co := coordinator.New(cc, coordinator.NewStore(pool), coordinator.WithLogger(testLogger("pooled-1")))
	co.Round(ctx, nil)
	drop := receive(t, dropped)
	t.Logf("COMMIT response swallowed between the replica and PgBouncer on connection %d; tags seen: %q", drop.Conn, drop.Tags)
	if st := co.Stats.Snapshot(); st.Claims != 1 || st.Admits != 0 || st.Errors != 1 {
		t.Errorf("stats %+v; want the admit reported as an error (1 claim, 0 admits, 1 error)", st)
	}
	if n := pt.runsOf("a", occA); n != 1 {
		t.Fatalf("%d runs for the occurrence; the admit committed, want 1", n)
	}

	// 2. Through the store: the caller retries the same admit under the same claim.
	occB := pt.due("b")
	store := coordinator.NewStore(pool)
	claim, d := claimToFire(t, store, "pooled-1", "b", occB)
	dropped = proxy.DropNextCommit()
	_, outcome, err := store.Admit(ctx, claim, d.ScheduledForMs, d.NextFireAtMs, uuid.New(), 3)
	receive(t, dropped)
	t.Logf("admit with a swallowed COMMIT response: outcome %q, error: %v", outcome, err)
	if err == nil || !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("admit error %v; want the connection reset (ECONNRESET) the caller saw", err)
	}
	_, outcome, err = store.Admit(ctx, claim, d.ScheduledForMs, d.NextFireAtMs, uuid.New(), 3)
	if err != nil || outcome != coordinator.Race {
		t.Errorf("retry: outcome %q, error %v; want a race (the committed admit cleared the fence)", outcome, err)
	}

	// 3. A fresh replica through PgBouncer, as qlsched run starts it, while more falls due.
	fresh := pt.startReplica("pooled-fresh", nil)
	if fresh.Recovery.Candidates != 0 {
		t.Errorf("fresh replica's startup recovery %+v; want the pristine queued Attempts excluded", fresh.Recovery)
	}
	more := pt.dueMany("after", 4)
	pt.waitAllAdmitted(2 + more)
	pt.stop(fresh)
	if s := proxy.Stats(); s.CommitsDropped != 2 {
		t.Errorf("proxy stats %+v; want 2 COMMIT responses dropped", s)
	}
	requireAudit(t, pt.su, int64(2+more))
	t.Logf("COMMIT-response loss through PgBouncer: %s", time.Since(start).Round(time.Millisecond))
}

// pooledTarget is a target whose replicas connect through a PgBouncer.
type pooledTarget struct {
	*target
	d        *testpg.DB
	bouncer  *testpg.Bouncer
	database string
	seq      int
}

func newPooledTarget(t *testing.T, mode string) *pooledTarget {
	t.Helper()
	d := testpg.New(t)
	tg := &target{t: t, su: d.Pool(t, ""), admin: admin.NewPublisher(d.Handle(t, "ql_admin")),
		config: func(role string) *dbconn.Config { return d.Config(t, role) }}
	tg.seed()
	return &pooledTarget{target: tg, d: d, bouncer: d.StartPgBouncer(t, mode), database: d.Name}
}

// startReplica starts a replica as `qlsched run` does, through PgBouncer (or through proxy, which
// forwards to it): detected in transaction pooling, told by ql_pooler=session in session pooling. The lease is short, so that a
// claim whose answer a fault swallowed expires within the gate.
func (pt *pooledTarget) startReplica(owner string, proxy *faultproxy.Proxy) *qlreplica.Replica {
	t := pt.t
	t.Helper()
	pool := pt.open(owner, proxy)
	cc := coordinator.DefaultConfig(owner)
	cc.Lease, cc.Cadence = 2*time.Second, 100*time.Millisecond
	if err := cc.Validate(); err != nil {
		t.Fatal(err)
	}
	names, _ := roles.NewNames(roles.DefaultPrefix)
	r, err := qlreplica.Start(context.Background(), pool, qlreplica.Options{Config: cc, Names: names, Log: testLogger(owner)})
	if err != nil {
		t.Fatalf("start %s through PgBouncer: %v", owner, err)
	}
	t.Cleanup(func() { _ = r.Lifecycle.Stop(context.Background()) })
	return r
}

// open opens a ql_runtime pool through PgBouncer (or through proxy, which forwards to it) and
// returns it with the connection's transaction-local settings.
func (pt *pooledTarget) open(owner string, proxy *faultproxy.Proxy) *dbconn.DB {
	t := pt.t
	t.Helper()
	url := pt.bouncer.URL("ql_runtime") // transaction pooling: detected
	if pt.bouncer.Mode == "session" {
		url += "&ql_pooler=session" // told: the prepared statements stay
	}
	cfg, err := dbconn.Resolve(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.SetApplicationName(owner)
	if proxy != nil {
		cfg.Pool.ConnConfig.Host, cfg.Pool.ConnConfig.Port = "127.0.0.1", proxy.Port()
		cfg.Pool.ConnConfig.Fallbacks = nil
	}
	pool, err := cfg.Open(context.Background())
	if err != nil {
		t.Fatalf("open %s through PgBouncer: %v", owner, err)
	}
	t.Cleanup(pool.Close)
	if !pool.Pooled() {
		t.Fatalf("%s: PgBouncer in the path was not detected", owner)
	}
	return pool
}

// dueMany makes n occurrences due now (yearly triggers prefix-1 … prefix-n) and returns n.
func (pt *pooledTarget) dueMany(prefix string, n int) int {
	for i := 0; i < n; i++ {
		pt.seq++
		pt.due(fmt.Sprintf("%s-%d", prefix, pt.seq))
	}
	return n
}

// waitAllAdmitted waits until n Runs exist and no schedule row is due and unclaimed or claimed:
// every occurrence admitted, every claim a fault left behind expired and taken over.
func (pt *pooledTarget) waitAllAdmitted(n int) {
	pt.t.Helper()
	eventually.NoError(pt.t, 60*time.Second, strconv.Itoa(n)+" occurrences admitted and no claim left", func() error {
		runs := pt.scalar("SELECT count(*) FROM control_core.runs")
		claims := pt.scalar("SELECT count(*) FROM control_core.trigger_schedules WHERE claim_token IS NOT NULL")
		due := pt.scalar("SELECT count(*) FROM control_core.trigger_schedules WHERE next_fire_at_ms <= control_core.db_now_ms()")
		if runs < int64(n) || claims != 0 || due != 0 {
			return fmt.Errorf("%d runs of %d, %d claims held, %d rows due", runs, n, claims, due)
		}
		return nil
	})
}

// stop stops the replicas (each finishes the claim in hand).
func (pt *pooledTarget) stop(rs ...*qlreplica.Replica) {
	for _, r := range rs {
		if err := r.Lifecycle.Stop(context.Background()); err != nil {
			pt.t.Errorf("stop: %v", err)
		}
	}
}
