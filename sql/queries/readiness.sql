-- Catalog reads of the readiness contract (checksums.ReadReadiness): what schema control_core
-- holds and everything in the catalogs that changes what a statement on its tables does, or who
-- may do it. Read-only; they run inside verify's (and readiness's) one read-only transaction,
-- after SET LOCAL search_path = pg_catalog, so every name the server deparses comes out
-- schema-qualified and independent of the connected role's search_path. Valid on PostgreSQL 15
-- to 18.

-- name: ReadinessTables :many
-- The tables of control_core (goose's version table is goose's, not part of the contract) with
-- the properties that change what a statement on them does: kind, persistence (an UNLOGGED
-- table loses its rows in a crash), row-level security (enabled with no policy, every row is
-- invisible to the runtime), and replica identity (with a publication, UPDATE fails without one).
SELECT c.relname::text AS table_name,
       (CASE c.relkind WHEN 'r' THEN 'ordinary' ELSE 'partitioned' END)::text AS relkind,
       (CASE c.relpersistence WHEN 'p' THEN 'permanent' WHEN 'u' THEN 'unlogged' ELSE 'temporary' END)::text AS persistence,
       c.relrowsecurity AS row_security,
       c.relforcerowsecurity AS force_row_security,
       (CASE c.relreplident WHEN 'd' THEN 'default' WHEN 'n' THEN 'nothing' WHEN 'f' THEN 'full' ELSE 'index' END)::text AS replica_identity
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p') AND c.relname <> 'goose_db_version'
ORDER BY 1;

-- name: ReadinessColumns :many
-- Every column of those tables: type as the server renders it, its collation where it is not
-- the type's own, nullability, default, identity and generation (pg_attrdef holds the
-- generation expression of a generated column, its "default"). domain_base is the base type
-- of a column whose type is a domain, or an array of one ('' otherwise): a domain's NOT NULL,
-- CHECK and DEFAULT are evaluated by every INSERT although the column shows none of them.
WITH RECURSIVE dom(oid, base, typmod, depth) AS (
    -- every domain with its base type, followed through domains over domains
    SELECT y.oid, y.typbasetype, y.typtypmod, 0 FROM pg_catalog.pg_type y WHERE y.typtype = 'd'
    UNION ALL
    SELECT dom.oid, b.typbasetype, b.typtypmod, dom.depth + 1
    FROM dom JOIN pg_catalog.pg_type b ON b.oid = dom.base
    WHERE b.typtype = 'd' AND dom.depth < 32
)
SELECT c.relname::text AS table_name,
       a.attname::text AS column_name,
       pg_catalog.format_type(a.atttypid, a.atttypmod)::text AS data_type,
       coalesce(pg_catalog.format_type(dom.base, dom.typmod)
                || (CASE WHEN t.typtype = 'd' THEN '' ELSE '[]' END), '')::text AS domain_base,
       (CASE WHEN a.attcollation <> t.typcollation
             THEN coalesce((SELECT pg_catalog.format('%I.%I', cn.nspname, co.collname)
                            FROM pg_catalog.pg_collation co
                            JOIN pg_catalog.pg_namespace cn ON cn.oid = co.collnamespace
                            WHERE co.oid = a.attcollation), a.attcollation::text)
             ELSE '' END)::text AS collation,
       a.attnotnull AS not_null,
       coalesce(pg_catalog.pg_get_expr(d.adbin, d.adrelid), '')::text AS default_expr,
       a.attidentity::text AS identity,
       a.attgenerated::text AS generated
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_catalog.pg_type et ON et.oid = t.typelem AND t.typsubscript = 'pg_catalog.array_subscript_handler'::pg_catalog.regproc
LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
LEFT JOIN dom ON dom.oid = (CASE WHEN t.typtype = 'd' THEN t.oid WHEN et.typtype = 'd' THEN et.oid END)
             AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_type b WHERE b.oid = dom.base AND b.typtype = 'd')
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p') AND c.relname <> 'goose_db_version'
  AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY 1, 2;

-- name: ReadinessConstraints :many
-- Primary, unique, foreign key, CHECK and exclusion constraints (NOT NULL constraints, which
-- PostgreSQL 18 also lists here, are the columns' nullability instead). pg_get_constraintdef
-- renders DEFERRABLE, INITIALLY DEFERRED and NOT VALID, so those are part of the definition. A
-- key whose index is not valid (a superuser's UPDATE of pg_index, a failed REINDEX CONCURRENTLY)
-- enforces nothing: the definition says so.
SELECT c.relname::text AS table_name,
       k.conname::text AS constraint_name,
       (pg_catalog.pg_get_constraintdef(k.oid)
        || CASE WHEN x.indisvalid AND x.indisready AND x.indislive OR x.indexrelid IS NULL THEN '' ELSE ' (index INVALID)' END)::text AS definition
FROM pg_catalog.pg_constraint k
LEFT JOIN pg_catalog.pg_index x ON x.indexrelid = k.conindid AND k.contype IN ('p', 'u', 'x')
JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p') AND c.relname <> 'goose_db_version'
  AND k.contype IN ('p', 'u', 'f', 'c', 'x')
ORDER BY 1, 2;

-- name: ReadinessIndexes :many
-- Indexes that no constraint owns (a constraint's own index is covered by the constraint), and
-- whether one can make a write fail: a unique index, or one whose expressions or predicate
-- every write evaluates.
SELECT c.relname::text AS table_name,
       i.relname::text AS index_name,
       (pg_catalog.pg_get_indexdef(i.oid)
        || CASE WHEN x.indisvalid AND x.indisready AND x.indislive THEN '' ELSE ' (INVALID)' END)::text AS definition,
       x.indisunique AS is_unique,
       (x.indexprs IS NOT NULL OR x.indpred IS NOT NULL)::boolean AS evaluates
FROM pg_catalog.pg_index x
JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
JOIN pg_catalog.pg_class c ON c.oid = x.indrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p') AND c.relname <> 'goose_db_version'
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k WHERE k.conindid = x.indexrelid AND k.conrelid = x.indrelid)
ORDER BY 1, 2;

-- name: ReadinessTriggers :many
-- Every trigger on those tables with its enabled state (tgenabled: O origin, R replica, A
-- always, D disabled). User triggers one by one; the internal triggers behind a constraint (a
-- foreign key's, on both of its tables) grouped per constraint, because their names hold OIDs:
-- the constraint names them, and its own table may be another one, even outside control_core.
SELECT x.table_name::text AS table_name,
       x.internal::boolean AS internal,
       x.trigger_name::text AS trigger_name,
       x.definition::text AS definition,
       x.constraint_schema::text AS constraint_schema,
       x.constraint_table::text AS constraint_table,
       x.constraint_name::text AS constraint_name,
       pg_catalog.string_agg(x.state, ', ' ORDER BY x.state)::text AS enabled
FROM (
    SELECT c.relname AS table_name,
           t.tgisinternal AS internal,
           (CASE WHEN t.tgisinternal THEN '' ELSE t.tgname::text END) AS trigger_name,
           (CASE WHEN t.tgisinternal THEN '' ELSE pg_catalog.pg_get_triggerdef(t.oid) END) AS definition,
           coalesce(kn.nspname::text, '') AS constraint_schema,
           coalesce(kc.relname::text, '') AS constraint_table,
           coalesce(k.conname::text, '') AS constraint_name,
           (CASE t.tgenabled WHEN 'O' THEN 'origin' WHEN 'D' THEN 'disabled' WHEN 'R' THEN 'replica'
                             WHEN 'A' THEN 'always' ELSE t.tgenabled::text END) AS state
    FROM pg_catalog.pg_trigger t
    JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_catalog.pg_constraint k ON k.oid = t.tgconstraint
    LEFT JOIN pg_catalog.pg_class kc ON kc.oid = k.conrelid
    LEFT JOIN pg_catalog.pg_namespace kn ON kn.oid = kc.relnamespace
    WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p') AND c.relname <> 'goose_db_version'
) x
GROUP BY x.table_name, x.internal, x.trigger_name, x.definition, x.constraint_schema, x.constraint_table, x.constraint_name
ORDER BY 1, 2, 3, 5, 6, 7;

-- name: ReadinessPolicies :many
-- Row-level security policies on those tables, rendered like CREATE POLICY's tail.
SELECT c.relname::text AS table_name,
       p.polname::text AS policy_name,
       ((CASE WHEN p.polpermissive THEN 'AS PERMISSIVE' ELSE 'AS RESTRICTIVE' END)
        || ' FOR ' || (CASE p.polcmd WHEN 'r' THEN 'SELECT' WHEN 'a' THEN 'INSERT' WHEN 'w' THEN 'UPDATE'
                                     WHEN 'd' THEN 'DELETE' ELSE 'ALL' END)
        || ' TO ' || coalesce((SELECT pg_catalog.string_agg(r.name, ', ' ORDER BY r.name)
                               FROM (SELECT CASE WHEN o = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(o)) END AS name
                                     FROM pg_catalog.unnest(p.polroles) AS o) r), 'PUBLIC')
        || coalesce(' USING (' || pg_catalog.pg_get_expr(p.polqual, p.polrelid) || ')', '')
        || coalesce(' WITH CHECK (' || pg_catalog.pg_get_expr(p.polwithcheck, p.polrelid) || ')', ''))::text AS definition
FROM pg_catalog.pg_policy p
JOIN pg_catalog.pg_class c ON c.oid = p.polrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p') AND c.relname <> 'goose_db_version'
ORDER BY 1, 2;

-- name: ReadinessRules :many
-- Rewrite rules on those tables (a view's _RETURN rule is the view itself; tables have none).
SELECT c.relname::text AS table_name,
       r.rulename::text AS rule_name,
       pg_catalog.pg_get_ruledef(r.oid)::text AS definition,
       (CASE r.ev_enabled WHEN 'O' THEN 'origin' WHEN 'D' THEN 'disabled' WHEN 'R' THEN 'replica'
                          WHEN 'A' THEN 'always' ELSE r.ev_enabled::text END)::text AS enabled
FROM pg_catalog.pg_rewrite r
JOIN pg_catalog.pg_class c ON c.oid = r.ev_class
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p') AND c.relname <> 'goose_db_version'
  AND r.rulename <> '_RETURN'
ORDER BY 1, 2;

-- name: ReadinessInheritance :many
-- Inheritance and partitioning links of those tables, either way: a child's rows are part of
-- every statement on its parent, so a table that inherits from a control_core table changes
-- what the scheduler reads and locks. is_partition: the child is a partition of its parent (undone
-- by DETACH PARTITION; NO INHERIT refuses a partition).
SELECT n.nspname::text AS child_schema, c.relname::text AS child_table,
       pn.nspname::text AS parent_schema, p.relname::text AS parent_table,
       c.relispartition::boolean AS is_partition
FROM pg_catalog.pg_inherits i
JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
JOIN pg_catalog.pg_namespace pn ON pn.oid = p.relnamespace
WHERE (n.nspname = 'control_core' AND c.relkind IN ('r', 'p') AND c.relname <> 'goose_db_version')
   OR (pn.nspname = 'control_core' AND p.relkind IN ('r', 'p') AND p.relname <> 'goose_db_version')
ORDER BY 1, 2, 3, 4;

-- name: ReadinessFunctions :many
-- The functions of control_core with everything a caller depends on; the body as a sha256. The
-- owner is read against the schema's owner (the role names are configurable, the contract is
-- not): a SECURITY DEFINER function runs as its owner, and its owner may change it.
SELECT pg_catalog.format('%I.%I(%s)', n.nspname, p.proname, pg_catalog.oidvectortypes(p.proargtypes))::text AS signature,
       pg_catalog.pg_get_function_arguments(p.oid)::text AS arguments,
       coalesce(pg_catalog.pg_get_function_result(p.oid), '')::text AS result,
       l.lanname::text AS language,
       (CASE p.provolatile WHEN 'i' THEN 'immutable' WHEN 's' THEN 'stable' ELSE 'volatile' END)::text AS volatility,
       (CASE p.proparallel WHEN 's' THEN 'safe' WHEN 'r' THEN 'restricted' ELSE 'unsafe' END)::text AS parallel,
       (CASE WHEN p.prosecdef THEN 'definer' ELSE 'invoker' END)::text AS security,
       coalesce(pg_catalog.array_to_string(p.proconfig, ', '), '')::text AS config,
       pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(p.prosrc, 'UTF8')), 'hex')::text AS body_sha256,
       (CASE WHEN p.proisstrict THEN 'returns null on null input' ELSE 'called on null input' END)::text AS null_input,
       (CASE WHEN p.proowner = n.nspowner THEN 'schema owner' ELSE pg_catalog.pg_get_userbyid(p.proowner) END)::text AS owner,
       pg_catalog.pg_get_userbyid(n.nspowner)::text AS schema_owner
FROM pg_catalog.pg_proc p
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
JOIN pg_catalog.pg_language l ON l.oid = p.prolang
WHERE n.nspname = 'control_core'
ORDER BY 1;

-- name: ReadinessEventTriggers :many
-- The database's event triggers: they fire inside migrations (ddl_command_*, sql_drop,
-- table_rewrite) and, from PostgreSQL 17, at every login.
SELECT e.evtname::text AS name,
       e.evtevent::text AS event,
       (CASE e.evtenabled WHEN 'O' THEN 'origin' WHEN 'D' THEN 'disabled' WHEN 'R' THEN 'replica'
                          WHEN 'A' THEN 'always' ELSE e.evtenabled::text END)::text AS enabled,
       coalesce(pg_catalog.array_to_string(e.evttags, ', '), '')::text AS tags,
       pg_catalog.format('%I.%I()', pn.nspname, p.proname)::text AS function
FROM pg_catalog.pg_event_trigger e
JOIN pg_catalog.pg_proc p ON p.oid = e.evtfoid
JOIN pg_catalog.pg_namespace pn ON pn.oid = p.pronamespace
ORDER BY 1;

-- name: ReadinessPublications :many
-- The publications that publish a table of control_core: listed by name (FOR TABLE, with its
-- row filter and column list, PostgreSQL 15+), through the schema (FOR TABLES IN SCHEMA, 15+),
-- or FOR ALL TABLES. A row filter or column list that the replica identity does not cover makes
-- every UPDATE and DELETE of the table fail (42P10); a publication without either is inert while
-- the table keeps a replica identity (the contract's, whose change is drift itself).
SELECT x.table_name::text AS table_name,
       x.publication_name::text AS publication_name,
       x.via::text AS via,
       x.row_filter::text AS row_filter,
       x.column_list::text AS column_list,
       pg_catalog.concat_ws(', ', CASE WHEN p.pubinsert THEN 'insert' END, CASE WHEN p.pubupdate THEN 'update' END,
                            CASE WHEN p.pubdelete THEN 'delete' END, CASE WHEN p.pubtruncate THEN 'truncate' END)::text AS publishes
FROM (
    SELECT c.relname AS table_name, p.pubname AS publication_name, 'table' AS via,
           coalesce(pg_catalog.pg_get_expr(pr.prqual, pr.prrelid), '') AS row_filter,
           coalesce((SELECT pg_catalog.string_agg(pg_catalog.quote_ident(att.attname), ', ' ORDER BY k.ord)
                     FROM pg_catalog.unnest(pr.prattrs::pg_catalog.int2[]) WITH ORDINALITY AS k(attnum, ord)
                     JOIN pg_catalog.pg_attribute att ON att.attrelid = pr.prrelid AND att.attnum = k.attnum), '') AS column_list,
           p.oid AS pub
    FROM pg_catalog.pg_publication_rel pr
    JOIN pg_catalog.pg_publication p ON p.oid = pr.prpubid
    JOIN pg_catalog.pg_class c ON c.oid = pr.prrelid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p') AND c.relname <> 'goose_db_version'
    UNION ALL
    SELECT c.relname, p.pubname, 'schema', '', '', p.oid
    FROM pg_catalog.pg_publication_namespace pn
    JOIN pg_catalog.pg_publication p ON p.oid = pn.pnpubid
    JOIN pg_catalog.pg_class c ON c.relnamespace = pn.pnnspid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p') AND c.relname <> 'goose_db_version'
    UNION ALL
    SELECT c.relname, p.pubname, 'all tables', '', '', p.oid
    FROM pg_catalog.pg_publication p
    JOIN pg_catalog.pg_class c ON true
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE p.puballtables
      AND n.nspname = 'control_core' AND c.relkind IN ('r', 'p') AND c.relname <> 'goose_db_version'
) x
JOIN pg_catalog.pg_publication p ON p.oid = x.pub
ORDER BY 1, 2, 3;
