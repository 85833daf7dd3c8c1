// Package worker is the library a worker process is written with: a Client for protocol v1
// (workerproto) and a Runner that registers a session, long-polls for offers, acknowledges them,
// runs a Handler per job up to its capacity, renews its leases by heartbeat, stops a job at its
// lease's local deadline (D11), on cancel or on lease loss, reports every outcome (replaying on
// 503), and drains on shutdown.
//
// It knows no database: it imports workerproto and the standard library only, so anyone may
// build a worker on it. worker/process is the reference Handler that runs a command.
//
// Guarantee: while the worker's clock runs at most 1 % slow against the database's, a job is
// stopped (its Handler's context ended KillGrace before) before the database may expire its
// lease, so no other worker runs the same Attempt's Run while it still runs. A worker that is
// itself stopped (SIGSTOP) cannot keep that promise: then only at-least-once holds.
package worker
