-- Queries of `qlmigrate` beyond the ledger listing (capability.sql): the audited accept of a
-- cosmetic edit, and who holds the migration lock.

-- name: AcceptLedgerChecksum :one
-- Moves an applied migration's ledger row to the sha256 of an edited file, only while it still
-- holds the sha256 the caller read and the same normal form (same statements): a concurrent accept
-- or a statement edit updates nothing. Runs in one transaction with InsertAcceptance.
UPDATE control_core.migration_ledger
   SET sha256 = sqlc.arg(new_sha256)
 WHERE version = sqlc.arg(version)
   AND sha256 = sqlc.arg(old_sha256)
   AND normalized_sha256 = sqlc.arg(normalized_sha256)
RETURNING version, name, sha256, normalized_sha256;

-- name: InsertAcceptance :one
INSERT INTO control_core.migration_acceptances (version, old_sha256, new_sha256, normalized_sha256, reason, accepted_at_ms)
VALUES (sqlc.arg(version), sqlc.arg(old_sha256), sqlc.arg(new_sha256), sqlc.arg(normalized_sha256), sqlc.arg(reason),
        floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint)
RETURNING version, old_sha256, new_sha256, normalized_sha256, reason, accepted_by, accepted_at_ms;

-- name: ListAcceptances :many
SELECT version, old_sha256, new_sha256, normalized_sha256, reason, accepted_by, accepted_at_ms
FROM control_core.migration_acceptances
ORDER BY version, accepted_at_ms;

-- name: MigrationLockHolders :many
-- The sessions of this database that hold the advisory lock key (a bigint key is classid = high
-- 32 bits, objid = low 32 bits, objsubid = 1), with what pg_stat_activity shows of them. Columns a
-- role may not see of another role's session (client address, state, times) come back empty.
SELECT l.pid::integer AS pid,
       coalesce(a.application_name, '')::text AS application_name,
       coalesce(a.usename::text, '')::text AS usename,
       coalesce(host(a.client_addr), CASE WHEN a.pid IS NOT NULL AND a.backend_type = 'client backend' AND a.client_port = -1 THEN 'local socket' ELSE '' END)::text AS client_addr,
       coalesce(a.xact_start, a.backend_start) AS since,
       coalesce(a.state, '')::text AS state
FROM pg_catalog.pg_locks l
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted
  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
  AND ((l.classid::bigint << 32) | l.objid::bigint) = sqlc.arg(lock_key)::bigint
  AND l.objsubid = 1
ORDER BY l.pid;
