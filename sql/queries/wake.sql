-- The dispatchers' wake-up on admission (issue 33, docs/dispatch.md "Waking the placer"): a
-- dispatcher LISTENs on this channel and places at once instead of at its next
-- --placement-interval probe.

-- name: WakeOnAdmit :exec
-- Queued in the admitting transaction after the admit, in the same pipeline: one notification,
-- empty payload, only if the transaction wrote, i.e. if the admit wrote at least one Run (the
-- admit writes only for the items it verified, and every one gets its Run). It reads no table,
-- so it adds no predicate lock to the SERIALIZABLE transaction. NOTIFY is transactional: it is
-- delivered at COMMIT and dropped on rollback (a retried admit notifies once, when it commits),
-- and it works through PgBouncer transaction pooling (the LISTEN side does not).
SELECT pg_notify('qlsched_runs_queued', '') WHERE pg_current_xact_id_if_assigned() IS NOT NULL;
