package coordinator

import (
	"context"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// ReplicaRow is an owner's registration in control_core.replicas (pg-0024) as replica_register
// returns it: taken by this instance (Registered) or the holder's. Times are database ms. A refused
// register's InstanceID is uuid.Nil: the holder's id is what heartbeat and release take, and the
// query blanks it so that a refused caller cannot evict the holder with it.
type ReplicaRow struct {
	Registered    bool
	InstanceID    uuid.UUID
	Hostname      string
	Version       string
	StartedAtMs   int64
	HeartbeatAtMs int64
	ExpiresAtMs   int64
	NowMs         int64
}

// RegisterReplica calls control_core.replica_register: one statement, no session state.
func RegisterReplica(ctx context.Context, h *dbconn.DB, owner string, instance uuid.UUID, hostname, version string, ttlMs int64) (ReplicaRow, error) {
	var row db.RegisterReplicaRow
	err := h.Run(ctx, func(q dbconn.Querier) error {
		var err error
		row, err = db.New(q).RegisterReplica(ctx, db.RegisterReplicaParams{Owner: owner, InstanceID: instance, Hostname: hostname,
			Version: version, TtlMs: ttlMs})
		return err
	})
	return ReplicaRow(row), err
}

// HeartbeatReplica calls control_core.replica_heartbeat: the new expiry (database ms), or 0 when
// the registration is no longer instance's.
func HeartbeatReplica(ctx context.Context, h *dbconn.DB, owner string, instance uuid.UUID, ttlMs int64) (int64, error) {
	var expires int64
	err := h.Run(ctx, func(q dbconn.Querier) error {
		var err error
		expires, err = db.New(q).HeartbeatReplica(ctx, db.HeartbeatReplicaParams{Owner: owner, InstanceID: instance, TtlMs: ttlMs})
		return err
	})
	return expires, err
}

// ReleaseReplica calls control_core.replica_release: whether instance's registration was deleted.
func ReleaseReplica(ctx context.Context, h *dbconn.DB, owner string, instance uuid.UUID) (bool, error) {
	var released bool
	err := h.Run(ctx, func(q dbconn.Querier) error {
		var err error
		released, err = db.New(q).ReleaseReplica(ctx, db.ReleaseReplicaParams{Owner: owner, InstanceID: instance})
		return err
	})
	return released, err
}
