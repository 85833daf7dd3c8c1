// Package replica composes one scheduler replica in the order ADR-0105 fixes for the cluster
// composition root: schema readiness (fail closed), then startup recovery, then the lifecycle.
// `qlsched run` and `qldemo` start their replicas through it, so neither can skip a step.
package replica

import (
	"context"
	"log/slog"
	"time"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/roles"
)

// Options are what one replica needs besides its database handle.
type Options struct {
	Config coordinator.Config // validated by the caller before any connection
	Names  roles.Names        // the four roles readiness checks
	Log    *slog.Logger       // without the owner: the replica's lines carry it from Config
	// Observer receives the coordinator's measurements from its first round (metrics' histograms).
	Observer coordinator.Observer
	// Register, when set, registers the replica under Config.Owner (control_core.replicas) after
	// readiness and before recovery: a live replica with the same owner refuses the start
	// (*OwnerHeldError). Owner, when empty, is Config.Owner.
	Register *RegisterOptions
}

// Replica is one started replica.
type Replica struct {
	Coordinator *coordinator.Coordinator
	Lifecycle   *coordinator.Lifecycle
	// Store is the coordinator's; the caller closes it (Store.Close) after stopping the lifecycle,
	// which sends the dispatchers' last pending wake-up and ends its sender.
	Store    *coordinator.Store
	Recovery coordinator.RecoveryReport
	// Registration is nil unless Options.Register was set; its Lost channel closes when another
	// instance took the owner, and the caller releases it after stopping the lifecycle.
	Registration *Registration
}

// Start checks readiness through h (a *verify.NotReadyError when the schema or the runtime role's
// privileges drifted), runs startup recovery, and starts the lifecycle. Nothing is claimed
// before readiness and recovery have converged; on error nothing is left running.
func Start(ctx context.Context, h *dbconn.DB, opts Options) (*Replica, error) {
	if err := verify.Readiness(ctx, h, opts.Names); err != nil {
		return nil, err
	}
	log := opts.Log.With("owner", opts.Config.Owner) // the coordinator adds it to its own lines
	var reg *Registration
	if opts.Register != nil {
		ro := *opts.Register
		if ro.Owner == "" {
			ro.Owner = opts.Config.Owner
		}
		if ro.Log == nil {
			ro.Log = log
		}
		var err error
		if reg, err = Register(ctx, h, ro); err != nil {
			return nil, err
		}
	}
	release := func() {
		if reg != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = reg.Release(ctx)
		}
	}
	began := time.Now()
	rep, err := coordinator.Recover(ctx, h, log)
	if err != nil {
		release()
		return nil, err
	}
	log.Info("startup recovery done", "candidates", rep.Candidates, "failed_closed", rep.FailedClosed, "skipped", rep.Skipped,
		"took_ms", time.Since(began).Milliseconds())
	store := coordinator.NewStore(h)
	co := coordinator.New(opts.Config, store, coordinator.WithLogger(opts.Log),
		coordinator.WithObserver(opts.Observer))
	lc := coordinator.NewLifecycle(co, opts.Config)
	if err := lc.Start(ctx); err != nil {
		release()
		return nil, err
	}
	return &Replica{Coordinator: co, Lifecycle: lc, Store: store, Recovery: rep, Registration: reg}, nil
}
