package dbconn

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is an open pool and what its transactions must run first: the one database handle the
// packages above take. Its prologue (the transaction-local bounds, see Pooled) is fixed when Open
// returns, after Open decided whether a pooler stands in between, so no caller reads settings by
// hand and none can read them too early.
type DB struct {
	pool     *pgxpool.Pool
	prologue []string // statements every transaction runs first; nil on a direct connection
	pooled   bool
	session  bool // ql_pooler=session: the driver's named prepared statements stay
	timeouts Timeouts
	target   string // Config.Describe
}

// Querier runs statements: a *pgxpool.Pool, a pgx.Tx, a *pgx.Conn. It is the generated code's
// db.DBTX.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

func newDB(c *Config, pool *pgxpool.Pool) *DB {
	return &DB{pool: pool, prologue: c.localSettings(), pooled: c.pooled, session: c.session, timeouts: c.timeouts, target: c.Describe()}
}

// Begin begins a transaction with opts and runs the prologue in it first: the one way to begin a
// transaction on a DB, so that behind a transaction pooler each transaction gets the bounds a
// direct session got at startup. On a direct connection it is pool.BeginTx and nothing more.
func (d *DB) Begin(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	return begin(ctx, d.pool, opts, d.prologue)
}

func begin(ctx context.Context, b interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}, opts pgx.TxOptions, prologue []string) (pgx.Tx, error) {
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	for _, s := range prologue {
		if _, err := tx.Exec(ctx, s); err != nil {
			_ = tx.Rollback(ctx)
			return nil, fmt.Errorf("transaction-local settings: %w", err)
		}
	}
	return tx, nil
}

// BeginTx is Begin: with it a DB is what pgx.BeginTxFunc and readers that begin their own
// transactions (readiness, the role audit) take.
func (d *DB) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	return d.Begin(ctx, opts)
}

// InTx is Begin, then fn, then COMMIT (ROLLBACK when fn or the commit fails), like
// pgx.BeginTxFunc.
func (d *DB) InTx(ctx context.Context, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, d, opts, fn)
}

// Run runs fn's statements with the connection's bounds: on a direct connection on the pool,
// each statement alone as it is; behind a pooler in one transaction begun by Begin (BEGIN, the
// prologue, the statements, COMMIT), so that no statement runs without them.
func (d *DB) Run(ctx context.Context, fn func(Querier) error) error {
	if len(d.prologue) == 0 {
		return fn(d.pool)
	}
	return d.InTx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error { return fn(tx) })
}

// Pipeline sends b as ONE round trip in one transaction that starts with the prologue: begin (a
// BEGIN statement; "" for PostgreSQL's implicit transaction of the pipeline, committed at its
// Sync), the prologue, b's statements, and COMMIT when begin is not "". The results are b's own:
// the BEGIN and the prologue are read first, their error reported as that of b's first
// statement; read them, then call Commit, which reads the COMMIT and the Sync and says whether
// the transaction committed (nothing read counts unless it returned nil).
//
// The prologue is one SELECT of set_config(…, true), which acts in whatever transaction it runs
// in, the implicit one included (SET LOCAL would draw "SET LOCAL can only be used in transaction
// blocks"). When a statement fails the server skips the rest, COMMIT included: the implicit
// transaction rolls back at the Sync, an explicit one leaves the connection in a failed
// transaction, which the pool discards.
func (d *DB) Pipeline(ctx context.Context, begin string, b *pgx.Batch) *PipelineResults {
	wire := &pgx.Batch{}
	first := d.queueTx(wire, begin, b)
	first.br = d.pool.SendBatch(ctx, wire)
	return first
}

// PipelineThen is Pipeline followed, in the same round trip, by then: a second transaction,
// PostgreSQL's implicit one after the first's COMMIT (begin must not be ""), which runs the
// prologue first as well and commits at the Sync. Read first's results and Commit it, then
// second's, whose Commit reads the Sync and says whether then committed. When the first fails,
// the server skips the rest up to the Sync: then did not run, and second's results and Commit
// return the first's error.
func (d *DB) PipelineThen(ctx context.Context, begin string, b, then *pgx.Batch) (first, second *PipelineResults) {
	if begin == "" {
		panic("dbconn: PipelineThen needs an explicit first transaction")
	}
	wire := &pgx.Batch{}
	first = d.queueTx(wire, begin, b)
	second = d.queueTx(wire, "", then)
	first.br = d.pool.SendBatch(ctx, wire)
	first.then, second.br = second, first.br
	return first, second
}

// queueTx queues one transaction of a pipeline on wire: begin (if any), the prologue, b's
// statements, and COMMIT when begin is not "".
func (d *DB) queueTx(wire *pgx.Batch, begin string, b *pgx.Batch) *PipelineResults {
	if begin != "" {
		wire.Queue(begin)
	}
	for _, s := range d.prologue {
		wire.Queue(s)
	}
	wire.QueuedQueries = append(wire.QueuedQueries, b.QueuedQueries...)
	if begin != "" {
		wire.Queue("COMMIT")
	}
	skip := len(d.prologue)
	if begin != "" {
		skip++
	}
	return &PipelineResults{skip: skip, explicit: begin != ""}
}

// PipelineResults are the results of a Pipeline's own statements, in order.
type PipelineResults struct {
	br        pgx.BatchResults
	skip      int              // the BEGIN and the prologue, read before the first own result
	explicit  bool             // a COMMIT follows the own statements
	then      *PipelineResults // the transaction that follows in the same round trip (PipelineThen), which reads the Sync
	begun     bool
	committed bool
	err       error
}

func (r *PipelineResults) begin() error {
	if !r.begun {
		r.begun = true
		for i := 0; i < r.skip && r.err == nil; i++ {
			if _, err := r.br.Exec(); err != nil {
				r.err = fmt.Errorf("transaction start: %w", err)
			}
		}
	}
	return r.err
}

// Exec reads the next statement's result as a command tag.
func (r *PipelineResults) Exec() (pgconn.CommandTag, error) {
	if err := r.begin(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return r.br.Exec()
}

// QueryRow reads the next statement's one row.
func (r *PipelineResults) QueryRow() pgx.Row {
	if err := r.begin(); err != nil {
		return errRow{err}
	}
	return r.br.QueryRow()
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// Query reads the next statement's rows.
func (r *PipelineResults) Query() (pgx.Rows, error) {
	if err := r.begin(); err != nil {
		return nil, err
	}
	return r.br.Query()
}

// Commit reads the COMMIT, if any (unless the transaction already failed), and closes the
// pipeline (the Sync: the implicit transaction's commit). It returns the first error of the
// pipeline; nil means the transaction committed. Idempotent.
func (r *PipelineResults) Commit() error {
	if r.committed {
		return r.err
	}
	r.committed = true
	if r.begin() == nil && r.explicit {
		if _, err := r.br.Exec(); err != nil {
			r.err = err
		}
	}
	if r.then != nil {
		return r.err // the Sync is the next transaction's to read
	}
	if err := r.br.Close(); r.err == nil {
		r.err = err
	}
	return r.err
}

// Prologue returns the statements every transaction on d runs first (nil on a direct
// connection), for a caller that writes out what a transaction will run (qlmigrate's dry run).
// Begin, InTx, Run and Pipeline run them by themselves.
func (d *DB) Prologue() []string { return slices.Clone(d.prologue) }

// Pooled reports whether d talks through a transaction-pooling pooler (Config.Pooled, as Open
// left it).
func (d *DB) Pooled() bool { return d.pooled }

// PlansPerExecution reports whether every statement on d reaches the server as the unnamed
// statement, parsed and planned again at each execution: behind a transaction pooler (pooled,
// and not ql_pooler=session), where pgx's named prepared statements cannot be used (see
// Pooled). A caller with a hot statement can then send a function call instead, whose
// PL/pgSQL body the server plans once per server session (the store's claim and admit,
// pg-0027). False on a direct connection and with ql_pooler=session, where each statement is
// prepared once per connection.
func (d *DB) PlansPerExecution() bool { return d.pooled && !d.session }

// Timeouts returns the bounds d's connections were opened with.
func (d *DB) Timeouts() Timeouts { return d.timeouts }

// Describe names the target: user@host:port/database, never a password (Config.Describe).
func (d *DB) Describe() string { return d.target }

// Acquire takes one connection of the pool for session-level work (a session advisory lock). It
// carries no prologue: behind a pooler a session is not the caller's to keep, so callers refuse
// pooled mode before they acquire.
func (d *DB) Acquire(ctx context.Context) (*pgxpool.Conn, error) { return d.pool.Acquire(ctx) }

// Pool is the pool itself, for statements a test or a tool runs outside any transaction of its
// own. Production packages begin through Begin, InTx, Run or Pipeline.
func (d *DB) Pool() *pgxpool.Pool { return d.pool }

// Close closes the pool.
func (d *DB) Close() { d.pool.Close() }

// Conn is one connection (Config.Connect) whose transactions begin with the prologue, as a DB's
// do: its Begin and BeginTx replace those of the pgx.Conn it embeds.
type Conn struct {
	*pgx.Conn
	prologue []string
}

// Begin begins a transaction with opts and runs the prologue in it first (see DB.Begin).
func (c *Conn) Begin(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	return begin(ctx, c.Conn, opts, c.prologue)
}

// BeginTx is Begin (for pgx.BeginTxFunc and readers that begin their own transactions).
func (c *Conn) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	return c.Begin(ctx, opts)
}
