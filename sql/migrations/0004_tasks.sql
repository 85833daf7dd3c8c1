-- pg-0004-tasks: Task heads and their immutable revisions.
-- control-core capability v3 / tasks.

-- +goose Up
CREATE TABLE control_core.tasks (
    project_id    text   NOT NULL REFERENCES control_core.projects (project_id),
    task_id       text   NOT NULL CHECK (task_id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    head_revision bigint NOT NULL CHECK (head_revision >= 1),
    created_at_ms bigint NOT NULL CHECK (created_at_ms > 0),
    updated_at_ms bigint NOT NULL CHECK (updated_at_ms >= created_at_ms),
    PRIMARY KEY (project_id, task_id)
);

CREATE TABLE control_core.task_revisions (
    project_id            text   NOT NULL,
    task_id               text   NOT NULL,
    revision              bigint NOT NULL CHECK (revision >= 1),
    execution_revision_id uuid   NOT NULL REFERENCES control_core.execution_revisions (execution_revision_id),
    -- sha256 (hex) of the revision's canonical content; admission recomputes and compares it.
    content_digest        text   NOT NULL CHECK (content_digest ~ '^[0-9a-f]{64}$'),
    created_at_ms         bigint NOT NULL CHECK (created_at_ms > 0),
    PRIMARY KEY (project_id, task_id, revision),
    FOREIGN KEY (project_id, task_id) REFERENCES control_core.tasks (project_id, task_id)
);
CREATE INDEX task_revisions_execution_revision_idx ON control_core.task_revisions (execution_revision_id);

-- The head must name an existing revision; deferred so head and revision can be written in one transaction.
ALTER TABLE control_core.tasks
    ADD CONSTRAINT tasks_head_revision_fkey FOREIGN KEY (project_id, task_id, head_revision)
    REFERENCES control_core.task_revisions (project_id, task_id, revision) DEFERRABLE INITIALLY DEFERRED;

-- A task revision's content digest: it pins the execution revision by id and by digest.
CREATE FUNCTION control_core.task_digest(task_id text, revision bigint, execution_revision_id uuid,
                                         execution_digest text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.jsonb_build_object(
          'task_id', task_id, 'revision', revision,
          'execution_revision_id', execution_revision_id, 'execution_digest', execution_digest)::pg_catalog.text, 'UTF8')), 'hex') $$;

SELECT control_core.advance_capability('control-core', 3, 'tasks', 'pg-0004-tasks');
