package replica_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/app/replica"
	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// A replica starts only on a ready schema: drift fails it before recovery or any round (no claim
// is ever written), and a ready schema gets recovery, then running rounds, every one of them
// measured by the observer the options name (from the first: it is the coordinator's from its
// construction).
func TestStartIsReadinessThenRecoveryThenLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)

	drifted := testpg.New(t)
	drifted.Exec(t, "ALTER TABLE control_core.trigger_schedules ADD COLUMN forged integer NOT NULL DEFAULT 0")
	var rounds atomic.Int64
	observer := coordinator.Observer{Round: func(time.Duration, int) { rounds.Add(1) }}
	_, err := replica.Start(ctx, drifted.Handle(t, "ql_runtime"), replica.Options{Config: coordinator.DefaultConfig("r1"),
		Names: drifted.Names, Log: log, Observer: observer})
	var notReady *verify.NotReadyError
	if !errors.As(err, &notReady) || rounds.Load() != 0 {
		t.Fatalf("on a drifted schema: err %v, %d rounds observed; want a *verify.NotReadyError before any round", err, rounds.Load())
	}

	ready := testpg.New(t)
	r, err := replica.Start(ctx, ready.Handle(t, "ql_runtime"), replica.Options{Config: coordinator.DefaultConfig("r2"),
		Names: ready.Names, Log: log, Observer: observer})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "a round observed", func() bool { return rounds.Load() > 0 })
	if err := r.Lifecycle.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if ran := r.Coordinator.Stats.Rounds.Load(); rounds.Load() != ran || r.Recovery.Candidates != 0 {
		t.Fatalf("%d rounds observed of %d run, recovery %+v; want the observer to see every round, nothing to recover", rounds.Load(), ran, r.Recovery)
	}
}
