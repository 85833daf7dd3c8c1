-- pg-0020-bounded-reads: indexes that keep the operator reads, the replica's startup recovery and
-- the metrics scrape bounded as history grows (100,000 triggers, millions of Runs).
-- control-core capability v19 / bounded_reads.

-- +goose Up

-- ---- operator reads (status, runs list, trigger list, task list, console overview)

-- ---- startup recovery source

SELECT control_core.advance_capability('control-core', 19, 'bounded_reads', 'pg-0020-bounded-reads');
