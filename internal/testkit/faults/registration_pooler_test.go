//go:build faults

package faults

import (
	"context"
	"errors"
	"testing"
	"time"

	qlreplica "github.com/qlcontrol/controlcore/internal/app/replica"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
)

// The replica registration (pg-0024) behind PgBouncer in transaction pooling: registering,
// heartbeating across a PgBouncer restart and releasing work; two replicas registering one owner
// at the same instant: exactly one wins, the other gets *OwnerHeldError.
func TestRegistrationThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pt := newPooledTarget(t, "transaction")
	h := pt.open("reg", nil)
	opts := qlreplica.RegisterOptions{Owner: "reg", Hostname: "h", Version: "v", TTL: qlreplica.MinRegistrationTTL, Log: testLogger("reg")}
	type result struct {
		r   *qlreplica.Registration
		err error
	}
	results := make(chan result, 2)
	start := make(chan struct{})
	for range 2 {
		go func() {
			<-start
			r, err := qlreplica.Register(context.Background(), h, opts)
			results <- result{r, err}
		}()
	}
	close(start)
	var won *qlreplica.Registration
	for range 2 {
		x := <-results
		var held *qlreplica.OwnerHeldError
		switch {
		case x.err == nil && won == nil:
			won = x.r
		case x.err == nil:
			t.Fatalf("both simultaneous registrations of one owner won")
		case !errors.As(x.err, &held):
			t.Fatalf("the losing registration: %v; want *OwnerHeldError", x.err)
		}
	}
	if won == nil {
		t.Fatal("neither simultaneous registration won")
	}
	heartbeat := func() int64 {
		var ms int64
		if err := pt.su.QueryRow(context.Background(), "SELECT heartbeat_at_ms FROM control_core.replicas WHERE owner = 'reg' AND instance_id = $1", won.InstanceID).Scan(&ms); err != nil {
			t.Fatal(err)
		}
		return ms
	}
	first := heartbeat()
	eventually.True(t, 10*time.Second, "a heartbeat through PgBouncer", func() bool { return heartbeat() > first })
	pt.bouncer.Restart(t)
	second := heartbeat()
	eventually.True(t, 10*time.Second, "a heartbeat after PgBouncer restarted", func() bool { return heartbeat() > second })
	select {
	case <-won.Lost():
		t.Fatal("registration lost across a PgBouncer restart")
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := won.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pt.su.QueryRow(context.Background(), "SELECT count(*) FROM control_core.replicas").Scan(&n); err != nil || n != 0 {
		t.Errorf("after the release: %d rows (%v); want none", n, err)
	}
}
