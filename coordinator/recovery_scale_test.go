package coordinator

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// addPristine adds n pristine queued Runs to f, set-based as admission writes them (the Admit
// statement's Run, claimed Attempt 1 and two events), copies of the one admitted Run at later
// occurrences. Replica mode skips only the per-row foreign-key triggers; the rows are consistent.
func addPristine(f *fixture, from, n int) {
	f.t.Helper()
	f.exec(`SET statement_timeout = 0; ` + replica(`WITH run AS (
			INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
				trigger_revision, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
			SELECT gen_random_uuid(), r.project_id, r.task_id, r.task_revision, r.execution_revision_id, r.trigger_id, r.trigger_revision,
				r.scheduled_for_ms + g * 1000, control_core.cron_idempotency_key(r.trigger_id, r.trigger_revision, r.scheduled_for_ms + g * 1000),
				'queued', 'runtime', r.queued_at_ms + g, r.created_at_ms + g, r.updated_at_ms + g
			FROM (SELECT * FROM control_core.runs ORDER BY scheduled_for_ms LIMIT 1) r, generate_series(`+strconv.Itoa(from)+`, `+strconv.Itoa(from+n-1)+`) g
			RETURNING run_id, created_at_ms),
		attempt AS (
			INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, created_at_ms, updated_at_ms)
			SELECT gen_random_uuid(), run_id, 1, 'remote_worker', 'claimed', created_at_ms, created_at_ms FROM run)
		INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms)
		SELECT gen_random_uuid(), run.run_id, e.seq, e.type, run.created_at_ms
		FROM run CROSS JOIN (VALUES (1, 'run.created'), (2, 'run.queued')) AS e (seq, type)`))
	f.exec(`SET statement_timeout = 0; ANALYZE control_core.runs, control_core.attempts`)
}

// rowsRead is what the scans of a plan (EXPLAIN ANALYZE, FORMAT JSON) read: every row a scan
// node returned or filtered away, over all its loops.
func rowsRead(node map[string]any) float64 {
	n := 0.0
	if _, scan := node["Relation Name"]; scan {
		loops, _ := node["Actual Loops"].(float64)
		rows, _ := node["Actual Rows"].(float64)
		removed, _ := node["Rows Removed by Filter"].(float64)
		n += (rows + removed) * loops
	}
	if kids, ok := node["Plans"].([]any); ok {
		for _, k := range kids {
			n += rowsRead(k.(map[string]any))
		}
	}
	return n
}

// The recovery source reads what left the pristine shape, never the admitted history: at 1,000
// and at 50,000 pristine queued Runs (with the same three drifted ones) its plan reads the same
// rows, in the custom plan and the generic one. Walking every queued Run (pg-0016's source) reads
// 50 times as many at the larger size.
func TestRecoverySourceDoesNotGrowWithPristineHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := admittedOnce(t)
	addPristine(f, 1, 999)
	// three drifted Runs: one by its own row, two by their Attempts (the state changes past the
	// Run/Attempt agreement, pg-0022's I1, which would refuse them at commit)
	f.exec(replica(`UPDATE control_core.runs SET state = 'dispatching' WHERE run_id = (SELECT run_id FROM control_core.runs ORDER BY queued_at_ms LIMIT 1 OFFSET 10)`))
	f.exec(`UPDATE control_core.attempts SET worker_id = 'w1' WHERE run_id = (SELECT run_id FROM control_core.runs ORDER BY queued_at_ms LIMIT 1 OFFSET 20)`)
	f.exec(replica(`UPDATE control_core.attempts SET state = 'dispatching' WHERE run_id = (SELECT run_id FROM control_core.runs ORDER BY queued_at_ms LIMIT 1 OFFSET 30)`))
	conn := must(f.rt.Pool().Acquire(ctx)).of(t)
	defer conn.Release()
	if _, err := conn.Exec(ctx, "PREPARE recovery_candidates AS "+testpg.Query(t, "RecoveryCandidates")); err != nil {
		t.Fatal(err)
	}
	measure := func(mode string) float64 {
		t.Helper()
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		var doc string
		if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE recovery_candidates('{}', 500)").Scan(&doc); err != nil {
			t.Fatal(err)
		}
		var plans []map[string]any
		if err := json.Unmarshal([]byte(doc), &plans); err != nil {
			t.Fatal(err)
		}
		return rowsRead(plans[0]["Plan"].(map[string]any))
	}
	modes := []string{"force_custom_plan", "force_generic_plan"}
	small := map[string]float64{}
	for _, mode := range modes {
		small[mode] = measure(mode)
	}
	addPristine(f, 1000, 49_000)
	if _, err := conn.Exec(ctx, "DEALLOCATE recovery_candidates; PREPARE recovery_candidates AS "+testpg.Query(t, "RecoveryCandidates")); err != nil {
		t.Fatal(err)
	}
	for _, mode := range modes {
		if large := measure(mode); large != small[mode] || large > 100 {
			t.Errorf("%s: the recovery source reads %.0f rows at 1,000 pristine Runs and %.0f at 50,000; want the same few",
				mode, small[mode], large)
		}
	}
	if rep := must(Recover(ctx, f.rt, testLogger())).of(t); rep.FailedClosed != 3 || rep.Candidates != 3 {
		t.Errorf("recovery report %+v; want the 3 drifted Runs failed closed", rep)
	}
}

// Startup recovery at a production-sized history: QL_RECOVERY_SCALE pristine queued Runs (default
// 100000; docs/operations.md quotes 2000000), written set-based as admission writes them, then
// one recovery per iteration. Run: go test -run '^$' -bench RecoveryAtScale ./coordinator/
func BenchmarkRecoveryAtScale(b *testing.B) {
	n, _ := strconv.Atoi(os.Getenv("QL_RECOVERY_SCALE"))
	if n <= 0 {
		n = 100_000
	}
	ctx := context.Background()
	f := admittedOnce(b)
	start := time.Now()
	for from := 1; from < n; from += 50_000 {
		addPristine(f, from, min(50_000, n-from))
	}
	b.Logf("built %d pristine queued Runs in %s", f.count(`SELECT count(*) FROM control_core.runs`), time.Since(start).Round(time.Second))
	b.ResetTimer()
	for b.Loop() {
		rep, err := Recover(ctx, f.rt, testLogger())
		if err != nil || rep.Candidates != 0 {
			b.Fatalf("recovery: %+v, %v; want no candidate", rep, err)
		}
	}
}
