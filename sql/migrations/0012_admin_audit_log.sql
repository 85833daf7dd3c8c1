-- pg-0012-admin-audit-log: every admin action (publish, lock) leaves an append-only audit row.
-- Who and when are the database's to say: pg-0015 stamps actor and at_ms on every insert, so
-- they have no defaults a caller could override.
-- control-core capability v11 / admin_audit_log.

-- +goose Up
CREATE TABLE control_core.admin_audit_log (
    audit_id   uuid   PRIMARY KEY,
    at_ms      bigint NOT NULL CHECK (at_ms > 0),
    actor      text   NOT NULL,
    action     text   NOT NULL CHECK (action IN ('project.create', 'task.publish', 'trigger.publish',
                                                 'project.lock', 'plugin.publish', 'plugin.bind',
                                                 'project.pause', 'project.resume')),
    project_id text   NOT NULL REFERENCES control_core.projects (project_id),
    subject    text   NOT NULL CHECK (length(subject) BETWEEN 1 AND 256),
    detail     jsonb  NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(detail) = 'object')
);
CREATE INDEX admin_audit_log_project_idx ON control_core.admin_audit_log (project_id, at_ms DESC);

SELECT control_core.advance_capability('control-core', 11, 'admin_audit_log', 'pg-0012-admin-audit-log');
