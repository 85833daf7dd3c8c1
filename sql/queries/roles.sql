-- name: RoleAttributes :many
-- Attributes of the named roles that exist. valid_until is empty when the role never expires (NULL
-- or 'infinity'), else the time as the server renders it.
SELECT rolname::text AS name, rolcanlogin AS can_login, rolsuper AS superuser, rolcreatedb AS create_db,
       rolcreaterole AS create_role, rolreplication AS replication, rolbypassrls AS bypass_rls,
       rolconnlimit::integer AS connection_limit,
       (CASE WHEN rolvaliduntil IS NULL OR rolvaliduntil = 'infinity' THEN '' ELSE rolvaliduntil::text END)::text AS valid_until
FROM pg_catalog.pg_roles
WHERE rolname = ANY (@names::text[])
ORDER BY rolname;

-- name: CurrentRole :one
-- Who is connected, and may it create roles.
SELECT current_user::text AS current_user, session_user::text AS session_user, current_database()::text AS database,
       r.rolsuper AS superuser, r.rolcreaterole AS create_role
FROM pg_catalog.pg_roles r
WHERE r.rolname = current_user;
