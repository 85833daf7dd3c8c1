package dispatch

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// pipelineTx runs a transition's generated statements as ONE round trip (dbconn.DB.Pipeline:
// BEGIN, the prologue, the statements, COMMIT, one Sync): every call but the last is queued and
// answered at once (Exec with an empty tag, Query with no rows: their results are read and
// dropped when the last is sent), the last is sent with them and its result is the caller's. On
// the server the statements still run one after the other, each READ COMMITTED statement with a
// snapshot taken when it starts, so a lock one takes is held when the next one's snapshot is
// taken, as in a transaction sent statement by statement. Use it only where the earlier
// statements' results are not needed (a lock, a setting) and their errors abort the whole.
type pipelineTx struct {
	h     *dbconn.DB
	begin string
	batch pgx.Batch
	last  bool // the next call is the last: send
	res   *dbconn.PipelineResults
}

var errPipelineTxSent = errors.New("dispatch pipeline: sent already")

// send queues the last call and sends the pipeline, reading the results of the queued ones.
func (p *pipelineTx) send(ctx context.Context, sql string, args []any) error {
	if p.res != nil {
		return errPipelineTxSent
	}
	p.batch.Queue(sql, args...)
	p.res = p.h.Pipeline(ctx, p.begin, &p.batch)
	for range len(p.batch.QueuedQueries) - 1 {
		if _, err := p.res.Exec(); err != nil {
			return err
		}
	}
	return nil
}

func (p *pipelineTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !p.last {
		p.batch.Queue(sql, args...)
		return pgconn.CommandTag{}, nil
	}
	if err := p.send(ctx, sql, args); err != nil {
		return pgconn.CommandTag{}, err
	}
	return p.res.Exec()
}

func (p *pipelineTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !p.last {
		p.batch.Queue(sql, args...)
		return noRows{}, nil
	}
	if err := p.send(ctx, sql, args); err != nil {
		return nil, err
	}
	return p.res.Query()
}

func (p *pipelineTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !p.last {
		p.batch.Queue(sql, args...)
		return noRow{}
	}
	if err := p.send(ctx, sql, args); err != nil {
		return noRow{err: err}
	}
	return p.res.QueryRow()
}

// commit ends the pipeline (the COMMIT and the Sync): nil means the transaction committed.
func (p *pipelineTx) commit() error {
	if p.res == nil {
		return errors.New("dispatch pipeline: nothing was sent")
	}
	return p.res.Commit()
}

// noRows answers a queued query: its rows are read when the pipeline is sent.
type noRows struct{}

func (noRows) Close()                                       {}
func (noRows) Err() error                                   { return nil }
func (noRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (noRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (noRows) Next() bool                                   { return false }
func (noRows) Scan(...any) error                            { return errors.New("dispatch pipeline: no row") }
func (noRows) Values() ([]any, error)                       { return nil, nil }
func (noRows) RawValues() [][]byte                          { return nil }
func (noRows) Conn() *pgx.Conn                              { return nil }
func (noRows) TypeMap() *pgtype.Map                         { return pgtype.NewMap() }

type noRow struct{ err error }

func (r noRow) Scan(...any) error {
	if r.err != nil {
		return r.err
	}
	return errors.New("dispatch pipeline: a queued statement's row is not read")
}

// SendBatch is not used by the queries a pipelineTx runs (db.DBTX asks for it).
func (p *pipelineTx) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults {
	return failedBatch{errors.New("dispatch pipeline: SendBatch is not supported")}
}

type failedBatch struct{ err error }

func (b failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b failedBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b failedBatch) QueryRow() pgx.Row                { return noRow{err: b.err} }
func (b failedBatch) Close() error                     { return b.err }
func (b failedBatch) Tx() pgx.Tx                       { return nil }
