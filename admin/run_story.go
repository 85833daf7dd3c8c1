package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/db"
)

// Bounds of a Run's story: how many of its offers and events it lists (the newest). Attempts are
// all listed: a Run has at most max_attempts (≤ MaxMaxAttempts) plus its hand-backs
// (control_core.max_hand_backs(), 16) of them, well under MaxStoryList.
const (
	DefaultStoryOffers = 20
	DefaultStoryEvents = 100
	MaxStoryList       = 1000
	FieldOffers        = "offers"
	FieldEvents        = "events"
)

// StoryLimits bounds what RunStory lists; 0 means the default.
type StoryLimits struct {
	Offers int // 1 … MaxStoryList; the newest offers
	Events int // 1 … MaxStoryList; the newest events
}

// Validate names the field out of range.
func (l StoryLimits) Validate() error {
	if l.Offers < 0 || l.Offers > MaxStoryList {
		return fieldErrf(FieldOffers, "%d is out of range: want 1 … %d", l.Offers, MaxStoryList)
	}
	if l.Events < 0 || l.Events > MaxStoryList {
		return fieldErrf(FieldEvents, "%d is out of range: want 1 … %d", l.Events, MaxStoryList)
	}
	return nil
}

// RunStory is the whole story of one Run, read in one snapshot: its admission (the Run's own
// fields: trigger, occurrence, created_at_ms is when it was admitted, owner who owns it), its
// retry policy, every Attempt with its worker, lease and outcome, its newest offers and its
// newest events. Its JSON is qlsched.runs-show/v1 (docs/json.md).
// Never in it: the callback token hash, a worker token's hash, the executor spec.
type RunStory struct {
	RunID               uuid.UUID `json:"run_id"`
	ProjectID           string    `json:"project_id"`
	TaskID              string    `json:"task_id"`
	TaskRevision        int64     `json:"task_revision"`
	ExecutionRevisionID uuid.UUID `json:"execution_revision_id"`
	TriggerID           *string   `json:"trigger_id"`
	TriggerRevision     *int64    `json:"trigger_revision"`
	ScheduledForMs      *int64    `json:"scheduled_for_ms"`
	IdempotencyKey      string    `json:"idempotency_key"`
	State               string    `json:"state"`
	Owner               string    `json:"owner"`
	QueuedAtMs          *int64    `json:"queued_at_ms"`
	CancelRequestedAtMs *int64    `json:"cancel_requested_at_ms"`
	FinishedAtMs        *int64    `json:"finished_at_ms"`
	CreatedAtMs         int64     `json:"created_at_ms"`
	UpdatedAtMs         int64     `json:"updated_at_ms"`
	LagMs               *int64    `json:"lag_ms"`
	NowMs               int64     `json:"now_ms"`

	// RetryAtMs: a queued retry's ready time (its backoff end); LeaseVersion: the Run's lease
	// counter (each ACK grants the next version).
	RetryAtMs      *int64 `json:"retry_at_ms"`
	LeaseVersion   int64  `json:"lease_version"`
	MaxAttempts    int32  `json:"max_attempts"`
	RetryBackoffMs int64  `json:"retry_backoff_ms"`

	Attempts []StoryAttempt `json:"attempts"`
	// Offers are the newest offers, by Attempt and time, oldest first; OffersTotal counts them all.
	Offers      []StoryOffer `json:"offers"`
	OffersTotal int64        `json:"offers_total"`
	// Events are the newest events in seq order; EventsTotal counts them all (the first shown is
	// seq EventsTotal − len(Events) + 1).
	Events      []Event `json:"events"`
	EventsTotal int64   `json:"events_total"`
}

// StoryAttempt is one Attempt with what happened to it: the fields of Attempt, its worker's
// token name and session, its lease, and the worker's report (Result) or the loop's reason
// (Error) as recorded.
type StoryAttempt struct {
	Attempt
	TokenName            *string       `json:"token_name"`
	SessionState         *string       `json:"session_state"`
	SessionHeartbeatAtMs *int64        `json:"session_heartbeat_at_ms"`
	Lease                *StoryLease   `json:"lease"`
	Result               *AttemptEnd   `json:"result"`
	Error                *AttemptError `json:"error"`
}

// StoryLease is an Attempt's lease: granted at its ACK, renewed by heartbeats (ExpiresAtMs moves),
// ended by the report, the sweep or a drain.
type StoryLease struct {
	LeaseID      uuid.UUID `json:"lease_id"`
	LeaseVersion int64     `json:"lease_version"`
	State        string    `json:"state"`
	GrantedAtMs  int64     `json:"granted_at_ms"`
	ExpiresAtMs  int64     `json:"expires_at_ms"`
	EndedAtMs    *int64    `json:"ended_at_ms"`
}

// AttemptEnd is a worker's report as the Attempt records it: the outcome, the exit code or
// signal, the last bytes of the job's output and how long it ran (the worker's measure).
type AttemptEnd struct {
	Outcome         string `json:"outcome"`
	ExitCode        *int   `json:"exit_code"`
	Signal          string `json:"signal"`
	OutputTail      string `json:"output_tail"`
	OutputTruncated bool   `json:"output_truncated"`
	DurationMs      int64  `json:"duration_ms"`
}

// AttemptError is why an Attempt did not succeed: the worker's kind and message, or the loop's
// reason (run_cancelled, revision_digest_mismatch, lease expiry).
type AttemptError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Reason  string `json:"reason"`
}

// StoryOffer is one offer of an Attempt to a worker session: offered, then acked or rejected
// (AnsweredAtMs), or expired unanswered (after ExpiresAtMs; a cancel or a drain expires it early).
type StoryOffer struct {
	OfferID      uuid.UUID `json:"offer_id"`
	AttemptNo    int32     `json:"attempt_no"`
	SessionID    uuid.UUID `json:"session_id"`
	Worker       string    `json:"worker"`
	State        string    `json:"state"`
	OfferedAtMs  int64     `json:"offered_at_ms"`
	ExpiresAtMs  int64     `json:"expires_at_ms"`
	AnsweredAtMs *int64    `json:"answered_at_ms"`
}

// RunStory reads one Run's story in one snapshot. The nil UUID is a FieldError; a Run that does
// not exist is ErrNotFound. The read is bounded: all Attempts (≤ MaxMaxAttempts + 16 hand-backs), the newest
// offers and events up to the limits, and the counts of both.
func (r *Reader) RunStory(ctx context.Context, runID uuid.UUID, l StoryLimits) (RunStory, error) {
	var out RunStory
	if runID == uuid.Nil {
		return out, fieldErrf(FieldRun, "the nil UUID names no Run")
	}
	if err := l.Validate(); err != nil {
		return out, err
	}
	if l.Offers == 0 {
		l.Offers = DefaultStoryOffers
	}
	if l.Events == 0 {
		l.Events = DefaultStoryEvents
	}
	err := r.snapshot(ctx, func(q *db.Queries) error {
		x, err := q.RunStoryHead(ctx, runID)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("run %s: %w", runID, ErrNotFound)
		} else if err != nil {
			return fmt.Errorf("read run %s: %w", runID, err)
		}
		out = RunStory{RunID: x.RunID, ProjectID: x.ProjectID, TaskID: x.TaskID, TaskRevision: x.TaskRevision,
			ExecutionRevisionID: x.ExecutionRevisionID, TriggerID: textPtr(x.TriggerID), TriggerRevision: int8Ptr(x.TriggerRevision),
			ScheduledForMs: int8Ptr(x.ScheduledForMs), IdempotencyKey: x.IdempotencyKey, State: x.State, Owner: x.Owner,
			QueuedAtMs: int8Ptr(x.QueuedAtMs), CancelRequestedAtMs: int8Ptr(x.CancelRequestedAtMs), FinishedAtMs: int8Ptr(x.FinishedAtMs),
			CreatedAtMs: x.CreatedAtMs, UpdatedAtMs: x.UpdatedAtMs, NowMs: x.NowMs, RetryAtMs: int8Ptr(x.RetryAtMs),
			LeaseVersion: x.LeaseVersion, MaxAttempts: x.MaxAttempts, RetryBackoffMs: x.RetryBackoffMs,
			OffersTotal: x.Offers, EventsTotal: x.Events,
			Attempts: []StoryAttempt{}, Offers: []StoryOffer{}, Events: []Event{}}
		if lag, ok := admissionLag(out.ScheduledForMs, out.QueuedAtMs); ok {
			out.LagMs = &lag
		}
		attempts, err := q.RunStoryAttempts(ctx, db.RunStoryAttemptsParams{RunID: runID, MaxRows: MaxStoryList})
		if err != nil {
			return fmt.Errorf("read attempts of run %s: %w", runID, err)
		}
		for _, a := range attempts {
			sa, err := storyAttempt(a)
			if err != nil {
				return fmt.Errorf("run %s attempt %d: %w", runID, a.AttemptNo, err)
			}
			out.Attempts = append(out.Attempts, sa)
		}
		offers, err := q.RunStoryOffers(ctx, db.RunStoryOffersParams{RunID: runID, MaxRows: int32(l.Offers)})
		if err != nil {
			return fmt.Errorf("read offers of run %s: %w", runID, err)
		}
		for _, o := range slices.Backward(offers) {
			out.Offers = append(out.Offers, StoryOffer{OfferID: o.OfferID, AttemptNo: o.AttemptNo, SessionID: o.WorkerSessionID,
				Worker: o.WorkerID, State: o.State, OfferedAtMs: o.OfferedAtMs, ExpiresAtMs: o.ExpiresAtMs,
				AnsweredAtMs: int8Ptr(o.AnsweredAtMs)})
		}
		events, err := q.RunStoryEvents(ctx, db.RunStoryEventsParams{RunID: runID, MaxRows: int32(l.Events)})
		if err != nil {
			return fmt.Errorf("read events of run %s: %w", runID, err)
		}
		for _, e := range slices.Backward(events) {
			out.Events = append(out.Events, Event{EventID: e.EventID, Seq: e.Seq, Type: e.Type, AtMs: e.AtMs, Detail: e.Detail})
		}
		return nil
	})
	return out, err
}

func storyAttempt(a db.RunStoryAttemptsRow) (StoryAttempt, error) {
	sa := StoryAttempt{Attempt: Attempt{AttemptID: a.AttemptID, AttemptNo: a.AttemptNo, ExecutorKind: a.ExecutorKind,
		State: a.State, WorkerID: textPtr(a.WorkerID), WorkerSessionID: uuidPtr(a.WorkerSessionID), RunLeaseID: uuidPtr(a.RunLeaseID),
		OfferID: uuidPtr(a.OfferID), StartedAtMs: int8Ptr(a.StartedAtMs), FinishedAtMs: int8Ptr(a.FinishedAtMs),
		CreatedAtMs: a.CreatedAtMs, UpdatedAtMs: a.UpdatedAtMs, HasResult: a.Result != nil, HasError: a.Error != nil},
		TokenName: textPtr(a.TokenName), SessionState: textPtr(a.SessionState), SessionHeartbeatAtMs: int8Ptr(a.SessionHeartbeatAtMs)}
	if a.RunLeaseID.Valid && a.LeaseVersion.Valid {
		sa.Lease = &StoryLease{LeaseID: a.RunLeaseID.UUID, LeaseVersion: a.LeaseVersion.Int64, State: a.LeaseState.String,
			GrantedAtMs: a.LeaseGrantedAtMs.Int64, ExpiresAtMs: a.LeaseExpiresAtMs.Int64, EndedAtMs: int8Ptr(a.LeaseEndedAtMs)}
	}
	if a.Result != nil {
		m, err := jsonObject(a.Result)
		if err != nil {
			return sa, fmt.Errorf("result: %w", err)
		}
		res := &AttemptEnd{Outcome: str(m, "outcome"), Signal: str(m, "signal"), OutputTail: str(m, "output_tail")}
		if v, ok := m["exit_code"].(float64); ok {
			c := int(v)
			res.ExitCode = &c
		}
		res.OutputTruncated, _ = m["output_truncated"].(bool)
		if v, ok := m["duration_ms"].(float64); ok {
			res.DurationMs = int64(v)
		}
		sa.Result = res
	}
	if a.Error != nil {
		m, err := jsonObject(a.Error)
		if err != nil {
			return sa, fmt.Errorf("error: %w", err)
		}
		sa.Error = &AttemptError{Kind: str(m, "kind"), Message: str(m, "message"), Reason: str(m, "reason")}
	}
	return sa, nil
}

// jsonObject reads a recorded result or error leniently: a field of another type than expected
// is left out rather than hiding the whole story.
func jsonObject(b []byte) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}
