-- Catalog reads of the readiness contract (readiness.ReadFacts): what schema control_core
-- holds and everything in the catalogs that changes what a statement on its tables does, or who
-- may do it. Read-only; they run inside verify's (and readiness's) one read-only transaction,
-- after SET LOCAL search_path = pg_catalog, so every name the server deparses comes out
-- schema-qualified and independent of the connected role's search_path. Valid on PostgreSQL 15
-- to 18.

-- name: ReadinessTables :many
-- The tables of control_core, goose's version table among them (a trigger, rule or policy on it
-- fires inside the next `qlmigrate up`, as the owner), with the properties that change what a statement on them does: kind, persistence (an UNLOGGED
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
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p')
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
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p')
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
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p')
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
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p')
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k WHERE k.conindid = x.indexrelid AND k.conrelid = x.indrelid)
ORDER BY 1, 2;

-- name: ReadinessTriggers :many
-- Every trigger on those tables with its enabled state (tgenabled: O origin, R replica, A
-- always, D disabled). User triggers one by one; the internal triggers behind a constraint (a
-- foreign key's, on both of its tables) grouped per constraint, because their names hold OIDs:
-- the constraint names them, and its own table may be another one, even outside control_core.
-- internal_definitions renders the internal ones without their names (pg_get_triggerdef): the
-- events, function and deferrability they fire with are pg_trigger's own (tgtype, tgfoid,
-- tgdeferrable, tginitdeferred), not the constraint's, so a catalog UPDATE of one changes what
-- the foreign key checks while pg_get_constraintdef reads the same.
SELECT x.table_name::text AS table_name,
       x.internal::boolean AS internal,
       x.trigger_name::text AS trigger_name,
       x.definition::text AS definition,
       x.constraint_schema::text AS constraint_schema,
       x.constraint_table::text AS constraint_table,
       x.constraint_name::text AS constraint_name,
       pg_catalog.string_agg(x.state, ', ' ORDER BY x.state)::text AS enabled,
       coalesce(pg_catalog.string_agg(x.internal_definition, '; ' ORDER BY x.internal_definition), '')::text AS internal_definitions
FROM (
    SELECT c.relname AS table_name,
           t.tgisinternal AS internal,
           (CASE WHEN t.tgisinternal THEN '' ELSE t.tgname::text END) AS trigger_name,
           (CASE WHEN t.tgisinternal THEN '' ELSE pg_catalog.pg_get_triggerdef(t.oid) END) AS definition,
           coalesce(kn.nspname::text, '') AS constraint_schema,
           coalesce(kc.relname::text, '') AS constraint_table,
           coalesce(k.conname::text, '') AS constraint_name,
           (CASE t.tgenabled WHEN 'O' THEN 'origin' WHEN 'D' THEN 'disabled' WHEN 'R' THEN 'replica'
                             WHEN 'A' THEN 'always' ELSE t.tgenabled::text END) AS state,
           (CASE WHEN t.tgisinternal
                 THEN pg_catalog.regexp_replace(pg_catalog.pg_get_triggerdef(t.oid), '^CREATE CONSTRAINT TRIGGER \S+ ', '') END) AS internal_definition
    FROM pg_catalog.pg_trigger t
    JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_catalog.pg_constraint k ON k.oid = t.tgconstraint
    LEFT JOIN pg_catalog.pg_class kc ON kc.oid = k.conrelid
    LEFT JOIN pg_catalog.pg_namespace kn ON kn.oid = kc.relnamespace
    WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p')
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
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p')
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
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p')
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
WHERE (n.nspname = 'control_core' AND c.relkind IN ('r', 'p'))
   OR (pn.nspname = 'control_core' AND p.relkind IN ('r', 'p'))
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
    WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p')
    UNION ALL
    SELECT c.relname, p.pubname, 'schema', '', '', p.oid
    FROM pg_catalog.pg_publication_namespace pn
    JOIN pg_catalog.pg_publication p ON p.oid = pn.pnpubid
    JOIN pg_catalog.pg_class c ON c.relnamespace = pn.pnnspid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p')
    UNION ALL
    SELECT c.relname, p.pubname, 'all tables', '', '', p.oid
    FROM pg_catalog.pg_publication p
    JOIN pg_catalog.pg_class c ON true
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE p.puballtables
      AND n.nspname = 'control_core' AND c.relkind IN ('r', 'p')
) x
JOIN pg_catalog.pg_publication p ON p.oid = x.pub
ORDER BY 1, 2, 3;

-- name: ReadinessRelationFlags :many
-- The pg_class switches of every table beside what the other queries render: whether its
-- indexes are maintained (relhasindex: with it off, no write inserts into an index, so no
-- unique key is checked), how many CHECK constraints are evaluated (relchecks), whether its
-- triggers fire and its rules rewrite at all (relhastriggers, relhasrules), whether statements
-- on it reach its children (relhassubclass), and the switches the relcache and executor read
-- (relisshared, relispopulated, relispartition, relnatts, the access method, a row type it is
-- typed by). A gate flag (relhasindex, relhastriggers, relhasrules, relhassubclass) stays on
-- after its last object goes, until VACUUM clears it, so it reads 'ok' unless it is off while
-- objects it gates exist; relchecks and relnatts read 'ok' while they match pg_constraint and
-- pg_attribute. atthasdef reads 'ok' while every column's agrees with pg_attrdef, else names the
-- columns that disagree: with it off the planner and INSERT take the column for one without a
-- default (NULL), while pg_attrdef, which the column's rendered default reads, still holds it.
-- Left out on purpose: relkind, relpersistence, relrowsecurity,
-- relforcerowsecurity, relreplident (ReadinessTables), relowner and relacl (the privileges
-- check), reltablespace and reloptions (storage placement and tuning, an operator's choice that
-- changes no statement's result), relpages, reltuples, relallvisible, relallfrozen,
-- relfrozenxid, relminmxid (statistics and vacuum state), relfilenode, reltoastrelid, reltype,
-- relrewrite and relpartbound (identities, transient state, or the partition bound that
-- ReadinessInheritance reads).
SELECT c.relname::text AS table_name,
       (CASE WHEN c.relhasindex OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_index x WHERE x.indrelid = c.oid)
             THEN 'ok' ELSE 'off' END)::text AS relhasindex,
       (SELECT CASE WHEN c.relchecks = count(*) THEN 'ok' ELSE c.relchecks || '/' || count(*) END
        FROM pg_catalog.pg_constraint k WHERE k.conrelid = c.oid AND k.contype = 'c')::text AS relchecks,
       (CASE WHEN c.relhastriggers OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = c.oid)
             THEN 'ok' ELSE 'off' END)::text AS relhastriggers,
       (CASE WHEN c.relhasrules OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_rewrite r WHERE r.ev_class = c.oid)
             THEN 'ok' ELSE 'off' END)::text AS relhasrules,
       (CASE WHEN c.relhassubclass OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i WHERE i.inhparent = c.oid)
             THEN 'ok' ELSE 'off' END)::text AS relhassubclass,
       (SELECT CASE WHEN c.relnatts = coalesce(max(a.attnum), 0) THEN 'ok' ELSE c.relnatts || '/' || coalesce(max(a.attnum), 0) END
        FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0)::text AS relnatts,
       coalesce((SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname) || ':' || (CASE WHEN a.atthasdef THEN 'on' ELSE 'off' END), ',' ORDER BY a.attnum)
                 FROM pg_catalog.pg_attribute a
                 WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                   AND a.atthasdef <> EXISTS (SELECT 1 FROM pg_catalog.pg_attrdef d WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum)),
                'ok')::text AS atthasdef,
       c.relisshared AS relisshared,
       c.relispopulated AS relispopulated,
       c.relispartition AS relispartition,
       coalesce((SELECT am.amname::text FROM pg_catalog.pg_am am WHERE am.oid = c.relam), '-')::text AS access_method,
       (CASE WHEN c.reloftype = 0 THEN '-' ELSE pg_catalog.format_type(c.reloftype, NULL) END)::text AS of_type
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p')
ORDER BY 1;

-- name: ReadinessIndexFlags :many
-- The pg_index switches of every index on those tables, a constraint's own among them, that
-- decide what a write checks: pg_get_constraintdef renders a key from pg_constraint (DEFERRABLE
-- from condeferrable), while inserts read the index's own flags: with indisunique off a second
-- row with the same key is admitted, with indimmediate off the check waits for a recheck
-- trigger that a NOT DEFERRABLE key does not have (so it never comes). indisvalid, indisready
-- and indislive are read with the definitions (ReadinessConstraints, ReadinessIndexes); left
-- out on purpose: indisclustered (only a bare CLUSTER reads it), indcheckxmin (hides a new index
-- from plans until its row's xmin is old, which passes by itself), and indkey, indclass,
-- indcollation, indoption, indexprs, indpred (the definitions).
SELECT c.relname::text AS table_name,
       i.relname::text AS index_name,
       x.indisunique AS is_unique,
       x.indnullsnotdistinct AS nulls_not_distinct,
       x.indisprimary AS is_primary,
       x.indisexclusion AS is_exclusion,
       x.indimmediate AS is_immediate,
       x.indisreplident AS is_replident
FROM pg_catalog.pg_index x
JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
JOIN pg_catalog.pg_class c ON c.oid = x.indrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p')
ORDER BY 1, 2;

-- name: ReadinessConstraintIndexes :many
-- The index of every primary key, unique and exclusion constraint, rendered by pg_get_indexdef:
-- pg_get_constraintdef renders the key from pg_constraint (conkey), while writes check the index
-- (indkey, indexprs, indpred, indclass, indcollation, indoption, indnkeyatts), so a catalog
-- UPDATE of pg_index moves the check to other columns while the constraint reads the same.
-- referenced_by names the foreign keys that depend on the index (DROP CONSTRAINT refuses then).
SELECT c.relname::text AS table_name,
       k.conname::text AS constraint_name,
       i.relname::text AS index_name,
       pg_catalog.pg_get_indexdef(i.oid)::text AS definition,
       coalesce((SELECT pg_catalog.string_agg(pg_catalog.format('%I.%I', fc.relname, f.conname), ', ' ORDER BY fc.relname, f.conname)
                 FROM pg_catalog.pg_constraint f
                 JOIN pg_catalog.pg_class fc ON fc.oid = f.conrelid
                 WHERE f.contype = 'f' AND f.conindid = k.conindid), '')::text AS referenced_by
FROM pg_catalog.pg_constraint k
JOIN pg_catalog.pg_class i ON i.oid = k.conindid
JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p')
  AND k.contype IN ('p', 'u', 'x')
ORDER BY 1, 2;

-- name: ReadinessConstraintFlags :many
-- The pg_constraint switches that pg_get_constraintdef does not render (it renders contype,
-- keys, actions, MATCH, DEFERRABLE and INITIALLY DEFERRED from condeferrable and condeferred,
-- NOT VALID from convalidated, NO INHERIT from connoinherit and, from PostgreSQL 18, NOT
-- ENFORCED from conenforced): whether the constraint is the table's own and how many parents
-- it is inherited from (an inherited constraint cannot be dropped, so the next migration that
-- drops it fails). Left out: conindid, conparentid, conkey and the operator arrays (identities
-- and definitions).
SELECT c.relname::text AS table_name,
       k.conname::text AS constraint_name,
       k.conislocal AS is_local,
       k.coninhcount::integer AS inherited_count
FROM pg_catalog.pg_constraint k
JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p')
  AND k.contype IN ('p', 'u', 'f', 'c', 'x')
ORDER BY 1, 2;

-- name: ReadinessSchemaObjects :many
-- Everything else in schema control_core: relations that are not tables (sequences with their
-- parameters and the column that owns them, views, materialized views, foreign tables,
-- composite types) and the objects of the other catalogs that live in a schema (types,
-- operators, collations, operator classes and families, conversions, extended statistics, text
-- search objects, extensions). Nothing is skipped: what the contract does not list is reported.
SELECT x.kind::text AS kind, x.name::text AS name, x.definition::text AS definition
FROM (
    SELECT (CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized_view'
                           WHEN 'f' THEN 'foreign_table' WHEN 'c' THEN 'composite_type' ELSE 'relation_' || c.relkind::text END) AS kind,
           c.relname::text AS name,
           (CASE WHEN c.relkind = 'S' THEN
                (SELECT pg_catalog.format('AS %s START %s INCREMENT %s MINVALUE %s MAXVALUE %s CACHE %s %s',
                                          pg_catalog.format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin,
                                          s.seqmax, s.seqcache, CASE WHEN s.seqcycle THEN 'CYCLE' ELSE 'NO CYCLE' END)
                 FROM pg_catalog.pg_sequence s WHERE s.seqrelid = c.oid)
                || coalesce((SELECT pg_catalog.format(' OWNED BY %I.%I.%I%s', dn.nspname, dc.relname, da.attname,
                                                      CASE d.deptype WHEN 'i' THEN ' (identity)' ELSE '' END)
                             FROM pg_catalog.pg_depend d
                             JOIN pg_catalog.pg_class dc ON dc.oid = d.refobjid
                             JOIN pg_catalog.pg_namespace dn ON dn.oid = dc.relnamespace
                             JOIN pg_catalog.pg_attribute da ON da.attrelid = d.refobjid AND da.attnum = d.refobjsubid
                             WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objid = c.oid
                               AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.deptype IN ('a', 'i')
                             LIMIT 1), '')
                 WHEN c.relkind IN ('v', 'm') THEN pg_catalog.pg_get_viewdef(c.oid)
                 ELSE '' END) AS definition
    FROM pg_catalog.pg_class c
    WHERE c.relnamespace = 'control_core'::pg_catalog.regnamespace AND c.relkind NOT IN ('r', 'p', 'i', 'I')
    UNION ALL
    SELECT 'type', t.typname::text, (CASE t.typtype WHEN 'd' THEN 'domain over ' || pg_catalog.format_type(t.typbasetype, t.typtypmod)
                                                    WHEN 'e' THEN 'enum' WHEN 'r' THEN 'range' WHEN 'm' THEN 'multirange'
                                                    WHEN 'b' THEN 'base' WHEN 'p' THEN 'pseudo' ELSE 'composite' END)
    FROM pg_catalog.pg_type t
    WHERE t.typnamespace = 'control_core'::pg_catalog.regnamespace
      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid AND c.relkind <> 'c') -- a table's row type is the table
      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_type e WHERE e.typarray = t.oid)                      -- an array type comes with its element
      AND NOT (t.typtype = 'c' AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid)) -- a composite type is its relation
      AND NOT (t.typtype = 'm' AND EXISTS (SELECT 1 FROM pg_catalog.pg_range r WHERE r.rngmultitypid = t.oid))
    UNION ALL
    SELECT 'operator', pg_catalog.format('%s(%s, %s)', o.oprname, pg_catalog.format_type(o.oprleft, NULL), pg_catalog.format_type(o.oprright, NULL)),
           o.oprcode::text
    FROM pg_catalog.pg_operator o WHERE o.oprnamespace = 'control_core'::pg_catalog.regnamespace
    UNION ALL
    SELECT 'collation', co.collname::text, co.collprovider::text FROM pg_catalog.pg_collation co
    WHERE co.collnamespace = 'control_core'::pg_catalog.regnamespace
    UNION ALL
    SELECT 'operator_class', oc.opcname::text, '' FROM pg_catalog.pg_opclass oc WHERE oc.opcnamespace = 'control_core'::pg_catalog.regnamespace
    UNION ALL
    SELECT 'operator_family', of.opfname::text, '' FROM pg_catalog.pg_opfamily of WHERE of.opfnamespace = 'control_core'::pg_catalog.regnamespace
    UNION ALL
    SELECT 'conversion', cv.conname::text, '' FROM pg_catalog.pg_conversion cv WHERE cv.connamespace = 'control_core'::pg_catalog.regnamespace
    UNION ALL
    SELECT 'statistics', st.stxname::text, '' FROM pg_catalog.pg_statistic_ext st WHERE st.stxnamespace = 'control_core'::pg_catalog.regnamespace
    UNION ALL
    SELECT 'text_search_configuration', ts.cfgname::text, '' FROM pg_catalog.pg_ts_config ts WHERE ts.cfgnamespace = 'control_core'::pg_catalog.regnamespace
    UNION ALL
    SELECT 'text_search_dictionary', td.dictname::text, '' FROM pg_catalog.pg_ts_dict td WHERE td.dictnamespace = 'control_core'::pg_catalog.regnamespace
    UNION ALL
    SELECT 'text_search_parser', tp.prsname::text, '' FROM pg_catalog.pg_ts_parser tp WHERE tp.prsnamespace = 'control_core'::pg_catalog.regnamespace
    UNION ALL
    SELECT 'text_search_template', tt.tmplname::text, '' FROM pg_catalog.pg_ts_template tt WHERE tt.tmplnamespace = 'control_core'::pg_catalog.regnamespace
    UNION ALL
    SELECT 'extension', e.extname::text, e.extversion::text FROM pg_catalog.pg_extension e WHERE e.extnamespace = 'control_core'::pg_catalog.regnamespace
) x
ORDER BY 1, 2;
