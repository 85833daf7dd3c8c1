package console_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/app/console"
	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/roles"
	"github.com/qlcontrol/controlcore/schedule"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// secret is in an executor spec of the seeded database: no page may show it.
const secret = "s3cret-token-4711"

// seeded is a database with what every page shows, and the console serving it as the admin role.
type seeded struct {
	d   *testpg.DB
	srv *httptest.Server
}

// seed publishes two projects as the admin role: billing (active) with nightly (Europe/Berlin,
// fire_once, three revisions: the cron changed, then the misfire grace), hourly (claimed by replica-a, 30 Runs admitted in
// the last hour with 250 ms lag) and off (disabled); ops (paused) with one trigger, sweep.
func seed(t *testing.T) *seeded {
	t.Helper()
	ctx := context.Background()
	d := testpg.New(t)
	pub := admin.NewPublisher(d.Handle(t, "ql_admin"))
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"billing", "ops"} {
		must(pub.CreateProject(ctx, p))
		must(pub.PublishTask(ctx, admin.TaskSpec{Project: p, Task: "job",
			ExecutorSpec: []byte(`{"image":"example/job:1","env":{"TOKEN":"` + secret + `"}}`)}))
	}
	trig := func(project, trigger, cron, zone string, misfire schedule.MisfirePolicy, enabled bool) admin.TriggerSpec {
		return admin.TriggerSpec{Project: project, Trigger: trigger, Task: "job", Cron: cron, TimeZone: zone, Misfire: misfire, Enabled: enabled}
	}
	must(pub.PublishTrigger(ctx, trig("billing", "nightly", "0 3 * * *", "Europe/Berlin", schedule.MisfireFireOnce, true)))
	must(pub.PublishTrigger(ctx, trig("billing", "nightly", "30 3 * * *", "Europe/Berlin", schedule.MisfireFireOnce, true)))
	graced := trig("billing", "nightly", "30 3 * * *", "Europe/Berlin", schedule.MisfireFireOnce, true)
	graced.MisfireGrace = 15 * time.Minute // a third revision that changes the grace only
	must(pub.PublishTrigger(ctx, graced))
	must(pub.PublishTrigger(ctx, trig("billing", "hourly", "0 * * * *", "UTC", schedule.MisfireSkip, true)))
	must(pub.PublishTrigger(ctx, trig("billing", "off", "*/5 * * * *", "UTC", schedule.MisfireSkip, false)))
	must(pub.PublishTrigger(ctx, trig("ops", "sweep", "15 * * * *", "America/New_York", schedule.MisfireSkip, true)))
	must(pub.PauseProject(ctx, "ops"))
	// a replica's claim on hourly, and 30 admissions of it in the last hour, one a minute
	d.Exec(t, `UPDATE control_core.trigger_schedules SET next_fire_at_ms = control_core.db_now_ms() - 1000, claim_owner = 'replica-a',
		claim_token = gen_random_uuid(), claim_version = claim_version + 1, updated_at_ms = control_core.db_now_ms(),
		claim_expires_at_ms = control_core.db_now_ms() + 600000,
		missed_total = 7, last_missed_for_ms = 1704085200000 -- seven occurrences passed over, the last 2024-01-01T05:00Z
		WHERE project_id = 'billing' AND trigger_id = 'hourly'`)
	insertRuns(t, d, 30, 60000)
	return &seeded{d: d, srv: serve(t, d.Handle(t, "ql_admin"))}
}

// insertRuns inserts n Runs of billing/hourly as a replica admits them, one every step ms back
// from now, each queued 250 ms after its scheduled time.
func insertRuns(t *testing.T, d *testpg.DB, n, step int) {
	t.Helper()
	d.Exec(t, `
		INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
		        trigger_revision, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
		SELECT gen_random_uuid(), 'billing', 'job', 1, kr.execution_revision_id, 'hourly', 1, x.at - 250,
		       control_core.cron_idempotency_key('hourly', 1, x.at - 250),
		       CASE WHEN g % 10 = 0 THEN 'failed' ELSE 'succeeded' END, 'runtime', x.at, x.at, x.at
		FROM generate_series(1, $1::integer) g
		CROSS JOIN LATERAL (SELECT control_core.db_now_ms() - g * $2::bigint AS at) x
		JOIN control_core.task_revisions kr ON kr.project_id = 'billing' AND kr.task_id = 'job' AND kr.revision = 1`, n, step)
}

// serve starts the console on a loopback port over pool, as `qlsched ui` wires it.
func serve(t testing.TB, pool *dbconn.DB) *httptest.Server {
	t.Helper()
	names, err := roles.NewNames(roles.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	h, err := console.Handler(console.Options{
		Reader: admin.NewReader(pool),
		Log:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Health: func(ctx context.Context) (*verify.Report, error) {
			return verify.Run(ctx, pool, verify.Options{Names: names, Scope: verify.ScopeProbe})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// hostileTail is the output tail of the loop's failed Attempt: markup the Run page must escape.
const hostileTail = "building…\n<script>alert(\"tail\")</script>\nexit 3\n"

// loop is what seedLoop leaves: billing's worker sessions and Runs at each stage of the loop.
type loop struct {
	failed, leased, queued uuid.UUID // the Runs: failed (exit 3), leased to w-busy, queued
	token, tokenHash       string    // the worker token and its hash: no page may show them
	callbackToken          string    // the leased Attempt's callback token: nor this
	busy, draining         dispatch.Session
}

// seedLoop drives billing's dispatch loop through the dispatcher's store (as ql_runtime): a
// worker token "fleet", a session w-busy (capacity 3) that takes one Run to failure (exit 3,
// hostileTail) and holds the lease of a second, a session w-drain that drains, and a third Run
// left queued.
func seedLoop(t *testing.T, s *seeded) loop {
	t.Helper()
	ctx := context.Background()
	tok, err := admin.NewPublisher(s.d.Handle(t, "ql_admin")).CreateWorkerToken(ctx, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	cred := dispatch.CredentialFor(tok.Token)
	store := dispatch.NewStore(s.d.Handle(t, "ql_runtime"), dispatch.Config{OfferTTL: time.Minute, LeaseTTL: time.Minute})
	l := loop{token: tok.Token, tokenHash: cred.TokenHash}
	register := func(name string, capacity int) dispatch.Session {
		x, err := store.Register(ctx, cred, dispatch.Registration{Name: name, Capacity: capacity, Protocol: 1,
			Labels: map[string]string{"pool": "batch"}})
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	queue := func() uuid.UUID {
		id := uuid.New()
		s.d.Exec(t, `
			INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id,
			        idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
			SELECT $1::uuid, 'billing', 'job', 1, kr.execution_revision_id, 'manual:' || $1::text, 'queued', 'runtime',
			       control_core.db_now_ms(), control_core.db_now_ms(), control_core.db_now_ms()
			FROM control_core.task_revisions kr WHERE kr.project_id = 'billing' AND kr.task_id = 'job' AND kr.revision = 1`, id)
		s.d.Exec(t, `INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, created_at_ms, updated_at_ms)
			VALUES (gen_random_uuid(), $1::uuid, 1, 'remote_worker', 'claimed', control_core.db_now_ms(), control_core.db_now_ms())`, id)
		s.d.Exec(t, `INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms, detail)
			VALUES (gen_random_uuid(), $1::uuid, 1, 'run.created', control_core.db_now_ms(), '{}')`, id)
		return id
	}
	take := func(x dispatch.Session) (dispatch.Offer, dispatch.Lease) {
		cands, _, err := store.Candidates(ctx, dispatch.CandidateQuery{SessionID: x.ID, Labels: x.Labels, Slots: 1})
		if err != nil {
			t.Fatal(err)
		}
		offers, err := store.Offer(ctx, cred, x.ID, cands)
		if err != nil || len(offers) != 1 {
			t.Fatalf("placement for %s: %d offers, %v; want 1", x.WorkerID, len(offers), err)
		}
		lease, err := store.Ack(ctx, cred, offers[0].OfferID, x.ID, offers[0].CallbackToken)
		if err != nil {
			t.Fatal(err)
		}
		return offers[0], lease
	}
	l.busy = register("w-busy", 3)
	l.failed = queue()
	o, lease := take(l.busy)
	exit3 := 3
	if c, err := store.Complete(ctx, cred, o.AttemptID, dispatch.Report{SessionID: l.busy.ID, CallbackToken: o.CallbackToken,
		LeaseVersion: lease.LeaseVersion, Outcome: dispatch.OutcomeFailed, ExitCode: &exit3, ErrorKind: "exit_status",
		ErrorMessage: "exit status 3", OutputTail: hostileTail, DurationMs: 1234}); err != nil || c.RunState != "failed" {
		t.Fatalf("complete: %+v, %v; want the Run failed", c, err)
	}
	l.leased = queue()
	o, _ = take(l.busy)
	l.callbackToken = o.CallbackToken
	l.draining = register("w-drain", 2)
	if _, err := store.Drain(ctx, cred, l.draining.ID); err != nil {
		t.Fatal(err)
	}
	l.queued = queue()
	return l
}
