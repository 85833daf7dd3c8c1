package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/testkit/loopaudit"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// fx is one test database: the publisher as ql_admin (projects and tasks), the store on a
// ql_runtime handle (what the dispatcher connects as) and a superuser pool for arranging and
// asserting. The loop audit runs when the test ends.
type fx struct {
	t     testing.TB
	d     *testpg.DB
	su    *pgxpool.Pool
	pub   *admin.Publisher
	store *dispatch.Store
}

// testConfig has long TTLs: tests that need an expiry move the row's expiry into the past
// (database time is the judge, so arranging it is exact) or set short TTLs themselves.
var testConfig = dispatch.Config{OfferTTL: time.Minute, LeaseTTL: time.Minute}

func newFx(t testing.TB, cfg ...dispatch.Config) *fx {
	t.Helper()
	d := testpg.New(t)
	c := testConfig
	if len(cfg) > 0 {
		c = cfg[0]
	}
	f := &fx{t: t, d: d, su: d.Pool(t, ""), pub: admin.NewPublisher(d.Handle(t, "ql_admin")),
		store: dispatch.NewStore(d.Handle(t, "ql_runtime"), c)}
	t.Cleanup(func() { loopaudit.Assert(t, f.su) })
	f.project("p")
	return f
}

// project creates a project with one task "task".
func (f *fx) project(id string) {
	f.t.Helper()
	ctx := context.Background()
	if _, err := f.pub.CreateProject(ctx, id); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.pub.PublishTask(ctx, admin.TaskSpec{Project: id, Task: "task",
		ExecutorSpec: []byte(`{"image":"example/job:1","args":["--once"]}`)}); err != nil {
		f.t.Fatal(err)
	}
}

// policy sets the head revision's retry policy and selector with its 7-argument digest, as the
// publisher of pg-0022 writes them (arranged as superuser: revisions are immutable otherwise).
func (f *fx) policy(project string, maxAttempts int, backoffMs int64, selector string) {
	f.t.Helper()
	err := pgx.BeginFunc(context.Background(), f.su, func(tx pgx.Tx) error {
		if _, err := tx.Exec(context.Background(), "SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		_, err := tx.Exec(context.Background(), `
			UPDATE control_core.task_revisions kr SET max_attempts = $2, retry_backoff_ms = $3, worker_selector = $4::jsonb,
			       content_digest = control_core.task_digest(kr.task_id, kr.revision, er.execution_revision_id, er.digest,
			                                                 $2::integer, $3::bigint, $4::jsonb)
			FROM control_core.execution_revisions er
			WHERE er.execution_revision_id = kr.execution_revision_id AND kr.project_id = $1`,
			project, maxAttempts, backoffMs, selector)
		return err
	})
	if err != nil {
		f.t.Fatalf("set the retry policy of %s: %v", project, err)
	}
}

// queue admits n queued Runs of project's task (each with its claimed Attempt 1 and the events
// run.created, run.queued), oldest first, all ready; it returns their ids in ready order.
func (f *fx) queue(project string, n int) []uuid.UUID {
	f.t.Helper()
	rows, err := f.su.Query(context.Background(), `
		WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
		kr AS (SELECT kr.project_id, kr.task_id, kr.revision, kr.execution_revision_id
		       FROM control_core.tasks t JOIN control_core.task_revisions kr
		         ON kr.project_id = t.project_id AND kr.task_id = t.task_id AND kr.revision = t.head_revision
		       WHERE t.project_id = $1 AND t.task_id = 'task'),
		g AS (SELECT gen_random_uuid() AS run_id, i FROM generate_series(1, $2::int) i),
		r AS (INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id,
		              idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
		      SELECT g.run_id, kr.project_id, kr.task_id, kr.revision, kr.execution_revision_id, 'test:' || g.run_id,
		             'queued', 'runtime', obs.now_ms - 100000 + g.i, obs.now_ms, obs.now_ms
		      FROM g, kr, obs RETURNING run_id),
		a AS (INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, created_at_ms, updated_at_ms)
		      SELECT gen_random_uuid(), r.run_id, 1, 'remote_worker', 'claimed', obs.now_ms, obs.now_ms FROM r, obs),
		e AS (INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms)
		      SELECT gen_random_uuid(), r.run_id, x.seq, x.type, obs.now_ms
		      FROM r, obs, (VALUES (1, 'run.created'), (2, 'run.queued')) x (seq, type))
		SELECT g.run_id FROM g JOIN r ON r.run_id = g.run_id ORDER BY g.i`, project, n)
	if err != nil {
		f.t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil || len(ids) != n {
		f.t.Fatalf("queue %d runs of %s: %v (%d)", n, project, err, len(ids))
	}
	return ids
}

// token creates a live worker token and returns its credential.
func (f *fx) token(name string) dispatch.Credential {
	f.t.Helper()
	tok, hash, err := dispatch.NewWorkerToken()
	if err != nil {
		f.t.Fatal(err)
	}
	f.exec(`INSERT INTO control_core.worker_tokens (worker_token_id, name, token_hash, created_at_ms)
		VALUES (gen_random_uuid(), $1, $2, control_core.db_now_ms())`, name, hash)
	return dispatch.CredentialFor(tok)
}

func (f *fx) revoke(c dispatch.Credential) {
	f.t.Helper()
	f.exec(`UPDATE control_core.worker_tokens SET revoked_at_ms = control_core.db_now_ms() WHERE token_hash = $1`, c.TokenHash)
}

// session registers a session of capacity with labels.
func (f *fx) session(c dispatch.Credential, capacity int, labels map[string]string) dispatch.Session {
	f.t.Helper()
	s, err := f.store.Register(context.Background(), c, dispatch.Registration{Name: "w1", Capacity: capacity, Labels: labels, Protocol: 1})
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// place reads candidates for the session and offers them (one placement pass of the placer).
func (f *fx) place(c dispatch.Credential, s dispatch.Session, slots int) []dispatch.Offer {
	f.t.Helper()
	ctx := context.Background()
	cands, _, err := f.store.Candidates(ctx, dispatch.CandidateQuery{SessionID: s.ID, Labels: s.Labels, Slots: slots})
	if err != nil {
		f.t.Fatal(err)
	}
	offers, err := f.store.Offer(ctx, c, s.ID, cands)
	if err != nil {
		f.t.Fatal(err)
	}
	return offers
}

// running places one Run for a fresh session and ACKs it.
func (f *fx) running(c dispatch.Credential) (dispatch.Session, dispatch.Offer, dispatch.Lease) {
	f.t.Helper()
	s := f.session(c, 1, nil)
	offers := f.place(c, s, 1)
	if len(offers) != 1 {
		f.t.Fatalf("placed %d offers, want 1", len(offers))
	}
	l, err := f.store.Ack(context.Background(), c, offers[0].OfferID, s.ID, offers[0].CallbackToken)
	if err != nil {
		f.t.Fatal(err)
	}
	return s, offers[0], l
}

func (f *fx) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.su.Exec(context.Background(), sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

func (f *fx) str(sql string, args ...any) string {
	f.t.Helper()
	var s string
	if err := f.su.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func (f *fx) count(sql string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.su.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// state is "run/attempt/offer/lease" of a Run's newest Attempt ("-" for none): one string to
// compare before and after a refused transition.
func (f *fx) state(run uuid.UUID) string {
	return f.str(`SELECT r.state || '/' || a.state || '/' || coalesce(o.state, '-') || '/' || coalesce(l.state, '-')
		|| '/' || (SELECT count(*) FROM control_core.run_events e WHERE e.run_id = r.run_id)
		|| '/' || (SELECT count(*) FROM control_core.run_leases x WHERE x.run_id = r.run_id)
		FROM control_core.runs r
		JOIN LATERAL (SELECT * FROM control_core.attempts a WHERE a.run_id = r.run_id ORDER BY attempt_no DESC LIMIT 1) a ON true
		LEFT JOIN LATERAL (SELECT o.state FROM control_core.dispatch_offers o WHERE o.attempt_id = a.attempt_id
		                   ORDER BY o.offered_at_ms DESC LIMIT 1) o ON true
		LEFT JOIN control_core.run_leases l ON l.run_lease_id = a.run_lease_id
		WHERE r.run_id = $1`, run)
}

// events is a Run's event types and reasons in order.
func (f *fx) events(run uuid.UUID) string {
	return f.str(`SELECT string_agg(type || coalesce(':' || (detail ->> 'reason'), ''), ' ' ORDER BY seq)
		FROM control_core.run_events WHERE run_id = $1`, run)
}

// expireOffer puts an offer's expiry one ms of database time in the past.
func (f *fx) expireOffer(offer uuid.UUID) {
	f.exec(`UPDATE control_core.dispatch_offers SET offered_at_ms = offered_at_ms - 60000,
		expires_at_ms = control_core.db_now_ms() - 1 WHERE offer_id = $1`, offer)
}

// expireLease puts an Attempt's lease expiry one ms of database time in the past.
func (f *fx) expireLease(attempt uuid.UUID) {
	f.exec(`UPDATE control_core.run_leases SET granted_at_ms = granted_at_ms - 60000,
		expires_at_ms = control_core.db_now_ms() - 1 WHERE attempt_id = $1 AND state = 'active'`, attempt)
}

func (f *fx) expireSession(s uuid.UUID) {
	f.exec(`UPDATE control_core.worker_sessions SET heartbeat_at_ms = heartbeat_at_ms - 60000, created_at_ms = created_at_ms - 60000,
		expires_at_ms = control_core.db_now_ms() - 1 WHERE worker_session_id = $1`, s)
}

// cancel cancels a Run as control_core.cancel_run does (K).
func (f *fx) cancel(run uuid.UUID) {
	f.t.Helper()
	f.exec(`SELECT * FROM control_core.cancel_run($1, 'test')`, run)
}
