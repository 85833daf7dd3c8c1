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
