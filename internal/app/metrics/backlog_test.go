package metrics_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/app/metrics"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/schedule"
)

func TestMain(m *testing.M) { testpg.Main(m) }

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// The backlog has one definition: what a claim would take now. The gauge, qlsched status and
// ClaimDue itself must agree row for row, including on the rows no claim can ever take (a
// disabled trigger, an archived project), which once kept the gauge above 0 for ever.
func TestBacklogIsWhatAClaimWouldTake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.New(t)
	su, rt := d.Pool(t, ""), d.Handle(t, "ql_runtime")
	pub := admin.NewPublisher(d.Handle(t, "ql_admin"))
	for _, p := range []string{"p", "gone"} {
		if _, err := pub.CreateProject(ctx, p); err != nil {
			t.Fatal(err)
		}
		if _, err := pub.PublishTask(ctx, admin.TaskSpec{Project: p, Task: "k", ExecutorSpec: []byte(`{"image":"x"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// Each case is one trigger; arrange sets its schedule row (as the superuser, arranging time).
	cases := []struct {
		project, trigger string
		enabled          bool
		arrange          string // SET clause for the schedule row; "" leaves it uninitialised
		inBacklog        bool
	}{
		{"p", "due", true, "next_fire_at_ms = control_core.db_now_ms() - 120000", true},
		{"p", "uninitialised", true, "", true},
		{"p", "expired-claim", true, `next_fire_at_ms = control_core.db_now_ms() - 60000, claim_owner = 'dead', claim_token = gen_random_uuid(),
			updated_at_ms = control_core.db_now_ms() - 10, claim_expires_at_ms = control_core.db_now_ms() - 9`, true},
		{"p", "live-claim", true, `next_fire_at_ms = control_core.db_now_ms() - 60000, claim_owner = 'alive', claim_token = gen_random_uuid(),
			updated_at_ms = control_core.db_now_ms(), claim_expires_at_ms = control_core.db_now_ms() + 600000`, false},
		{"p", "not-yet-due", true, "next_fire_at_ms = control_core.db_now_ms() + 600000", false},
		{"p", "disabled", false, "next_fire_at_ms = control_core.db_now_ms() - 600000", false},
		{"gone", "archived", true, "next_fire_at_ms = control_core.db_now_ms() - 600000", false},
	}
	var want []string
	for _, c := range cases {
		if _, err := pub.PublishTrigger(ctx, admin.TriggerSpec{Project: c.project, Trigger: c.trigger, Task: "k",
			Cron: "* * * * *", TimeZone: "UTC", Misfire: schedule.MisfireSkip, Enabled: c.enabled}); err != nil {
			t.Fatalf("publish %s: %v", c.trigger, err)
		}
		if c.arrange != "" {
			exec(t, su, "UPDATE control_core.trigger_schedules SET "+c.arrange+" WHERE project_id = $1 AND trigger_id = $2", c.project, c.trigger)
		}
		if c.inBacklog {
			want = append(want, c.trigger)
		}
	}
	exec(t, su, "UPDATE control_core.projects SET state = 'archived' WHERE project_id = 'gone'")

	gauges, err := metrics.DatabaseBacklog(rt)(ctx)
	if err != nil {
		t.Fatal(err)
	}
	due, age := gauges.Due, gauges.OldestAge
	// the oldest is "due" (120 s); the older disabled and archived rows must not count
	if due != int64(len(want)) || age < 120*time.Second || age > 150*time.Second {
		t.Errorf("gauge: %d due, oldest %s; want %d (%v), oldest about 120s", due, age, len(want), want)
	}
	// of them, "uninitialised" alone waits for initialisation, since its publish moments ago
	if gauges.Uninitialised != 1 || gauges.OldestUninitialisedAge <= 0 || gauges.OldestUninitialisedAge > time.Minute {
		t.Errorf("uninitialised gauges: %d rows, oldest %s; want 1, waiting since its publish", gauges.Uninitialised, gauges.OldestUninitialisedAge)
	}
	status, err := admin.NewReader(rt).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var statusBacklog int64
	for _, p := range status.Projects {
		statusBacklog += p.Backlog
		if p.ProjectID == "p" && (p.OldestOverdueMs == 0 || p.NowMs-p.OldestOverdueMs < 120000 || p.NowMs-p.OldestOverdueMs > 150000) {
			t.Errorf("status of p: oldest overdue %d ms before now, want about 120000", p.NowMs-p.OldestOverdueMs)
		}
		if p.ProjectID == "gone" && (p.Backlog != 0 || p.OldestOverdueMs != 0) {
			t.Errorf("status of the archived project: backlog %d, oldest overdue %d; want 0, 0 (none)", p.Backlog, p.OldestOverdueMs)
		}
	}
	if statusBacklog != due {
		t.Errorf("qlsched status counts %d in the backlog, the gauge %d", statusBacklog, due)
	}
	claimed, err := coordinator.NewStore(rt).ClaimBatch(ctx, "probe", 30*time.Second, 256)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range claimed {
		got = append(got, c.TriggerID)
	}
	var uninitialised int64
	for _, c := range claimed {
		if c.CursorMs == nil {
			uninitialised++
		}
	}
	if uninitialised != gauges.Uninitialised {
		t.Errorf("a claim takes %d uninitialised rows, the gauge says %d", uninitialised, gauges.Uninitialised)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("a claim takes %v, the backlog definition says %v", got, want)
	}
	if after, err := metrics.DatabaseBacklog(rt)(ctx); err != nil || after.Due != 0 || after.Uninitialised != 0 {
		t.Errorf("after claiming everything claimable the gauges read %+v (%v), want 0", after, err)
	}
}

// backlogSQL is the Backlog query as sqlc compiles it, read from sql/queries (the generated
// constant is unexported).
func backlogSQL(t *testing.T) string {
	t.Helper()
	body, err := os.ReadFile("../../../sql/queries/status.sql")
	if err != nil {
		t.Fatal(err)
	}
	q := string(body)
	q = q[strings.Index(q, "-- name: Backlog "):]
	q = q[:strings.Index(q[1:], "-- name:")]
	return strings.Replace(strings.TrimSuffix(strings.TrimSpace(q), ";"), "@cap::integer", "$1::integer", 1)
}

// The gauge is an index range count on trigger_schedules_claim_idx, whether few or all rows are
// due, bounded by its cap: never a sequential scan of the schedule table.
func TestBacklogCountsAlongTheClaimIndex(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: skipping the 200,000-row plan test")
	}
	const rows = 200_000 // schedule rows
	cases := []struct {
		name string
		// cursor of row g relative to db-now, in ms
		cursor        string
		due           int64
		uninitialised int64
	}{
		// far from now either way, so the count does not move while the test looks
		{"a sixth due", "CASE WHEN g % 6 = 0 THEN -3600000 - g ELSE 3600000 + g END", rows / 6, 0},
		{"everything due", "-3600000 - g", rows, 0},
		// a mass publish: every row waits for initialisation (the index's -1 range)
		{"everything uninitialised", "NULL", rows, rows},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := testpg.New(t)
			// The rows are consistent; replica mode only skips the per-row foreign-key triggers,
			// which would make this set-up take minutes.
			d.Exec(t, `SET session_replication_role = replica;
				BEGIN;
				INSERT INTO control_core.projects (project_id, state, revision, content_digest) VALUES ('p', 'active', 1, repeat('a', 64));
				INSERT INTO control_core.triggers (project_id, trigger_id, head_revision)
				    SELECT 'p', 't' || g, 1 FROM generate_series(1, `+strconv.Itoa(rows)+`) g;
				INSERT INTO control_core.trigger_revisions (project_id, trigger_id, revision, kind, cron_spec, timezone,
				        misfire_policy, misfire_grace_ms, enabled, task_id, task_revision, content_digest)
				    SELECT 'p', 't' || g, 1, 'cron', '* * * * *', 'UTC', 'skip', 60000, true, 'task', 1, repeat('a', 64)
				    FROM generate_series(1, `+strconv.Itoa(rows)+`) g;
				INSERT INTO control_core.trigger_schedules (project_id, trigger_id, trigger_revision, next_fire_at_ms,
				        state_version, claim_version, updated_at_ms)
				    SELECT 'p', 't' || g, 1, control_core.db_now_ms() + `+c.cursor+`, 1, 0, control_core.db_now_ms()
				    FROM generate_series(1, `+strconv.Itoa(rows)+`) g;
				COMMIT;
				ANALYZE control_core.trigger_schedules, control_core.trigger_revisions, control_core.projects;`)
			rt := d.Handle(t, "ql_runtime")
			res, err := rt.Pool().Query(ctx, "EXPLAIN "+backlogSQL(t), int32(metrics.BacklogCap))
			if err != nil {
				t.Fatal(err)
			}
			var plan []string
			for res.Next() {
				var line string
				if err := res.Scan(&line); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, line)
			}
			if err := res.Err(); err != nil {
				t.Fatal(err)
			}
			text := strings.Join(plan, "\n")
			// An index range on the claim's index: walked in order when the due range is larger
			// than the cap (the scan stops there), or bitmap-scanned and sorted when the planner
			// expects fewer due rows than the cap (all of them are counted anyway). Never the table.
			usesIndex := strings.Contains(text, "Index Scan using trigger_schedules_claim_idx") ||
				strings.Contains(text, "Bitmap Index Scan on trigger_schedules_claim_idx")
			if !usesIndex || strings.Contains(text, "Seq Scan on trigger_schedules") {
				t.Errorf("backlog plan does not range-scan trigger_schedules_claim_idx:\n%s", text)
			}
			if c.due > metrics.BacklogCap && !strings.Contains(text, "Index Scan using trigger_schedules_claim_idx") {
				t.Errorf("a due range beyond the cap is not walked in index order (stopping at the cap):\n%s", text)
			}
			gauges, err := metrics.DatabaseBacklog(rt)(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := min(c.due, metrics.BacklogCap); gauges.Due != want || gauges.Uninitialised != min(c.uninitialised, want) {
				t.Errorf("gauges %d due, %d uninitialised; want %d, %d (capped at %d)", gauges.Due, gauges.Uninitialised,
					want, min(c.uninitialised, want), metrics.BacklogCap)
			}
		})
	}
}
