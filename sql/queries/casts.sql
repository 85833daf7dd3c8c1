-- name: UserCasts :many
-- Casts created in this database (not by initdb, not by an extension) from or to a built-in
-- type. A cast is found by its types, not by search_path, so one of these replaces the
-- conversion a statement of control-core asks for (CAST(… AS tid) in the admit) whatever the
-- session's path; creating one on built-in types takes a superuser.
SELECT pg_catalog.format_type(c.castsource, NULL)::text AS source,
       pg_catalog.format_type(c.casttarget, NULL)::text AS target,
       coalesce((SELECT format('%I.%I(%s)', n.nspname, p.proname, pg_catalog.oidvectortypes(p.proargtypes))
                 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
                 WHERE p.oid = c.castfunc), '')::text AS function,
       (CASE c.castcontext WHEN 'e' THEN 'explicit' WHEN 'a' THEN 'assignment' ELSE 'implicit' END)::text AS context
FROM pg_catalog.pg_cast c
WHERE c.oid >= 16384
  AND (c.castsource < 16384 OR c.casttarget < 16384)
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                  WHERE d.classid = 'pg_catalog.pg_cast'::pg_catalog.regclass AND d.objid = c.oid AND d.deptype = 'e')
ORDER BY 1, 2;
