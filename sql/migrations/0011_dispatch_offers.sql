-- pg-0011-dispatch-offers: offers of an Attempt to a Worker Session, acknowledged or not.
-- control-core capability v10 / dispatch_offers.

-- +goose Up
CREATE TABLE control_core.dispatch_offers (
    offer_id          uuid   PRIMARY KEY,
    attempt_id        uuid   NOT NULL REFERENCES control_core.attempts (attempt_id),
    worker_session_id uuid   NOT NULL REFERENCES control_core.worker_sessions (worker_session_id),
    state             text   NOT NULL CHECK (state IN ('offered', 'acked', 'rejected', 'expired')),
    offered_at_ms     bigint NOT NULL CHECK (offered_at_ms > 0),
    expires_at_ms     bigint NOT NULL CHECK (expires_at_ms > offered_at_ms),
    answered_at_ms    bigint CHECK (answered_at_ms >= offered_at_ms),
    CHECK ((state IN ('acked', 'rejected')) = (answered_at_ms IS NOT NULL))
);
CREATE INDEX dispatch_offers_attempt_idx ON control_core.dispatch_offers (attempt_id);
CREATE INDEX dispatch_offers_worker_session_idx ON control_core.dispatch_offers (worker_session_id);

CREATE INDEX attempts_offer_idx ON control_core.attempts (offer_id) WHERE offer_id IS NOT NULL;
ALTER TABLE control_core.attempts
    ADD CONSTRAINT attempts_offer_id_fkey FOREIGN KEY (offer_id)
    REFERENCES control_core.dispatch_offers (offer_id);

SELECT control_core.advance_capability('control-core', 10, 'dispatch_offers', 'pg-0011-dispatch-offers');
