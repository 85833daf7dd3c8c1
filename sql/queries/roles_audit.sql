-- Catalog reads of the roles audit beyond privileges (roles.Read): settings, LOGIN members, large
-- objects, and what the four roles may do in the cluster's other databases. Like verify.sql they
-- run inside one read-only transaction whose search_path is pg_catalog only. Every catalog and
-- function used here is readable by any role (pg_db_role_setting, pg_auth_members,
-- pg_largeobject_metadata, pg_database, has_database_privilege), so the audit works connected
-- as the runtime or the owner role, not only as a superuser.

-- name: RoleSettings :many
-- Stored settings that apply to the four roles in this database: their own (ALTER ROLE r SET,
-- database 0), their own here (ALTER ROLE r IN DATABASE d SET), this database's (ALTER DATABASE
-- d SET, role 0) and every role's everywhere (ALTER ROLE ALL SET, both 0). One row per setting;
-- role_name is empty for the database's and ALL's.
SELECT coalesce(r.rolname, '')::text AS role_name,
       (s.setdatabase <> 0)::boolean AS in_database,
       pg_catalog.split_part(c.entry, '=', 1)::text AS name,
       pg_catalog.substr(c.entry, pg_catalog.strpos(c.entry, '=') + 1)::text AS value
FROM pg_catalog.pg_db_role_setting s
LEFT JOIN pg_catalog.pg_roles r ON r.oid = s.setrole
CROSS JOIN LATERAL pg_catalog.unnest(s.setconfig) WITH ORDINALITY AS c(entry, ord)
WHERE (s.setdatabase = 0 OR s.setdatabase = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()))
  AND (s.setrole = 0 OR r.rolname = ANY (@role_names::text[]))
ORDER BY (s.setrole = 0), 1, 2, c.ord;

-- name: LoginMembers :many
-- LOGIN roles that may act as one of the four roles: members, directly or through other roles,
-- along memberships that confer the role's privileges (inherit) or SET ROLE. PostgreSQL 16 added
-- inherit_option and set_option to pg_auth_members (a membership with neither only administers
-- the role: the CREATEROLE creator's); to_jsonb reads them where they exist, and before 16 every
-- membership allows SET ROLE. The walk goes on through NOLOGIN roles and through allowed LOGIN
-- roles, and stops at any other LOGIN role (reported itself: its own fix cuts the paths below
-- it), at superusers (who need no membership) and at the four roles (a membership of one of
-- them is drift of its own). One row per path: its last edge (member → parent, grantor) is the
-- grant that the fix revokes.
WITH RECURSIVE model AS (
    SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = ANY (@role_names::text[])
), edges AS (
    SELECT m.roleid, m.member, m.grantor
    FROM pg_catalog.pg_auth_members m
    WHERE coalesce((pg_catalog.to_jsonb(m) ->> 'inherit_option')::boolean, true)
       OR coalesce((pg_catalog.to_jsonb(m) ->> 'set_option')::boolean, true)
), reach AS (
    SELECT md.oid AS model_role, e.member, e.roleid AS parent, e.grantor, ARRAY[md.oid, e.member] AS path
    FROM model md JOIN edges e ON e.roleid = md.oid
    UNION ALL
    SELECT r.model_role, e.member, e.roleid, e.grantor, r.path || e.member
    FROM reach r
    JOIN pg_catalog.pg_roles via ON via.oid = r.member
    JOIN edges e ON e.roleid = r.member
    WHERE e.member <> ALL (r.path)
      AND via.oid NOT IN (SELECT oid FROM model) AND NOT via.rolsuper
      AND (NOT via.rolcanlogin OR via.rolname = ANY (@allowed_members::text[]))
)
SELECT pg_catalog.pg_get_userbyid(x.model_role)::text AS role_name,
       mr.rolname::text AS member,
       pg_catalog.pg_get_userbyid(x.parent)::text AS parent,
       pg_catalog.pg_get_userbyid(x.grantor)::text AS grantor,
       (SELECT pg_catalog.array_agg(pg_catalog.pg_get_userbyid(p.oid) ORDER BY p.ord)
        FROM pg_catalog.unnest(x.path) WITH ORDINALITY AS p(oid, ord))::text[] AS path,
       (mr.rolname = ANY (@allowed_members::text[]))::boolean AS allowed
FROM reach x
JOIN pg_catalog.pg_roles mr ON mr.oid = x.member
WHERE mr.rolcanlogin AND NOT mr.rolsuper AND mr.oid NOT IN (SELECT oid FROM model)
ORDER BY 1, 2, pg_catalog.array_length(x.path, 1), 3, 4;

-- name: LargeObjectsOfRoles :many
-- Large objects of this database owned by one of the four roles or whose ACL grants to one of
-- them or to PUBLIC (every role, the four included), with every entry of their ACL (a fix that changes the owner rewrites the old owner's
-- entries). database_owner and bootstrap_superuser are the candidates for the new owner.
SELECT l.oid::bigint AS large_object,
       pg_catalog.pg_get_userbyid(l.lomowner)::text AS owner,
       coalesce(CASE WHEN a.grantor = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantor) END, '')::text AS grantor,
       coalesce(CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantee) END, '')::text AS grantee,
       coalesce(a.privilege_type, '')::text AS privilege,
       coalesce(a.is_grantable, false)::boolean AS grantable,
       (SELECT pg_catalog.pg_get_userbyid(d.datdba) FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())::text AS database_owner,
       pg_catalog.pg_get_userbyid(10)::text AS bootstrap_superuser
FROM pg_catalog.pg_largeobject_metadata l
LEFT JOIN LATERAL pg_catalog.aclexplode(l.lomacl) AS a(grantor, grantee, privilege_type, is_grantable) ON true
WHERE pg_catalog.pg_get_userbyid(l.lomowner) = ANY (@role_names::text[])
   OR EXISTS (SELECT 1 FROM pg_catalog.aclexplode(l.lomacl) x
              WHERE x.grantee = 0 OR pg_catalog.pg_get_userbyid(x.grantee) = ANY (@role_names::text[]))
ORDER BY 1, 4, 5, 3;

-- name: OtherDatabasePrivileges :many
-- CONNECT and TEMPORARY that the four roles hold on the cluster's other databases that accept
-- connections (templates left out), with where each comes from: one row per ACL entry that gives
-- it (to PUBLIC, to the role, or to a role whose privileges it inherits); via is empty when none
-- does (a superuser).
SELECT r.rolname::text AS role_name,
       d.datname::text AS database,
       p.privilege::text AS privilege,
       coalesce(CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantee) END, '')::text AS via,
       coalesce(pg_catalog.pg_get_userbyid(a.grantor), '')::text AS grantor,
       pg_catalog.pg_get_userbyid(d.datdba)::text AS database_owner
FROM pg_catalog.pg_roles r
CROSS JOIN pg_catalog.pg_database d
CROSS JOIN (VALUES ('CONNECT'), ('TEMPORARY')) AS p(privilege)
LEFT JOIN LATERAL (
    SELECT x.grantor, x.grantee
    FROM pg_catalog.aclexplode(coalesce(d.datacl, pg_catalog.acldefault('d', d.datdba))) AS x(grantor, grantee, privilege_type, is_grantable)
    WHERE x.privilege_type = p.privilege
      AND (x.grantee = 0 OR x.grantee = r.oid OR pg_catalog.pg_has_role(r.oid, x.grantee, 'USAGE'))
) a ON true
WHERE r.rolname = ANY (@role_names::text[])
  AND d.datname <> pg_catalog.current_database() AND d.datallowconn AND NOT d.datistemplate
  AND pg_catalog.has_database_privilege(r.oid, d.oid, p.privilege)
ORDER BY 1, 2, 3, 4, 5;

-- name: DefinerFunctions :many
-- SECURITY DEFINER routines (functions and procedures) outside pg_catalog, information_schema
-- and control_core (control_core's are the contract's, audited by readiness) that one of the four
-- roles may execute (EXECUTE on the routine and USAGE on its schema, through PUBLIC, a grant of
-- its own or a membership) and whose owner may change control_core's data: a superuser, a role
-- holding INSERT, UPDATE, DELETE or TRUNCATE on (or owning) a control_core table, or one of the
-- four roles. Calling one runs its body with its owner's powers. One row per routine and model
-- role that may execute it. public_may: PUBLIC itself may (EXECUTE and the schema's USAGE);
-- direct: the grantees of EXECUTE among PUBLIC and the four roles (what the fix revokes), with
-- their grantors at the same index in direct_grantors; via:
-- the other roles whose EXECUTE role_name holds through membership.
WITH model AS (
    SELECT r.oid, r.rolname FROM pg_catalog.pg_roles r WHERE r.rolname = ANY (@role_names::text[])
), fn AS (
    SELECT p.oid, p.prokind, p.pronamespace, p.proowner,
           pg_catalog.format('%I.%I(%s)', n.nspname, p.proname, pg_catalog.oidvectortypes(p.proargtypes)) AS signature,
           pg_catalog.aclexplode(coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) AS acl
    FROM pg_catalog.pg_proc p
    JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
    WHERE p.prosecdef AND p.prokind IN ('f', 'p')
      AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'control_core')
), routines AS (
    SELECT DISTINCT f.oid, f.prokind, f.pronamespace, f.proowner, f.signature FROM fn f
), writers AS (
    SELECT r.oid, r.proowner,
           (o.rolsuper OR o.oid IN (SELECT oid FROM model) OR EXISTS (
                SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace cn ON cn.oid = c.relnamespace
                WHERE cn.nspname = 'control_core' AND c.relkind IN ('r', 'p')
                  AND (c.relowner = o.oid OR pg_catalog.has_table_privilege(o.oid, c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE'))
           ))::boolean AS dangerous,
           o.rolsuper AS owner_superuser
    FROM routines r JOIN pg_catalog.pg_roles o ON o.oid = r.proowner
)
SELECT r.signature::text AS signature,
       (CASE r.prokind WHEN 'p' THEN 'procedure' ELSE 'function' END)::text AS kind,
       pg_catalog.pg_get_userbyid(r.proowner)::text AS owner,
       w.owner_superuser::boolean AS owner_superuser,
       m.rolname::text AS role_name,
       (pg_catalog.has_function_privilege('public', r.oid, 'EXECUTE')
        AND pg_catalog.has_schema_privilege('public', r.pronamespace, 'USAGE'))::boolean AS public_may,
       coalesce((SELECT pg_catalog.array_agg(CASE WHEN (f.acl).grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid((f.acl).grantee) END
                                             ORDER BY (f.acl).grantor, (f.acl).grantee)
                 FROM fn f
                 WHERE f.oid = r.oid AND (f.acl).privilege_type = 'EXECUTE'
                   AND ((f.acl).grantee = 0 OR (f.acl).grantee IN (SELECT oid FROM model))), '{}')::text[] AS direct,
       coalesce((SELECT pg_catalog.array_agg(pg_catalog.pg_get_userbyid((f.acl).grantor) ORDER BY (f.acl).grantor, (f.acl).grantee)
                 FROM fn f
                 WHERE f.oid = r.oid AND (f.acl).privilege_type = 'EXECUTE'
                   AND ((f.acl).grantee = 0 OR (f.acl).grantee IN (SELECT oid FROM model))), '{}')::text[] AS direct_grantors,
       coalesce((SELECT pg_catalog.array_agg(DISTINCT pg_catalog.pg_get_userbyid((f.acl).grantee))
                 FROM fn f
                 WHERE f.oid = r.oid AND (f.acl).privilege_type = 'EXECUTE'
                   AND (f.acl).grantee <> 0 AND (f.acl).grantee <> m.oid
                   AND pg_catalog.pg_has_role(m.oid, (f.acl).grantee, 'USAGE')), '{}')::text[] AS via
FROM routines r
JOIN writers w ON w.oid = r.oid
CROSS JOIN model m
WHERE w.dangerous
  AND pg_catalog.has_function_privilege(m.oid, r.oid, 'EXECUTE')
  AND pg_catalog.has_schema_privilege(m.oid, r.pronamespace, 'USAGE')
ORDER BY 1, 5;

-- name: DatabaseConnections :one
-- Who may connect to this database at all: its CONNECTION LIMIT (-1: none; superusers are never
-- limited) and ALLOW_CONNECTIONS.
SELECT d.datname::text AS database, d.datconnlimit::integer AS connection_limit, d.datallowconn::boolean AS allow_connections
FROM pg_catalog.pg_database d
WHERE d.datname = pg_catalog.current_database();

-- name: PredefinedRoleMembers :many
-- Direct members of a predefined role (below FirstNormalObjectId, 16384; not a superuser) whose
-- own privileges reach one of the tables (control_core, by name) without any grant on them:
-- pg_read_all_data, pg_write_all_data, from PostgreSQL 17 pg_maintain, and whatever a later
-- server adds, found by has_table_privilege of the predefined role itself, not by a list. Members
-- that are superusers or predefined roles are left out; so is a role nobody may use here (no
-- role with its privileges may LOGIN and CONNECT to this database), as the cluster's other
-- databases' roles are theirs. privileges: what membership allows on those tables.
SELECT pg_catalog.pg_get_userbyid(m.roleid)::text AS role_name,
       pg_catalog.pg_get_userbyid(m.member)::text AS member,
       pg_catalog.pg_get_userbyid(m.grantor)::text AS grantor,
       pg_catalog.array_agg(DISTINCT a.privilege_type ORDER BY a.privilege_type)::text[] AS privileges
FROM pg_catalog.pg_auth_members m
JOIN pg_catalog.pg_roles p ON p.oid = m.roleid
JOIN pg_catalog.pg_roles r ON r.oid = m.member
CROSS JOIN (SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'control_core' AND c.relname = ANY (@tables::text[])) t
CROSS JOIN (SELECT x.privilege_type FROM pg_catalog.aclexplode(pg_catalog.acldefault('r', 10::oid)) AS x(grantor, grantee, privilege_type, is_grantable)
            WHERE x.grantee = 10::oid) a
WHERE p.oid < 16384 AND NOT p.rolsuper AND r.oid >= 16384 AND NOT r.rolsuper
  AND pg_catalog.has_table_privilege(p.oid, t.oid, a.privilege_type)
  AND (r.rolname = ANY (@role_names::text[]) OR EXISTS (
        SELECT 1 FROM pg_catalog.pg_roles x
        WHERE x.rolcanlogin AND NOT x.rolsuper -- a superuser uses every role anyway, through no membership
          AND pg_catalog.pg_has_role(x.oid, r.oid, 'USAGE')
          AND pg_catalog.has_database_privilege(x.oid, pg_catalog.current_database(), 'CONNECT')))
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3;

-- name: ParameterPrivileges :many
-- Parameter privileges (GRANT SET | ALTER SYSTEM ON PARAMETER, PostgreSQL 15 and later; the
-- catalog does not exist before, so roles.ReadAuditIn runs this only on 15+) that one of the
-- four roles holds: granted to it, to PUBLIC, or to a role it is a member of (MEMBER: through
-- inheritance or SET ROLE, either one lets it use them). One row per ACL entry and model role;
-- grantee is 'PUBLIC' for PUBLIC. pg_parameter_acl is readable by every role.
SELECT p.parname::text AS parameter,
       CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(x.grantee) END::text AS grantee,
       pg_catalog.pg_get_userbyid(x.grantor)::text AS grantor,
       x.privilege_type::text AS privilege,
       x.is_grantable::boolean AS grantable,
       r.rolname::text AS role_name,
       pg_catalog.pg_get_userbyid(10)::text AS bootstrap_superuser
FROM pg_catalog.pg_parameter_acl p
CROSS JOIN LATERAL pg_catalog.aclexplode(p.paracl) AS x(grantor, grantee, privilege_type, is_grantable)
JOIN pg_catalog.pg_roles r ON r.rolname = ANY (@role_names::text[])
WHERE x.grantee = 0 OR x.grantee = r.oid OR pg_catalog.pg_has_role(r.oid, x.grantee, 'MEMBER')
ORDER BY 1, 2, 3, 4, 6;

-- name: CurrentUserMaySetParameter :one
-- Whether the connected role may SET the parameter (PostgreSQL 15 and later): by a grant to it,
-- to PUBLIC or to a role whose privileges it inherits, or as a superuser. Readiness's own check
-- of session_replication_role, whatever route the privilege takes.
SELECT pg_catalog.has_parameter_privilege(current_user, @parameter::text, 'SET')::boolean AS may_set;
