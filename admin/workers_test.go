package admin_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/admin"
)

// workers list shows the live sessions by default (an expired or closed one is left out), with
// capacity, in flight (live offers), heartbeat age on the database's clock, labels and token
// name; --all shows every session.
func TestWorkersListShowsLiveSessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	tok, err := f.pub.CreateWorkerToken(ctx, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	// sessions as the dispatcher writes them, as the runtime role: live (heartbeat 2 s ago),
	// expired but not yet swept, closed
	rt := f.d.Pool(t, "ql_runtime")
	if _, err := rt.Exec(ctx, `
		INSERT INTO control_core.worker_sessions (worker_session_id, worker_id, state, capacity, heartbeat_at_ms, expires_at_ms,
		        created_at_ms, worker_token_id, labels, protocol, closed_at_ms)
		SELECT x.id::uuid, x.name, x.state, 4, n - x.hb, n - x.hb + x.ttl, n - 60000, $1, x.labels::jsonb, 1, x.closed
		FROM (SELECT control_core.db_now_ms() AS n) now,
		     (VALUES ('00000000-0000-0000-0000-0000000000a1', 'w-live', 'active', 2000, 30000, '{"zone":"a","gpu":"true"}', NULL::bigint),
		             ('00000000-0000-0000-0000-0000000000a2', 'w-stale', 'active', 40000, 30000, '{}', NULL),
		             ('00000000-0000-0000-0000-0000000000a3', 'w-closed', 'closed', 50000, 30000, '{}', 1)) x(id, name, state, hb, ttl, labels, closed)`,
		tok.ID); err != nil {
		t.Fatal(err)
	}
	// one live offer of the live session (a queued Run's claimed Attempt offered to it)
	runID := insertQueuedRun(t, f)
	f.d.Exec(t, `INSERT INTO control_core.dispatch_offers (offer_id, attempt_id, worker_session_id, state, offered_at_ms, expires_at_ms)
		SELECT gen_random_uuid(), a.attempt_id, '00000000-0000-0000-0000-0000000000a1', 'offered',
		       control_core.db_now_ms(), control_core.db_now_ms() + 600000
		FROM control_core.attempts a WHERE a.run_id = $1`, runID)

	r := admin.NewReader(f.d.Handle(t, "ql_admin"))
	live, more, err := r.WorkerSessions(ctx, admin.WorkerFilter{})
	if err != nil || more || len(live) != 1 {
		t.Fatalf("live sessions %+v, more %v, %v; want w-live alone", live, more, err)
	}
	s := live[0]
	if s.Worker != "w-live" || s.TokenName != "fleet" || s.State != "active" || !s.Live || s.Capacity != 4 || s.Offers != 1 ||
		s.Leases != 0 || s.InFlight != 1 || s.Labels["gpu"] != "true" || s.Labels["zone"] != "a" ||
		s.HeartbeatAgeMs < 2000 || s.HeartbeatAgeMs > 60000 {
		t.Errorf("live session %+v; want w-live of fleet, capacity 4, 1 in flight, labels, heartbeat ≈ 2 s ago", s)
	}
	all, _, err := r.WorkerSessions(ctx, admin.WorkerFilter{All: true})
	if err != nil || len(all) != 3 {
		t.Fatalf("all sessions %+v, %v; want 3", all, err)
	}
	for _, x := range all {
		if x.Worker != "w-live" && x.Live {
			t.Errorf("session %s live; want only w-live live", x.Worker)
		}
	}
	if cut, more, err := r.WorkerSessions(ctx, admin.WorkerFilter{All: true, Limit: 2}); err != nil || len(cut) != 2 || !more {
		t.Errorf("limit 2: %d sessions, more %v, %v; want 2 and more", len(cut), more, err)
	}
}

// The live list reads worker_sessions through worker_sessions_live_expiry_idx only: with 5,000
// closed sessions of history beside 2 live ones, no scan of worker_sessions reads the history.
// The statement is the query of sql/queries/workers.sql, its parameters written in.
func TestWorkersListLiveReadIsBoundedByTheLiveIndex(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	tok, err := f.pub.CreateWorkerToken(ctx, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	f.d.Exec(t, fmt.Sprintf(`
		INSERT INTO control_core.worker_sessions (worker_session_id, worker_id, state, capacity, heartbeat_at_ms, expires_at_ms,
		        created_at_ms, worker_token_id, labels, protocol, closed_at_ms)
		SELECT gen_random_uuid(), 'w' || i, CASE WHEN i <= 2 THEN 'active' ELSE 'closed' END, 1,
		       control_core.db_now_ms() - 1000, control_core.db_now_ms() + CASE WHEN i <= 2 THEN 30000 ELSE 0 END,
		       control_core.db_now_ms() - 2000, '%s', '{}', 1, CASE WHEN i <= 2 THEN NULL ELSE control_core.db_now_ms() END
		FROM generate_series(1, 5000) i;
		ANALYZE control_core.worker_sessions`, tok.ID))
	src, err := os.ReadFile("../sql/queries/workers.sql")
	if err != nil {
		t.Fatal(err)
	}
	q := string(src)
	q = q[strings.Index(q, "-- name: ListWorkerSessions"):]
	q = q[strings.Index(q, "\n")+1 : strings.Index(q, "-- name: CancelRun")]
	q = strings.NewReplacer("@all_sessions::boolean", "false", "@max_rows::integer", "100").Replace(strings.TrimSpace(q))
	q = strings.TrimSuffix(q, ";")
	conn, err := f.d.Pool(t, "").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var doc []struct{ Plan planNode }
	if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+q).Scan(&doc); err != nil || len(doc) != 1 {
		t.Fatalf("EXPLAIN ANALYZE: %v", err)
	}
	var walk func(n planNode)
	seen := false
	walk = func(n planNode) {
		if n.RelationName == "worker_sessions" && n.Loops > 0 && n.IndexName != "worker_sessions_pkey" {
			if n.IndexName != "worker_sessions_live_expiry_idx" || n.Rows > 2 {
				t.Errorf("worker_sessions read by %s %s: %v rows; want worker_sessions_live_expiry_idx, 2 rows", n.NodeType, n.IndexName, n.Rows)
			}
			seen = true
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(doc[0].Plan)
	if !seen || doc[0].Plan.Rows != 2 {
		t.Errorf("plan returned %v rows (want 2), live index used: %v", doc[0].Plan.Rows, seen)
	}
}
