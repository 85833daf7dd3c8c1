-- Catalog reads of writes that arrive from outside the roles (readiness.SubscriptionDrift) and of the
-- built-ins the schema depends on (readiness.BuiltinDrift). Read-only, inside verify's one
-- read-only transaction with search_path pg_catalog; every column named here is readable by
-- PUBLIC on PostgreSQL 15 to 18 (pg_subscription's conninfo is not, and is not read).

-- name: OutsideSubscriptions :many
-- The logical-replication subscriptions of this database (a subscription applies rows only into
-- the database it was created in), with the control_core tables it already has rows for. Its
-- apply worker writes as its owner with session_replication_role = replica: ordinary triggers
-- and the foreign keys' triggers do not fire.
SELECT s.subname::text AS name,
       s.subenabled AS enabled,
       coalesce(s.subslotname::text, '')::text AS slot_name,
       pg_catalog.array_to_string(s.subpublications, ', ')::text AS publications,
       coalesce((SELECT pg_catalog.string_agg(c.relname::text, ', ' ORDER BY c.relname)
                 FROM pg_catalog.pg_subscription_rel r
                 JOIN pg_catalog.pg_class c ON c.oid = r.srrelid
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                 WHERE r.srsubid = s.oid AND n.nspname = 'control_core'), '')::text AS control_core_tables
FROM pg_catalog.pg_subscription s
WHERE s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
ORDER BY 1;

-- name: BuiltinFunctions :many
-- Every function initdb created in pg_catalog (oid below FirstNormalObjectId, 16384: no later
-- object gets one) with every fact that decides what a call computes; the grants (proacl) and the planner's
-- cost and rows estimates are left out, a DBA's to tune. Types and functions by name, not oid:
-- what initdb creates after bootstrap (plpgsql's handlers) gets oids that vary with the
-- machine's locales (the collations are imported first). information_schema is left out for
-- that reason (its SQL bodies hold such oids), and nothing of control-core calls it. The node trees (SQL-standard
-- bodies, argument defaults) come as text and are hashed by the client, not by the server's
-- sha256, which is one of the functions checked.
SELECT p.oid::oid AS oid,
       (n.nspname::text || '.' || p.proname::text || '(' || pg_catalog.oidvectortypes(p.proargtypes) || ')')::text AS signature,
       (p.proowner = 10) AS bootstrap_owner,
       l.lanname::text AS language,
       p.prokind::text AS kind,
       p.provolatile::text AS volatility,
       p.proparallel::text AS parallel,
       p.proisstrict AS strict,
       p.prosecdef AS security_definer,
       p.proleakproof AS leakproof,
       p.proretset AS returns_set,
       pg_catalog.format_type(p.prorettype, NULL)::text AS result,
       (CASE WHEN p.provariadic = 0 THEN '-' ELSE pg_catalog.format_type(p.provariadic, NULL) END)::text AS variadic,
       (CASE WHEN p.prosupport = 0 THEN '-' ELSE p.prosupport::oid::regprocedure::text END)::text AS support,
       coalesce((SELECT pg_catalog.string_agg(pg_catalog.format_type(t.oid, NULL), ',' ORDER BY t.ord)
                 FROM pg_catalog.unnest(p.proallargtypes) WITH ORDINALITY AS t(oid, ord)), '-')::text AS all_arg_types,
       coalesce(pg_catalog.array_to_string(p.proargmodes, ','), '-')::text AS arg_modes,
       coalesce(pg_catalog.array_to_string(p.proargnames, ',', '""'), '-')::text AS arg_names,
       p.pronargdefaults::int4 AS nargdefaults,
       coalesce(p.proargdefaults::text, '')::text AS arg_defaults,
       p.prosrc::text AS src,
       coalesce(p.probin, '')::text AS bin,
       coalesce(p.prosqlbody::text, '')::text AS sql_body,
       coalesce(pg_catalog.array_to_string(p.proconfig, ','), '')::text AS config
FROM pg_catalog.pg_proc p
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
JOIN pg_catalog.pg_language l ON l.oid = p.prolang
WHERE p.oid < 16384 AND p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace
ORDER BY 2;

-- name: BuiltinOperators :many
-- Every operator initdb created, with the function it calls: UPDATE pg_operator can point a
-- built-in operator (the schema's OPERATOR(pg_catalog.*), every = and <) at another function.
SELECT o.oid::oid AS oid,
       (n.nspname::text || '.' || o.oprname::text || '(' || pg_catalog.format_type(o.oprleft, NULL) || ',' ||
        pg_catalog.format_type(o.oprright, NULL) || ')')::text AS signature,
       (o.oprowner = 10) AS bootstrap_owner,
       o.oprkind::text AS kind,
       pg_catalog.format_type(o.oprresult, NULL)::text AS result,
       o.oprcode::oid::regprocedure::text AS code,
       o.oprcom::oid::regoperator::text AS commutator,
       o.oprnegate::oid::regoperator::text AS negator
FROM pg_catalog.pg_operator o
JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace
WHERE o.oid < 16384 AND o.oprnamespace = 'pg_catalog'::pg_catalog.regnamespace
ORDER BY 2;

-- name: BuiltinServerMajor :one
-- The server's major version, which the built-ins' contract is keyed by.
SELECT (pg_catalog.current_setting('server_version_num')::int4 / 10000)::int4 AS major;

-- name: UserObjectsInCatalog :many
-- Functions and operators created in schema pg_catalog after initdb, extensions' members aside:
-- pg_catalog is searched first by every session, so a new overload there can take a call that
-- named a built-in (an argument of type unknown resolves to the new one).
SELECT 'function'::text AS kind, p.oid::oid AS oid, p.oid::regprocedure::text AS name
FROM pg_catalog.pg_proc p
WHERE p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace AND p.oid >= 16384
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                  WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid AND d.deptype = 'e')
UNION ALL
SELECT 'operator'::text, o.oid::oid, o.oid::regoperator::text
FROM pg_catalog.pg_operator o
WHERE o.oprnamespace = 'pg_catalog'::pg_catalog.regnamespace AND o.oid >= 16384
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                  WHERE d.classid = 'pg_catalog.pg_operator'::pg_catalog.regclass AND d.objid = o.oid AND d.deptype = 'e')
ORDER BY 1, 3;

-- name: BuiltinOpFamilies :many
-- Every operator family and class in pg_catalog (an index compares its keys with its class's
-- family), extensions' members aside; those created after initdb (oid 16384 on) are drift too.
-- Keyed by access method and name, never by oid.
SELECT 'opfamily'::text AS kind, f.oid::oid AS oid,
       ('pg_catalog.' || f.opfname::text || ' USING ' || a.amname::text)::text AS signature,
       (f.opfowner = 10) AS bootstrap_owner,
       ''::text AS family, ''::text AS intype, ''::text AS keytype, false AS is_default
FROM pg_catalog.pg_opfamily f
JOIN pg_catalog.pg_am a ON a.oid = f.opfmethod
WHERE f.opfnamespace = 'pg_catalog'::pg_catalog.regnamespace
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                  WHERE d.classid = 'pg_catalog.pg_opfamily'::pg_catalog.regclass AND d.objid = f.oid AND d.deptype = 'e')
UNION ALL
SELECT 'opclass'::text, c.oid::oid,
       ('pg_catalog.' || c.opcname::text || ' USING ' || a.amname::text)::text,
       (c.opcowner = 10),
       (fn.nspname::text || '.' || f.opfname::text)::text,
       pg_catalog.format_type(c.opcintype, NULL)::text,
       (CASE WHEN c.opckeytype = 0 THEN '-' ELSE pg_catalog.format_type(c.opckeytype, NULL) END)::text,
       c.opcdefault
FROM pg_catalog.pg_opclass c
JOIN pg_catalog.pg_am a ON a.oid = c.opcmethod
JOIN pg_catalog.pg_opfamily f ON f.oid = c.opcfamily
JOIN pg_catalog.pg_namespace fn ON fn.oid = f.opfnamespace
WHERE c.opcnamespace = 'pg_catalog'::pg_catalog.regnamespace
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                  WHERE d.classid = 'pg_catalog.pg_opclass'::pg_catalog.regclass AND d.objid = c.oid AND d.deptype = 'e');

-- name: BuiltinFamilyMembers :many
-- Every operator and support function of the operator families initdb created (family oid below
-- 16384), whatever the member's oid: a row added later (ALTER OPERATOR FAMILY … ADD) is drift.
-- UPDATE pg_amproc can point btree text_ops' comparison at another function, and every unique
-- index on text then compares with it. Keyed by family, types and number, never by oid.
SELECT 'amop'::text AS kind, o.oid::oid AS oid,
       ('pg_catalog.' || f.opfname::text || ' USING ' || a.amname::text || ': OPERATOR ' || o.amopstrategy::text || ' (' ||
        pg_catalog.format_type(o.amoplefttype, NULL) || ',' || pg_catalog.format_type(o.amoprighttype, NULL) || ')')::text AS signature,
       o.amopopr::oid::regoperator::text AS member,
       o.amoppurpose::text AS purpose,
       (CASE WHEN o.amopsortfamily = 0 THEN '-'
             ELSE (SELECT sn.nspname::text || '.' || sf.opfname::text FROM pg_catalog.pg_opfamily sf
                   JOIN pg_catalog.pg_namespace sn ON sn.oid = sf.opfnamespace WHERE sf.oid = o.amopsortfamily) END)::text AS sortfamily,
       (o.amopmethod = f.opfmethod) AS same_method
FROM pg_catalog.pg_amop o
JOIN pg_catalog.pg_opfamily f ON f.oid = o.amopfamily
JOIN pg_catalog.pg_am a ON a.oid = f.opfmethod
WHERE f.oid < 16384
UNION ALL
SELECT 'amproc'::text, p.oid::oid,
       ('pg_catalog.' || f.opfname::text || ' USING ' || a.amname::text || ': FUNCTION ' || p.amprocnum::text || ' (' ||
        pg_catalog.format_type(p.amproclefttype, NULL) || ',' || pg_catalog.format_type(p.amprocrighttype, NULL) || ')')::text,
       p.amproc::oid::regprocedure::text,
       ''::text, '-'::text, true
FROM pg_catalog.pg_amproc p
JOIN pg_catalog.pg_opfamily f ON f.oid = p.amprocfamily
JOIN pg_catalog.pg_am a ON a.oid = f.opfmethod
WHERE f.oid < 16384;

-- name: BuiltinCasts :many
-- Every cast initdb created (a cast created later is readiness.CastDrift's): UPDATE pg_cast can
-- make bigint to integer implicit, or point a cast at another function. Keyed by the two types.
SELECT c.oid::oid AS oid,
       ('(' || pg_catalog.format_type(c.castsource, NULL) || ' AS ' || pg_catalog.format_type(c.casttarget, NULL) || ')')::text AS signature,
       (CASE WHEN c.castfunc = 0 THEN '-' ELSE c.castfunc::oid::regprocedure::text END)::text AS function,
       c.castcontext::text AS context,
       c.castmethod::text AS method
FROM pg_catalog.pg_cast c
WHERE c.oid < 16384;
