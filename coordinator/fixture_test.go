package coordinator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/schedule"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// fixture is one test database with the publisher connected as ql_admin, the runtime as
// ql_runtime, and a superuser pool for arranging and asserting.
type fixture struct {
	t     testing.TB
	d     *testpg.DB
	admin *admin.Publisher
	su    *pgxpool.Pool
	rt    *dbconn.DB
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	d := testpg.New(t)
	f := &fixture{t: t, d: d, admin: admin.NewPublisher(d.Handle(t, "ql_admin")), su: d.Pool(t, ""), rt: d.Handle(t, "ql_runtime")}
	ctx := context.Background()
	if _, err := f.admin.CreateProject(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "task",
		ExecutorSpec: []byte(`{"image":"example/job:1","args":["--once"]}`)}); err != nil {
		t.Fatal(err)
	}
	return f
}

// trigger publishes an enabled trigger on task "task".
func (f *fixture) trigger(id, cron string, misfire schedule.MisfirePolicy) admin.TriggerPublished {
	f.t.Helper()
	pub, err := f.admin.PublishTrigger(context.Background(), admin.TriggerSpec{Project: "p", Trigger: id, Task: "task",
		Cron: cron, TimeZone: "UTC", Misfire: misfire, Enabled: true})
	if err != nil {
		f.t.Fatalf("publish trigger %s: %v", id, err)
	}
	return pub
}

// farYearly is a yearly cron, "0 0 1 M *", whose occurrences lie five months or more from now,
// before and after: never due by the clock while a test runs, and never within the misfire grace
// of a cursor a test puts up to months in the past. @yearly ("0 0 1 1 *") is not that: during the
// first minute of a year (UTC) its latest occurrence is within the grace of now (a cursor an hour
// back is then followed by an on-time occurrence: admitted, not skipped), and a test running
// across New Year's midnight finds a row it admitted due again.
func farYearly() string {
	return fmt.Sprintf("0 0 1 %d *", (int(time.Now().UTC().Month())+5)%12+1)
}

// dueOnce publishes yearly fire_once triggers (farYearly) with their cursors a second back: each
// due once, its next occurrence never due while a test runs, so a round's claims can be counted
// exactly.
func (f *fixture) dueOnce(ids ...string) {
	f.t.Helper()
	for _, id := range ids {
		f.trigger(id, farYearly(), schedule.MisfireFireOnce)
		f.setCursor(id, -time.Second)
	}
}

// setCursor puts a trigger's cursor at db-now + offset (arranging time, as a test may).
func (f *fixture) setCursor(trigger string, offset time.Duration) int64 {
	f.t.Helper()
	var cursor int64
	err := f.su.QueryRow(context.Background(), `UPDATE control_core.trigger_schedules
		SET next_fire_at_ms = control_core.db_now_ms() + $2::bigint, state_version = state_version + 1
		WHERE project_id = 'p' AND trigger_id = $1 RETURNING next_fire_at_ms`, trigger, offset.Milliseconds()).Scan(&cursor)
	if err != nil {
		f.t.Fatalf("set cursor of %s: %v", trigger, err)
	}
	return cursor
}

// bulkSchedules adds n enabled every-minute triggers t1 … tn to project p, with cursors spread one
// a second over spread seconds, the first due seconds of them in the past, and ANALYZEs.
func (f *fixture) bulkSchedules(n, spread, due int) {
	f.t.Helper()
	f.bulk("t", n, fmt.Sprintf("control_core.db_now_ms() + (g %% %d - %d) * 1000", spread, due))
}

// bulk adds n enabled every-minute triggers <prefix>1 … <prefix>n to project p whose schedule rows
// hold the cursor the SQL expression cursor gives (g: the row's number; NULL: waiting for
// initialisation), unclaimed at state_version 1, and ANALYZEs. The rows are consistent; replica
// mode only skips the per-row foreign-key triggers, which would make a million rows take minutes.
func (f *fixture) bulk(prefix string, n int, cursor string) {
	f.t.Helper()
	f.d.Exec(f.t, fmt.Sprintf(`SET session_replication_role = replica;
		BEGIN;
		INSERT INTO control_core.triggers (project_id, trigger_id, head_revision)
		    SELECT 'p', '%[2]s' || g, 1 FROM generate_series(1, %[1]d) g;
		INSERT INTO control_core.trigger_revisions (project_id, trigger_id, revision, kind, cron_spec, timezone,
		        misfire_policy, misfire_grace_ms, enabled, task_id, task_revision, content_digest)
		    SELECT 'p', '%[2]s' || g, 1, 'cron', '* * * * *', 'UTC', 'skip', 60000, true, 'task', 1, repeat('a', 64)
		    FROM generate_series(1, %[1]d) g;
		INSERT INTO control_core.trigger_schedules (project_id, trigger_id, trigger_revision, next_fire_at_ms,
		        state_version, claim_version, updated_at_ms)
		    SELECT 'p', '%[2]s' || g, 1, %[3]s, 1, 0, control_core.db_now_ms()
		    FROM generate_series(1, %[1]d) g;
		COMMIT;
		ANALYZE control_core.triggers, control_core.trigger_schedules, control_core.trigger_revisions, control_core.projects;`,
		n, prefix, cursor))
}

// expireClaim moves a held claim's expiry into the past, as if its lease had run out.
func (f *fixture) expireClaim(trigger string) {
	f.t.Helper()
	f.exec(`UPDATE control_core.trigger_schedules SET updated_at_ms = control_core.db_now_ms() - 10, claim_expires_at_ms = control_core.db_now_ms() - 9
		WHERE project_id = 'p' AND trigger_id = $1 AND claim_token IS NOT NULL`, trigger)
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.su.Exec(context.Background(), sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

func (f *fixture) count(sql string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.su.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// audit checks the exactly-once shape of every admitted occurrence: per Run 1 Attempt and 2
// Events, no idempotency key twice, no occurrence twice. It returns the number of Runs.
func (f *fixture) audit() int {
	f.t.Helper()
	bad := f.count(`SELECT count(*) FROM control_core.runs r
		WHERE (SELECT count(*) FROM control_core.attempts a WHERE a.run_id = r.run_id) <> 1
		   OR (SELECT count(*) FROM control_core.run_events e WHERE e.run_id = r.run_id) <> 2`)
	dup := f.count(`SELECT count(*) FROM (SELECT trigger_id, scheduled_for_ms FROM control_core.runs
		GROUP BY 1, 2 HAVING count(*) > 1) d`)
	if bad != 0 || dup != 0 {
		f.t.Errorf("audit: %d runs without exactly 1 attempt and 2 events, %d duplicate occurrences", bad, dup)
	}
	return f.count("SELECT count(*) FROM control_core.runs")
}

// coordinator returns a coordinator for owner on its own runtime pool.
func (f *fixture) coordinator(owner string, pool *dbconn.DB, mutate ...func(*Config)) *Coordinator {
	f.t.Helper()
	return f.coordinatorWith(owner, pool, nil, mutate...)
}

// coordinatorWith is coordinator with options besides the test logger.
func (f *fixture) coordinatorWith(owner string, pool *dbconn.DB, opts []Option, mutate ...func(*Config)) *Coordinator {
	f.t.Helper()
	cfg := DefaultConfig(owner)
	for _, m := range mutate {
		m(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		f.t.Fatal(err)
	}
	return New(cfg, NewStore(pool), append([]Option{WithLogger(testLogger())}, opts...)...)
}

func testLogger() *slog.Logger {
	if os.Getenv("QL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// must(f()).of(t) fails the test when f returned an error, else gives f's value.
func must[T any](v T, err error) result[T] { return result[T]{v, err} }

type result[T any] struct {
	v   T
	err error
}

func (r result[T]) of(t testing.TB) T {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.v
}

// dueFixture is a fixture with an enabled every-minute skip trigger per id, each due since ago
// (its cursor at db-now − ago), and a store on the runtime pool: what most store tests start from.
func dueFixture(t testing.TB, ago time.Duration, ids ...string) (*fixture, *Store) {
	t.Helper()
	f := newFixture(t)
	for _, id := range ids {
		f.trigger(id, "* * * * *", schedule.MisfireSkip)
		f.setCursor(id, -ago)
	}
	return f, NewStore(f.rt)
}
