-- pg-0029-pooled-plan-settings (review 48): pg-0027's claim and admit functions carry the planner
-- settings the store sends for them, so that their statements are planned under those settings
-- whoever calls them. A PL/pgSQL statement's plan is made by the first call on a server session
-- after each invalidation (an ANALYZE of a table it reads, autoanalyze included), under that
-- caller's settings, and kept for every later call on the server session whatever their
-- transaction-local settings. Behind a transaction pooler server sessions are shared and outlive
-- clients: a caller without the store's settings (an older replica during a rolling upgrade, a
-- DBA's call) fixed a plan that sorts the whole due range for everyone on that server session
-- (~160-630 ms a claim instead of ~1 ms). A function's own SET applies while its statements are
-- planned and run, and is undone when it returns.
--
-- The settings are exactly the store's (coordinator/store.go): claim_due, claimSettings
-- (plan_cache_mode force_generic_plan, jit off, enable_sort off); admit, admitSettings
-- (plan_cache_mode force_generic_plan, jit off, join_collapse_limit 1).
-- TestPooledFunctionsCarryTheStoresSettings holds them together. ALTER FUNCTION keeps the bodies,
-- owner, SECURITY INVOKER, search_path and grants. Cost: the catalog's locks on two functions.
-- control-core capability v28 / pooled_plan_settings.

-- +goose Up

ALTER FUNCTION control_core.claim_due(text, bigint, bigint, integer)
    SET plan_cache_mode = force_generic_plan
    SET jit = off
    SET enable_sort = off;

ALTER FUNCTION control_core.admit(text[], text[], text[], text[], uuid[], bigint[], bigint[], bigint[],
                                  bigint[], bigint[], bigint[], bigint[], bigint[], text[], text[],
                                  text[], uuid[], text[], text[], bigint[], uuid[], bigint[], bigint[])
    SET plan_cache_mode = force_generic_plan
    SET jit = off
    SET join_collapse_limit = 1;

SELECT control_core.advance_capability('control-core', 28, 'pooled_plan_settings', 'pg-0029-pooled-plan-settings');
