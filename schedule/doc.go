// Package schedule is the cron + misfire decision of the ADR-0105 scheduler: it parses a trigger's
// cron spec and IANA time zone (ParseSchedule, ParseMisfirePolicy), finds occurrences
// (Schedule.Next) and decides what a claimed schedule row does (Decide: init, not due, fire, skip).
// Decide reads a trigger only through Occurrences, its next fire time strictly after t: cron's
// *Schedule is one kind, and a new kind implements Occurrences here.
//
// The package guarantees: every function is pure (no I/O, no database, no clock; times are int64
// milliseconds since the epoch as observed by PostgreSQL and passed in), so two replicas given the
// same inputs decide the same thing; an accepted spec fires at least once every eight years, and
// every error of ParseSchedule wraps ErrInvalidSchedule; for init, fire and skip the new cursor is an
// occurrence strictly after the old cursor, the scheduled occurrence and now, and the scheduled
// occurrence lies in [cursor, now]; fire_once admits at most one catch-up occurrence, never a
// backlog. It imports neither the generated db package nor pgx (docs/scheduling.md has the rules).
package schedule
