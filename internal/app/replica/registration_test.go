package replica_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/app/replica"
	"github.com/qlcontrol/controlcore/internal/testkit/faultproxy"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// The three functions of pg-0024 as the runtime role calls them: a row is taken only when
// absent, expired or the caller's; a heartbeat or a release by another instance changes nothing;
// and the runtime role writes the table through them alone.
func TestRegistrationFunctionsTakeOnlyAFreeRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.New(t)
	h := d.Handle(t, "ql_runtime")
	a, b := uuid.New(), uuid.New()

	row, err := coordinator.RegisterReplica(ctx, h, "o1", a, "host-a", "v1", 60000)
	if err != nil || !row.Registered || row.InstanceID != a || row.ExpiresAtMs != row.HeartbeatAtMs+60000 {
		t.Fatalf("first register: %+v, %v; want taken by a for 60 s", row, err)
	}
	again, err := coordinator.RegisterReplica(ctx, h, "o1", a, "host-a", "v1", 60000)
	if err != nil || !again.Registered || again.StartedAtMs != row.StartedAtMs {
		t.Errorf("re-register by the same instance: %+v, %v; want taken, start kept", again, err)
	}
	refused, err := coordinator.RegisterReplica(ctx, h, "o1", b, "host-b", "v2", 60000)
	if err != nil || refused.Registered || refused.InstanceID != uuid.Nil || refused.Hostname != "host-a" || refused.ExpiresAtMs <= refused.NowMs {
		t.Errorf("register by another instance while live: %+v, %v; want refused, naming host-a but not its instance", refused, err)
	}
	if exp, err := coordinator.HeartbeatReplica(ctx, h, "o1", b, 60000); err != nil || exp != 0 {
		t.Errorf("heartbeat by another instance: %d, %v; want 0", exp, err)
	}
	if ok, err := coordinator.ReleaseReplica(ctx, h, "o1", b); err != nil || ok {
		t.Errorf("release by another instance: %v, %v; want nothing released", ok, err)
	}
	if exp, err := coordinator.HeartbeatReplica(ctx, h, "o1", a, 60000); err != nil || exp == 0 {
		t.Errorf("heartbeat by the holder: %d, %v; want a new expiry", exp, err)
	}
	// expired (as a crashed replica's row is once its TTL passed): another instance takes it
	d.Exec(t, "UPDATE control_core.replicas SET started_at_ms = started_at_ms - 120000, heartbeat_at_ms = heartbeat_at_ms - 120000, expires_at_ms = expires_at_ms - 120000 WHERE owner = 'o1'")
	taken, err := coordinator.RegisterReplica(ctx, h, "o1", b, "host-b", "v2", 60000)
	if err != nil || !taken.Registered || taken.InstanceID != b || taken.Hostname != "host-b" || taken.StartedAtMs != taken.NowMs {
		t.Errorf("register over an expired row: %+v, %v; want taken by b, started now", taken, err)
	}
	if exp, err := coordinator.HeartbeatReplica(ctx, h, "o1", a, 60000); err != nil || exp != 0 {
		t.Errorf("the old holder's heartbeat after the take-over: %d, %v; want 0 (lost)", exp, err)
	}
	if ok, err := coordinator.ReleaseReplica(ctx, h, "o1", b); err != nil || !ok {
		t.Errorf("release by the holder: %v, %v; want released", ok, err)
	}
	if _, err := coordinator.RegisterReplica(ctx, h, "o1", a, "host-a", "v1", 10); err == nil {
		t.Errorf("register with a 10 ms TTL: accepted; want invalid_parameter_value")
	}

	// the runtime role holds nothing on the table itself
	for _, sql := range []string{
		"INSERT INTO control_core.replicas VALUES ('x', gen_random_uuid(), 'h', 'v', 1, 1, 2)",
		"UPDATE control_core.replicas SET expires_at_ms = 0",
		"DELETE FROM control_core.replicas",
	} {
		_, err := h.Pool().Exec(ctx, sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.InsufficientPrivilege {
			t.Errorf("as the runtime role %q: %v; want insufficient_privilege", sql, err)
		}
	}
}

// Register waits for a crashed holder's row to expire and takes it; a holder that heartbeats
// meanwhile refuses it with an *OwnerHeldError naming the holder.
func TestRegisterWaitsOutACrashedHolderOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.New(t)
	h := d.Handle(t, "ql_runtime")
	log := slog.New(slog.DiscardHandler)
	opts := replica.RegisterOptions{Owner: "o", Hostname: "h", Version: "v", TTL: replica.MinRegistrationTTL, Log: log}

	live, err := replica.Register(ctx, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err = replica.Register(ctx, h, opts)
	var held *replica.OwnerHeldError
	if !errors.As(err, &held) || held.Owner != "o" || held.Hostname != "h" || !held.StartedAt.Equal(live.StartedAt) {
		t.Fatalf("second Register while the first heartbeats: %v; want *OwnerHeldError naming the first", err)
	}
	if waited := time.Since(began); waited > 2*replica.MinRegistrationTTL {
		t.Errorf("refusal took %s; want within one TTL (%s) plus a poll", waited, replica.MinRegistrationTTL)
	}

	// a crashed holder: its row stays, nobody heartbeats it
	crashed := uuid.New()
	if _, err := coordinator.RegisterReplica(ctx, h, "c", crashed, "dead", "v", replica.MinRegistrationTTL.Milliseconds()); err != nil {
		t.Fatal(err)
	}
	r, err := replica.Register(ctx, h, replica.RegisterOptions{Owner: "c", Hostname: "h", Version: "v", TTL: replica.MinRegistrationTTL, Log: log})
	if err != nil || r.InstanceID == crashed {
		t.Fatalf("Register over a crashed holder's row: %v; want it taken after the row expired", err)
	}
	for _, x := range []*replica.Registration{live, r} {
		if err := x.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

// A heartbeat stuck in a network partition (no RST, no FIN: a black-holed database) must not hold
// up a clean stop: Release is bounded by its own context, not by the in-flight heartbeat's
// timeout (a third of the TTL: 100 s at the largest --registration-ttl).
func TestReleaseDoesNotWaitForAHeartbeatStuckInAPartition(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	cfg := d.Config(t, "ql_runtime")
	cc := cfg.Pool.ConnConfig
	proxy, err := faultproxy.Start(net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	cc.Host, cc.Port = "127.0.0.1", proxy.Port()
	h, err := cfg.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	const ttl = 30 * time.Second // heartbeat every 10 s, each given 10 s
	r, err := replica.Register(context.Background(), h, replica.RegisterOptions{Owner: "p", Hostname: "h", Version: "v",
		TTL: ttl, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	fired := proxy.PartitionOnQuery("-- name: HeartbeatReplica")
	select {
	case <-fired: // the first heartbeat is now in flight, held by the partition
	case <-time.After(ttl):
		t.Fatal("no heartbeat reached the proxy within one TTL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	began := time.Now()
	err = r.Release(ctx)
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("Release with a 1 s context took %s (err %v); want about 1 s, not the stuck heartbeat's %s", took, err, ttl/3)
	}
	if err == nil {
		t.Errorf("Release during the partition: nil; want the release's error (it cannot reach the database)")
	}
}

// A refused register names the holder by host, version and times, never by its instance id: the
// id is what replica_heartbeat and replica_release take, so a runtime client that learned it could
// keep a dead holder's row alive or delete a live one's (the live replica then loses its
// registration and stops). The id the refused Register returns releases nothing.
func TestARefusedRegisterCannotEvictTheHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.New(t)
	h := d.Handle(t, "ql_runtime")
	holder := uuid.New()
	if row, err := coordinator.RegisterReplica(ctx, h, "o", holder, "host-a", "v1", 60000); err != nil || !row.Registered {
		t.Fatalf("first register: %+v, %v", row, err)
	}
	refused, err := coordinator.RegisterReplica(ctx, h, "o", uuid.New(), "host-b", "v2", 60000)
	if err != nil || refused.Registered || refused.Hostname != "host-a" {
		t.Fatalf("second register: %+v, %v; want refused, naming host-a", refused, err)
	}
	if refused.InstanceID != uuid.Nil {
		t.Errorf("the refused register returned the holder's instance id %s; want none (uuid.Nil)", refused.InstanceID)
	}
	if ok, err := coordinator.ReleaseReplica(ctx, h, "o", refused.InstanceID); err != nil || ok {
		t.Errorf("release with the id a refused register returned: %v, %v; want nothing released (the holder evicted)", ok, err)
	}
	if exp, err := coordinator.HeartbeatReplica(ctx, h, "o", holder, 60000); err != nil || exp == 0 {
		t.Errorf("the holder's heartbeat: %d, %v; want its registration kept", exp, err)
	}
}
