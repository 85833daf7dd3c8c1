package admin

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/db"
)

// Bounds of a workers list.
const (
	DefaultWorkersLimit = 100
	MaxWorkersLimit     = 10000
)

// WorkerFilter chooses the sessions a workers list shows.
type WorkerFilter struct {
	All   bool // every session (the history, newest first); else the live ones only
	Limit int  // 1 … MaxWorkersLimit; 0: DefaultWorkersLimit
}

// Validate checks the limit.
func (f WorkerFilter) Validate() error {
	if f.Limit < 0 || f.Limit > MaxWorkersLimit {
		return fieldErrf(FieldLimit, "%d is out of range: want 1 … %d", f.Limit, MaxWorkersLimit)
	}
	return nil
}

// WorkerSession is one worker session as the workers list shows it. InFlight is what it holds
// now: live offers (offered, not expired) plus active leases. HeartbeatAgeMs is measured on the
// database's clock (NowMs minus the last heartbeat).
type WorkerSession struct {
	SessionID      uuid.UUID         `json:"session_id"`
	Worker         string            `json:"worker"`
	TokenName      string            `json:"token_name"`
	State          string            `json:"state"`
	Live           bool              `json:"live"` // active or draining and not past its expiry
	Capacity       int32             `json:"capacity"`
	Offers         int64             `json:"offers"`
	Leases         int64             `json:"leases"`
	InFlight       int64             `json:"in_flight"`
	Labels         map[string]string `json:"labels"`
	HeartbeatAtMs  int64             `json:"heartbeat_at_ms"`
	HeartbeatAgeMs int64             `json:"heartbeat_age_ms"`
	ExpiresAtMs    int64             `json:"expires_at_ms"`
	CreatedAtMs    int64             `json:"created_at_ms"`
	ClosedAtMs     *int64            `json:"closed_at_ms"`
	NowMs          int64             `json:"now_ms"`
}

// WorkerSessions lists worker sessions in one snapshot and one statement: the live ones (a range
// of worker_sessions_live_expiry_idx: the cost follows the live fleet, not the history), or with
// f.All every session, newest first, up to the limit. More: the limit cut the list.
func (r *Reader) WorkerSessions(ctx context.Context, f WorkerFilter) (out []WorkerSession, more bool, err error) {
	if err := f.Validate(); err != nil {
		return nil, false, err
	}
	limit := f.Limit
	if limit == 0 {
		limit = DefaultWorkersLimit
	}
	err = r.snapshot(ctx, func(q *db.Queries) error {
		rows, err := q.ListWorkerSessions(ctx, db.ListWorkerSessionsParams{AllSessions: f.All, MaxRows: int32(limit + 1)})
		if err != nil {
			return fmt.Errorf("list worker sessions: %w", err)
		}
		if len(rows) > limit {
			rows, more = rows[:limit], true
		}
		out = make([]WorkerSession, 0, len(rows))
		for _, x := range rows {
			labels := map[string]string{}
			if err := json.Unmarshal(x.Labels, &labels); err != nil {
				return fmt.Errorf("worker session %s: labels: %w", x.WorkerSessionID, err)
			}
			live := (x.State == "active" || x.State == "draining") && x.ExpiresAtMs > x.NowMs
			out = append(out, WorkerSession{SessionID: x.WorkerSessionID, Worker: x.WorkerID, TokenName: x.TokenName, State: x.State,
				Live: live, Capacity: x.Capacity, Offers: x.Offers, Leases: x.Leases, InFlight: x.Offers + x.Leases, Labels: labels,
				HeartbeatAtMs: x.HeartbeatAtMs, HeartbeatAgeMs: x.NowMs - x.HeartbeatAtMs, ExpiresAtMs: x.ExpiresAtMs,
				CreatedAtMs: x.CreatedAtMs, ClosedAtMs: int8Ptr(x.ClosedAtMs), NowMs: x.NowMs})
		}
		return nil
	})
	return out, more, err
}
