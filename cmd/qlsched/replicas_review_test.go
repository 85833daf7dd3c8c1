package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/faultproxy"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// SIGTERM while the start waits for a crashed holder's registration to expire: the process exits
// promptly and registers nothing (the crashed holder's row stays as it was).
func TestSIGTERMDuringTheCrashWaitExitsPromptlyRegisteringNothing(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	su := d.Pool(t, "")
	ctx := context.Background()
	if _, err := su.Exec(ctx, "SELECT control_core.replica_register('waited', '00000000-0000-0000-0000-00000000dead', 'dead-host', 'v', 60000)"); err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, qlsched(t), "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0", "--owner", "waited",
		"--registration-ttl", "30s")
	r.waitFor(t, 60*time.Second, "the wait for the crashed registration", func(l string) bool {
		return strings.Contains(l, "is registered by host") && strings.Contains(l, "waiting up to")
	})
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := r.exitWithin(t, 5*time.Second)
	out := r.all.String()
	if strings.Contains(out, "replica running") || strings.Contains(out, "replica registered") {
		t.Errorf("a replica signalled during the crash wait ran or registered:\n%s", out)
	}
	var inst string
	if err := su.QueryRow(ctx, "SELECT instance_id::text FROM control_core.replicas WHERE owner = 'waited'").Scan(&inst); err != nil ||
		inst != "00000000-0000-0000-0000-00000000dead" {
		t.Errorf("after the signal the row is %q (%v); want the crashed holder's, untouched", inst, err)
	}
	t.Logf("exit %d:\n%s", code, out)
}

// A database outage longer than the TTL, with nobody taking the owner meanwhile, must not kill a
// healthy replica: when the database returns its heartbeat finds the row still its own (expired,
// not taken) and it carries on.
func TestAnOutageLongerThanTheTTLDoesNotStopTheReplica(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	cc := d.Config(t, "ql_runtime").Pool.ConnConfig
	proxy, err := faultproxy.Start(net.JoinHostPort(cc.Host, fmt.Sprint(cc.Port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	url := fmt.Sprintf("postgres://ql_runtime:%s@127.0.0.1:%d/%s?sslmode=disable", testpg.Password, proxy.Port(), cc.Database)
	r := startReplica(t, qlsched(t), "--database-url", url, "--http-addr", "127.0.0.1:0", "--owner", "outage",
		"--registration-ttl", "3s")
	r.waitFor(t, 60*time.Second, "replica running", func(l string) bool { return strings.Contains(l, "replica running") })
	proxy.Partition()
	r.waitFor(t, 30*time.Second, "a failed heartbeat", func(l string) bool { return strings.Contains(l, "replica heartbeat failed") })
	su := d.Pool(t, "")
	eventually.True(t, 30*time.Second, "the registration expired in database time", func() bool {
		var expired bool
		err := su.QueryRow(context.Background(), "SELECT expires_at_ms < control_core.db_now_ms() FROM control_core.replicas WHERE owner = 'outage'").Scan(&expired)
		return err == nil && expired
	})
	proxy.Heal()
	r.waitFor(t, 30*time.Second, "the heartbeat's recovery", func(l string) bool { return strings.Contains(l, "replica heartbeat recovered") })
	if code := r.stop(t); code != 0 {
		t.Errorf("replica after an outage longer than its TTL: exit %d on SIGTERM, want 0:\n%s", code, r.all.String())
	}
}

// A crashed holder that ran with a longer --registration-ttl than its restart (the TTL lowered in
// a rolling change): the restart must wait for that row's own expiry and take it, not call the
// dead holder "a live replica" and exit 2 after its own, shorter, TTL.
func TestARestartWithAShorterTTLWaitsForTheCrashedHoldersExpiry(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	su := d.Pool(t, "")
	if _, err := su.Exec(context.Background(), "SELECT control_core.replica_register('shorter', '00000000-0000-0000-0000-00000000dead', 'dead-host', 'v', 12000)"); err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, qlsched(t), "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0", "--owner", "shorter",
		"--registration-ttl", "3s")
	r.waitFor(t, 60*time.Second, "replica running", func(l string) bool {
		if strings.Contains(l, "already registered by a live replica") {
			t.Fatalf("the restart called the crashed holder live:\n%s", r.all.String())
		}
		return strings.Contains(l, "replica running")
	})
	r.tookExpiredRegistrationAndStops(t)
}

// `qlsched replicas` as the runtime role (which may not read the table) names the admin role.
func TestReplicasAsRuntimeNamesTheAdminRole(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	r := run(t, "replicas", "--database-url", d.URL("ql_runtime"))
	if r.code != 3 || !strings.Contains(r.stderr, "permission denied") || !strings.Contains(r.stderr, "hint: qlsched replicas runs as the admin role ql_admin (the runtime role may not read control_core.replicas") ||
		strings.Contains(r.stderr, "lacks its grants") {
		t.Errorf("replicas as ql_runtime: exit %d, stderr %q; want exit 3 naming ql_admin alone, not a missing grant of ql_runtime", r.code, r.stderr)
	}
	t.Logf("stderr: %s", r.stderr)
}
