package dispatch_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
)

// pipelineFx is a store on its own ql_runtime handle (so its pool can be inspected), a worker
// session and one queued Run.
type pipelineFx struct {
	*fx
	h    *dbconn.DB
	c    dispatch.Credential
	s    dispatch.Session
	cand []dispatch.Candidate
	was  string // the Run's state before any offer
}

func newPipelineFx(t *testing.T, h func(f *fx) *dbconn.DB) *pipelineFx {
	f := newFx(t)
	p := &pipelineFx{fx: f}
	if h == nil {
		p.h = f.d.Handle(t, "ql_runtime")
	} else {
		p.h = h(f)
	}
	f.store = dispatch.NewStore(p.h, testConfig)
	p.c = f.token("w")
	p.s = f.session(p.c, 4, nil)
	f.queue("p", 1)
	cands, _, err := f.store.Candidates(bg, dispatch.CandidateQuery{SessionID: p.s.ID, Labels: p.s.Labels, Slots: 1})
	if err != nil || len(cands) != 1 {
		t.Fatalf("candidates %d, %v", len(cands), err)
	}
	p.cand = cands
	p.was = f.state(cands[0].RunID)
	return p
}

// clean asserts that nothing of the failed offer remains: the Run queued with its claimed
// Attempt and no offer or event, the store's pool holding no connection, no ql_runtime backend
// inside a transaction; and that the next offer on the same pool is made and committed.
func (p *pipelineFx) clean(t *testing.T) dispatch.Offer {
	t.Helper()
	run := p.cand[0].RunID
	if got, want := p.state(run), p.was; got != want {
		t.Errorf("after the failed offer: %s, want %s", got, want)
	}
	// A connection the pool destroys (closed, or left in a transaction) counts as acquired until
	// its close ends, in a goroutine of the pool's.
	eventually.True(t, 10*time.Second, "no connection acquired from the store's pool", func() bool {
		return p.h.Pool().Stat().AcquiredConns() == 0
	})
	// The server connection of a client connection the pool closed (and, behind PgBouncer, the
	// pooler's server connection it closes in turn) ends once its close is read.
	eventually.True(t, 10*time.Second, "no ql_runtime backend left inside a transaction", func() bool {
		return p.count(`SELECT count(*) FROM pg_stat_activity WHERE usename = 'ql_runtime'
			AND datname = current_database() AND state LIKE 'idle in transaction%'`) == 0
	})
	for range 3 { // each connection the pool holds is used at least once
		if _, err := p.h.Pool().Exec(bg, "SELECT 1"); err != nil {
			t.Fatalf("a pooled connection after the failed offer: %v", err)
		}
	}
	offers, err := p.store.Offer(bg, p.c, p.s.ID, p.cand)
	if err != nil || len(offers) != 1 {
		t.Fatalf("the next offer: %d offers, %v", len(offers), err)
	}
	if got, want := p.state(run), "dispatching/dispatching/offered/-/3/0"; got != want || p.was != "queued/claimed/-/-/2/0" {
		t.Errorf("after the next offer: %s, want %s (before: %s)", got, want, p.was)
	}
	return offers[0]
}

// An error in the offer's pipeline (in the offer statement, after the setting and the lock,
// before the COMMIT) rolls the whole transaction back, reports the server's error, leaves no
// connection in a transaction and no result unread: the next offer on the pool is made.
func TestOfferPipelineErrorRollsBackWhole(t *testing.T) {
	p := newPipelineFx(t, nil)
	p.exec(`CREATE FUNCTION public.refuse_offer() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused by the test' USING ERRCODE = 'P0001'; END $$`)
	p.exec(`CREATE TRIGGER refuse AFTER INSERT ON control_core.dispatch_offers
		FOR EACH ROW EXECUTE FUNCTION public.refuse_offer()`)
	for range 3 { // more than the pool's warm connections: each failure must leave it usable
		offers, err := p.store.Offer(bg, p.c, p.s.ID, p.cand)
		if err == nil || len(offers) != 0 {
			t.Fatalf("offer through a refusing trigger: %d offers, err %v", len(offers), err)
		}
		if want := "refused by the test"; !containsErr(err, want) {
			t.Fatalf("error %q, want the server's %q", err, want)
		}
	}
	p.exec(`DROP TRIGGER refuse ON control_core.dispatch_offers`)
	p.clean(t)
}

// The session's lock (the middle statement) failing on lock_timeout aborts the pipeline the same
// way: the offer statement after it never runs.
func TestOfferPipelineLockErrorRollsBackWhole(t *testing.T) {
	p := newPipelineFx(t, func(f *fx) *dbconn.DB {
		f.exec(`DO $$ BEGIN EXECUTE format('ALTER ROLE ql_runtime IN DATABASE %I SET lock_timeout = ''50ms''', current_database()); END $$`)
		return f.d.Handle(t, "ql_runtime")
	})
	tx, err := p.su.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(bg, `SELECT 1 FROM control_core.worker_sessions WHERE worker_session_id = $1 FOR UPDATE`, p.s.ID); err != nil {
		t.Fatal(err)
	}
	offers, err := p.store.Offer(bg, p.c, p.s.ID, p.cand)
	if err == nil || len(offers) != 0 || !containsErr(err, "lock timeout") {
		t.Fatalf("offer behind a held session lock: %d offers, err %v; want a lock timeout", len(offers), err)
	}
	if err := tx.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	p.clean(t)
}

// A retryable error in the middle of the pipeline (a serialization failure, once) is retried
// with a new pipeline and the offer is made once.
func TestOfferPipelineRetriesARetryableError(t *testing.T) {
	p := newPipelineFx(t, nil)
	p.exec(`CREATE SEQUENCE public.offer_tries`)
	p.exec(`GRANT USAGE ON SEQUENCE public.offer_tries TO ql_runtime`)
	p.exec(`CREATE FUNCTION public.fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF nextval('public.offer_tries') = 1 THEN
				RAISE EXCEPTION 'serialization failure by the test' USING ERRCODE = '40001';
			END IF;
			RETURN NULL;
		END $$`)
	p.exec(`CREATE TRIGGER fail_once AFTER INSERT ON control_core.dispatch_offers
		FOR EACH ROW EXECUTE FUNCTION public.fail_once()`)
	offers, err := p.store.Offer(bg, p.c, p.s.ID, p.cand)
	if err != nil || len(offers) != 1 {
		t.Fatalf("offer after one serialization failure: %d offers, %v", len(offers), err)
	}
	if n := p.count(`SELECT last_value FROM public.offer_tries`); n != 2 {
		t.Errorf("the offer statement ran %d times, want 2", n)
	}
	if n := p.count(`SELECT count(*) FROM control_core.dispatch_offers`); n != 1 {
		t.Errorf("%d offers stored, want 1", n)
	}
}

// The caller's context ending, or the connection lost, while the pipeline waits for the
// session's lock ends the offer: the transaction is rolled back (for a cancel, once pgx's cancel
// request reaches the server), the connection does not return to the pool mid-transaction.
func TestOfferPipelineCancelledWhileWaiting(t *testing.T) {
	for _, how := range []string{"context cancelled", "backend terminated"} {
		t.Run(how, func(t *testing.T) { offerInterruptedWhileWaiting(t, how) })
	}
}

func offerInterruptedWhileWaiting(t *testing.T, how string) {
	p := newPipelineFx(t, nil)
	tx, err := p.su.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(bg) }()
	if _, err := tx.Exec(bg, `SELECT 1 FROM control_core.worker_sessions WHERE worker_session_id = $1 FOR UPDATE`, p.s.ID); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	type res struct {
		n   int
		err error
	}
	done := make(chan res, 1)
	go func() {
		offers, err := p.store.Offer(ctx, p.c, p.s.ID, p.cand)
		done <- res{len(offers), err}
	}()
	// lockWaits counts the ql_runtime backends waiting for a lock: the offer's
	lockWaits := func() int {
		var n int
		_ = p.su.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity WHERE usename = 'ql_runtime'
			AND datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return n
	}
	eventually.True(t, 10*time.Second, "the offer waits for the session's lock", func() bool { return lockWaits() == 1 })
	if how == "context cancelled" {
		cancel()
	} else {
		defer cancel()
		p.exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'ql_runtime'
			AND datname = current_database() AND wait_event_type = 'Lock'`)
	}
	r := <-done
	if r.err == nil || r.n != 0 {
		t.Fatalf("%s: %d offers, err %v", how, r.n, r.err)
	}
	// pgx returns at the cancel and sends PostgreSQL its cancel request from a goroutine as it
	// closes the connection: the offer's backend stops waiting once that request lands. Released
	// before, the lock would let it run the rest of the pipeline it had read, COMMIT included (a
	// CI run on a loaded machine: the next offer found the Run taken by the cancelled one).
	eventually.True(t, 10*time.Second, "the cancelled offer's backend no longer waiting for the lock", func() bool { return lockWaits() == 0 })
	if err := tx.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "no ql_runtime backend busy after the cancelled offer", func() bool {
		var n int
		_ = p.su.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity WHERE usename = 'ql_runtime'
			AND datname = current_database() AND state <> 'idle'`).Scan(&n)
		return n == 0
	})
	p.clean(t)
}

// Behind PgBouncer in transaction pooling the offer is one transaction too: its setting stays
// the offer's (an ACK on the same server connections commits durably), and a failed pipeline
// leaves no server connection in a transaction for the next client.
func TestOfferPipelineThroughPgBouncer(t *testing.T) {
	p := newPipelineFx(t, func(f *fx) *dbconn.DB {
		f.runtimeCommitsDurably()
		b := f.d.StartPgBouncer(t, "transaction", "default_pool_size = 1")
		cfg, err := dbconn.Resolve(b.URL("ql_runtime"))
		if err != nil {
			t.Fatal(err)
		}
		h, err := cfg.Open(bg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		if !h.Pooled() {
			t.Fatal("the handle through PgBouncer is not in pooled mode")
		}
		return h
	})
	p.recordCommitModes()
	p.exec(`CREATE FUNCTION public.refuse_offer() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused by the test' USING ERRCODE = 'P0001'; END $$`)
	p.exec(`CREATE TRIGGER refuse AFTER INSERT ON control_core.dispatch_offers
		FOR EACH ROW EXECUTE FUNCTION public.refuse_offer()`)
	for range 3 {
		if _, err := p.store.Offer(bg, p.c, p.s.ID, p.cand); !containsErr(err, "refused by the test") {
			t.Fatalf("offer through a refusing trigger behind PgBouncer: err %v", err)
		}
	}
	p.exec(`DROP TRIGGER refuse ON control_core.dispatch_offers`)
	o := p.clean(t)
	if _, err := p.store.Ack(bg, p.c, o.OfferID, p.s.ID, o.CallbackToken); err != nil {
		t.Fatal(err)
	}
	got := p.str(`SELECT coalesce(string_agg(what || '=' || mode, ' ' ORDER BY n), '') FROM public.commit_modes`)
	if want := "offer=off ack=on"; got != want {
		t.Fatalf("synchronous_commit seen = %q, want %q", got, want)
	}
}

func containsErr(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

// sends counts what the driver sends on a pool: statements sent alone (each a round trip) and
// batches (one round trip each once their statements are prepared).
type sends struct {
	mu      sync.Mutex
	queries []string
	batches int
}

func (s *sends) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	s.queries = append(s.queries, d.SQL)
	s.mu.Unlock()
	return ctx
}
func (s *sends) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *sends) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.mu.Lock()
	s.batches++
	s.mu.Unlock()
	return ctx
}
func (s *sends) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (s *sends) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (s *sends) reset() (queries []string, batches int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	queries, batches = s.queries, s.batches
	s.queries, s.batches = nil, 0
	return queries, batches
}

// The offer that makes offers is one batch and nothing else on the wire (the gate of the one
// round trip: statement by statement, BEGIN, the lock, the offer and COMMIT are four queries).
func TestOfferIsOneBatch(t *testing.T) {
	tr := &sends{}
	p := newPipelineFx(t, func(f *fx) *dbconn.DB {
		cfg := f.d.Config(t, "ql_runtime")
		cfg.Pool.ConnConfig.Tracer = tr
		h, err := cfg.Open(bg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		return h
	})
	tr.reset()
	offers, err := p.store.Offer(bg, p.c, p.s.ID, p.cand)
	if err != nil || len(offers) != 1 {
		t.Fatalf("offer: %d, %v", len(offers), err)
	}
	if q, b := tr.reset(); len(q) != 0 || b != 1 {
		for i := range q {
			q[i], _, _ = strings.Cut(q[i], "\n")
		}
		t.Fatalf("the offer sent %d statements alone (%q) and %d batches, want 0 and 1", len(q), q, b)
	}
}
