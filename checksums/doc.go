// Package checksums knows the migration files by version, name and sha256, and records that
// sha256 and the sha256 of its normal form (internal/base/sqlfile) in the database's checksum ledger
// inside the same transaction as the migration itself (RecordSQL; for a NO TRANSACTION migration,
// in one transaction with its version row), so a version is never recorded as applied without the
// exact bytes that ran, and an edit of comments or whitespace can be told from one of statements.
//
// It also holds what verify checks about the stream and the schema: the integrity file
// sql/migrations/migrations.sum (an edited, added, removed or renamed migration is caught in the
// repository and in the binary), the comparison of the ledger and goose's versions with the
// binary's migrations (edited checksum, unknown applied version, pending migration), and the
// readiness contract of control-core v20 (readiness_contract.txt) with its comparison against the
// catalogs: the schema's shape and everything that changes what a statement on it does
// (triggers and their enabled state, row-level security, rules, persistence, function
// attributes and owners, the database's event triggers), each difference naming the object,
// classified as drift or an inert note, with the statements that remove it (Drift.SQL).
package checksums
