-- pg-0008-run-events: the append-only event history of each Run.
-- control-core capability v7 / run_events.

-- +goose Up
-- event_id is a random UUID, not a sequence: concurrent admits then insert on different index
-- pages instead of all contending for the right-most one.
CREATE TABLE control_core.run_events (
    event_id uuid    PRIMARY KEY,
    run_id   uuid    NOT NULL REFERENCES control_core.runs (run_id),
    seq      integer NOT NULL CHECK (seq >= 1),
    type     text    NOT NULL CHECK (type IN ('run.created', 'run.queued', 'run.dispatching', 'run.running',
                                              'run.succeeded', 'run.failed', 'run.cancelled', 'run.recovery_failed')),
    at_ms    bigint  NOT NULL CHECK (at_ms > 0),
    detail   jsonb   NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(detail) = 'object'),
    UNIQUE (run_id, seq)
);

SELECT control_core.advance_capability('control-core', 7, 'run_events', 'pg-0008-run-events');
