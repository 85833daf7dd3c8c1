package checksums

import (
	"context"
	"errors"
	"fmt"

	"github.com/pressly/goose/v3/database"
)

// LedgerStore is goose's PostgreSQL version store plus the checksum ledger: goose calls Insert on
// the migration's own transaction, so the version row and the ledger row commit or roll back
// together with the migration's statements.
//
// Every migration of the stream is transactional (none uses "NO TRANSACTION"); a
// non-transactional migration would get its version and ledger rows in one transaction of their
// own after its statements, so a crash in between leaves it pending (re-run, hence it must be
// idempotent) and never recorded without a checksum.
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

// Insert records the version and, for real migrations, its checksum in the same transaction.
func (s *LedgerStore) Insert(ctx context.Context, db database.DBTxConn, req database.InsertRequest) error {
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
