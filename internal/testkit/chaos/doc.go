// Package chaos holds the parts of a chaos soak that do not depend on the system under test, so
// that qlsched and a peer (River's periodic jobs, bench/river) can be put through the same faults
// and judged by the same audit:
//
//   - Plan: a fault schedule drawn from a seed before anything runs (times, kinds, hold times,
//     whether a fault aims at the leader), so two systems get the same faults at the same offsets;
//   - Supervisor: R real processes in slots, readiness read from their logs, the plan applied to
//     them (SIGKILL + restart, SIGSTOP/SIGCONT, graceful restart, SIGSTOP of every process), every
//     signal recorded;
//   - Audit: occurrences by scheduled second (expected, exactly once, missed, duplicated, the
//     admission lag), from what each system recorded, and Table, the one table of both;
//   - AuditExec and ExecTable: the whole loop, by execution (exactly once, at least once, late,
//     missed), from an execution log the job writes; QlschedLoop adds qlsched's dispatchers and
//     workers.
package chaos
