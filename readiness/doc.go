// Package readiness holds the readiness contract of control-core v28 (readiness_contract.txt)
// and its comparison against the catalogs: the schema's shape and everything that changes what a
// statement on it does (triggers and their enabled state, row-level security, rules, persistence,
// function attributes and owners, the database's event triggers, subscriptions that write into
// control_core, and the pg_catalog built-ins the schema depends on, builtins_contract.txt), each
// difference naming the object, classified as drift or an inert note, with the statements that
// remove it (Drift.SQL). The migration files themselves, their integrity file and the checksum
// ledger are package checksums'.
package readiness
