// Package checksums knows the migration files by version, name and sha256, and records that
// sha256 and the sha256 of its normal form (internal/base/sqlfile) in the database's checksum ledger
// inside the same transaction as the migration itself (RecordSQL; for a NO TRANSACTION migration,
// in one transaction with its version row), so a version is never recorded as applied without the
// exact bytes that ran, and an edit of comments or whitespace can be told from one of statements.
//
// It also holds what verify checks about the stream: the integrity file
// sql/migrations/migrations.sum (an edited, added, removed or renamed migration is caught in the
// repository and in the binary), and the comparison of the ledger and goose's versions with the
// binary's migrations (edited checksum, unknown applied version, pending migration). What the
// schema must hold once migrated, the readiness contract, is package readiness's.
package checksums
