package coordinator

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// The wake-up's reading (WakeWanted) behind a transaction pooler, on its one server session
// shared with the claims and the admits: no session, the wake-up is skipped; an active one
// (once the reading is wakeRecheck old), it is sent, and only it.
func TestWakeUpReadingThroughATransactionPooler(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := NewStore(f.openThrough("transaction", ""))
	next := listenOnly(t, f)
	f.dueOnce("a", "b")
	admitOneByOne(t, s, 1)
	waitSenderIdle(t, s)
	if st := s.WakeStats(); st != (WakeStats{Marked: 1, Skipped: 1}) {
		t.Fatalf("no session, behind the pooler: %+v, want 1 marked, 1 skipped", st)
	}
	f.d.WorkerSession(t, "active", 30_000)
	ageWakeReading(s)
	admitOneByOne(t, s, 1)
	if p := next(); p != "" {
		t.Fatalf("payload %q, want empty", p)
	}
	waitSenderIdle(t, s)
	if st := s.WakeStats(); st != (WakeStats{Marked: 2, Sent: 1, Skipped: 1}) {
		t.Fatalf("an active session, behind the pooler: %+v, want 2 marked, 1 sent, 1 skipped", st)
	}
	f.exec(`SELECT pg_notify('qlsched_runs_queued', 'sentinel')`)
	if p := next(); p != "sentinel" {
		t.Fatalf("notification %q, want only the sentinel", p)
	}
}

// WakeWanted reads the live sessions only, under the store's settings (hotSettings: a generic
// plan), whatever the history: 200,000 closed and 20,000 expired sessions (never deleted), 5
// active ones past their expiry (unswept) and 500 live draining ones cost it a few pages, never a
// scan of the table, which only grows. The planner takes either partial index of live sessions
// (not always the live-expiry range the query's comment named: it varied between ANALYZE
// samples of the same data), both bounded by the sessions not yet closed or expired.
func TestWakeWantedReadsOnlyTheLiveSessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sessions := func(n int, state, expires string) {
		f.d.Exec(t, fmt.Sprintf(`SET session_replication_role = replica;
			INSERT INTO control_core.worker_sessions (worker_session_id, worker_id, state, capacity, heartbeat_at_ms,
				expires_at_ms, created_at_ms, worker_token_id, protocol, closed_at_ms)
			SELECT gen_random_uuid(), 'w' || g, '%[2]s', 4, control_core.db_now_ms() - 600000, %[3]s,
				control_core.db_now_ms() - 600000, gen_random_uuid(), 1,
				CASE WHEN '%[2]s' = 'closed' THEN control_core.db_now_ms() - 500000 END
			FROM generate_series(1, %[1]d) g;
			RESET session_replication_role;
			ANALYZE control_core.worker_sessions`, n, state, expires))
	}
	sessions(200_000, "closed", "control_core.db_now_ms() - 500000 + g")
	sessions(20_000, "expired", "control_core.db_now_ms() - 400000 + g")
	sessions(5, "active", "control_core.db_now_ms() - 1000")
	sessions(500, "draining", "control_core.db_now_ms() + 30000 + g")
	// the live sessions' partial indexes: worker_sessions_live_expiry_idx (active and draining, by
	// expiry: the range past now) or worker_sessions_worker_idx (active only: all of it, the
	// expiry a filter)
	liveIndex := map[string]bool{"worker_sessions_live_expiry_idx": true, "worker_sessions_worker_idx": true}
	const maxPages = 50
	for _, active := range []bool{false, true} {
		if active {
			sessions(1, "active", "control_core.db_now_ms() + 30000")
		}
		conn := must(f.su.Acquire(t.Context())).of(t)
		if _, err := conn.Exec(t.Context(), "BEGIN; "+hotSettings+"; PREPARE wake_wanted AS "+testpg.Query(t, "WakeWanted")); err != nil {
			t.Fatal(err)
		}
		var raw []byte
		err := conn.QueryRow(t.Context(), "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE wake_wanted").Scan(&raw)
		if _, rerr := conn.Exec(t.Context(), "ROLLBACK; DEALLOCATE wake_wanted"); err == nil {
			err = rerr
		}
		conn.Release()
		if err != nil {
			t.Fatal(err)
		}
		var doc []struct {
			Plan map[string]any `json:"Plan"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		root := doc[0].Plan
		pages := root["Shared Hit Blocks"].(float64) + root["Shared Read Blocks"].(float64)
		var indexes []string // the indexes read
		seq := false         // a sequential scan of worker_sessions
		var walk func(n map[string]any)
		walk = func(n map[string]any) {
			if idx, ok := n["Index Name"].(string); ok {
				indexes = append(indexes, idx)
			}
			seq = seq || n["Node Type"] == "Seq Scan" && n["Relation Name"] == "worker_sessions"
			kids, _ := n["Plans"].([]any)
			for _, k := range kids {
				walk(k.(map[string]any))
			}
		}
		walk(root)
		t.Logf("an active session %v: %.0f pages, indexes %v", active, pages, indexes)
		live := len(indexes) > 0
		for _, idx := range indexes {
			live = live && liveIndex[idx]
		}
		if seq || !live || pages > maxPages {
			t.Fatalf("WakeWanted (an active session: %v): %.0f pages, indexes %v, sequential scan %v; want a live sessions' index only, at most %d pages:\n%s",
				active, pages, indexes, seq, maxPages, raw)
		}
	}
}
