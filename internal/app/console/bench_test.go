package console_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/schedule"
)

// benchSize reads a size from the environment, with a default.
func benchSize(b *testing.B, name string, def int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive count", name, v)
	}
	return n
}

// BenchmarkPages renders every console page against one project of 1,000,000 schedule rows and
// 10,000,000 Runs (and a small project of three triggers next to it) (QL_CONSOLE_BENCH_SCHEDULES and QL_CONSOLE_BENCH_RUNS choose other sizes): the
// budget of docs/console.md is 200 ms a page. The seed (generate_series, foreign-key triggers off
// as in internal/app/metrics' backlog test, every row consistent) takes minutes; only the benchmark
// pays it. The Runs are spread over the last ten days (about 42,000 an hour at 10M), 1% failed,
// ten per trigger; 1% of the schedule rows are due (and disabled: the due range the backlog walks
// holds what cannot be claimed), 100 others are due and claimed by two replicas.
func BenchmarkPages(b *testing.B) {
	schedules := benchSize(b, "QL_CONSOLE_BENCH_SCHEDULES", 1_000_000)
	runs := benchSize(b, "QL_CONSOLE_BENCH_RUNS", 10_000_000)
	ctx := context.Background()
	d := testpg.New(b)
	pub := admin.NewPublisher(d.Handle(b, "ql_admin"))
	if _, err := pub.CreateProject(ctx, "big"); err != nil {
		b.Fatal(err)
	}
	if _, err := pub.PublishTask(ctx, admin.TaskSpec{Project: "big", Task: "job", ExecutorSpec: []byte(`{"image":"x"}`)}); err != nil {
		b.Fatal(err)
	}
	// a small project next to the big one: its counts must not walk the big one's rows
	if _, err := pub.CreateProject(ctx, "small"); err != nil {
		b.Fatal(err)
	}
	if _, err := pub.PublishTask(ctx, admin.TaskSpec{Project: "small", Task: "job", ExecutorSpec: []byte(`{"image":"x"}`)}); err != nil {
		b.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := pub.PublishTrigger(ctx, admin.TriggerSpec{Project: "small", Trigger: id, Task: "job", Cron: "*/5 * * * *",
			TimeZone: "UTC", Misfire: schedule.MisfireSkip, Enabled: true}); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	d.Exec(b, fmt.Sprintf(`SET session_replication_role = replica;
		BEGIN;
		INSERT INTO control_core.triggers (project_id, trigger_id, head_revision)
		    SELECT 'big', 't' || g, 1 FROM generate_series(1, %[1]d) g;
		INSERT INTO control_core.trigger_revisions (project_id, trigger_id, revision, kind, cron_spec, timezone,
		        misfire_policy, misfire_grace_ms, enabled, task_id, task_revision, content_digest)
		    SELECT 'big', 't' || g, 1, 'cron', '0 * * * *', CASE WHEN g %% 3 = 0 THEN 'Europe/Berlin' ELSE 'UTC' END,
		           'skip', 60000, g %% 50 <> 0, 'job', 1, repeat('a', 64)
		    FROM generate_series(1, %[1]d) g;
		INSERT INTO control_core.trigger_schedules (project_id, trigger_id, trigger_revision, next_fire_at_ms,
		        state_version, claim_version, updated_at_ms, claim_owner, claim_token, claim_expires_at_ms)
		    SELECT 'big', 't' || g, 1,
		           CASE WHEN g %% 100 = 0 THEN control_core.db_now_ms() - 5000 - g ELSE control_core.db_now_ms() + 3600000 + g END,
		           1, 0, control_core.db_now_ms(), NULL, NULL, NULL
		    FROM generate_series(1, %[1]d) g;
		COMMIT;`, schedules))
	b.Logf("seeded %d schedule rows in %s", schedules, time.Since(start).Round(time.Second))
	start = time.Now()
	// Runs in chunks of a million: run i belongs to trigger i mod N, occurs (R - i) steps before
	// its chunk's database time, so the newest end now and the times grow with i across chunks
	// (every occurrence key is unique), and is admitted 50 … 249 ms later; its id grows with i
	// too, so the primary key is appended to, not scattered.
	const chunk = 1_000_000
	step := (10 * 24 * time.Hour).Milliseconds() / int64(runs)
	for lo := 1; lo <= runs; lo += chunk {
		hi := min(lo+chunk-1, runs)
		d.Exec(b, fmt.Sprintf(`SET session_replication_role = replica;
			INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
			        trigger_revision, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
			SELECT lpad(to_hex(i), 32, '0')::uuid, 'big', 'job', 1, kr.execution_revision_id, 't' || (i %% %[3]d + 1), 1, x.at,
			       control_core.cron_idempotency_key('t' || (i %% %[3]d + 1), 1, x.at),
			       CASE WHEN i %% 100 = 0 THEN 'failed' ELSE 'succeeded' END, 'runtime', x.at + 50 + i %% 200, x.at + 50 + i %% 200,
			       x.at + 50 + i %% 200
			FROM generate_series(%[1]d, %[2]d) i
			CROSS JOIN LATERAL (SELECT control_core.db_now_ms() - (%[5]d - i) * %[4]d AS at) x
			JOIN control_core.task_revisions kr ON kr.project_id = 'big' AND kr.task_id = 'job' AND kr.revision = 1`,
			lo, hi, schedules, step, runs))
	}
	// 100 live claims by two replicas on due rows, taken now (the seed outlasts a lease)
	d.Exec(b, fmt.Sprintf(`UPDATE control_core.trigger_schedules s SET next_fire_at_ms = control_core.db_now_ms() - 5000,
		    claim_owner = 'replica-' || (g %% 2), claim_token = gen_random_uuid(), claim_version = 1,
		    claim_expires_at_ms = control_core.db_now_ms() + 600000, updated_at_ms = control_core.db_now_ms()
		FROM generate_series(%[2]d, %[1]d, %[2]d) g WHERE s.project_id = 'big' AND s.trigger_id = 't' || g`, schedules, max(schedules/100, 1)))
	d.Exec(b, `VACUUM ANALYZE control_core.runs, control_core.trigger_schedules, control_core.trigger_revisions, control_core.triggers`)
	b.Logf("seeded %d Runs in %s", runs, time.Since(start).Round(time.Second))

	h := serve(b, d.Handle(b, "ql_admin")).Config.Handler
	mid := "t" + strconv.Itoa(schedules/2)
	var midRun uuid.UUID // the seed's Run ids are their numbers, lpad(to_hex(i), 32, '0')
	binary.BigEndian.PutUint64(midRun[8:], uint64(runs/2))
	older := strconv.FormatInt(time.Now().Add(-5*24*time.Hour).UnixMilli(), 10)
	if os.Getenv("QL_CONSOLE_BENCH_EXPLAIN") != "" {
		pool := d.Pool(b, "ql_admin")
		const maxUUID = "'ffffffff-ffff-ffff-ffff-ffffffffffff'"
		for _, e := range []struct {
			name   string
			values map[string]string
		}{
			{"ProjectTriggerCounts", map[string]string{"cap": "1000"}},
			{"ProjectBacklog", map[string]string{"cap": "1000"}},
			{"ProjectLiveClaims", map[string]string{"cap": "1000"}},
			{"ConsoleAdmissions", map[string]string{"window_ms": "3600000"}},
			{"ConsoleQueueDepth", map[string]string{"max_rows": "1000"}},
			{"ConsoleProjectTriggers", map[string]string{"project_id": "'big'", "after_trigger": "'" + mid + "'", "max_rows": "100"}},
			{"ConsoleTriggerRevisions", map[string]string{"project_id": "'big'", "trigger_id": "'" + mid + "'", "max_rows": "51"}},
			{"ConsoleRunsPage", map[string]string{"project_id": "'big'", "before_created_ms": older, "before_run_id": maxUUID,
				"since_ms": "0", "state": "'failed'", "max_rows": "50"}},
			{"ConsoleTriggerRunsPage", map[string]string{"project_id": "'big'", "trigger_id": "'" + mid + "'",
				"before_scheduled_ms": "9223372036854775807", "since_ms": "0", "max_rows": "50"}},
		} {
			explain(b, pool, e.name, e.values)
		}
	}
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"project", "/projects/big"},
		{"project-small", "/projects/small"},
		{"project-deep-page", "/projects/big?after=" + mid},
		{"trigger", "/projects/big/triggers/" + mid},
		{"runs", "/projects/big/runs"},
		{"runs-failed", "/projects/big/runs?state=failed"},
		{"runs-by-trigger", "/projects/big/runs?trigger=" + mid},
		{"runs-5-days-back", "/projects/big/runs?before=" + older + "&before_run=ffffffff-ffff-ffff-ffff-ffffffffffff"},
		{"workers", "/workers"},
		{"run", "/runs/" + midRun.String()},
		{"health", "/health"},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodGet, p.path, nil)
				req.Host = "127.0.0.1" // the console's own name (NewRequest's example.com is refused: 421)
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("GET %s: %d\n%s", p.path, rec.Code, rec.Body.String())
				}
			}
		})
	}
}
