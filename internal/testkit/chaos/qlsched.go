package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/app/pgcluster"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/roles"
	"github.com/qlcontrol/controlcore/schedule"
)

// Qlsched is qlsched under the soak: a database on a throwaway cluster with the roles, the schema
// and N every-second fire_once triggers, and `qlsched run` processes connected as the runtime
// role.
type Qlsched struct {
	Su         *pgxpool.Pool // superuser, for the audit and for finding claim holders
	RuntimeURL string
	Triggers   []string
	Grace      time.Duration // each trigger's misfire grace

	fence, unique atomic.Int64 // refused duplicate attempts, from the replicas' logs
}

// QlschedRun are the flags of each `qlsched run`: the faults soak's lease and cadence, and
// batches of 16 (one-row admission of 500 every-second triggers on a 2-core machine runs too
// close to the period, docs/performance.md), budget 256; Budget 0 means 256.
type QlschedRun struct {
	Lease, Cadence time.Duration
	Batch, Budget  int
}

func (r QlschedRun) budget() int {
	if r.Budget == 0 {
		return 256
	}
	return r.Budget
}

// Flags are the run's flags as the table shows them.
func (r QlschedRun) Flags() string {
	return fmt.Sprintf("--lease %s --cadence %s --budget %d --admit-batch %d", r.Lease, r.Cadence, r.budget(), r.Batch)
}

// PrepareQlsched creates database on c with roles and schema, publishes n every-second triggers
// (misfire fire_once, the given grace: schedule.MinMisfireGrace, 1 s, ends a gap in one
// catch-up; schedule.DefaultMisfireGrace admits what is at most 60 s late) and returns what the
// soak needs. Close the Su pool when done.
func PrepareQlsched(ctx context.Context, c *pgcluster.Cluster, database string, n int, grace time.Duration) (*Qlsched, error) {
	return prepareQlsched(ctx, c, database, n, grace, admin.TaskSpec{ExecutorSpec: []byte(`{"image":"example/job:1"}`)}, nil)
}

// prepareQlsched is PrepareQlsched with the task's spec (its Project and Task are set here) and
// more to publish, before the triggers (nil for nothing).
func prepareQlsched(ctx context.Context, c *pgcluster.Cluster, database string, n int, grace time.Duration, task admin.TaskSpec,
	more func(*admin.Publisher) error) (*Qlsched, error) {
	su, err := pgx.Connect(ctx, c.URL("postgres", "postgres"))
	if err != nil {
		return nil, err
	}
	_, err = su.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{database}.Sanitize())
	su.Close(ctx)
	if err != nil {
		return nil, fmt.Errorf("create database %s: %w", database, err)
	}
	names, err := roles.NewNames(roles.DefaultPrefix)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres", database))
	if err != nil {
		return nil, err
	}
	_, err = roles.Create(ctx, conn, names)
	conn.Close(ctx)
	if err != nil {
		return nil, fmt.Errorf("roles create: %w", err)
	}
	cfg, err := dbconn.Resolve(c.URL("postgres", database))
	if err != nil {
		return nil, err
	}
	r, err := migrate.Open(ctx, cfg, migrate.Options{Names: names, AsOwner: true})
	if err != nil {
		return nil, err
	}
	_, err = r.Up(ctx, 0)
	r.Close()
	if err != nil {
		return nil, fmt.Errorf("migrate up: %w", err)
	}
	pool, err := pgxpool.New(ctx, c.URL("postgres", database))
	if err != nil {
		return nil, err
	}
	q := &Qlsched{Su: pool, RuntimeURL: c.URL(names.Runtime, database), Grace: grace}
	h, err := cfg.Open(ctx) // the publisher's handle, as the superuser
	if err != nil {
		pool.Close()
		return nil, err
	}
	defer h.Close()
	pub := admin.NewPublisher(h)
	if _, err := pub.CreateProject(ctx, "p"); err != nil {
		pool.Close()
		return nil, err
	}
	task.Project, task.Task = "p", "task"
	if _, err := pub.PublishTask(ctx, task); err != nil {
		pool.Close()
		return nil, err
	}
	if more != nil {
		if err := more(pub); err != nil {
			pool.Close()
			return nil, err
		}
	}
	var specs []admin.TriggerSpec
	for i := range n {
		id := fmt.Sprintf("t%04d", i)
		q.Triggers = append(q.Triggers, id)
		specs = append(specs, admin.TriggerSpec{Project: "p", Trigger: id, Task: "task", Cron: "* * * * * *", TimeZone: "UTC",
			Misfire: schedule.MisfireFireOnce, MisfireGrace: grace, Enabled: true})
	}
	if _, err := pub.PublishTriggers(ctx, specs); err != nil {
		pool.Close()
		return nil, fmt.Errorf("publish %d triggers: %w", n, err)
	}
	return q, nil
}

// Process is a `qlsched run` of the binary bin.
func (q *Qlsched) Process(bin string, run QlschedRun) Process {
	return Process{
		Command: func(owner string) *exec.Cmd {
			cmd := exec.Command(bin, "run", "--owner", owner, "--lease", run.Lease.String(), "--cadence", run.Cadence.String(),
				"--budget", strconv.Itoa(run.budget()), "--admit-batch", strconv.Itoa(run.Batch), "--drain-timeout", "5s",
				"--http-addr", "127.0.0.1:0", "--log-format", "json")
			cmd.Env = append(os.Environ(), "QL_DATABASE_URL="+q.RuntimeURL)
			return cmd
		},
		Ready: func(line []byte) bool { return JSONMsg(line) == "replica running" },
		Observe: func(_ string, line []byte) {
			q.observe(line)
		},
		Holding: func(owner string) []string { return q.Holding(context.Background(), owner) },
	}
}

// observe counts a replica's log line that reports a refused duplicate attempt: a fenced write
// that found its fence changed ("… lost its fence (race)": another replica decided the row since
// the claim, nothing written), or a Run refused by the unique key runs_occurrence_key (SQLSTATE
// 23505, which the fence should make unreachable).
func (q *Qlsched) observe(line []byte) {
	switch l := string(line); {
	case strings.HasSuffix(JSONMsg(line), "lost its fence (race)"):
		q.fence.Add(1)
	case strings.Contains(l, "runs_occurrence_key") || strings.Contains(l, "23505"):
		q.unique.Add(1)
	}
}

// Refused are the duplicate attempts the replicas' logs reported refused: by the fence and by
// the unique key, over the whole soak (warm-up and settle included).
func (q *Qlsched) Refused() (fence, unique int64) { return q.fence.Load(), q.unique.Load() }

// Holding names the triggers whose live claim owner holds now.
func (q *Qlsched) Holding(ctx context.Context, owner string) []string {
	rows, err := q.Su.Query(ctx, `SELECT trigger_id FROM control_core.trigger_schedules
		WHERE claim_owner = $1 AND claim_token IS NOT NULL AND claim_expires_at_ms > control_core.db_now_ms()`, owner)
	if err != nil {
		return nil
	}
	ids, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids
}

// Holder is qlsched's counterpart of a leader: one owner holding a live claim now, "" if none
// (qlsched has no leader; a replica holding claims is the one whose fault strands work).
func (q *Qlsched) Holder(ctx context.Context) string {
	var owner string
	_ = q.Su.QueryRow(ctx, `SELECT claim_owner FROM control_core.trigger_schedules
		WHERE claim_token IS NOT NULL AND claim_expires_at_ms > control_core.db_now_ms() LIMIT 1`).Scan(&owner)
	return owner
}

// Initialised reports whether every trigger has a cursor (a replica has seen each one).
func (q *Qlsched) Initialised(ctx context.Context) (bool, error) {
	var n int64
	err := q.Su.QueryRow(ctx, "SELECT count(*) FROM control_core.trigger_schedules WHERE next_fire_at_ms IS NULL").Scan(&n)
	return n == 0, err
}

// Admissions are the Runs: scheduled_for_ms is the scheduled second itself, queued_at_ms the
// database time of the admitting transaction.
func (q *Qlsched) Admissions(ctx context.Context) ([]Admission, error) {
	rows, err := q.Su.Query(ctx, "SELECT trigger_id, scheduled_for_ms, queued_at_ms FROM control_core.runs")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Admission, error) {
		var a Admission
		err := row.Scan(&a.Key, &a.SecondMs, &a.AdmittedMs)
		return a, err
	})
}
