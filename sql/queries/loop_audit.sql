-- name: LoopAuditChecks :many
-- The closed loop's invariants over the whole database (issue 32, design §6), each with the
-- number of rows that break it: what must hold after any interleaving of placements, ACKs,
-- heartbeats, completions, sweeps and cancels. Read-only; the demo prints it, the test kit's
-- loopaudit asserts it.
SELECT 'at most one active lease per Run'::text AS check_name,
       (SELECT count(*) FROM (SELECT run_id FROM control_core.run_leases WHERE state = 'active'
                              GROUP BY run_id HAVING count(*) > 1) x)::bigint AS violations
UNION ALL
SELECT 'leases of one Run never overlap',
       (SELECT count(*) FROM control_core.run_leases a JOIN control_core.run_leases b
          ON a.run_id = b.run_id AND a.run_lease_id < b.run_lease_id
        WHERE a.granted_at_ms < coalesce(b.ended_at_ms, 9223372036854775807)
          AND b.granted_at_ms < coalesce(a.ended_at_ms, 9223372036854775807))::bigint
UNION ALL
SELECT 'at most one succeeded Attempt per Run',
       (SELECT count(*) FROM (SELECT run_id FROM control_core.attempts WHERE state = 'succeeded'
                              GROUP BY run_id HAVING count(*) > 1) x)::bigint
UNION ALL
SELECT 'every Run''s newest Attempt agrees with it',
       (SELECT count(*) FROM control_core.runs r
        JOIN LATERAL (SELECT a.state FROM control_core.attempts a WHERE a.run_id = r.run_id
                      ORDER BY a.attempt_no DESC LIMIT 1) n ON true
        WHERE NOT control_core.run_attempt_states_agree(r.state, n.state))::bigint
UNION ALL
SELECT 'no older Attempt is live',
       (SELECT count(*) FROM control_core.attempts a
        WHERE a.state IN ('claimed', 'dispatching', 'running')
          AND EXISTS (SELECT 1 FROM control_core.attempts b WHERE b.run_id = a.run_id AND b.attempt_no > a.attempt_no))::bigint
UNION ALL
SELECT 'a running Attempt holds the Run''s active lease',
       (SELECT count(*) FROM control_core.attempts a
        WHERE a.state = 'running' AND NOT EXISTS (SELECT 1 FROM control_core.run_leases l
                  WHERE l.run_lease_id = a.run_lease_id AND l.state = 'active' AND l.run_id = a.run_id))::bigint
UNION ALL
SELECT 'a dispatching Attempt holds a live offer',
       (SELECT count(*) FROM control_core.attempts a
        WHERE a.state = 'dispatching' AND NOT EXISTS (SELECT 1 FROM control_core.dispatch_offers o
                  WHERE o.offer_id = a.offer_id AND o.state = 'offered' AND o.attempt_id = a.attempt_id))::bigint
UNION ALL
SELECT 'event seqs contiguous from 1',
       (SELECT count(*) FROM (SELECT run_id FROM control_core.run_events GROUP BY run_id
                              HAVING min(seq) <> 1 OR max(seq) <> count(*)) x)::bigint
UNION ALL
SELECT 'every terminal Run has finished_at_ms',
       (SELECT count(*) FROM control_core.runs
        WHERE state IN ('succeeded', 'failed', 'cancelled') AND finished_at_ms IS NULL)::bigint
UNION ALL
SELECT 'a Run''s last event names its state',
       (SELECT count(*) FROM control_core.runs r
        JOIN LATERAL (SELECT e.type FROM control_core.run_events e WHERE e.run_id = r.run_id
                      ORDER BY e.seq DESC LIMIT 1) e ON true
        WHERE e.type <> 'run.' || r.state AND e.type <> 'run.recovery_failed')::bigint;

-- name: LoopAuditRunStates :many
-- Runs and their Attempts per task and Run state, for a reader of the closed loop.
SELECT r.task_id::text AS task_id, r.state::text AS state, count(*)::bigint AS runs,
       coalesce(sum((SELECT count(*) FROM control_core.attempts a WHERE a.run_id = r.run_id)), 0)::bigint AS attempts
FROM control_core.runs r
GROUP BY r.task_id, r.state
ORDER BY r.task_id, r.state;
