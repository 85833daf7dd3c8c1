-- pg-0003-execution-revisions: immutable execution specs that task revisions pin.
-- control-core capability v2 / execution_revisions.

-- +goose Up
-- digest is the sha256 (hex) of the spec's canonical form, PostgreSQL's jsonb text rendering
-- (keys sorted, fixed spacing): encode(sha256(convert_to(spec::text, 'UTF8')), 'hex').
-- A row whose digest does not match its spec is corrupt and admits nothing.
CREATE TABLE control_core.execution_revisions (
    execution_revision_id uuid   PRIMARY KEY,
    project_id            text   NOT NULL REFERENCES control_core.projects (project_id),
    executor_kind         text   NOT NULL CHECK (executor_kind IN ('remote_worker')),
    spec                  jsonb  NOT NULL CHECK (jsonb_typeof(spec) = 'object'),
    digest                text   NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
    created_at_ms         bigint NOT NULL CHECK (created_at_ms > 0),
    UNIQUE (project_id, digest)
);

-- The spec's digest (see above): the one formula the publisher writes and the admission recomputes.
CREATE FUNCTION control_core.execution_digest(spec jsonb) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(spec::pg_catalog.text, 'UTF8')), 'hex') $$;

SELECT control_core.advance_capability('control-core', 2, 'execution_revisions', 'pg-0003-execution-revisions');
