package dbconn_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// Every way the handle offers to run statements gets the connection's bounds: behind a pooler
// (no startup parameters reach the server session) each runs the prologue first, so inside it
// statement_timeout and search_path are this connection's, not the server session's; on a direct
// connection there is no prologue and the session got them at startup. A way to begin that
// forgot the prologue reads the server's defaults (0, "$user", public) here.
func TestEveryWayToBeginRunsThePrologue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.New(t)
	for _, pooled := range []bool{false, true} {
		cfg := d.Config(t, "ql_runtime")
		to := cfg.Timeouts()
		to.Statement = 7 * time.Second
		cfg.SetTimeouts(to)
		if pooled {
			cfg.SetPooled() // as ql_pooler=transaction: the bounds are not sent at startup
		}
		h, err := cfg.Open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		conn, err := cfg.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(ctx) })
		if h.Pooled() != pooled || (len(h.Prologue()) > 0) != pooled {
			t.Fatalf("pooled %v: handle pooled %v, prologue %q", pooled, h.Pooled(), h.Prologue())
		}
		const read = "SELECT current_setting('statement_timeout') || ' ' || current_setting('search_path')"
		const want = "7s pg_catalog"
		inTx := func(tx pgx.Tx) (got string, err error) { return got, tx.QueryRow(ctx, read).Scan(&got) }
		ways := map[string]func() (string, error){
			"Begin": func() (string, error) {
				tx, err := h.Begin(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
				if err != nil {
					return "", err
				}
				defer tx.Rollback(ctx) //nolint:errcheck // read-only
				return inTx(tx)
			},
			"InTx": func() (got string, err error) {
				return got, h.InTx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) (err error) { got, err = inTx(tx); return err })
			},
			"pgx.BeginTxFunc": func() (got string, err error) {
				return got, pgx.BeginTxFunc(ctx, h, pgx.TxOptions{}, func(tx pgx.Tx) (err error) { got, err = inTx(tx); return err })
			},
			"Run": func() (got string, err error) {
				return got, h.Run(ctx, func(q dbconn.Querier) error { return q.QueryRow(ctx, read).Scan(&got) })
			},
			"Pipeline implicit": func() (got string, err error) {
				return pipelined(ctx, h, "", read)
			},
			"Pipeline explicit": func() (got string, err error) {
				return pipelined(ctx, h, "BEGIN ISOLATION LEVEL SERIALIZABLE", read)
			},
			"Conn.BeginTx": func() (got string, err error) {
				return got, pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{}, func(tx pgx.Tx) (err error) { got, err = inTx(tx); return err })
			},
		}
		for name, way := range ways {
			if got, err := way(); err != nil || got != want {
				t.Errorf("pooled %v, %s: read %q (%v); want %q", pooled, name, got, err, want)
			}
		}
	}
}

func pipelined(ctx context.Context, h *dbconn.DB, begin, read string) (got string, err error) {
	b := &pgx.Batch{}
	b.Queue(read)
	r := h.Pipeline(ctx, begin, b)
	err = r.QueryRow().Scan(&got)
	if cerr := r.Commit(); err == nil {
		err = cerr
	}
	return got, err
}

// PipelineThen sends two transactions in one round trip: the first explicit, the second the
// implicit one after its COMMIT, each with the prologue. They commit apart (two transaction ids,
// each committed, the second reading the connection's bounds), a failing first leaves the second
// unrun (the server skips to the Sync: a sequence it would advance stays untouched), and a
// failing second leaves the first committed. Directly and through a transaction pooler with one
// server session, whose hand-over at each transaction's end would break a pipeline PgBouncer
// cut in two.
func TestPipelineThenRunsTwoTransactionsInOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.New(t)
	d.Exec(t, `CREATE SEQUENCE public.pipeline_then_seq; GRANT USAGE, SELECT ON SEQUENCE public.pipeline_then_seq TO ql_runtime`)
	for _, pooled := range []bool{false, true} {
		cfg := d.Config(t, "ql_runtime")
		if pooled {
			u := d.StartPgBouncer(t, "transaction", "default_pool_size = 1").URL("ql_runtime")
			var err error
			if cfg, err = dbconn.Resolve(u); err != nil {
				t.Fatal(err)
			}
		}
		h, err := cfg.Open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		if h.Pooled() != pooled {
			t.Fatalf("pooled %v: handle pooled %v", pooled, h.Pooled())
		}
		batch := func(sql string) *pgx.Batch { b := &pgx.Batch{}; b.Queue(sql); return b }
		status := func(xid int64) (s string) {
			if err := h.Pool().QueryRow(ctx, "SELECT txid_status($1)", xid).Scan(&s); err != nil {
				t.Fatal(err)
			}
			return s
		}
		const xid = "SELECT txid_current()"
		const bound = "SELECT current_setting('search_path')"
		const advance = "SELECT nextval('public.pipeline_then_seq')::text"

		first, second := h.PipelineThen(ctx, "BEGIN ISOLATION LEVEL SERIALIZABLE", batch(xid), batch(xid+", "+bound[7:]))
		var x1, x2 int64
		var path string
		err1 := first.QueryRow().Scan(&x1)
		if cerr := first.Commit(); err1 == nil {
			err1 = cerr
		}
		err2 := second.QueryRow().Scan(&x2, &path)
		if cerr := second.Commit(); err2 == nil {
			err2 = cerr
		}
		if err1 != nil || err2 != nil || x1 == x2 || status(x1) != "committed" || status(x2) != "committed" || path != "pg_catalog" {
			t.Errorf("pooled %v, both: xids %d (%v) and %d (%v), %s and %s, search_path %q; want two committed transactions with the bounds",
				pooled, x1, err1, x2, err2, status(x1), status(x2), path)
		}

		first, second = h.PipelineThen(ctx, "BEGIN", batch("SELECT 1/0"), batch(advance))
		_, err1 = first.Exec()
		if cerr := first.Commit(); err1 == nil {
			err1 = cerr
		}
		_, err2 = second.Exec()
		if cerr := second.Commit(); err2 == nil {
			err2 = cerr
		}
		var called bool
		if err := h.Pool().QueryRow(ctx, "SELECT is_called FROM public.pipeline_then_seq").Scan(&called); err != nil {
			t.Fatal(err)
		}
		if err1 == nil || err2 == nil || called {
			t.Errorf("pooled %v, the first failing: %v, then %v, sequence advanced %v; want both errors and the second unrun", pooled, err1, err2, called)
		}

		first, second = h.PipelineThen(ctx, "BEGIN", batch(xid), batch("SELECT 1/0"))
		err1 = first.QueryRow().Scan(&x1)
		if cerr := first.Commit(); err1 == nil {
			err1 = cerr
		}
		_, err2 = second.Exec()
		if cerr := second.Commit(); err2 == nil {
			err2 = cerr
		}
		if err1 != nil || err2 == nil || status(x1) != "committed" {
			t.Errorf("pooled %v, the second failing: first %v (%s), second %v; want the first committed, the second's error", pooled, err1, status(x1), err2)
		}
	}
}
