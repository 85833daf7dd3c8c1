-- The offer's commit (issue 33 point 6, docs/dispatch.md "The offer's commit").

-- name: OfferCommitAsync :exec
-- Taken first in the offer's transaction: its commit does not wait for the WAL flush
-- (synchronous_commit off, this transaction only). An offer is no grant: a lease exists only once
-- the worker's ACK commits, and that commit is durable (synchronous_commit as configured), so its
-- flush carries the offer's commit record with it (the WAL is one sequence). An offer lost to a
-- crash before any flush rolls back whole (the Run is queued again, its run.dispatching event and
-- offer row gone) and its ACK is answered not_found: exactly once and the ACK protocol hold. The
-- flush it saves is on every Run's path from admitted to running.
SELECT set_config('synchronous_commit', 'off', true);
