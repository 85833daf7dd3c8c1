-- The claim's order of schedule keys, asked of the database (admin: a publish or an apply resets
-- schedule rows in it, so that it locks them as a batch claim or initialisation does).

-- name: ClaimKeyOrder :many
-- The 1-based positions of the (project_id, trigger_id) pairs sorted as ClaimDue and ClaimInit
-- sort rows of one cursor: project_id, trigger_id in the database's collation, which is the
-- columns' (text, no COLLATE clause) and need not be byte order (en-US puts "a_1" before "a-1");
-- equal pairs keep their order.
SELECT i.ord::integer AS ord
FROM ROWS FROM (unnest(@project_ids::text[]), unnest(@trigger_ids::text[]))
     WITH ORDINALITY AS i (project_id, trigger_id, ord)
ORDER BY i.project_id, i.trigger_id, i.ord;
