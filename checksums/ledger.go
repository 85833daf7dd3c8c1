package checksums

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/pressly/goose/v3/database"
)

// LedgerStore is goose's PostgreSQL version store plus the checksum ledger. Insert writes the
// version row and the ledger row in one transaction, so neither is ever recorded without the
// other:
//
//   - a transactional migration (every migration of the stream): goose passes Insert the
//     migration's own *sql.Tx, so both rows commit or roll back together with the migration's
//     statements;
//   - a "-- +goose NO TRANSACTION" migration: goose runs its statements in autocommit on its
//     locked *sql.Conn and then passes Insert that same connection; Insert opens a transaction
//     of its own there for the two rows. The statements are not covered: a failure or crash
//     after some of them leaves those applied and the migration pending, so the next `up` runs
//     it again (such a migration must be written to be re-runnable, e.g. IF NOT EXISTS).
type LedgerStore struct {
	database.Store
	byVersion map[int64]Migration
}

// NewLedgerStore wraps goose's PostgreSQL store using table (schema-qualified) for versions.
func NewLedgerStore(table string, migrations []Migration) (*LedgerStore, error) {
	inner, err := database.NewStore(database.DialectPostgres, table)
	if err != nil {
		return nil, fmt.Errorf("goose store: %w", err)
	}
	by := make(map[int64]Migration, len(migrations))
	for _, m := range migrations {
		by[m.Version] = m
	}
	return &LedgerStore{Store: inner, byVersion: by}, nil
}

// insertLedger is the one statement goose's database/sql transaction needs; the typed queries
// that read the ledger live in sql/queries.
const insertLedger = `INSERT INTO control_core.migration_ledger (version, name, sha256, applied_at_ms)
VALUES ($1, $2, $3, floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint)`

// txBeginner is what goose passes Insert outside a migration transaction: the session's
// *sql.Conn for a NO TRANSACTION SQL migration (or the *sql.DB for a Go one).
type txBeginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Insert records the version and, for real migrations, its checksum in one transaction: the
// migration's own when goose passes one, otherwise a transaction of Insert's own on the same
// connection (see LedgerStore).
func (s *LedgerStore) Insert(ctx context.Context, db database.DBTxConn, req database.InsertRequest) error {
	if _, inTx := db.(*sql.Tx); inTx {
		return s.insert(ctx, db, req)
	}
	b, ok := db.(txBeginner)
	if !ok {
		return fmt.Errorf("checksum ledger: version %d: goose passed a %T, which can open no transaction", req.Version, db)
	}
	tx, err := b.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("checksum ledger: begin the transaction for version %d: %w", req.Version, err)
	}
	if err := s.insert(ctx, tx, req); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("checksum ledger: commit version %d: %w", req.Version, err)
	}
	return nil
}

func (s *LedgerStore) insert(ctx context.Context, db database.DBTxConn, req database.InsertRequest) error {
	if err := s.Store.Insert(ctx, db, req); err != nil {
		return err
	}
	if req.Version == 0 { // goose's own marker row, written when it creates its table
		return nil
	}
	m, ok := s.byVersion[req.Version]
	if !ok {
		return fmt.Errorf("checksum ledger: version %d is not a known migration", req.Version)
	}
	if _, err := db.ExecContext(ctx, insertLedger, m.Version, m.Name, m.SHA256); err != nil {
		return fmt.Errorf("checksum ledger: record %s: %w", m.Name, err)
	}
	return nil
}

// TableExists keeps goose's catalog lookup for its version table (an optional store method).
func (s *LedgerStore) TableExists(ctx context.Context, db database.DBTxConn) (bool, error) {
	if ext, ok := s.Store.(database.StoreExtender); ok {
		return ext.TableExists(ctx, db)
	}
	return false, errors.ErrUnsupported
}
