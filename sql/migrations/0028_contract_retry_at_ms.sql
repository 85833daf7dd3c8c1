-- pg-0028-contract-retry-at-ms: the contract step pg-0023 promised (expand, then contract).
-- pg-0023 added the 6-argument retry_at_ms (a hand-back is not an attempt) and, in its final text,
-- kept pg-0022's 5-argument form for v21 dispatchers still serving during a rolling upgrade. No
-- dispatcher since v22 calls it (sql/queries call only the 6-argument form), so it goes now.
-- The stop-43 release (f1634fb) applied pg-0023's first text, which dropped the 5-argument form
-- already: IF EXISTS makes this one statement hold on both histories, which end in one schema.
-- control-core capability v27 / contract_retry_at_ms.

-- +goose Up

DROP FUNCTION IF EXISTS control_core.retry_at_ms(text, integer, integer, bigint, bigint);

SELECT control_core.advance_capability('control-core', 27, 'contract_retry_at_ms', 'pg-0028-contract-retry-at-ms');
