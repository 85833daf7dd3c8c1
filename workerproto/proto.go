// Package workerproto holds the wire types of worker protocol v1 (docs/dispatch.md, the
// HTTP/JSON protocol `qlsched dispatch` serves and workers speak): one struct per request and
// response, the error body and its codes, and the bounds both sides check. It imports the
// standard library only, so a worker written by anyone can use it without the database side.
//
// Durations on the wire are relative integer milliseconds (`*_ms`, `*_in_ms`), never wall-clock
// times: the worker measures them on its own monotonic clock (D11). Identifiers are UUIDs in
// their text form; this package keeps them as strings so it needs no UUID library.
package workerproto

import "encoding/json"

// Version is the protocol version a session registers with and the path prefix carries (/v1/).
const Version = 1

// Paths of protocol v1. The {id} parts are the UUIDs of the session, offer or attempt.
const (
	PathPrefix   = "/v1"
	PathSessions = PathPrefix + "/sessions" // POST: register
)

// SessionPath is DELETE /v1/sessions/{sid} (close).
func SessionPath(sessionID string) string { return PathSessions + "/" + sessionID }

// PollPath is POST /v1/sessions/{sid}/poll.
func PollPath(sessionID string) string { return SessionPath(sessionID) + "/poll" }

// HeartbeatPath is POST /v1/sessions/{sid}/heartbeat.
func HeartbeatPath(sessionID string) string { return SessionPath(sessionID) + "/heartbeat" }

// DrainPath is POST /v1/sessions/{sid}/drain.
func DrainPath(sessionID string) string { return SessionPath(sessionID) + "/drain" }

// AckPath is POST /v1/offers/{oid}/ack.
func AckPath(offerID string) string { return PathPrefix + "/offers/" + offerID + "/ack" }

// RejectPath is POST /v1/offers/{oid}/reject.
func RejectPath(offerID string) string { return PathPrefix + "/offers/" + offerID + "/reject" }

// CompletePath is POST /v1/attempts/{aid}/complete.
func CompletePath(attemptID string) string {
	return PathPrefix + "/attempts/" + attemptID + "/complete"
}

// RegisterRequest is the body of POST /v1/sessions.
type RegisterRequest struct {
	Name     string            `json:"name"`
	Capacity int               `json:"capacity"`
	Labels   map[string]string `json:"labels,omitempty"`
	Protocol int               `json:"protocol"`
}

// RegisterResponse is the 201 body of POST /v1/sessions.
type RegisterResponse struct {
	SessionID           string `json:"session_id"`
	HeartbeatIntervalMs int64  `json:"heartbeat_interval_ms"`
	LeaseTTLMs          int64  `json:"lease_ttl_ms"`
	PollMaxWaitMs       int64  `json:"poll_max_wait_ms"`
	OutputTailMaxBytes  int    `json:"output_tail_max_bytes"`
}

// PollRequest is the body of POST /v1/sessions/{sid}/poll. WaitMs is capped by the session's
// poll_max_wait_ms; the worker's HTTP timeout must exceed it by PollTimeoutSlackMs.
type PollRequest struct {
	WaitMs    int64 `json:"wait_ms"`
	MaxOffers int   `json:"max_offers"`
}

// PollResponse is the 200 body of a poll: the offers placed (none at the deadline), and
// DispatcherStopping when the dispatcher answered because it is shutting down (poll another).
type PollResponse struct {
	Offers             []Offer `json:"offers"`
	DispatcherStopping bool    `json:"dispatcher_stopping,omitempty"`
}

// Offer is one Attempt placed on the session. CallbackToken is sent once, here, and never again
// (D8): it authenticates ack, reject and complete for this Attempt. Trigger and ScheduledForMs are
// absent for a manual Run. Spec is the execution spec whose digest the dispatcher verified.
type Offer struct {
	OfferID        string          `json:"offer_id"`
	AttemptID      string          `json:"attempt_id"`
	RunID          string          `json:"run_id"`
	AttemptNo      int             `json:"attempt_no"`
	MaxAttempts    int             `json:"max_attempts"`
	CallbackToken  string          `json:"callback_token"`
	ExpiresInMs    int64           `json:"expires_in_ms"`
	Project        string          `json:"project"`
	Task           string          `json:"task"`
	TaskRevision   int64           `json:"task_revision"`
	Trigger        string          `json:"trigger,omitempty"`
	ScheduledForMs *int64          `json:"scheduled_for_ms,omitempty"`
	Spec           json.RawMessage `json:"spec"`
}

// AckRequest is the body of POST /v1/offers/{oid}/ack.
type AckRequest struct {
	SessionID     string `json:"session_id"`
	CallbackToken string `json:"callback_token"`
}

// AckResponse is the 200 body of an ack (and of its replay): the lease granted.
type AckResponse struct {
	LeaseVersion        int64 `json:"lease_version"`
	LeaseExpiresInMs    int64 `json:"lease_expires_in_ms"`
	HeartbeatIntervalMs int64 `json:"heartbeat_interval_ms"`
}

// RejectRequest is the body of POST /v1/offers/{oid}/reject. Reason ≤ MaxReasonBytes.
type RejectRequest struct {
	SessionID     string `json:"session_id"`
	CallbackToken string `json:"callback_token"`
	Reason        string `json:"reason,omitempty"`
}

// RejectResponse is the 200 body of a reject: `{}`.
type RejectResponse struct{}

// LeaseRef names one lease the session holds: its Attempt and the version granted by the ack.
type LeaseRef struct {
	AttemptID    string `json:"attempt_id"`
	LeaseVersion int64  `json:"lease_version"`
}

// HeartbeatRequest is the body of POST /v1/sessions/{sid}/heartbeat: every lease the worker
// holds (≤ the session's capacity).
type HeartbeatRequest struct {
	Leases []LeaseRef `json:"leases"`
}

// Lease statuses of a heartbeat answer.
const (
	LeaseRenewed = "renewed" // the deadline moves
	LeaseCancel  = "cancel"  // the Run was cancelled: stop, then complete with OutcomeCancelled
	LeaseLost    = "lost"    // stop at once and do not report
)

// LeaseStatus is one listed lease's answer. LeaseExpiresInMs is 0 for a lost lease.
type LeaseStatus struct {
	AttemptID        string `json:"attempt_id"`
	Status           string `json:"status"`
	LeaseExpiresInMs int64  `json:"lease_expires_in_ms"`
}

// HeartbeatResponse is the 200 body of a heartbeat.
type HeartbeatResponse struct {
	SessionExpiresInMs int64         `json:"session_expires_in_ms"`
	Leases             []LeaseStatus `json:"leases"`
}

// Outcomes a worker reports.
const (
	OutcomeSucceeded  = "succeeded"
	OutcomeFailed     = "failed"
	OutcomeCancelled  = "cancelled"
	OutcomeHandedBack = "handed_back" // drain grace exceeded: not an attempt, retried at once (at most 16 per Run)
)

// Error kinds of a failed (or cancelled, handed back) Attempt.
const (
	KindExitStatus = "exit_status" // the process exited non-zero or was killed by a signal
	KindTimeout    = "timeout"     // the spec's timeout passed
	KindSpawn      = "spawn"       // the program could not be started
	KindBadSpec    = "bad_spec"    // the spec could not be parsed
	KindCancelled  = "cancelled"   // the Run was cancelled
	KindLeaseLost  = "lease_lost"  // the local lease deadline passed
	KindHandler    = "handler"     // the handler itself failed (a bug, a panic)
)

// AttemptError says why an Attempt did not succeed. Message ≤ MaxMessageBytes, no secrets.
type AttemptError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// CompleteRequest is the body of POST /v1/attempts/{aid}/complete. ExitCode is absent when no
// process exited (spawn, bad_spec); Signal names the signal that ended it ("SIGKILL"), if any.
// OutputTail is the last ≤ OutputTailMaxBytes of output, valid UTF-8.
type CompleteRequest struct {
	SessionID       string        `json:"session_id"`
	CallbackToken   string        `json:"callback_token"`
	LeaseVersion    int64         `json:"lease_version"`
	Outcome         string        `json:"outcome"`
	ExitCode        *int          `json:"exit_code,omitempty"`
	Signal          string        `json:"signal,omitempty"`
	Error           *AttemptError `json:"error,omitempty"`
	OutputTail      string        `json:"output_tail,omitempty"`
	OutputTruncated bool          `json:"output_truncated,omitempty"`
	DurationMs      int64         `json:"duration_ms"`
}

// Run states a completion answers with.
const (
	RunSucceeded = "succeeded"
	RunQueued    = "queued" // retried: a new Attempt waits
	RunFailed    = "failed"
	RunCancelled = "cancelled"
)

// CompleteResponse is the 200 body of a completion; Replay is true when this report had
// already been accepted (the same attempt, callback token, lease version and outcome).
type CompleteResponse struct {
	RunState string `json:"run_state"`
	Replay   bool   `json:"replay"`
}

// DrainRequest is the body of POST /v1/sessions/{sid}/drain: `{}`.
type DrainRequest struct{}

// DrainResponse is the 200 body of a drain: the offers this call withdrew, the session's active
// leases now, and whether an earlier drain had already moved it to draining (a repeated drain:
// nothing else changes, WithdrawnOffers is then 0 unless an earlier drain left an offer whose Run
// stayed locked past the store's tries).
type DrainResponse struct {
	WithdrawnOffers int  `json:"withdrawn_offers"`
	ActiveLeases    int  `json:"active_leases"`
	AlreadyDraining bool `json:"already_draining"`
}

// The enums as lists (the schema's enums; a test holds them equal).
var (
	LeaseStatuses = []string{LeaseRenewed, LeaseCancel, LeaseLost}
	Outcomes      = []string{OutcomeSucceeded, OutcomeFailed, OutcomeCancelled, OutcomeHandedBack}
	ErrorKinds    = []string{KindExitStatus, KindTimeout, KindSpawn, KindBadSpec, KindCancelled, KindLeaseLost, KindHandler}
	RunStates     = []string{RunSucceeded, RunQueued, RunFailed, RunCancelled}
)
