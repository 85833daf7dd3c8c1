package dispatch_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// DispatchCandidates reads the queue through runs_dispatch_queue_idx and never the history: with
// 50,000 finished Runs in one project beside 40 projects of queued ones, a placement read touches
// a number of pages bounded by the projects and the scan cap, not by the history.
func TestDispatchCandidatesReadsNoHistory(t *testing.T) {
	f := newFx(t)
	ctx := context.Background()
	f.queue("p", 5)
	f.history()
	conn, err := f.su.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "PREPARE candidates AS "+testpg.Query(t, "DispatchCandidates")); err != nil {
		t.Fatal(err)
	}
	var plan []byte
	// after, max_projects, labels, session_id, scan_cap, slots (testpg.Query numbers by first use)
	if err := conn.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
		EXECUTE candidates('', 64, '{}', '00000000-0000-0000-0000-000000000000', 64, 16)`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var doc []struct {
		Plan map[string]any `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &doc); err != nil {
		t.Fatal(err)
	}
	root := doc[0].Plan
	pages := root["Shared Hit Blocks"].(float64) + root["Shared Read Blocks"].(float64)
	var seqRuns, queueIdx bool
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		seqRuns = seqRuns || n["Node Type"] == "Seq Scan" && n["Relation Name"] == "runs"
		queueIdx = queueIdx || n["Index Name"] == "runs_dispatch_queue_idx"
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			walk(k.(map[string]any))
		}
	}
	walk(root)
	if seqRuns || !queueIdx || root["Actual Rows"].(float64) != 16 || pages > 1500 {
		t.Fatalf("DispatchCandidates: %v rows, %v pages; plan:\n%s", root["Actual Rows"], pages, plan)
	}
	t.Logf("%v pages", pages)
}

// history adds 50,000 finished Runs to project p and 400 queued ones spread over 40 projects q1 …
// q40 (10 each, queued at 50001 … 50400 ms), and analyzes.
func (f *fx) history() {
	f.t.Helper()
	f.exec(`SET session_replication_role = replica;
		INSERT INTO control_core.projects (project_id, state, revision, content_digest, created_at_ms, updated_at_ms)
		SELECT 'q' || g, 'active', 1, repeat('a', 64), 1, 1 FROM generate_series(1, 40) g;
		INSERT INTO control_core.tasks (project_id, task_id, head_revision, created_at_ms, updated_at_ms)
		SELECT 'q' || g, 'task', 1, 1, 1 FROM generate_series(1, 40) g;
		INSERT INTO control_core.task_revisions (project_id, task_id, revision, execution_revision_id, content_digest, created_at_ms)
		SELECT 'q' || g, 'task', 1, kr.execution_revision_id, kr.content_digest, 1
		FROM generate_series(1, 40) g, control_core.task_revisions kr WHERE kr.project_id = 'p';
		INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, idempotency_key,
		        state, owner, queued_at_ms, finished_at_ms, created_at_ms, updated_at_ms)
		SELECT gen_random_uuid(), CASE WHEN g <= 50000 THEN 'p' ELSE 'q' || (g % 40 + 1) END, 'task', 1, kr.execution_revision_id,
		       'bulk:' || g, CASE WHEN g <= 50000 THEN 'succeeded' ELSE 'queued' END, 'runtime', g,
		       CASE WHEN g <= 50000 THEN g + 1 END, 1, 1
		FROM generate_series(1, 50400) g, control_core.task_revisions kr WHERE kr.project_id = 'p';
		RESET session_replication_role;
		ANALYZE control_core.runs, control_core.projects, control_core.task_revisions, control_core.attempts, control_core.dispatch_offers`)
}
