package coordinator

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
)

// BenchmarkAdmitDispatchQueueIndex measures what pg-0022's runs_dispatch_queue_idx costs the
// admission: every admitted Run is queued, so the admit also inserts into that partial index.
// Two databases on the same server, built alike (every-minute triggers all due, 2,000 for
// single-row admits and 6,400 for batches of 128; runs
// holding 100,000 finished and 10,000 queued Runs), the index dropped in the second one only;
// batches are claimed and admitted in alternation (which database goes first alternates too), so
// both share the same seconds of the server. Only the admit is timed (the claim is the same
// statement on both). It reports each database's mean and median per admitted Run, their ratios
// (with the index / without it), and the WAL each admit wrote per Run (the server's insert
// position before and after it; the server holds only these two databases, and the timed admit
// runs alone on it).
// Run: nice -n 10 go test -run '^$' -bench 'BenchmarkAdmitDispatchQueueIndex/batch_1$' -benchtime 1000x -count 5 ./coordinator/
//
//	nice -n 10 go test -run '^$' -bench 'BenchmarkAdmitDispatchQueueIndex/batch_128' -benchtime 40x -count 5 ./coordinator/
func BenchmarkAdmitDispatchQueueIndex(b *testing.B) {
	for _, batch := range []int{1, 128} {
		triggers := max(2_000, 50*batch) // -benchtime 1000x (batch 1), 40x (batch 128)
		b.Run(fmt.Sprintf("batch_%d", batch), func(b *testing.B) {
			ctx := context.Background()
			names := []string{"idx", "noidx"}
			stores := make([]*Store, len(names))
			fxs := make([]*fixture, len(names))
			for i, name := range names {
				f := newFixture(b)
				f.bulkSchedules(triggers, triggers, triggers)
				f.d.Exec(b, `SET session_replication_role = replica;
					UPDATE control_core.trigger_revisions SET content_digest =
					    control_core.trigger_digest('cron', '* * * * *', 'UTC', 'skip', 60000, true, 'task', 1)
					WHERE content_digest = repeat('a', 64);
					RESET session_replication_role;`) // bulk's placeholder digest, made one the admit recomputes
				f.history(100_000, 10_000)
				if name == "noidx" {
					f.exec(`DROP INDEX control_core.runs_dispatch_queue_idx`) // this bench database only
				}
				f.exec(`VACUUM ANALYZE control_core.runs`)
				stores[i], fxs[i] = NewStore(f.rt), f
			}
			per := make([][]time.Duration, len(names)) // per admitted Run, one entry per batch
			var total [2]time.Duration
			var admitted, wal [2]int
			for n := 0; b.Loop(); n++ {
				for k := range names {
					i := (n + k) % len(names)
					claims, err := stores[i].ClaimBatch(ctx, "bench", 30*time.Second, batch)
					if err != nil || len(claims) != batch {
						b.Fatalf("%s: claimed %d of %d: %v (a shorter -benchtime keeps enough rows due)", names[i], len(claims), batch, err)
					}
					items := make([]AdmitItem, len(claims))
					for j, c := range claims { // next an hour ahead: the row is not due again in the run
						items[j] = AdmitItem{Claim: c, ScheduledFor: *c.CursorMs, Next: c.ClaimedAtMs + 3_600_000, RunID: uuid.New()}
					}
					lsn := fxs[i].count(`SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint`)
					start := time.Now()
					res := stores[i].AdmitBatch(ctx, items, 3)
					d := time.Since(start)
					wal[i] += fxs[i].count(`SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint`) - lsn
					for _, r := range res {
						if r.Err != nil || r.Outcome != Written {
							b.Fatalf("%s: admit: %v, %v", names[i], r.Outcome, r.Err)
						}
					}
					total[i] += d
					admitted[i] += len(res)
					per[i] = append(per[i], d/time.Duration(len(res)))
				}
			}
			med := make([]float64, len(names))
			for i, name := range names {
				slices.Sort(per[i])
				med[i] = float64(per[i][len(per[i])/2].Nanoseconds())
				b.ReportMetric(float64(total[i].Nanoseconds())/float64(admitted[i]), "ns/run-"+name)
				b.ReportMetric(med[i], "p50-ns/run-"+name)
				b.ReportMetric(float64(wal[i])/float64(admitted[i]), "walB/run-"+name)
			}
			b.ReportMetric(float64(total[0])/float64(admitted[0])/(float64(total[1])/float64(admitted[1])), "mean-idx/noidx")
			b.ReportMetric(med[0]/med[1], "p50-idx/noidx")
		})
	}
}

// history adds finished succeeded Runs and queued ones of task "task" to project p, with their
// times spread over the past, in one transaction (replica mode skips only the per-row foreign-key
// triggers, as in bulk). The Runs have no Attempts: only the runs table and its indexes matter.
func (f *fixture) history(finished, queued int) {
	f.t.Helper()
	f.d.Exec(f.t, fmt.Sprintf(`SET session_replication_role = replica;
		INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, idempotency_key,
		        state, owner, queued_at_ms, finished_at_ms, created_at_ms, updated_at_ms)
		SELECT gen_random_uuid(), 'p', 'task', 1, kr.execution_revision_id, 'bulk:' || g,
		       CASE WHEN g <= %[1]d THEN 'succeeded' ELSE 'queued' END, 'runtime', g,
		       CASE WHEN g <= %[1]d THEN g + 1 END, g, g
		FROM generate_series(1, %[1]d + %[2]d) g, control_core.task_revisions kr WHERE kr.project_id = 'p';
		RESET session_replication_role;`, finished, queued))
}
