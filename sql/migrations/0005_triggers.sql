-- pg-0005-triggers: Trigger heads and their immutable revisions (built-in cron triggers).
-- control-core capability v4 / triggers.

-- +goose Up
CREATE TABLE control_core.triggers (
    project_id    text   NOT NULL REFERENCES control_core.projects (project_id),
    trigger_id    text   NOT NULL CHECK (trigger_id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    head_revision bigint NOT NULL CHECK (head_revision >= 1),
    created_at_ms bigint NOT NULL CHECK (created_at_ms > 0),
    updated_at_ms bigint NOT NULL CHECK (updated_at_ms >= created_at_ms),
    PRIMARY KEY (project_id, trigger_id)
);

CREATE TABLE control_core.trigger_revisions (
    project_id     text    NOT NULL,
    trigger_id     text    NOT NULL,
    revision       bigint  NOT NULL CHECK (revision >= 1),
    kind           text    NOT NULL CHECK (kind IN ('cron')),
    cron_spec      text    NOT NULL CHECK (length(cron_spec) BETWEEN 1 AND 200),
    timezone       text    NOT NULL CHECK (length(timezone) BETWEEN 1 AND 64),
    misfire_policy text    NOT NULL CHECK (misfire_policy IN ('skip', 'fire_once')),
    -- an occurrence at most this late is on time under both policies (docs/scheduling.md):
    -- 1 s to 24 h, as schedule.MinMisfireGrace and schedule.MaxMisfireGrace
    misfire_grace_ms bigint NOT NULL CHECK (misfire_grace_ms BETWEEN 1000 AND 86400000),
    enabled        boolean NOT NULL,
    task_id        text    NOT NULL,
    task_revision  bigint  NOT NULL,
    -- sha256 (hex) of the revision's canonical content; admission recomputes and compares it.
    content_digest text    NOT NULL CHECK (content_digest ~ '^[0-9a-f]{64}$'),
    created_at_ms  bigint  NOT NULL CHECK (created_at_ms > 0),
    PRIMARY KEY (project_id, trigger_id, revision),
    FOREIGN KEY (project_id, trigger_id) REFERENCES control_core.triggers (project_id, trigger_id),
    FOREIGN KEY (project_id, task_id, task_revision)
        REFERENCES control_core.task_revisions (project_id, task_id, revision)
);
CREATE INDEX trigger_revisions_task_idx ON control_core.trigger_revisions (project_id, task_id, task_revision);

ALTER TABLE control_core.triggers
    ADD CONSTRAINT triggers_head_revision_fkey FOREIGN KEY (project_id, trigger_id, head_revision)
    REFERENCES control_core.trigger_revisions (project_id, trigger_id, revision) DEFERRABLE INITIALLY DEFERRED;

-- A trigger revision's content digest: everything that decides when and what it fires.
CREATE FUNCTION control_core.trigger_digest(kind text, cron_spec text, timezone text, misfire_policy text,
                                            misfire_grace_ms bigint, enabled boolean, task_id text,
                                            task_revision bigint) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.jsonb_build_object(
          'kind', kind, 'cron_spec', cron_spec, 'timezone', timezone,
          'misfire_policy', misfire_policy, 'misfire_grace_ms', misfire_grace_ms, 'enabled', enabled,
          'task_id', task_id, 'task_revision', task_revision)::pg_catalog.text, 'UTF8')), 'hex') $$;

SELECT control_core.advance_capability('control-core', 4, 'triggers', 'pg-0005-triggers');
