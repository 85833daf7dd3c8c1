package admin

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/db"
)

// Replica is one registration in control_core.replicas (pg-0024): the replica running under an
// owner, or the last one that did while its row has not been taken or released. Times are the
// database's; Live: not past its expiry at NowMs.
type Replica struct {
	Owner          string    `json:"owner"`
	InstanceID     uuid.UUID `json:"instance_id"`
	Hostname       string    `json:"hostname"`
	Version        string    `json:"version"`
	StartedAtMs    int64     `json:"started_at_ms"`
	HeartbeatAtMs  int64     `json:"heartbeat_at_ms"`
	HeartbeatAgeMs int64     `json:"heartbeat_age_ms"`
	ExpiresAtMs    int64     `json:"expires_at_ms"`
	Live           bool      `json:"live"`
	NowMs          int64     `json:"now_ms"`
}

// Replicas lists every registration by owner, in one snapshot (one row per owner: the table is as
// small as the fleet).
func (r *Reader) Replicas(ctx context.Context) (out []Replica, err error) {
	err = r.snapshot(ctx, func(q *db.Queries) error {
		rows, err := q.ListReplicas(ctx)
		if err != nil {
			return fmt.Errorf("list replicas: %w", err)
		}
		out = make([]Replica, 0, len(rows))
		for _, x := range rows {
			out = append(out, Replica{Owner: x.Owner, InstanceID: x.InstanceID, Hostname: x.Hostname, Version: x.Version,
				StartedAtMs: x.StartedAtMs, HeartbeatAtMs: x.HeartbeatAtMs, HeartbeatAgeMs: x.NowMs - x.HeartbeatAtMs,
				ExpiresAtMs: x.ExpiresAtMs, Live: x.ExpiresAtMs > x.NowMs, NowMs: x.NowMs})
		}
		return nil
	})
	return out, err
}
