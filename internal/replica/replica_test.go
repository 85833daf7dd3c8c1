package replica_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/replica"
	"github.com/qlcontrol/controlcore/internal/testpg"
	"github.com/qlcontrol/controlcore/internal/verify"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// A replica starts only on a ready schema: drift fails it before recovery or any round (no claim
// is ever written), and a ready schema gets recovery, the wiring hook, then running rounds.
func TestStartIsReadinessThenRecoveryThenLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)

	drifted := testpg.New(t)
	drifted.Exec(t, "ALTER TABLE control_core.trigger_schedules ADD COLUMN forged integer NOT NULL DEFAULT 0")
	wired := false
	_, err := replica.Start(ctx, drifted.Pool(t, "ql_runtime"), replica.Options{Config: coordinator.DefaultConfig("r1"),
		Names: drifted.Names, Log: log, Wire: func(*coordinator.Coordinator) { wired = true }})
	var notReady *verify.NotReadyError
	if !errors.As(err, &notReady) || wired {
		t.Fatalf("on a drifted schema: err %v, wired %v; want a *verify.NotReadyError before the coordinator exists", err, wired)
	}

	ready := testpg.New(t)
	var wiredTo *coordinator.Coordinator
	r, err := replica.Start(ctx, ready.Pool(t, "ql_runtime"), replica.Options{Config: coordinator.DefaultConfig("r2"),
		Names: ready.Names, Log: log, Wire: func(co *coordinator.Coordinator) { wiredTo = co }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Lifecycle.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if wiredTo == nil || wiredTo != r.Coordinator || r.Recovery.Candidates != 0 {
		t.Fatalf("wired %p, coordinator %p, recovery %+v; want the hook called with the replica's coordinator, nothing to recover", wiredTo, r.Coordinator, r.Recovery)
	}
}
