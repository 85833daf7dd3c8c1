// Package admin is what an operator does to the scheduler's data: publish projects, tasks and
// triggers (Publisher, as the admin role) and read what the scheduler holds and does (Reader, as
// any role with SELECT on control_core).
//
// The package guarantees:
//   - every publish is one transaction under the audited Project lock, with its audit row: all of
//     it or nothing;
//   - every publish is idempotent by content: content equal to the head revision writes nothing
//     (no revision, no schedule reset, no audit row) and reports Unchanged, and a change of an
//     existing trigger keeps every field the caller did not give (TriggerChange);
//   - input is checked before anything is sent; a refusal is a *FieldError naming the field
//     (FieldCron, FieldExecutorSpec, …), never a command-line flag, and never quoting an executor
//     spec (it may hold secrets);
//   - every reader reads in one snapshot (one REPEATABLE READ READ ONLY transaction), so the parts
//     of one report agree with each other;
//   - results are this package's own types of plain Go values: no sqlc row type and no pgtype
//     value crosses its boundary.
package admin
