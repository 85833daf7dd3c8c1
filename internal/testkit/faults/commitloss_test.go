//go:build faults

package faults

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/testkit/faultproxy"
)

// Gate 3: raw-wire COMMIT-response loss. The fault proxy sits between pgx and the server and
// swallows the server's CommandComplete "COMMIT" of an admit, then resets the connection: the
// admit committed, the caller saw only an error. A retry of the same admit under the same claim
// writes nothing (the fence was cleared by the commit: a counted race); the replica's next round
// and a fresh replica's startup recovery change nothing; the pristine queued Attempt is left to
// the dispatcher. Final state: exactly one Run per occurrence.
func TestGateCommitResponseLoss(t *testing.T) {
	ctx := context.Background()
	tg := newTarget(t)
	proxy := tg.proxy()
	pool := tg.pool(replicaOptions{app: "gate3", proxy: proxy})

	// 1. Through the coordinator: one round, whose admit loses its COMMIT response.
	occA := tg.due("a")
	dropped := proxy.DropNextCommit()
	co := coordinatorFor(t, "replica-1", pool, 30*time.Second)
	co.Round(ctx, nil)
	drop := receive(t, dropped)
	st := co.Stats.Snapshot()
	t.Logf("COMMIT response swallowed on proxied connection %d; command tags the driver had seen on it: %q", drop.Conn, drop.Tags)
	t.Logf("replica after the round: %+v", st)
	if st.Claims != 1 || st.Admits != 0 || st.Errors != 1 || st.Races != 0 {
		t.Errorf("stats %+v; want the admit reported as an error (1 claim, 0 admits, 1 error)", st)
	}
	if n := tg.runsOf("a", occA); n != 1 {
		t.Fatalf("%d runs for the occurrence; the admit committed, want 1", n)
	}
	if s := tg.schedule("a"); s.Claimed || s.Cursor <= occA {
		t.Errorf("schedule %+v; want the claim cleared and the cursor advanced past %d by the committed admit", s, occA)
	}

	// 2. Through the store: the caller sees the error itself and retries the same admit.
	occB := tg.due("b")
	store := coordinator.NewStore(pool)
	claim, d := claimToFire(t, store, "replica-1", "b", occB)
	dropped = proxy.DropNextCommit()
	_, outcome, err := store.Admit(ctx, claim, d.ScheduledForMs, d.NextFireAtMs, uuid.New(), 3)
	receive(t, dropped)
	t.Logf("admit with a swallowed COMMIT response returned outcome %q, error: %v", outcome, err)
	if err == nil || !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("admit error %v; want the connection reset (ECONNRESET) the caller saw", err)
	}
	_, outcome, err = store.Admit(ctx, claim, d.ScheduledForMs, d.NextFireAtMs, uuid.New(), 3)
	t.Logf("the same admit retried under the same claim: outcome %q, error %v", outcome, err)
	if err != nil || outcome != coordinator.Race {
		t.Errorf("retry: outcome %q, error %v; want a race (the committed admit cleared the fence)", outcome, err)
	}
	if n := tg.runsOf("b", occB); n != 1 {
		t.Errorf("%d runs for occurrence b after the retry, want 1", n)
	}

	// 3. The replica's next round and a fresh replica's startup find nothing to do.
	attemptsBefore := attemptRows(t, tg)
	co.Round(ctx, nil)
	fresh := tg.pool(replicaOptions{app: "gate3-fresh"})
	if err := ready(ctx, fresh); err != nil {
		t.Fatalf("fresh replica readiness: %v", err)
	}
	rep, err := coordinator.Recover(ctx, fresh, testLogger("replica-2"))
	if err != nil {
		t.Fatal(err)
	}
	co2 := coordinatorFor(t, "replica-2", fresh, 30*time.Second)
	co2.Round(ctx, nil)
	t.Logf("fresh replica startup recovery: %+v; its first round: %+v; first replica's next round: %+v", rep, co2.Stats.Snapshot(), co.Stats.Snapshot())
	if rep.Candidates != 0 || rep.FailedClosed != 0 {
		t.Errorf("startup recovery %+v; want the pristine queued Attempts excluded (0 candidates)", rep)
	}
	if got := co.Stats.Snapshot(); got.Claims != 1 || got.Admits != 0 {
		t.Errorf("first replica after its next round: %+v; want nothing more claimed", got)
	}
	if got := co2.Stats.Snapshot(); got.Claims != 0 || got.Admits != 0 {
		t.Errorf("fresh replica: %+v; want nothing claimed or admitted", got)
	}
	if after := attemptRows(t, tg); after != attemptsBefore {
		t.Errorf("attempts changed by recovery:\n before %v\n after  %v", attemptsBefore, after)
	}
	if s := proxy.Stats(); s.CommitsDropped != 2 {
		t.Errorf("proxy stats %+v; want 2 COMMIT responses dropped", s)
	}
	requireAudit(t, tg.su, 2)
}

// Batch admission (--admit-batch): three occurrences admitted in one SERIALIZABLE pipeline whose
// COMMIT response is lost. The coordinator cannot tell a lost COMMIT response from an aborted
// transaction and re-admits the items one by one; each retry finds its fence cleared by the
// committed batch and writes nothing (today it counts each as a race, although its own batch
// admitted them). Exactly one Run per occurrence.
func TestGateCommitResponseLossBatch(t *testing.T) {
	ctx := context.Background()
	tg := newTarget(t)
	proxy := tg.proxy()
	pool := tg.pool(replicaOptions{app: "gate3-batch", proxy: proxy})
	occ := map[string]int64{}
	for _, id := range []string{"a", "b", "c"} {
		occ[id] = tg.due(id)
	}
	dropped := proxy.DropNextCommit()
	co := coordinatorFor(t, "replica-1", pool, 30*time.Second, func(c *coordinator.Config) { c.AdmitBatch = 3 })
	co.Round(ctx, nil)
	drop := receive(t, dropped)
	st := co.Stats.Snapshot()
	t.Logf("batch COMMIT response swallowed; tags the driver had seen on that connection: %q; replica stats %+v", drop.Tags, st)
	for id, at := range occ {
		if n := tg.runsOf(id, at); n != 1 {
			t.Errorf("trigger %s: %d runs, want 1 (the batch committed)", id, n)
		}
	}
	if st.Admits+st.Errors+st.Races != 3 {
		t.Errorf("stats %+v; want each of the 3 items to end as an admit, an error or a race", st)
	}
	co.Round(ctx, nil)
	if got := co.Stats.Snapshot(); got.Claims != st.Claims || got.Admits != 0 {
		t.Errorf("next round %+v; want nothing more claimed or admitted", got)
	}
	requireAudit(t, tg.su, 3)
}

func receive(t *testing.T, ch <-chan faultproxy.Drop) faultproxy.Drop {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(30 * time.Second):
		t.Fatal("the proxy saw no COMMIT to drop")
		return faultproxy.Drop{}
	}
}

// attemptRows renders every Attempt with the fields recovery could change.
func attemptRows(t *testing.T, tg *target) string {
	t.Helper()
	var s string
	err := tg.su.QueryRow(context.Background(), `SELECT coalesce(string_agg(format('%s:%s:%s', attempt_id, state, updated_at_ms), ',' ORDER BY attempt_id), '')
		FROM control_core.attempts`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
