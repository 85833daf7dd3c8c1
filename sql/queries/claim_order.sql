-- The claim's order of schedule keys, asked of the database (admin: a publish or an apply resets
-- schedule rows in it, so that it locks them as a batch claim, admit or initialisation does).

-- name: ClaimKeyOrder :many
-- The 1-based positions of the (project_id, trigger_id) pairs sorted as ClaimDue and ClaimInit
-- sort rows, and so as a batch admit and Initialise lock them (in the batch's order, the claim's):
-- coalesce(next_fire_at_ms, -1) of the pair's schedule row as it is now (a due row has its cursor,
-- so "b" due before "a" comes first; a pair without a row, a new trigger, sorts as an
-- uninitialised one: -1), then project_id, trigger_id in the database's collation, which is the
-- columns' (text, no COLLATE clause) and need not be byte order (en-US puts "a_1" before "a-1");
-- equal pairs keep their order. The cursor is read, not locked: an admit that commits between
-- this read and the reset moves it, so the order is the claim's as of this statement.
SELECT i.ord::integer AS ord
FROM ROWS FROM (unnest(@project_ids::text[]), unnest(@trigger_ids::text[]))
     WITH ORDINALITY AS i (project_id, trigger_id, ord)
LEFT JOIN control_core.trigger_schedules s ON s.project_id = i.project_id AND s.trigger_id = i.trigger_id
ORDER BY coalesce(s.next_fire_at_ms, -1), i.project_id, i.trigger_id, i.ord;
