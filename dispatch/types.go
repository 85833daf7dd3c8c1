package dispatch

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"
)

// Sentinel errors: the caller (the protocol handlers) branches on them with errors.Is to choose
// the status code. A transition that wrote nothing returns one of them, never a bare error.
var (
	ErrUnauthorized    = errors.New("unauthorized")                // token unknown or revoked (401)
	ErrNotFound        = errors.New("not found")                   // no such session/offer/attempt for this token (404)
	ErrOfferGone       = errors.New("offer gone")                  // offer expired, withdrawn or rejected (409 offer_gone)
	ErrLeaseLost       = errors.New("lease lost")                  // lease expired, foreign or an old version (409 lease_lost)
	ErrRunCancelled    = errors.New("run cancelled")               // the Run was cancelled (409 run_cancelled)
	ErrSessionGone     = errors.New("session gone")                // session closed or expired (410 session_gone)
	ErrSessionDraining = errors.New("session draining")            // the session drains: no new offers (409 session_draining)
	ErrLeasesActive    = errors.New("session holds active leases") // close refused (409 leases_active)
	ErrStopping        = errors.New("dispatcher stopping")         // the placer stopped: polls answer [] (dispatcher_stopping)
	ErrBadValue        = errors.New("value the database refuses")  // data exception (class 22): a retry cannot help (400)
	ErrTooManySessions = errors.New("too many sessions")           // the token holds MaxSessionsPerToken live sessions (409 too_many_sessions)
	ErrTooManyLeases   = errors.New("more leases than capacity")   // a heartbeat lists more leases than the session's capacity (400)
	ErrBusy            = errors.New("run busy")                    // the Run stayed locked by another transition: retry (503)
)

// MaxSessionsPerToken bounds the live (active or draining, unexpired) sessions of one worker token:
// a worker that registers in a loop fills no table. A closed or expired session does not count.
const MaxSessionsPerToken = 64

// Credential identifies the caller of every worker-facing transition: the sha256 of its bearer
// token (HashToken). The token itself never enters the store.
type Credential struct{ TokenHash string }

// CredentialFor hashes a bearer token into a Credential.
func CredentialFor(token string) Credential { return Credential{TokenHash: HashToken(token)} }

// Registration is a worker's request to open a session (POST /v1/sessions), already validated
// by the protocol layer (name pattern, capacity 1…256, ≤ 16 labels).
type Registration struct {
	Name     string
	Capacity int
	Labels   map[string]string
	Protocol int
}

// Session is an open worker session. Durations are relative milliseconds (D11).
type Session struct {
	ID                  uuid.UUID
	WorkerID            string
	State               string // active, draining, closed, expired
	Capacity            int
	Labels              map[string]string
	ExpiresInMs         int64
	HeartbeatIntervalMs int64
	LeaseTTLMs          int64
	PollMaxWaitMs       int64
}

// CandidateQuery is one bounded, fair read of placeable Runs for a session (§3.2).
type CandidateQuery struct {
	SessionID   uuid.UUID
	Labels      map[string]string
	After       string // rotation cursor: a project id, "" for the start
	Slots       int
	MaxProjects int
	ScanCap     int
}

// Candidate is one Run DispatchCandidates returned, in round-robin order.
type Candidate struct {
	RunID     uuid.UUID
	ProjectID string
}

// Offer is a Run placed for a session (the transition P). CallbackToken is returned once, here;
// only its hash is stored.
type Offer struct {
	OfferID        uuid.UUID
	AttemptID      uuid.UUID
	RunID          uuid.UUID
	AttemptNo      int
	MaxAttempts    int
	CallbackToken  string
	ExpiresInMs    int64
	ProjectID      string
	TaskID         string
	TaskRevision   int64
	TriggerID      string // "" for a manual Run
	ScheduledForMs *int64 // nil for a manual Run
	Spec           json.RawMessage
}

// Lease is what an ACK grants.
type Lease struct {
	LeaseVersion        int64
	LeaseExpiresInMs    int64
	HeartbeatIntervalMs int64
	// Started: this ACK moved the Run to running (false for a replay, A′). Waited is then how long
	// the Run waited, by database time, from when it was last queued and ready (admitted, or its
	// retry's backoff end) to running; negative when the Run carried no queue time.
	Started bool
	Waited  time.Duration
}

// LeaseRef names a lease a worker holds, in a heartbeat.
type LeaseRef struct {
	AttemptID    uuid.UUID
	LeaseVersion int64
}

// LeaseStatus is a heartbeat's answer for one lease.
type LeaseStatus string

const (
	LeaseRenewed LeaseStatus = "renewed" // the deadline moved
	LeaseCancel  LeaseStatus = "cancel"  // renewed, but the Run was cancelled: stop and report cancelled
	LeaseLost    LeaseStatus = "lost"    // not renewed: stop at once, do not report
)

// LeaseState is one lease of a HeartbeatResult.
type LeaseState struct {
	AttemptID        uuid.UUID
	Status           LeaseStatus
	LeaseExpiresInMs int64 // 0 when lost
}

// HeartbeatResult answers a heartbeat: the session's new expiry and one state per listed lease,
// in request order.
type HeartbeatResult struct {
	SessionExpiresInMs int64
	Leases             []LeaseState
}

// Outcome is how a worker says an Attempt ended.
type Outcome string

const (
	OutcomeSucceeded  Outcome = "succeeded"
	OutcomeFailed     Outcome = "failed"
	OutcomeCancelled  Outcome = "cancelled"
	OutcomeHandedBack Outcome = "handed_back" // drain grace exceeded: not an attempt, retried at once (control_core.max_hand_backs per Run)
)

// Report is a worker's completion of an Attempt (POST /v1/attempts/{id}/complete), validated by
// the protocol layer (tail ≤ 8192 bytes of UTF-8, message ≤ 1024).
type Report struct {
	SessionID       uuid.UUID
	CallbackToken   string
	LeaseVersion    int64
	Outcome         Outcome
	ExitCode        *int
	Signal          string
	ErrorKind       string // exit_status, timeout, spawn, bad_spec, cancelled, lease_lost, handler; "" on success
	ErrorMessage    string
	OutputTail      string
	OutputTruncated bool
	DurationMs      int64
}

// Completion answers a report: the Run's state after it, and whether it repeated an earlier one.
type Completion struct {
	RunState string // succeeded, queued, failed, cancelled
	Replay   bool
	// AttemptState is the state this report ended the Attempt in (succeeded, failed, cancelled), ""
	// for a replay (nothing written); Ran is then how long the Attempt ran, from its lease's grant
	// to the report, by database time.
	AttemptState string
	Ran          time.Duration
}

// LeaseExpiries is what one lease sweep (E) ended: the Attempts it expired, and how many of their
// Runs it queued again for another Attempt (the others failed, or stayed cancelled).
type LeaseExpiries struct {
	Expired, Requeued int
}

// DrainResult answers a drain.
type DrainResult struct {
	WithdrawnOffers int
	ActiveLeases    int
	AlreadyDraining bool // an earlier drain moved the session to draining
}
