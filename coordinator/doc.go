// Package coordinator is the ADR-0105 cluster scheduler: a bounded coordinator that every
// replica runs, with no global leader.
//
// A round claims at most Budget schedule rows, one claim statement each (committed alone, with a
// four-part fence: owner, token, version, expiry); decides each one in pure Go (cron + misfire,
// package schedule); and ends each claim under the full fence: admit (one SERIALIZABLE transaction
// that re-verifies everything and writes Run + Attempt + 2 Events + cursor), skip, or release.
// A lost fence is a counted race, never a duplicate. Time is always the database's.
//
// The package guarantees: per occurrence at most one Run (the fence and the idempotency key
// ql3:cron:v1:<triggerId>:<triggerRevision>:<scheduledForMs>); a Run identity only for an admit;
// rounds that never overlap; a stop that drains within its bound.
package coordinator
