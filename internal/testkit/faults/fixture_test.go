//go:build faults

package faults

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/app/pgcluster"
	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/faultproxy"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/roles"
	cronschedule "github.com/qlcontrol/controlcore/schedule"
)

func TestMain(m *testing.M) {
	// A gate that cannot run fails: the opt-out that turns a missing server into skips does not
	// apply here.
	os.Unsetenv("QL_TEST_SKIP_DB")
	testpg.Main(m)
}

// yearly fires once a year, on the first of a month half a year away: a cursor put one second in
// the past is exactly one due occurrence whatever second of the minute the test runs in, and
// nothing else becomes due while it runs. "0 0 1 1 *" was not that across New Year's midnight
// (UTC): an admitted row came due again.
var yearly = fmt.Sprintf("0 0 1 %d *", (int(time.Now().UTC().Month())+5)%12+1)

// target is one database the gate works on: the publisher as ql_admin, a superuser pool for
// arranging and auditing, and a way to open runtime pools (replicas) with their own settings.
type target struct {
	t      *testing.T
	su     *pgxpool.Pool
	admin  *admin.Publisher
	config func(role string) *dbconn.Config
}

// newTarget is a fresh database on the test binary's server (testpg), with project p and task
// "task" published.
func newTarget(t *testing.T) *target {
	t.Helper()
	d := testpg.New(t)
	tg := &target{t: t, su: d.Pool(t, ""), admin: admin.NewPublisher(d.Handle(t, "ql_admin")),
		config: func(role string) *dbconn.Config { return d.Config(t, role) }}
	tg.seed()
	return tg
}

func (tg *target) seed() {
	tg.t.Helper()
	ctx := context.Background()
	if _, err := tg.admin.CreateProject(ctx, "p"); err != nil {
		tg.t.Fatal(err)
	}
	if _, err := tg.admin.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "task", ExecutorSpec: []byte(`{"image":"example/job:1"}`)}); err != nil {
		tg.t.Fatal(err)
	}
}

// trigger publishes an enabled cron trigger on task "task".
func (tg *target) trigger(id, cron string, misfire cronschedule.MisfirePolicy) {
	tg.t.Helper()
	_, err := tg.admin.PublishTrigger(context.Background(), admin.TriggerSpec{Project: "p", Trigger: id, Task: "task",
		Cron: cron, TimeZone: "UTC", Misfire: misfire, Enabled: true})
	if err != nil {
		tg.t.Fatalf("publish trigger %s: %v", id, err)
	}
}

// due publishes a yearly trigger whose cursor is one second in the past: one occurrence is due
// now. It returns that occurrence.
func (tg *target) due(id string) int64 {
	tg.t.Helper()
	tg.trigger(id, yearly, cronschedule.MisfireSkip)
	var cursor int64
	err := tg.su.QueryRow(context.Background(), `UPDATE control_core.trigger_schedules
		SET next_fire_at_ms = control_core.db_now_ms() - 1000, state_version = state_version + 1
		WHERE project_id = 'p' AND trigger_id = $1 RETURNING next_fire_at_ms`, id).Scan(&cursor)
	if err != nil {
		tg.t.Fatalf("set cursor of %s: %v", id, err)
	}
	return cursor
}

// replicaOptions shape a replica's pool.
type replicaOptions struct {
	app      string            // application_name, to find its backends in pg_stat_activity
	proxy    *faultproxy.Proxy // route through this proxy
	timeouts *dbconn.Timeouts  // replace the defaults
}

// pool opens a ql_runtime pool for one replica, closed when the test ends.
func (tg *target) pool(o replicaOptions) *dbconn.DB {
	tg.t.Helper()
	cfg := tg.config("ql_runtime")
	if o.timeouts != nil {
		cfg.SetTimeouts(*o.timeouts)
	}
	if o.app != "" {
		cfg.Pool.ConnConfig.RuntimeParams["application_name"] = o.app
	}
	if o.proxy != nil {
		cfg.Pool.ConnConfig.Host, cfg.Pool.ConnConfig.Port = "127.0.0.1", o.proxy.Port()
		cfg.Pool.ConnConfig.Fallbacks = nil
	}
	pool, err := cfg.Open(context.Background())
	if err != nil {
		tg.t.Fatalf("open runtime pool %s: %v", o.app, err)
	}
	tg.t.Cleanup(pool.Close)
	return pool
}

// proxy starts a fault proxy in front of the target's server, closed when the test ends.
func (tg *target) proxy() *faultproxy.Proxy {
	tg.t.Helper()
	cc := tg.config("ql_runtime").Pool.ConnConfig
	p, err := faultproxy.Start(net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	if err != nil {
		tg.t.Fatal(err)
	}
	tg.t.Cleanup(func() { p.Close() })
	return p
}

// coordinatorFor is one replica's coordinator on pool.
func coordinatorFor(t *testing.T, owner string, pool *dbconn.DB, lease time.Duration, mutate ...func(*coordinator.Config)) *coordinator.Coordinator {
	t.Helper()
	cfg := coordinator.DefaultConfig(owner)
	cfg.Lease, cfg.Cadence = lease, 100*time.Millisecond
	for _, m := range mutate {
		m(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return coordinator.New(cfg, coordinator.NewStore(pool), coordinator.WithLogger(testLogger(owner)))
}

func testLogger(owner string) *slog.Logger {
	if os.Getenv("QL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("replica", owner)
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func (tg *target) scalar(sql string, args ...any) int64 {
	tg.t.Helper()
	var n int64
	if err := tg.su.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		tg.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (tg *target) dbNow() int64 { return tg.scalar("SELECT control_core.db_now_ms()") }

// schedule is a schedule row as the database holds it.
type schedule struct {
	Cursor, StateVersion, ClaimVersion, ClaimExpires int64
	Owner                                            string
	Claimed                                          bool
}

func readSchedule(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, trigger string) (schedule, error) {
	var s schedule
	err := q.QueryRow(ctx, `SELECT coalesce(next_fire_at_ms, -1), state_version, claim_version,
		coalesce(claim_expires_at_ms, -1), coalesce(claim_owner, ''), claim_token IS NOT NULL
		FROM control_core.trigger_schedules WHERE project_id = 'p' AND trigger_id = $1`, trigger).
		Scan(&s.Cursor, &s.StateVersion, &s.ClaimVersion, &s.ClaimExpires, &s.Owner, &s.Claimed)
	return s, err
}

func (tg *target) schedule(trigger string) schedule {
	tg.t.Helper()
	s, err := readSchedule(context.Background(), tg.su, trigger)
	if err != nil {
		tg.t.Fatalf("read schedule %s: %v", trigger, err)
	}
	return s
}

// runsOf counts the Runs of one occurrence.
func (tg *target) runsOf(trigger string, scheduledFor int64) int64 {
	tg.t.Helper()
	return tg.scalar(`SELECT count(*) FROM control_core.runs WHERE trigger_id = $1 AND scheduled_for_ms = $2`, trigger, scheduledFor)
}

// auditResult is the exactly-once audit of one database.
type auditResult struct {
	Runs, Occurrences, Attempts, Events int64
	Duplicates                          int64 // Runs beyond the first of their occurrence
	Misshapen                           int64 // Runs without exactly 1 Attempt and the 2 Events run.created, run.queued
	ClaimsHeld                          int64 // schedule rows still carrying a claim
	NotPristine                         int64 // Runs or Attempts no longer in the shape admission left
}

func (a auditResult) String() string {
	return fmt.Sprintf("runs=%d occurrences=%d attempts=%d events=%d duplicates=%d misshapen=%d claims_held=%d not_pristine=%d",
		a.Runs, a.Occurrences, a.Attempts, a.Events, a.Duplicates, a.Misshapen, a.ClaimsHeld, a.NotPristine)
}

const auditSQL = `
SELECT (SELECT count(*) FROM control_core.runs),
       (SELECT count(DISTINCT (project_id, trigger_id, scheduled_for_ms)) FROM control_core.runs),
       (SELECT count(*) FROM control_core.attempts),
       (SELECT count(*) FROM control_core.run_events),
       (SELECT count(*) - count(DISTINCT (project_id, trigger_id, scheduled_for_ms)) FROM control_core.runs),
       (SELECT count(*) FROM control_core.runs r
         WHERE (SELECT count(*) FROM control_core.attempts a WHERE a.run_id = r.run_id) <> 1
            OR (SELECT array_agg(e.type ORDER BY e.seq) FROM control_core.run_events e WHERE e.run_id = r.run_id)
               IS DISTINCT FROM ARRAY['run.created', 'run.queued']::text[]),
       (SELECT count(*) FROM control_core.trigger_schedules WHERE claim_token IS NOT NULL OR claim_owner IS NOT NULL),
       (SELECT count(*) FROM control_core.runs r JOIN control_core.attempts a ON a.run_id = r.run_id
         WHERE NOT (r.state = 'queued' AND r.owner = 'runtime' AND r.cancel_requested_at_ms IS NULL
                AND a.attempt_no = 1 AND a.state = 'claimed' AND a.executor_kind = 'remote_worker'
                AND a.worker_id IS NULL AND a.worker_session_id IS NULL AND a.run_lease_id IS NULL
                AND a.offer_id IS NULL AND a.callback_token_hash IS NULL AND a.started_at_ms IS NULL
                AND a.finished_at_ms IS NULL AND a.result IS NULL AND a.error IS NULL
                AND a.updated_at_ms = a.created_at_ms AND r.updated_at_ms = r.created_at_ms))`

func audit(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (auditResult, error) {
	var a auditResult
	err := q.QueryRow(ctx, auditSQL).Scan(&a.Runs, &a.Occurrences, &a.Attempts, &a.Events, &a.Duplicates,
		&a.Misshapen, &a.ClaimsHeld, &a.NotPristine)
	return a, err
}

// requireAudit checks the end state of a gate: wantRuns Runs, each its own occurrence with
// exactly 1 Attempt and 2 Events, all still pristine, and no claim left on any schedule.
func requireAudit(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, wantRuns int64) auditResult {
	t.Helper()
	a, err := audit(context.Background(), q)
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	t.Logf("audit: %s", a)
	want := auditResult{Runs: wantRuns, Occurrences: wantRuns, Attempts: wantRuns, Events: 2 * wantRuns}
	if a != want {
		t.Errorf("audit %s\n want %s", a, want)
	}
	return a
}

// ownCluster is a PostgreSQL cluster a gate starts for itself (not testpg's), prepared like
// testpg's template: the four roles with the test password, the whole migration stream, the
// database grants, project p and task "task".
type ownCluster struct {
	*pgcluster.Cluster
	Database string
	Names    roles.Names
}

func (c *ownCluster) url(role string) string {
	u := c.URL("postgres", c.Database)
	if role == "" {
		return u
	}
	cfg, _ := pgx.ParseConfig(u)
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", role, testpg.Password, cfg.Port, c.Database)
}

func (c *ownCluster) urlOn(server *pgcluster.Cluster, role string) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%s/%s?sslmode=disable", role, testpg.Password, strconv.Itoa(server.Port), c.Database)
}

func startOwnCluster(t *testing.T, opts pgcluster.Options) *ownCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pc, err := pgcluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start a PostgreSQL cluster of the gate's own: %v", err)
	}
	t.Cleanup(func() { _ = pc.Stop() })
	names, _ := roles.NewNames(roles.DefaultPrefix)
	c := &ownCluster{Cluster: pc, Database: "ql", Names: names}
	if err := c.prepare(ctx); err != nil {
		t.Fatalf("prepare database on port %d: %v", pc.Port, err)
	}
	return c
}

func (c *ownCluster) prepare(ctx context.Context) error {
	admin, err := pgx.Connect(ctx, c.URL("postgres", "postgres"))
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+c.Database); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, c.url(""))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	report, err := roles.Create(ctx, conn, c.Names)
	if err != nil {
		return err
	}
	if !report.OK() {
		return fmt.Errorf("roles create: %v", report.Roles)
	}
	for _, role := range c.Names.All() {
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", role, testpg.Password)); err != nil {
			return err
		}
	}
	cfg, err := dbconn.Resolve(c.url(c.Names.Owner))
	if err != nil {
		return err
	}
	r, err := migrate.Open(ctx, cfg, migrate.Options{Names: c.Names, AsOwner: true})
	if err != nil {
		return err
	}
	defer r.Close()
	if _, err := r.Up(ctx, 0); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := roles.GrantDatabase(ctx, tx, c.Names, c.Database); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL ROLE %s; GRANT CONNECT ON DATABASE %s TO %s, %s",
			c.Names.Owner, c.Database, c.Names.Admin, c.Names.Runtime))
		return err
	})
}

// target returns a target on the cluster's database; server is where connections go (the
// cluster itself, or a promoted standby of it).
func (c *ownCluster) target(t *testing.T, server *pgcluster.Cluster, seed bool) *target {
	t.Helper()
	open := func(role string) *dbconn.DB {
		u := c.urlOn(server, role)
		if role == "" {
			u = server.URL("postgres", c.Database)
		}
		cfg, err := dbconn.Resolve(u)
		if err != nil {
			t.Fatal(err)
		}
		pool, err := cfg.Open(context.Background())
		if err != nil {
			t.Fatalf("open %q pool on port %d: %v", role, server.Port, err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	tg := &target{t: t, su: open("").Pool(), admin: admin.NewPublisher(open("ql_admin")),
		config: func(role string) *dbconn.Config {
			cfg, err := dbconn.Resolve(c.urlOn(server, role))
			if err != nil {
				t.Fatal(err)
			}
			return cfg
		}}
	if seed {
		tg.seed()
	}
	return tg
}

// ready is `qlsched run`'s readiness on a replica's pool (connected as ql_runtime).
func ready(ctx context.Context, pool *dbconn.DB) error {
	names, _ := roles.NewNames(roles.DefaultPrefix)
	return verify.Readiness(ctx, pool, names)
}

// claimToFire claims the due row of trigger as owner through store and decides it (skip, the
// claim's grace and observation): the decision must be to fire occurrence occ.
func claimToFire(t *testing.T, store *coordinator.Store, owner, trigger string, occ int64) (*coordinator.Claim, cronschedule.Decision) {
	t.Helper()
	claim, err := store.Claim(context.Background(), owner, 30*time.Second)
	if err != nil || claim == nil || claim.TriggerID != trigger {
		t.Fatalf("claim %s: %+v %v", trigger, claim, err)
	}
	sched, err := cronschedule.ParseSchedule(claim.CronSpec, claim.TimeZone)
	if err != nil {
		t.Fatal(err)
	}
	cursor := *claim.CursorMs
	d := cronschedule.Decide(sched, cronschedule.MisfireSkip, claim.MisfireGraceMs, &cursor, claim.ClaimedAtMs)
	if d.Kind != cronschedule.DecisionFire || d.ScheduledForMs != occ {
		t.Fatalf("decision %+v; want fire for %d", d, occ)
	}
	return claim, d
}
