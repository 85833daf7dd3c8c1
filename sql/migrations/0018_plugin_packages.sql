-- pg-0018-plugin-packages: three admin-only Plugin Package tables and an audited Project lock.
-- control-core capability v17 / plugin_packages.

-- +goose Up
CREATE TABLE control_core.plugin_packages (
    package_id    text   PRIMARY KEY CHECK (package_id ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    display_name  text   NOT NULL CHECK (length(display_name) BETWEEN 1 AND 128),
    created_at_ms bigint NOT NULL DEFAULT control_core.db_now_ms() CHECK (created_at_ms > 0)
);

CREATE TABLE control_core.plugin_package_versions (
    package_id    text   NOT NULL REFERENCES control_core.plugin_packages (package_id),
    version       text   NOT NULL CHECK (version ~ '^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$'),
    manifest      jsonb  NOT NULL CHECK (jsonb_typeof(manifest) = 'object'),
    -- sha256 (hex) of the manifest's jsonb text rendering, as for execution revisions
    digest        text   NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
    state         text   NOT NULL CHECK (state IN ('published', 'yanked')),
    created_at_ms bigint NOT NULL DEFAULT control_core.db_now_ms() CHECK (created_at_ms > 0),
    PRIMARY KEY (package_id, version)
);

CREATE TABLE control_core.project_plugin_bindings (
    project_id  text   NOT NULL REFERENCES control_core.projects (project_id),
    package_id  text   NOT NULL,
    version     text   NOT NULL,
    bound_at_ms bigint NOT NULL DEFAULT control_core.db_now_ms() CHECK (bound_at_ms > 0),
    PRIMARY KEY (project_id, package_id),
    FOREIGN KEY (package_id, version) REFERENCES control_core.plugin_package_versions (package_id, version)
);
CREATE INDEX project_plugin_bindings_version_idx ON control_core.project_plugin_bindings (package_id, version);

-- Lock a Project row for the rest of the caller's transaction (so plugin bindings and publishes
-- serialise per project) and record who did it and why. SECURITY INVOKER: it grants nothing the
-- caller does not already hold; the audit row is what it adds.
-- +goose StatementBegin
CREATE FUNCTION control_core.lock_project(p_project_id text, p_reason text) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog
AS $$
DECLARE
    v_revision bigint;
BEGIN
    IF p_reason IS NULL OR length(p_reason) NOT BETWEEN 1 AND 256 THEN
        RAISE EXCEPTION 'lock_project: a reason of 1 to 256 characters is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT revision INTO v_revision FROM control_core.projects WHERE project_id = p_project_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'lock_project: project % does not exist', p_project_id USING ERRCODE = 'no_data_found';
    END IF;
    INSERT INTO control_core.admin_audit_log (audit_id, action, project_id, subject, detail)
    VALUES (gen_random_uuid(), 'project.lock', p_project_id, p_project_id,
            jsonb_build_object('reason', p_reason, 'revision', v_revision));
    RETURN v_revision;
END
$$;
-- +goose StatementEnd

GRANT SELECT, INSERT, UPDATE, DELETE ON control_core.plugin_packages,
                                        control_core.plugin_package_versions,
                                        control_core.project_plugin_bindings
    TO ql_admin;
GRANT EXECUTE ON FUNCTION control_core.lock_project(text, text) TO ql_admin;

SELECT control_core.advance_capability('control-core', 17, 'plugin_packages', 'pg-0018-plugin-packages');
