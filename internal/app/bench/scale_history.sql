-- The scale scenario's history (`qlbench --scenario scale` and its CI test), written
-- set-based, as a superuser outside the product path, exactly as admission writes it (the Admit
-- statement of sql/queries/scheduler.sql): a queued runtime Run keyed by its occurrence, its
-- claimed remote_worker Attempt, the events run.created and run.queued, one INSERT … SELECT
-- generate_series per table. Kept here, not in sql/queries: sqlc cannot resolve the columns of a
-- derived table over generate_series.
--
-- Run i (@from_run ≤ i < @to_run) belongs to trigger j = i mod @triggers of project j mod @projects,
-- named as the scenario publishes them (@prefix || two digits, 't' || seven digits: scaleProject and
-- scaleTrigger in scale.go), and is that trigger's daily occurrence (spec "j mod 60, (j div 60)
-- mod 24, * * *") i div triggers + 1 days before @day_ms (a UTC midnight). Its id is md5(@salt || i), so
-- the Attempt and the events name it without reading it back; it was admitted 5 to 54 ms late.
-- The three statements spell the same occurrence: change them together. Statements are split
-- on lines holding only ";"; parameters are pgx named arguments.

INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
                               trigger_revision, scheduled_for_ms, idempotency_key, state, owner,
                               queued_at_ms, created_at_ms, updated_at_ms)
SELECT md5(@salt::text || o.i::text)::uuid, o.project_id, 'job', 1, kr.execution_revision_id, o.trigger_id,
       1, o.scheduled_ms, control_core.cron_idempotency_key(o.trigger_id, 1, o.scheduled_ms),
       'queued', 'runtime', o.scheduled_ms + 5 + o.i % 50, o.scheduled_ms + 5 + o.i % 50, o.scheduled_ms + 5 + o.i % 50
FROM (SELECT i, @prefix::text || lpad((i % @triggers::bigint % @projects::bigint)::text, 2, '0') AS project_id,
             't' || lpad((i % @triggers::bigint)::text, 7, '0') AS trigger_id,
             @day_ms::bigint - (i / @triggers::bigint + 1) * 86400000
               + (i % @triggers::bigint / 60 % 24) * 3600000 + (i % @triggers::bigint % 60) * 60000 AS scheduled_ms
      FROM generate_series(@from_run::bigint, @to_run::bigint - 1) AS g (i)) o
JOIN control_core.task_revisions kr ON kr.project_id = o.project_id AND kr.task_id = 'job' AND kr.revision = 1
;
INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, created_at_ms, updated_at_ms)
SELECT gen_random_uuid(), md5(@salt::text || i::text)::uuid, 1, 'remote_worker', 'claimed', o.queued_ms, o.queued_ms
FROM (SELECT i, @day_ms::bigint - (i / @triggers::bigint + 1) * 86400000
               + (i % @triggers::bigint / 60 % 24) * 3600000 + (i % @triggers::bigint % 60) * 60000 + 5 + i % 50 AS queued_ms
      FROM generate_series(@from_run::bigint, @to_run::bigint - 1) AS g (i)) o
;
INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms)
SELECT gen_random_uuid(), md5(@salt::text || i::text)::uuid, e.seq, e.type, o.queued_ms
FROM (SELECT i, @day_ms::bigint - (i / @triggers::bigint + 1) * 86400000
               + (i % @triggers::bigint / 60 % 24) * 3600000 + (i % @triggers::bigint % 60) * 60000 + 5 + i % 50 AS queued_ms
      FROM generate_series(@from_run::bigint, @to_run::bigint - 1) AS g (i)) o
CROSS JOIN (VALUES (1, 'run.created'), (2, 'run.queued')) AS e (seq, type)
