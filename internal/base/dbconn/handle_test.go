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
