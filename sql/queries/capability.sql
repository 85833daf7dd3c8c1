-- name: Capability :one
-- The capability a component has reached (control-core: 18 after pg-0019).
SELECT component, version, name, migration, updated_at_ms
FROM control_core.capabilities
WHERE component = $1;

-- name: ListLedger :many
-- The checksum ledger, one row per applied migration.
SELECT version, name, sha256, normalized_sha256, applied_at_ms, applied_by, duration_ms
FROM control_core.migration_ledger
ORDER BY version;

-- name: SchemaExists :one
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'control_core') AS exists;
