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
-- them, with every entry of their ACL (a fix that changes the owner rewrites the old owner's
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
              WHERE x.grantee <> 0 AND pg_catalog.pg_get_userbyid(x.grantee) = ANY (@role_names::text[]))
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
