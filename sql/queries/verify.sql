-- Catalog reads of `qlmigrate verify` and `qlmigrate grants`. Every query here is read-only and
-- runs inside verify's one read-only transaction, after SET LOCAL search_path = pg_catalog, so
-- every name the server deparses (defaults, constraints, indexes, types) comes out
-- schema-qualified and independent of the connected role's search_path.

-- name: ControlCoreObjects :one
-- Which of the objects verify reads before anything else exist. Read from pg_class, not with
-- to_regclass, which fails when the connected role may not use the schema (its owner changed).
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'control_core') AS schema_exists,
       EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = 'control_core' AND c.relname = 'goose_db_version') AS goose_table_exists,
       EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = 'control_core' AND c.relname = 'migration_ledger') AS ledger_exists,
       EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = 'control_core' AND c.relname = 'capabilities') AS capabilities_exists,
       pg_catalog.current_setting('server_version_num')::integer AS server_version_num,
       pg_catalog.current_setting('server_version')::text AS server_version,
       pg_catalog.current_database()::text AS database;

-- name: OwnerDefaultPrivileges :many
-- The privileges an owner holds on its own object of each kind, as this server version defines
-- them (PostgreSQL 17 added MAINTAIN on tables): the model's "everything the owner may".
SELECT k.kind::text AS kind, a.privilege_type::text AS privilege
FROM (VALUES ('database', 'd'), ('schema', 'n'), ('table', 'r'), ('sequence', 's'),
             ('function', 'f'), ('type', 'T'), ('language', 'l')) AS k(kind, code),
     pg_catalog.aclexplode(pg_catalog.acldefault(k.code::"char", 10::oid)) AS a(grantor, grantee, privilege_type, is_grantable)
WHERE a.grantee = 10::oid
ORDER BY 1, 2;

-- name: ModelObjects :many
-- Every object whose owner and privileges the model fixes: the current database, schema
-- control_core and every relation, routine and type in it (row types of tables and array types
-- follow their table or element and are left out).
SELECT o.kind::text AS kind, o.object::text AS object, pg_catalog.pg_get_userbyid(o.owner)::text AS owner
FROM (
    SELECT 'database' AS kind, pg_catalog.quote_ident(d.datname) AS object, d.datdba AS owner, 1 AS ord
    FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()
    UNION ALL
    SELECT 'schema', pg_catalog.quote_ident(n.nspname), n.nspowner, 2
    FROM pg_catalog.pg_namespace n WHERE n.nspname = 'control_core'
    UNION ALL
    SELECT CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view'
                          WHEN 'f' THEN 'foreign table' ELSE 'table' END,
           format('%I.%I', n.nspname, c.relname), c.relowner, 3
    FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'control_core' AND c.relkind IN ('r', 'p', 'S', 'v', 'm', 'f')
    UNION ALL
    SELECT CASE p.prokind WHEN 'p' THEN 'procedure' WHEN 'a' THEN 'aggregate' ELSE 'function' END,
           format('%I.%I(%s)', n.nspname, p.proname, pg_catalog.oidvectortypes(p.proargtypes)), p.proowner, 4
    FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'control_core'
    UNION ALL
    SELECT 'type', format('%I.%I', n.nspname, t.typname), t.typowner, 5
    FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
    LEFT JOIN pg_catalog.pg_class c ON c.oid = t.typrelid
    WHERE n.nspname = 'control_core' AND (t.typrelid = 0 OR c.relkind = 'c')
      AND NOT (t.typelem <> 0 AND t.typlen = -1)
) o
ORDER BY o.ord, o.object;

-- name: ObjectPrivileges :many
-- One row per privilege (aclexplode) on every modelled object, with the server's default ACL
-- where an object has none yet; plus any privilege held by one of the four roles on any other
-- schema, relation, routine, type or language of the database (explicit ACLs only).
SELECT o.kind::text AS kind, o.object::text AS object, o.modelled::boolean AS modelled,
       pg_catalog.pg_get_userbyid(o.owner)::text AS owner,
       (CASE WHEN a.grantor = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantor) END)::text AS grantor,
       (CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantee) END)::text AS grantee,
       a.privilege_type::text AS privilege, a.is_grantable::boolean AS grantable
FROM (
    SELECT 'database' AS kind, pg_catalog.quote_ident(d.datname) AS object, true AS modelled, d.datdba AS owner,
           coalesce(d.datacl, pg_catalog.acldefault('d', d.datdba)) AS acl
    FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()
    UNION ALL
    SELECT 'schema', pg_catalog.quote_ident(n.nspname), n.nspname = 'control_core', n.nspowner,
           CASE WHEN n.nspname = 'control_core' THEN coalesce(n.nspacl, pg_catalog.acldefault('n', n.nspowner)) ELSE n.nspacl END
    FROM pg_catalog.pg_namespace n
    UNION ALL
    SELECT CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view'
                          WHEN 'f' THEN 'foreign table' ELSE 'table' END,
           format('%I.%I', n.nspname, c.relname), n.nspname = 'control_core', c.relowner,
           CASE WHEN n.nspname = 'control_core'
                THEN coalesce(c.relacl, pg_catalog.acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner))
                ELSE c.relacl END
    FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p', 'S', 'v', 'm', 'f')
    UNION ALL
    SELECT CASE p.prokind WHEN 'p' THEN 'procedure' WHEN 'a' THEN 'aggregate' ELSE 'function' END,
           format('%I.%I(%s)', n.nspname, p.proname, pg_catalog.oidvectortypes(p.proargtypes)), n.nspname = 'control_core', p.proowner,
           CASE WHEN n.nspname = 'control_core' THEN coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner)) ELSE p.proacl END
    FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
    UNION ALL
    SELECT 'type', format('%I.%I', n.nspname, t.typname), n.nspname = 'control_core', t.typowner,
           CASE WHEN n.nspname = 'control_core' THEN coalesce(t.typacl, pg_catalog.acldefault('T', t.typowner)) ELSE t.typacl END
    FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
    LEFT JOIN pg_catalog.pg_class c ON c.oid = t.typrelid
    WHERE (t.typrelid = 0 OR c.relkind = 'c') AND NOT (t.typelem <> 0 AND t.typlen = -1)
    UNION ALL
    SELECT 'language', pg_catalog.quote_ident(l.lanname), false, l.lanowner, l.lanacl
    FROM pg_catalog.pg_language l
) o,
pg_catalog.aclexplode(o.acl) AS a(grantor, grantee, privilege_type, is_grantable)
WHERE o.acl IS NOT NULL
  AND (o.modelled OR (a.grantee <> 0 AND pg_catalog.pg_get_userbyid(a.grantee) = ANY (@role_names::text[])))
ORDER BY 1, 2, 5, 6, 4;

-- name: ColumnPrivileges :many
-- Column-level grants: any on a control_core table, and any held by one of the four roles
-- elsewhere. The model has none.
SELECT format('%I.%I', n.nspname, c.relname)::text AS table_name,
       pg_catalog.quote_ident(att.attname)::text AS column_name,
       (CASE WHEN a.grantor = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantor) END)::text AS grantor,
       (CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantee) END)::text AS grantee,
       a.privilege_type::text AS privilege, a.is_grantable::boolean AS grantable,
       pg_catalog.pg_get_userbyid(c.relowner)::text AS table_owner
FROM pg_catalog.pg_attribute att
JOIN pg_catalog.pg_class c ON c.oid = att.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace,
pg_catalog.aclexplode(att.attacl) AS a(grantor, grantee, privilege_type, is_grantable)
WHERE att.attacl IS NOT NULL AND att.attnum > 0 AND NOT att.attisdropped
  AND (n.nspname = 'control_core' OR (a.grantee <> 0 AND pg_catalog.pg_get_userbyid(a.grantee) = ANY (@role_names::text[])))
ORDER BY 1, 2, 4, 5;

-- name: DefaultPrivileges :many
-- Default ACLs (ALTER DEFAULT PRIVILEGES) that concern the model: those of the four roles, those
-- for schema control_core, and those granting to one of the four roles. A global entry
-- (schema '') replaces the server's defaults, so it is returned with those defaults beside it;
-- the owner role's global entry for functions is returned even when absent (then it is the
-- server's default, which lets PUBLIC execute: drift). A per-schema entry adds to the global one.
WITH roles AS (
    SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = ANY (@role_names::text[])
), entries AS (
    SELECT d.defaclrole AS role, d.defaclnamespace AS nsp, d.defaclobjtype AS objtype, d.defaclacl AS acl
    FROM pg_catalog.pg_default_acl d
    WHERE d.defaclrole IN (SELECT oid FROM roles)
       OR d.defaclnamespace IN (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'control_core')
       OR EXISTS (SELECT 1 FROM pg_catalog.aclexplode(d.defaclacl) x WHERE x.grantee IN (SELECT oid FROM roles))
    UNION ALL
    SELECT r.oid, 0::oid, 'f'::"char", NULL::aclitem[]
    FROM pg_catalog.pg_roles r
    WHERE r.rolname = @owner_name::text
      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_default_acl d
                      WHERE d.defaclrole = r.oid AND d.defaclnamespace = 0 AND d.defaclobjtype = 'f')
), items AS (
    SELECT e.role, e.nsp, e.objtype, false AS server_default, a.grantor, a.grantee, a.privilege_type, a.is_grantable
    FROM entries e,
         pg_catalog.aclexplode(coalesce(e.acl, pg_catalog.acldefault(CASE e.objtype WHEN 'S' THEN 's' ELSE e.objtype END, e.role)))
             AS a(grantor, grantee, privilege_type, is_grantable)
    UNION ALL
    SELECT e.role, e.nsp, e.objtype, true, a.grantor, a.grantee, a.privilege_type, a.is_grantable
    FROM entries e,
         pg_catalog.aclexplode(pg_catalog.acldefault(CASE e.objtype WHEN 'S' THEN 's' ELSE e.objtype END, e.role))
             AS a(grantor, grantee, privilege_type, is_grantable)
    WHERE e.nsp = 0
)
SELECT pg_catalog.pg_get_userbyid(i.role)::text AS for_role,
       coalesce((SELECT pg_catalog.quote_ident(n.nspname) FROM pg_catalog.pg_namespace n WHERE n.oid = i.nsp), '')::text AS in_schema,
       i.objtype::text AS object_type,
       i.server_default::boolean AS server_default,
       (CASE WHEN i.grantor = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(i.grantor) END)::text AS grantor,
       (CASE WHEN i.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(i.grantee) END)::text AS grantee,
       i.privilege_type::text AS privilege, i.is_grantable::boolean AS grantable
FROM items i
ORDER BY 1, 2, 3, 4, 6, 7;

-- name: RoleMemberships :many
-- Memberships that involve one of the four roles, as member or as the role granted.
SELECT pg_catalog.pg_get_userbyid(m.roleid)::text AS role_name,
       pg_catalog.pg_get_userbyid(m.member)::text AS member,
       pg_catalog.pg_get_userbyid(m.grantor)::text AS grantor,
       m.admin_option::boolean AS admin_option,
       r.rolsuper::boolean AS member_is_superuser
FROM pg_catalog.pg_auth_members m
JOIN pg_catalog.pg_roles r ON r.oid = m.member
WHERE pg_catalog.pg_get_userbyid(m.roleid) = ANY (@role_names::text[])
   OR pg_catalog.pg_get_userbyid(m.member) = ANY (@role_names::text[])
ORDER BY 1, 2, 3;

-- name: SchemaAccess :one
-- Whether the connected role may use schema control_core (USAGE: without it nothing inside can
-- be read), who owns the schema, and whether the connected role is, or has the privileges of,
-- one of role_names (the roles the model lets use it).
SELECT pg_catalog.has_schema_privilege(n.oid, 'USAGE')::boolean AS usable,
       pg_catalog.pg_get_userbyid(n.nspowner)::text AS owner,
       EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
               WHERE r.rolname = ANY (@role_names::text[]) AND pg_catalog.pg_has_role(r.oid, 'USAGE'))::boolean AS model_role
FROM pg_catalog.pg_namespace n
WHERE n.nspname = 'control_core';
