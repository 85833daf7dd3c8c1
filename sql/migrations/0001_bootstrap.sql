-- pg-0001-bootstrap: the control_core schema, the capability ladder and the checksum ledger.
-- control-core capability v0 / bootstrap.

-- +goose Up
-- The owner role runs the whole stream (qlmigrate does SET ROLE), so it owns every object.
-- +goose StatementBegin
DO $$
BEGIN
    IF current_user <> 'ql_owner' THEN
        RAISE EXCEPTION 'pg-0001-bootstrap: run migrations as ql_owner (SET ROLE ql_owner), not as %', current_user;
    END IF;
END
$$;
-- +goose StatementEnd

CREATE SCHEMA IF NOT EXISTS control_core;

-- One row per component; a migration pg-(N+1) moves control-core to vN, and only from vN-1.
CREATE TABLE control_core.capabilities (
    component     text    PRIMARY KEY CHECK (component ~ '^[a-z][a-z0-9-]{0,62}$'),
    version       integer NOT NULL CHECK (version >= 0),
    name          text    NOT NULL CHECK (name ~ '^[a-z][a-z0-9_]{0,62}$'),
    migration     text    NOT NULL CHECK (migration ~ '^pg-[0-9]{4}-[a-z0-9-]+$'),
    updated_at_ms bigint  NOT NULL CHECK (updated_at_ms > 0)
);

-- The checksum ledger: one row per applied migration, written by the migration runner inside the
-- migration's own transaction, so a version is never recorded without the sha256 of what ran.
-- normalized_sha256 hashes the file's normal form (no comments, whitespace reduced: see
-- internal/sqlfile), so an edit of comments or whitespace can be told from one of statements.
-- sha256 is the file the ledger vouches for now: `qlmigrate accept` may move it to a cosmetic edit
-- of the same statements, never to other statements, and keeps the old one in
-- migration_acceptances.
CREATE TABLE control_core.migration_ledger (
    version           bigint PRIMARY KEY CHECK (version > 0),
    name              text   NOT NULL CHECK (name ~ '^pg-[0-9]{4}-[a-z0-9-]+$'),
    sha256            text   NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    normalized_sha256 text   NOT NULL CHECK (normalized_sha256 ~ '^[0-9a-f]{64}$'),
    applied_at_ms     bigint NOT NULL CHECK (applied_at_ms > 0),
    applied_by        text   NOT NULL DEFAULT session_user,
    duration_ms       bigint NOT NULL CHECK (duration_ms >= 0)
);

-- Who accepted which cosmetic edit of an applied migration, when and why (`qlmigrate accept`),
-- with the sha256 the ledger held before: the ledger's history, never rewritten.
CREATE TABLE control_core.migration_acceptances (
    version           bigint NOT NULL REFERENCES control_core.migration_ledger (version),
    old_sha256        text   NOT NULL CHECK (old_sha256 ~ '^[0-9a-f]{64}$'),
    new_sha256        text   NOT NULL CHECK (new_sha256 ~ '^[0-9a-f]{64}$'),
    normalized_sha256 text   NOT NULL CHECK (normalized_sha256 ~ '^[0-9a-f]{64}$'),
    reason            text   NOT NULL CHECK (length(btrim(reason)) BETWEEN 1 AND 1000),
    accepted_by       text   NOT NULL DEFAULT session_user,
    accepted_at_ms    bigint NOT NULL CHECK (accepted_at_ms > 0),
    PRIMARY KEY (version, accepted_at_ms, new_sha256),
    CHECK (old_sha256 <> new_sha256)
);

-- +goose StatementBegin
CREATE FUNCTION control_core.advance_capability(p_component text, p_version integer, p_name text, p_migration text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
DECLARE
    v_now bigint := floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint;
    v_current integer;
BEGIN
    SELECT version INTO v_current FROM control_core.capabilities WHERE component = p_component FOR UPDATE;
    IF NOT FOUND AND p_version = 0 THEN
        INSERT INTO control_core.capabilities (component, version, name, migration, updated_at_ms)
        VALUES (p_component, 0, p_name, p_migration, v_now);
        RETURN;
    END IF;
    IF v_current IS DISTINCT FROM p_version - 1 THEN
        RAISE EXCEPTION '%: capability % is at v%, expected v% before moving to v%',
            p_migration, p_component, coalesce(v_current::text, 'none'), p_version - 1, p_version;
    END IF;
    UPDATE control_core.capabilities
       SET version = p_version, name = p_name, migration = p_migration,
           updated_at_ms = greatest(v_now, updated_at_ms)
     WHERE component = p_component;
END
$$;
-- +goose StatementEnd

SELECT control_core.advance_capability('control-core', 0, 'bootstrap', 'pg-0001-bootstrap');
