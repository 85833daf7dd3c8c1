-- Catalog reads of the readiness contract (checksums.ReadReadiness): what schema control_core
-- holds and everything in the catalogs that changes what a statement on its tables does, or who
-- may do it. Read-only; they run inside verify's (and readiness's) one read-only transaction,
-- after SET LOCAL search_path = pg_catalog, so every name the server deparses comes out
-- schema-qualified and independent of the connected role's search_path.

-- name: ReadinessTables :many
-- The tables of control_core (goose's version table is goose's, not part of the contract).
SELECT c.relname::text AS table_name
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p') AND c.relname <> 'goose_db_version'
ORDER BY 1;

-- name: ReadinessColumns :many
-- Every column of those tables: type as the server renders it, nullability, default.
SELECT c.relname::text AS table_name,
       a.attname::text AS column_name,
       pg_catalog.format_type(a.atttypid, a.atttypmod)::text AS data_type,
       a.attnotnull AS not_null,
       coalesce(pg_catalog.pg_get_expr(d.adbin, d.adrelid), '')::text AS default_expr
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p') AND c.relname <> 'goose_db_version'
  AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY 1, 2;

-- name: ReadinessConstraints :many
-- Primary, unique, foreign key, CHECK and exclusion constraints (NOT NULL constraints, which
-- PostgreSQL 18 also lists here, are the columns' nullability instead).
SELECT c.relname::text AS table_name,
       k.conname::text AS constraint_name,
       pg_catalog.pg_get_constraintdef(k.oid)::text AS definition
FROM pg_catalog.pg_constraint k
JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p') AND c.relname <> 'goose_db_version'
  AND k.contype IN ('p', 'u', 'f', 'c', 'x')
ORDER BY 1, 2;

-- name: ReadinessIndexes :many
-- Indexes that no constraint owns (a constraint's own index is covered by the constraint).
SELECT c.relname::text AS table_name,
       i.relname::text AS index_name,
       pg_catalog.pg_get_indexdef(i.oid)::text AS definition
FROM pg_catalog.pg_index x
JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
JOIN pg_catalog.pg_class c ON c.oid = x.indrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p') AND c.relname <> 'goose_db_version'
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k WHERE k.conindid = x.indexrelid AND k.conrelid = x.indrelid)
ORDER BY 1, 2;

-- name: ReadinessFunctions :many
-- The functions of control_core with everything a caller depends on; the body as a sha256.
SELECT format('%I.%I(%s)', n.nspname, p.proname, pg_catalog.oidvectortypes(p.proargtypes))::text AS signature,
       pg_catalog.pg_get_function_arguments(p.oid)::text AS arguments,
       coalesce(pg_catalog.pg_get_function_result(p.oid), '')::text AS result,
       l.lanname::text AS language,
       (CASE p.provolatile WHEN 'i' THEN 'immutable' WHEN 's' THEN 'stable' ELSE 'volatile' END)::text AS volatility,
       (CASE p.proparallel WHEN 's' THEN 'safe' WHEN 'r' THEN 'restricted' ELSE 'unsafe' END)::text AS parallel,
       (CASE WHEN p.prosecdef THEN 'definer' ELSE 'invoker' END)::text AS security,
       coalesce(pg_catalog.array_to_string(p.proconfig, ', '), '')::text AS config,
       pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(p.prosrc, 'UTF8')), 'hex')::text AS body_sha256
FROM pg_catalog.pg_proc p
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
JOIN pg_catalog.pg_language l ON l.oid = p.prolang
WHERE n.nspname = 'control_core'
ORDER BY 1;
