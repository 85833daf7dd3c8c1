package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// BenchmarkDispatchCandidatesQueueIndex measures what runs_dispatch_queue_idx (pg-0022) gains the
// placement read: two databases on the same server, built alike (the shape of
// TestDispatchCandidatesReadsNoHistory at a size of its own: 100,000 finished Runs in project p,
// the queued Runs spread round robin over p and 40 more projects, all ready), the index dropped
// in the second one only. DispatchCandidates for 16 slots (64 projects, scan cap 64, the
// defaults) runs on both in alternation (which goes first alternates too). It reports each
// database's mean and median per read, their ratio (with the index / without it), and each one's
// pages (shared hit + read of one EXPLAIN (ANALYZE, BUFFERS) after the loop). With the index, it
// also asserts the plan test's bound at this size: the queue index used, no sequential scan of
// runs, 16 rows, at most 1,500 pages.
// Run: nice -n 10 go test -run '^$' -bench 'BenchmarkDispatchCandidatesQueueIndex/queued_10k' -benchtime 500x -count 5 ./dispatch/
//
//	QL_PG_BIN=$(scripts/pg-bin.sh 16) nice -n 10 go test -run '^$' -bench 'BenchmarkDispatchCandidatesQueueIndex/queued_100k' -benchtime 100x ./dispatch/
func BenchmarkDispatchCandidatesQueueIndex(b *testing.B) {
	for _, size := range []struct {
		name             string
		finished, queued int
	}{{"queued_10k", 100_000, 10_000}, {"queued_100k", 100_000, 100_000}} {
		b.Run(size.name, func(b *testing.B) {
			ctx := context.Background()
			names := []string{"idx", "noidx"}
			fxs := make([]*fx, len(names))
			for i, name := range names {
				f := newFx(b)
				f.bulkQueue(size.finished, size.queued)
				if name == "noidx" {
					f.exec(`DROP INDEX control_core.runs_dispatch_queue_idx`) // this bench database only
				}
				f.exec(`VACUUM ANALYZE control_core.runs`)
				fxs[i] = f
			}
			q := dispatch.CandidateQuery{SessionID: uuid.New(), Slots: 16, MaxProjects: 64, ScanCap: 64}
			lat := make([][]time.Duration, len(names))
			for n := 0; b.Loop(); n++ {
				for k := range names {
					i := (n + k) % len(names)
					start := time.Now()
					cands, _, err := fxs[i].store.Candidates(ctx, q)
					lat[i] = append(lat[i], time.Since(start))
					if err != nil || len(cands) != 16 {
						b.Fatalf("%s: %d candidates: %v", names[i], len(cands), err)
					}
				}
			}
			var mean, med [2]float64
			for i, name := range names {
				var sum time.Duration
				for _, d := range lat[i] {
					sum += d
				}
				slices.Sort(lat[i])
				mean[i] = float64(sum.Nanoseconds()) / float64(len(lat[i]))
				med[i] = float64(lat[i][len(lat[i])/2].Nanoseconds())
				b.ReportMetric(mean[i], "ns/read-"+name)
				b.ReportMetric(med[i], "p50-ns/read-"+name)
				pages, seqRuns, queueIdx, rows, plan := fxs[i].candidatesPlan(b)
				b.ReportMetric(pages, "pages-"+name)
				if name == "idx" && (seqRuns || !queueIdx || rows != 16 || pages > 1500) {
					b.Errorf("with the index: %v rows, %v pages, seq scan of runs %v, queue index used %v; plan:\n%s", rows, pages, seqRuns, queueIdx, plan)
				}
			}
			b.ReportMetric(mean[0]/mean[1], "mean-idx/noidx")
			b.ReportMetric(med[0]/med[1], "p50-idx/noidx")
			// also as a line: a failed bound suppresses the metrics above
			b.Logf("%s: per read mean %.2f ms with the index, %.2f ms without (%.3f); p50 %.2f / %.2f ms (%.3f)",
				size.name, mean[0]/1e6, mean[1]/1e6, mean[0]/mean[1], med[0]/1e6, med[1]/1e6, med[0]/med[1])
		})
	}
}

// bulkQueue adds finished Runs to project p and queued ones spread round robin over p and
// projects q1 … q40 (created here, each with task "task" at p's revision), all ready, and no
// Attempts (only the runs table and its indexes matter to the read), in one transaction; replica
// mode skips only the per-row foreign-key triggers, as in TestDispatchCandidatesReadsNoHistory.
func (f *fx) bulkQueue(finished, queued int) {
	f.t.Helper()
	f.d.Exec(f.t, fmt.Sprintf(`SET session_replication_role = replica;
		BEGIN;
		INSERT INTO control_core.projects (project_id, state, revision, content_digest, created_at_ms, updated_at_ms)
		SELECT 'q' || g, 'active', 1, repeat('a', 64), 1, 1 FROM generate_series(1, 40) g;
		INSERT INTO control_core.tasks (project_id, task_id, head_revision, created_at_ms, updated_at_ms)
		SELECT 'q' || g, 'task', 1, 1, 1 FROM generate_series(1, 40) g;
		INSERT INTO control_core.task_revisions (project_id, task_id, revision, execution_revision_id, content_digest, created_at_ms)
		SELECT 'q' || g, 'task', 1, kr.execution_revision_id, kr.content_digest, 1
		FROM generate_series(1, 40) g, control_core.task_revisions kr WHERE kr.project_id = 'p';
		INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, idempotency_key,
		        state, owner, queued_at_ms, finished_at_ms, created_at_ms, updated_at_ms)
		SELECT gen_random_uuid(), CASE WHEN g <= %[1]d OR g %% 41 = 0 THEN 'p' ELSE 'q' || g %% 41 END, 'task', 1,
		       kr.execution_revision_id, 'bulk:' || g, CASE WHEN g <= %[1]d THEN 'succeeded' ELSE 'queued' END, 'runtime', g,
		       CASE WHEN g <= %[1]d THEN g + 1 END, 1, 1
		FROM generate_series(1, %[1]d + %[2]d) g, control_core.task_revisions kr WHERE kr.project_id = 'p';
		COMMIT;
		RESET session_replication_role;
		ANALYZE control_core.projects, control_core.tasks, control_core.task_revisions`, finished, queued))
}

// candidatesPlan runs DispatchCandidates once under EXPLAIN (ANALYZE, BUFFERS) as
// TestDispatchCandidatesReadsNoHistory does, and returns the pages it touched (shared hit + read),
// whether it scanned runs sequentially, whether it used runs_dispatch_queue_idx, its rows, and the
// plan of a second execution in text form (for a failure message).
func (f *fx) candidatesPlan(t testing.TB) (pages float64, seqRuns, queueIdx bool, rows float64, text string) {
	t.Helper()
	ctx := context.Background()
	conn, err := f.su.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "PREPARE bench_candidates AS "+testpg.Query(t, "DispatchCandidates")); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(ctx, "DEALLOCATE bench_candidates") }()
	var plan []byte
	// after, max_projects, labels, session_id, scan_cap, slots (testpg.Query numbers by first use)
	if err := conn.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
		EXECUTE bench_candidates('', 64, '{}', '00000000-0000-0000-0000-000000000000', 64, 16)`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var doc []struct {
		Plan map[string]any `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &doc); err != nil {
		t.Fatal(err)
	}
	root := doc[0].Plan
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
	var lines []string
	r, err := conn.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS)
		EXECUTE bench_candidates('', 64, '{}', '00000000-0000-0000-0000-000000000000', 64, 16)`)
	if err == nil {
		lines, err = pgx.CollectRows(r, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	return root["Shared Hit Blocks"].(float64) + root["Shared Read Blocks"].(float64), seqRuns, queueIdx, root["Actual Rows"].(float64),
		strings.Join(lines, "\n")
}
