//go:build faults

package faults

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
)

// Gate 1: pg_terminate_backend on a replica's backend in the middle of a claim, in the middle of
// an admit, and while idle in its pool. The replica keeps working (the pool drops the dead
// connection and the next rounds succeed) and nothing is admitted twice.
func TestGateBackendTermination(t *testing.T) {
	t.Run("during the claim statement", testTerminateDuringClaim)
	t.Run("during the admit statement", testTerminateDuringAdmit)
	t.Run("idle pooled backend", testTerminateIdleBackend)
}

// replica is a coordinator running its real lifecycle on its own pool.
type replica struct {
	co   *coordinator.Coordinator
	lc   *coordinator.Lifecycle
	pool *dbconn.DB
}

func startReplica(t *testing.T, owner string, pool *dbconn.DB, lease time.Duration) *replica {
	t.Helper()
	co := coordinatorFor(t, owner, pool, lease)
	cfg := coordinator.DefaultConfig(owner)
	cfg.Lease, cfg.Cadence = lease, 100*time.Millisecond
	lc := coordinator.NewLifecycle(co, cfg)
	if err := lc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // a backstop: the tests stop it themselves (a second Stop returns nil)
		if err := lc.Stop(context.Background()); err != nil {
			t.Errorf("clean-up: stop the replica: %v", err)
		}
	})
	return &replica{co: co, lc: lc, pool: pool}
}

// holdLock runs lockSQL in a superuser transaction that stays open until the returned release
// is called (or the test ends).
func (tg *target) holdLock(lockSQL string) (release func()) {
	tg.t.Helper()
	ctx := context.Background()
	tx, err := tg.su.Begin(ctx)
	if err != nil {
		tg.t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, lockSQL); err != nil {
		tg.t.Fatalf("%s: %v", lockSQL, err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			if err := tx.Rollback(ctx); err != nil {
				tg.t.Errorf("release the lock of %q: %v", lockSQL, err)
			}
		}
	}
	tg.t.Cleanup(release)
	return release
}

// waitingBackend finds the backend of application app that waits on a lock while running the
// sqlc query named name, and returns its pid.
func (tg *target) waitingBackend(app, name string) int32 {
	tg.t.Helper()
	var pid int32
	eventually.NoError(tg.t, 10*time.Second, "a backend of "+app+" waiting on a lock in "+name, func() error {
		return tg.su.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'active' AND wait_event_type = 'Lock'
			  AND query LIKE '-- name: ' || $2 || ' %' LIMIT 1`, app, name).Scan(&pid)
	})
	return pid
}

func (tg *target) terminate(pid int32) {
	tg.t.Helper()
	if ok := tg.scalar("SELECT pg_terminate_backend($1)::int", pid); ok != 1 {
		tg.t.Fatalf("pg_terminate_backend(%d) returned false", pid)
	}
	eventually.True(tg.t, 10*time.Second, "the terminated backend to exit", func() bool {
		return tg.scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid) == 0
	})
}

func backendPID(t *testing.T, pool *pgxpool.Pool) int32 {
	t.Helper()
	var pid int32
	if err := pool.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatalf("pool unusable: %v", err)
	}
	return pid
}

// The claim statement waits on a table lock held by the test; its backend is terminated.
func testTerminateDuringClaim(t *testing.T) {
	tg := newTarget(t)
	occurrence := tg.due("a")
	// EXCLUSIVE conflicts with the ROW SHARE / ROW EXCLUSIVE locks the claim's FOR UPDATE …
	// UPDATE takes: the claim waits instead of skipping.
	release := tg.holdLock("LOCK TABLE control_core.trigger_schedules IN EXCLUSIVE MODE")
	r := startReplica(t, "replica-1", tg.pool(replicaOptions{app: "gate1-claim"}), 2*time.Second)
	pid := tg.waitingBackend("gate1-claim", "ClaimDue")
	tg.terminate(pid)
	eventually.True(t, 10*time.Second, "the failed claim to be counted", func() bool { return r.co.Stats.Errors.Load() == 1 })
	release()
	eventually.True(t, 10*time.Second, "the replica to admit the occurrence", func() bool { return tg.runsOf("a", occurrence) == 1 })
	if err := r.lc.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := r.co.Stats.Snapshot()
	t.Logf("terminated claim backend %d; replica stats %+v", pid, st)
	if st.Errors != 1 || st.Admits != 1 || st.Races != 0 {
		t.Errorf("stats %+v; want exactly 1 error (the terminated claim), 1 admit, 0 races", st)
	}
	if now := backendPID(t, r.pool.Pool()); now == pid {
		t.Errorf("the pool still uses the terminated backend %d", pid)
	}
	requireAudit(t, tg.su, 1)
}

// The admit statement waits on a lock of the runs table held by the test (the claim does not
// touch runs); its backend is terminated mid-transaction. The transaction rolls back, the claim
// stays until its lease expires in database time, and the replica then takes its own expired
// claim over and admits the occurrence exactly once.
func testTerminateDuringAdmit(t *testing.T) {
	tg := newTarget(t)
	occurrence := tg.due("a")
	// SHARE conflicts with the ROW EXCLUSIVE lock an INSERT takes.
	release := tg.holdLock("LOCK TABLE control_core.runs IN SHARE MODE")
	const lease = 2 * time.Second
	r := startReplica(t, "replica-1", tg.pool(replicaOptions{app: "gate1-admit"}), lease)
	pid := tg.waitingBackend("gate1-admit", "Admit")
	held := tg.schedule("a")
	if !held.Claimed || held.Owner != "replica-1" {
		t.Fatalf("schedule %+v during the admit; want a claim of replica-1", held)
	}
	tg.terminate(pid)
	eventually.True(t, 10*time.Second, "the failed admit to be counted", func() bool { return r.co.Stats.Errors.Load() == 1 })
	release()
	after := tg.schedule("a")
	if n := tg.runsOf("a", occurrence); n != 0 || after != held {
		t.Fatalf("after the terminated admit: %d runs, schedule %+v; want 0 runs and the claim untouched %+v", n, after, held)
	}
	eventually.True(t, 15*time.Second, "the expired claim to be taken over and admitted", func() bool { return tg.runsOf("a", occurrence) == 1 })
	if err := r.lc.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	var queuedAt int64
	if err := tg.su.QueryRow(context.Background(), "SELECT queued_at_ms FROM control_core.runs WHERE trigger_id = 'a'").Scan(&queuedAt); err != nil {
		t.Fatal(err)
	}
	final := tg.schedule("a")
	st := r.co.Stats.Snapshot()
	t.Logf("terminated admit backend %d holding claim v%d (expires %d); re-admitted at db time %d as claim v%d; stats %+v",
		pid, held.ClaimVersion, held.ClaimExpires, queuedAt, final.ClaimVersion, st)
	if queuedAt < held.ClaimExpires {
		t.Errorf("admitted at %d, before the terminated claim expired at %d", queuedAt, held.ClaimExpires)
	}
	if final.ClaimVersion != held.ClaimVersion+1 || st.Takeovers != 1 {
		t.Errorf("claim version %d → %d, takeovers %d; want one takeover (+1)", held.ClaimVersion, final.ClaimVersion, st.Takeovers)
	}
	if st.Errors != 1 || st.Admits != 1 || st.Races != 0 {
		t.Errorf("stats %+v; want 1 error, 1 admit, 0 races", st)
	}
	requireAudit(t, tg.su, 1)
}

// Every backend of a running replica's pool is terminated between rounds. The pool drops the
// dead connections (at most one round fails per dead connection it hands out) and the next
// occurrence is admitted exactly once.
func testTerminateIdleBackend(t *testing.T) {
	tg := newTarget(t)
	first := tg.due("a")
	r := startReplica(t, "replica-1", tg.pool(replicaOptions{app: "gate1-idle"}), 2*time.Second)
	eventually.True(t, 10*time.Second, "the first occurrence", func() bool { return tg.runsOf("a", first) == 1 })
	// Between rounds: a sample taken while a round (every 100 ms) or the wake-up sender has every
	// pooled connection busy finds none idle, so it is taken again until one is.
	var pids []int32
	eventually.NoError(t, 10*time.Second, "an idle backend of the replica", func() error {
		rows, err := tg.su.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE application_name = 'gate1-idle' AND state = 'idle'`)
		if err != nil {
			return err
		}
		if pids, err = pgx.CollectRows(rows, pgx.RowTo[int32]); err == nil && len(pids) == 0 {
			err = errors.New("none idle")
		}
		return err
	})
	errorsBefore := r.co.Stats.Errors.Load()
	for _, pid := range pids {
		tg.terminate(pid)
	}
	second := tg.due("b")
	eventually.True(t, 10*time.Second, "the occurrence due after the termination", func() bool { return tg.runsOf("b", second) == 1 })
	roundsAfter := r.co.Stats.Rounds.Load()
	eventually.True(t, 10*time.Second, "three more rounds", func() bool { return r.co.Stats.Rounds.Load() >= roundsAfter+3 })
	if err := r.lc.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := r.co.Stats.Snapshot()
	failed := st.Errors - errorsBefore
	t.Logf("terminated %d idle backends %v; %d rounds failed on a dead connection; stats %+v", len(pids), pids, failed, st)
	if failed > int64(len(pids)) {
		t.Errorf("%d failed rounds for %d dead connections", failed, len(pids))
	}
	if st.Admits != 2 || st.Races != 0 {
		t.Errorf("stats %+v; want 2 admits, 0 races", st)
	}
	if pid := backendPID(t, r.pool.Pool()); pid != 0 {
		for _, dead := range pids {
			if pid == dead {
				t.Errorf("the pool still hands out terminated backend %d", dead)
			}
		}
	}
	requireAudit(t, tg.su, 2)
}
