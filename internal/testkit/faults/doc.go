// Package faults holds the fault and high-availability gates of the scheduler (ADR-0105 and
// beyond): backend termination, physical promotion, raw-wire COMMIT-response loss, network
// partition and a multi-process chaos soak. Each gate is a Go test against real PostgreSQL
// servers that it starts itself, and each ends with the exactly-once audit of the database.
//
// The closed loop's gates (TestGateDispatch*, issue 32) run real `qlsched run`, `qlsched
// dispatch` and `qlworker` processes and a test job (internal/testkit/cmd/qltestjob) that logs
// each execution: a worker SIGKILLed or SIGSTOPped mid-job, a dispatcher SIGKILLed with work in
// flight, a running Run cancelled, a token revoked mid-run. Each ends with the loop's audit
// (internal/testkit/loopaudit) and the execution log's (at least once; exactly once where the
// gate claims it).
//
// The tests carry the build tag "faults" so that `go test ./...` does not run them twice: run
// them with `make test-faults` (CI) and the long soak with `make chaos`. A gate that cannot run
// fails; none is ever skipped.
package faults
