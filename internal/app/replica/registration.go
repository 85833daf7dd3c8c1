package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// Registration bounds. The TTL is how long a registration outlives its last heartbeat; a replica
// heartbeats every TTL/3, so two heartbeats may fail before it expires.
const (
	DefaultRegistrationTTL = 15 * time.Second
	MinRegistrationTTL     = 3 * time.Second
	MaxRegistrationTTL     = 5 * time.Minute
)

// RegisterOptions are what a replica registers under (control_core.replicas, pg-0024).
type RegisterOptions struct {
	Owner    string // the replica's --owner: one live replica per owner
	Hostname string
	Version  string
	TTL      time.Duration // MinRegistrationTTL … MaxRegistrationTTL; 0: DefaultRegistrationTTL
	Log      *slog.Logger
}

// OwnerHeldError: another live replica holds the owner's registration (it heartbeated while this
// one waited). Times are the database's. It names the holder by host, version and start, never by
// its instance id, which a refused register does not learn (RegisterReplica).
type OwnerHeldError struct {
	Owner     string
	Hostname  string
	Version   string
	StartedAt time.Time
	ExpiresAt time.Time
}

func (e *OwnerHeldError) Error() string {
	return fmt.Sprintf("--owner %q is already registered by a live replica on host %q (version %s, started %s, registration expires %s unless it heartbeats again); every replica needs its own --owner: leave the default (host name and process id) or pass one unique per replica, e.g. --owner \"$(hostname)-$$\"",
		e.Owner, e.Hostname, e.Version, e.StartedAt.UTC().Format(time.RFC3339), e.ExpiresAt.UTC().Format(time.RFC3339Nano))
}

// ErrRegistrationLost: a heartbeat found the owner's row no longer this instance's (it expired
// and another replica took it, or it was deleted).
var ErrRegistrationLost = errors.New("replica registration lost")

// Registration is this process's row in control_core.replicas, kept alive by heartbeats until
// Release.
type Registration struct {
	h          *dbconn.DB
	owner      string
	instance   uuid.UUID
	ttl        time.Duration
	log        *slog.Logger
	lost       chan struct{}
	stop       chan struct{}
	stopCtx    context.Context // cancelled with stop: a heartbeat in flight gives up at once
	stopCancel context.CancelFunc
	done       chan struct{}
	stopOnce   sync.Once
	StartedAt  time.Time // database time of the registration
	InstanceID uuid.UUID
}

func ms(t int64) time.Time { return time.UnixMilli(t) }

// Register takes owner's registration for a new instance. A row another instance holds is waited
// for, at most one TTL or until the row's own expiry when the holder registered with a longer
// one (at most MaxRegistrationTTL): a crashed predecessor's row expires and is taken; a holder that
// heartbeats meanwhile is live, and Register returns an *OwnerHeldError. Then it heartbeats every
// TTL/3 in the background; Lost is closed when a heartbeat finds the row taken.
func Register(ctx context.Context, h *dbconn.DB, o RegisterOptions) (*Registration, error) {
	ttl := o.TTL
	if ttl == 0 {
		ttl = DefaultRegistrationTTL
	}
	if ttl < MinRegistrationTTL || ttl > MaxRegistrationTTL {
		return nil, fmt.Errorf("registration TTL %s: want %s … %s", ttl, MinRegistrationTTL, MaxRegistrationTTL)
	}
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	r := &Registration{h: h, owner: o.Owner, instance: uuid.New(), ttl: ttl, log: log,
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	r.InstanceID = r.instance
	poll := min(max(ttl/10, 100*time.Millisecond), time.Second)
	var first *coordinator.ReplicaRow
	var waitUntil time.Time // local clock: one TTL (or the holder's expiry) after the first refusal
	for {
		row, err := coordinator.RegisterReplica(ctx, h, o.Owner, r.instance, o.Hostname, o.Version, ttl.Milliseconds())
		if err != nil {
			return nil, fmt.Errorf("register replica --owner %q: %w", o.Owner, err)
		}
		if row.Registered {
			r.StartedAt = ms(row.StartedAtMs)
			if first != nil {
				log.Info("replica registered: the previous registration of this owner expired", "instance", r.instance,
					"previous_host", first.Hostname, "previous_started", ms(first.StartedAtMs).UTC().Format(time.RFC3339))
			}
			break
		}
		held := &OwnerHeldError{Owner: o.Owner, Hostname: row.Hostname, Version: row.Version,
			StartedAt: ms(row.StartedAtMs), ExpiresAt: ms(row.ExpiresAtMs)}
		switch {
		case first == nil:
			first = &row
			// one TTL, or the holder's own expiry when it registered with a longer TTL (a
			// crashed holder's row outlives our TTL then; a live one heartbeats before it)
			limit := ttl
			if remaining := time.Duration(max(row.ExpiresAtMs-row.NowMs, 0)) * time.Millisecond; remaining >= ttl {
				limit = min(remaining, MaxRegistrationTTL) + poll
			}
			waitUntil = time.Now().Add(limit)
			log.Warn(fmt.Sprintf("--owner %q is registered by host %q (started %s) until %s: waiting up to %s for that registration to expire (a crashed replica's) before taking it; if it heartbeats meanwhile it is live and this replica refuses to start",
				o.Owner, row.Hostname, held.StartedAt.UTC().Format(time.RFC3339), held.ExpiresAt.UTC().Format(time.RFC3339Nano), limit),
				"instance", r.instance)
		case row.StartedAtMs != first.StartedAtMs || row.HeartbeatAtMs != first.HeartbeatAtMs:
			// it heartbeated, or another instance took it (a new start): live. A refused register
			// sees no instance id (RegisterReplica), so the start and the heartbeat tell.
			return nil, held
		case time.Now().After(waitUntil):
			return nil, held
		}
		// until the holder's expiry in database time, in steps of poll, so that a heartbeat is seen
		wait := min(poll, time.Duration(max(row.ExpiresAtMs-row.NowMs, 0)+1)*time.Millisecond)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
	log.Info("replica registered", "instance", r.instance, "ttl", ttl.String(), "heartbeat", (ttl / 3).String())
	r.stopCtx, r.stopCancel = context.WithCancel(context.Background())
	go r.heartbeat()
	return r, nil
}

// Lost is closed when a heartbeat finds the registration no longer this instance's.
func (r *Registration) Lost() <-chan struct{} { return r.lost }

func (r *Registration) heartbeat() {
	defer close(r.done)
	every := r.ttl / 3
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(r.stopCtx, every)
		expires, err := coordinator.HeartbeatReplica(ctx, r.h, r.owner, r.instance, r.ttl.Milliseconds())
		cancel()
		switch {
		case err != nil && r.stopCtx.Err() != nil:
			return // Release cancelled it
		case err != nil:
			if !failing {
				r.log.Warn("replica heartbeat failed; retrying", "instance", r.instance, "err", err)
			}
			failing = true
		case expires == 0:
			r.log.Error(fmt.Sprintf("replica registration lost: --owner %q is no longer this instance's (it expired and another replica took it, or it was deleted); stopping claims", r.owner),
				"instance", r.instance)
			close(r.lost)
			return
		default:
			if failing {
				r.log.Info("replica heartbeat recovered", "instance", r.instance)
			}
			failing = false
		}
	}
}

// Release stops the heartbeats and deletes the registration if it is still this instance's (a
// clean stop: the owner can be reused at once).
func (r *Registration) Release(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.stop); r.stopCancel() })
	<-r.done
	if _, err := coordinator.ReleaseReplica(ctx, r.h, r.owner, r.instance); err != nil {
		return fmt.Errorf("release replica registration --owner %q: %w", r.owner, err)
	}
	return nil
}
