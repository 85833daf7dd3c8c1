-- pg-0002-projects: Projects, the unit of ownership of tasks and triggers.
-- control-core capability v1 / projects.
-- state: active (its triggers are claimed), paused (nothing of it is claimed; qlsched project
-- pause|resume; its schedule rows and cursors are kept), archived.

-- +goose Up
CREATE TABLE control_core.projects (
    project_id     text   PRIMARY KEY CHECK (project_id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    state          text   NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'paused', 'archived')),
    revision       bigint NOT NULL DEFAULT 1 CHECK (revision >= 1),
    -- sha256 (hex) of the project's canonical content; admission re-verifies it.
    content_digest text   NOT NULL CHECK (content_digest ~ '^[0-9a-f]{64}$'),
    created_at_ms  bigint NOT NULL CHECK (created_at_ms > 0),
    updated_at_ms  bigint NOT NULL CHECK (updated_at_ms >= created_at_ms)
);

-- Every rule function of the stream is LANGUAGE sql, a single expression, STABLE or IMMUTABLE and
-- without SET clauses, so the planner inlines it into the calling query (the plan the tests check is
-- the one of the expression written out); names are schema-qualified instead of pinned with SET.
-- The project's content digest: the one formula the publisher writes and the admission recomputes.
CREATE FUNCTION control_core.project_digest(project_id text, state text, revision bigint) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.jsonb_build_object(
          'project_id', project_id, 'state', state, 'revision', revision)::pg_catalog.text, 'UTF8')), 'hex') $$;

SELECT control_core.advance_capability('control-core', 1, 'projects', 'pg-0002-projects');
