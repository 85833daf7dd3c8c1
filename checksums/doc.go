// Package checksums knows the migration files by version, name and sha256, and records that
// sha256 in the database's checksum ledger inside the same transaction as the migration itself,
// so a version is never recorded as applied without the exact bytes that ran.
package checksums
