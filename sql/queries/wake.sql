-- The dispatchers' wake-up on admission (issue 33, docs/dispatch.md "Waking the placer"): a
-- dispatcher LISTENs on this channel and places at once instead of at its next
-- --placement-interval probe.

-- name: WakeOnAdmit :exec
-- Sent after an admit committed that wrote at least one Run, in a transaction of its own (never
-- in the admit's), by the coordinator.Store's sender, off the replica's round: one in flight per
-- Store, the admits that commit meanwhile sharing the next one, sent after it (never the last
-- lost; docs/dispatch.md, "Waking the placer"). Not in the admit's transaction: a committing
-- transaction that notified holds PostgreSQL's one notification queue lock (PreCommit_Notify)
-- until its commit record is flushed, so every notifying commit waits for the one before it,
-- fsync included: in the admit's own transaction that serialized the admits' durable commits
-- (16 writers, fsync on: ~2,000 commits/s without, ~250 with). Here the commit is asynchronous
-- (synchronous_commit off, this transaction only): it holds the lock for no flush, and a
-- notification lost to a crash costs at most one probe interval. One notification, empty
-- payload; it works through PgBouncer transaction pooling (the LISTEN side does not).
SELECT set_config('synchronous_commit', 'off', true), pg_notify('qlsched_runs_queued', '');

-- name: WakeWanted :one
-- Whether a dispatcher has anybody to place for: an active, unexpired worker session (through a
-- partial index of live sessions: the planner takes the range of worker_sessions_live_expiry_idx
-- or all of worker_sessions_worker_idx, active only, as ANALYZE's sample goes; never the closed
-- and expired history, coordinator.TestWakeWantedReadsOnlyTheLiveSessions). The coordinator.Store's sender reads it at most every
-- wakeRecheck and sends no wake-up while it is false: a placement pass with no poll waiting
-- does nothing, and a session's first poll starts a pass of its own, which finds every Run
-- admitted meanwhile (docs/dispatch.md, "Waking the placer").
SELECT EXISTS (
    SELECT 1 FROM control_core.worker_sessions s
    WHERE s.state = 'active' AND s.expires_at_ms > control_core.db_now_ms()
) AS wanted;
