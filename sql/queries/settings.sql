-- The effective value, in this session, of each setting that changes what control-core's
-- statements do (internal/app/verify, check "settings"), and where it came from. pg_settings shows
-- every role its own session's values and sources; sourcefile and sourceline are NULL unless the
-- role is a superuser or a member of pg_read_all_settings.

-- name: EffectiveSettings :many
SELECT s.name::text AS name,
       coalesce(s.setting, '')::text AS setting,
       coalesce(s.source, '')::text AS source,
       coalesce(s.sourcefile, '')::text AS source_file,
       coalesce(s.sourceline, 0)::integer AS source_line,
       pg_catalog.session_user()::text AS session_role,
       pg_catalog.current_database()::text AS database
FROM pg_catalog.pg_settings s
WHERE s.name = ANY (@names::text[])
ORDER BY s.name;

-- name: DatabaseOwnership :one
-- The current database's owner, whether it is a superuser, and the bootstrap superuser (the
-- role initdb created, OID 10), to whom roles.Audit gives the database back when one of the
-- four roles owns it.
SELECT pg_catalog.pg_get_userbyid(d.datdba)::text AS owner,
       coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = d.datdba), false)::boolean AS owner_superuser,
       pg_catalog.pg_get_userbyid(10)::text AS bootstrap_superuser
FROM pg_catalog.pg_database d
WHERE d.datname = pg_catalog.current_database();
