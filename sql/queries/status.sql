-- Operator views: read by `qlsched status` (any role with SELECT) and the backlog gauge.
--
-- "Backlog" has one definition everywhere: the rows ClaimDue (sql/queries/scheduler.sql) would
-- claim right now. A row is in the backlog when it is due or uninitialised
-- (coalesce(next_fire_at_ms, -1) <= now), carries no valid claim, its project is active and its
-- trigger revision is an enabled cron trigger. A disabled trigger or an archived project can never
-- be claimed, so it is never backlog: otherwise "due but nothing admitted" alerts would fire for
-- ever. Everything but "due" is control_core.schedule_claimable (pg-0014), the function ClaimDue
-- uses too; internal/app/metrics tests that Backlog and ProjectBacklog agree with what ClaimDue claims.

-- name: Backlog :one
-- The backlog, counted with the claim's index range (coalesce(next_fire_at_ms, -1) <= now, walked in
-- index order) and capped, so a huge backlog costs a bounded scan; with the oldest due occurrence.
-- The project and trigger conditions are per-row subqueries, as in ClaimDue and for the same
-- reason: the planner then has nothing to reorder and walks trigger_schedules_claim_idx in order,
-- stopping at the cap, instead of hash-joining and sorting the whole due range.
-- Time is control_core.db_now_ms() in the conditions, as in ClaimDue, not a column of the obs CTE:
-- the planner can estimate the due range from the function (one value per statement) but not from
-- a CTE's column, and with a blind guess it bitmap-scanned and sorted the whole range.
-- Rows waiting for initialisation (next_fire_at_ms NULL) are the index's -1 range, which the walk
-- reaches first: counted within the same cap, with the oldest one's updated_at_ms (its publish,
-- or a later claim that ended without initialising it).
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
due AS (
    SELECT s.next_fire_at_ms, s.updated_at_ms
    FROM control_core.trigger_schedules s
    WHERE coalesce(s.next_fire_at_ms, -1) <= control_core.db_now_ms()
      AND control_core.schedule_claimable(
            (SELECT p.state FROM control_core.projects p WHERE p.project_id = s.project_id),
            (SELECT control_core.trigger_fires(tr.kind, tr.enabled) FROM control_core.trigger_revisions tr
             WHERE tr.project_id = s.project_id AND tr.trigger_id = s.trigger_id AND tr.revision = s.trigger_revision),
            s.claim_token, s.claim_expires_at_ms, control_core.db_now_ms())
    ORDER BY coalesce(s.next_fire_at_ms, -1)
    LIMIT @cap::integer
)
SELECT (SELECT count(*) FROM due)::bigint AS due_unclaimed,
       coalesce((SELECT min(next_fire_at_ms) FROM due), -1)::bigint AS oldest_due_ms, -- -1: none (or only uninitialised rows)
       (SELECT count(*) FROM due WHERE next_fire_at_ms IS NULL)::bigint AS uninitialised,
       coalesce((SELECT min(updated_at_ms) FROM due WHERE next_fire_at_ms IS NULL), -1)::bigint AS oldest_uninitialised_ms, -- -1: none
       obs.now_ms
FROM obs;

-- The per-project reads of `qlsched status`, `qlsched project list` and the console's overview:
-- each bounded by @cap per project, whatever the number of triggers (issue 37: exact counts over
-- 100,000 schedule rows and a probe of each one's revision cost seconds on a loaded server). A
-- count equal to @cap means "at least".

-- name: ProjectTriggerCounts :many
-- Per project: triggers and enabled ones, each counted up to @cap.
SELECT p.project_id,
       -- ORDER BY the primary key's order: without it the planner took a sequential scan for a
       -- small project next to a big one (it expects the LIMIT to stop early), and read the whole
       -- table to find three rows (BenchmarkPages, EXPLAIN ANALYZE)
       (SELECT count(*) FROM (SELECT 1 FROM control_core.trigger_schedules s
                              WHERE s.project_id = p.project_id ORDER BY s.project_id, s.trigger_id LIMIT @cap::integer) x)::bigint AS triggers,
       (SELECT count(*) FROM (SELECT 1 FROM control_core.trigger_schedules s
                              JOIN control_core.trigger_revisions tr
                                ON tr.project_id = s.project_id AND tr.trigger_id = s.trigger_id AND tr.revision = s.trigger_revision
                              WHERE s.project_id = p.project_id AND tr.project_id = p.project_id AND tr.enabled
                              ORDER BY s.project_id, s.trigger_id LIMIT @cap::integer) x)::bigint AS enabled
FROM control_core.projects p
ORDER BY p.project_id;

-- name: ProjectBacklog :many
-- Per project: the backlog (the definition above) and the oldest overdue occurrence among the
-- first @cap rows of the claim index's due range (as Backlog, with the project as one more
-- condition), and how many rows that walk read: at the cap the backlog is a lower bound and the
-- oldest overdue occurrence may lie beyond the walk. The walk is bounded by rows read, not by
-- rows found, because the due range also holds what can never be claimed (a disabled trigger's
-- row is uninitialised, so it sits in the range for ever) and each row costs a probe of its
-- revision.
SELECT p.project_id, p.state,
       b.backlog::bigint AS backlog,
       coalesce(b.oldest_overdue_ms, 0)::bigint AS oldest_overdue_ms, -- 0: none found
       b.due_walked::bigint AS due_walked,
       control_core.db_now_ms()::bigint AS now_ms
FROM control_core.projects p
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE w.claimable) AS backlog,
           min(w.next_fire_at_ms) FILTER (WHERE w.claimable) AS oldest_overdue_ms,
           count(*) AS due_walked
    FROM (SELECT s.next_fire_at_ms,
                 control_core.schedule_claimable(p.state,
                     (SELECT control_core.trigger_fires(tr.kind, tr.enabled) FROM control_core.trigger_revisions tr
                      WHERE tr.project_id = s.project_id AND tr.trigger_id = s.trigger_id AND tr.revision = s.trigger_revision),
                     s.claim_token, s.claim_expires_at_ms, control_core.db_now_ms()) AS claimable
          FROM control_core.trigger_schedules s
          WHERE s.project_id = p.project_id AND coalesce(s.next_fire_at_ms, -1) <= control_core.db_now_ms()
          ORDER BY coalesce(s.next_fire_at_ms, -1)
          LIMIT @cap::integer) w
) b
ORDER BY p.project_id;

-- name: ProjectLiveClaims :many
-- Live claims per project and owner among the newest @cap rows of the project's due range (the
-- claim index's range backwards from now): the console's overview. A claim is taken on a due or
-- uninitialised row and every write that advances the cursor ends it, so a live claim sits in the
-- due range: the walk is bounded by rows read, as the backlog's is, because the range also holds
-- every disabled trigger's row (reading them all, one heap page each, cost 1.1 s of the overview
-- at 1M schedule rows). It walks from the newest end: without a backlog the rows in hand are the
-- ones that fell due last, while the range's oldest end holds the uninitialised rows. When the
-- project's due range holds @cap rows or more (ProjectBacklog's due_walked) a claim may lie
-- beyond the walk (during a backlog, the claims sit at its oldest end) and the counts are lower
-- bounds; `qlsched status` counts them exactly with LiveClaimsByProjectOwner.
SELECT p.project_id, c.owner::text AS owner, c.claims::bigint AS claims
FROM control_core.projects p
CROSS JOIN LATERAL (
    SELECT w.claim_owner AS owner, count(*) AS claims
    FROM (SELECT s.claim_owner, s.claim_expires_at_ms
          FROM control_core.trigger_schedules s
          WHERE s.project_id = p.project_id AND coalesce(s.next_fire_at_ms, -1) <= control_core.db_now_ms()
          ORDER BY coalesce(s.next_fire_at_ms, -1) DESC
          LIMIT @cap::integer) w
    WHERE w.claim_expires_at_ms > control_core.db_now_ms()
    GROUP BY w.claim_owner
) c
ORDER BY p.project_id, c.owner;

-- name: LiveClaimsByProjectOwner :many
-- Every live claim, by project and owner, with the soonest expiry among them (a duration from
-- the database's time): `qlsched status`, exact, because the replicas working a backlog hold
-- claims at its oldest end, beyond any bounded walk, and that is when an operator asks. One pass
-- over the schedule rows; obs is MATERIALIZED so the database's time is
-- computed once, not in every row's condition.
WITH obs AS MATERIALIZED (SELECT control_core.db_now_ms() AS now_ms)
SELECT s.project_id, s.claim_owner::text AS owner, count(*)::bigint AS claims,
       (min(s.claim_expires_at_ms) - obs.now_ms)::bigint AS soonest_expiry_in_ms
FROM control_core.trigger_schedules s CROSS JOIN obs
WHERE s.claim_expires_at_ms > obs.now_ms
GROUP BY s.project_id, s.claim_owner, obs.now_ms
ORDER BY s.project_id, s.claim_owner;

-- name: LastAdmits :many
-- Per project, the newest admitted Run of each trigger among the project's newest @walk admitted
-- Runs, newest admission first, at most @max_admits: one backward range of
-- runs_project_created_idx per project, read up to @walk whatever the history and the number of
-- triggers hold (choosing the triggers by their schedule rows' last occurrence sorted every row of
-- the project: 100,000 at the scale of issue 37). The first row of a project is its newest
-- admission. A trigger that admitted only before the walk's Runs is not listed.
SELECT p.project_id, a.trigger_id::text AS trigger_id, a.trigger_revision::bigint AS trigger_revision,
       a.scheduled_for_ms::bigint AS scheduled_for_ms, a.queued_at_ms::bigint AS queued_at_ms, a.run_id
FROM control_core.projects p
CROSS JOIN LATERAL (
    SELECT d.run_id, d.trigger_id, d.trigger_revision, d.scheduled_for_ms, d.queued_at_ms
    FROM (SELECT DISTINCT ON (w.trigger_id) w.run_id, w.trigger_id, w.trigger_revision, w.scheduled_for_ms, w.queued_at_ms
          FROM (SELECT r.run_id, r.trigger_id, r.trigger_revision, r.scheduled_for_ms, r.queued_at_ms, r.created_at_ms
                FROM control_core.runs r
                WHERE r.project_id = p.project_id AND r.owner = 'runtime' AND r.queued_at_ms IS NOT NULL
                  AND r.trigger_id IS NOT NULL AND r.scheduled_for_ms IS NOT NULL
                ORDER BY r.created_at_ms DESC, r.run_id DESC
                LIMIT @walk::integer) w
          ORDER BY w.trigger_id, w.created_at_ms DESC, w.run_id DESC) d
    ORDER BY d.queued_at_ms DESC, d.trigger_id
    LIMIT @max_admits::integer
) a
ORDER BY p.project_id, a.queued_at_ms DESC, a.trigger_id;
