package replica_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// Behind PgBouncer in transaction pooling the statement timeout is not a startup parameter, yet
// it bounds every statement of a replica's transactions: both shapes the replica uses, an
// explicit transaction (dbconn.DB.Begin: recovery, readiness, the admin package) and a pipeline
// committed at its Sync with the prologue queued first (dbconn.DB.Pipeline: the store's claim), cancel a statement
// that outlives it; and nothing leaks into the server session, which the next client of the
// pool gets.
func TestStatementTimeoutHoldsPerTransactionThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.New(t)
	b := d.StartPgBouncer(t, "transaction", "default_pool_size = 1") // one server session: a leak would show
	cfg, err := dbconn.Resolve(b.URL("ql_runtime"))
	if err != nil {
		t.Fatal(err)
	}
	timeouts := cfg.Timeouts()
	timeouts.Statement = 200 * time.Millisecond
	cfg.SetTimeouts(timeouts)
	pool, err := cfg.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if !pool.Pooled() || len(pool.Prologue()) == 0 {
		t.Fatalf("PgBouncer not detected: pooled %v, prologue %q", pool.Pooled(), pool.Prologue())
	}
	canceled := func(what string, err error) {
		t.Helper()
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.QueryCanceled {
			t.Errorf("%s: pg_sleep(2) ended with %v; want the statement timeout (SQLSTATE 57014)", what, err)
		}
	}
	err = pool.InTx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT pg_sleep(2)")
		return err
	})
	canceled("explicit transaction", err)

	batch := &pgx.Batch{}
	batch.Queue("SELECT pg_sleep(2)")
	br := pool.Pipeline(ctx, "", batch)
	_, err = br.Exec()
	canceled("pipeline", err)
	_ = br.Commit()

	var setting string
	if err := pool.Pool().QueryRow(ctx, "SELECT current_setting('statement_timeout')").Scan(&setting); err != nil || setting != "0" {
		t.Errorf("statement_timeout outside a transaction %q (%v); want the server's 0: the bound must stay transaction-local", setting, err)
	}
}
