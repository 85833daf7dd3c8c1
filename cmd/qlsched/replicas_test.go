package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// exitWithin waits for r's exit and returns its code; it fails the test after timeout.
func (r *replicaProcess) exitWithin(t *testing.T, timeout time.Duration) int {
	t.Helper()
	exited := make(chan struct{})
	go func() {
		for range r.lines { // drain: Wait must not close the pipe under the reader
		}
		_ = r.cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(timeout):
		t.Fatalf("still running after %s:\n%s", timeout, r.all.String())
	}
	return r.cmd.ProcessState.ExitCode()
}

// tookExpiredRegistrationAndStops fails the test unless r, a restart now running, said it took
// the expired registration of its owner, and exits 0 on SIGTERM.
func (r *replicaProcess) tookExpiredRegistrationAndStops(t *testing.T) {
	t.Helper()
	if !strings.Contains(r.all.String(), "the previous registration of this owner expired") {
		t.Errorf("the restart does not say it took the expired registration:\n%s", r.all.String())
	}
	if code := r.stop(t); code != 0 {
		t.Errorf("restart: exit %d on SIGTERM:\n%s", code, r.all.String())
	}
}

type replicasDoc struct {
	Schema   string `json:"schema"`
	Replicas []struct {
		Owner      string `json:"owner"`
		InstanceID string `json:"instance_id"`
		Hostname   string `json:"hostname"`
		Version    string `json:"version"`
		Live       bool   `json:"live"`
	} `json:"replicas"`
}

func listReplicas(t *testing.T, d *testpg.DB) replicasDoc {
	t.Helper()
	r := run(t, "replicas", "--format", "json", "--database-url", d.URL("ql_admin"))
	var doc replicasDoc
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &doc) != nil {
		t.Fatalf("replicas --format json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return doc
}

// Two replicas started with one --owner would renew each other's claims: the second is refused
// at start (exit 2) with the holder named, while the first keeps running and is listed; a clean
// stop releases the owner.
func TestASecondLiveReplicaWithTheSameOwnerIsRefused(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	bin := qlsched(t)
	args := []string{"--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0", "--owner", "shared-owner",
		"--registration-ttl", "3s"}
	first := startReplica(t, bin, args...)
	first.waitFor(t, 60*time.Second, "replica running", func(l string) bool { return strings.Contains(l, "replica running") })

	second := startReplica(t, bin, args...)
	code := second.exitWithin(t, 60*time.Second)
	out := second.all.String()
	host, _ := os.Hostname()
	if code != 2 {
		t.Errorf("second replica with the same --owner: exit %d, want 2:\n%s", code, out)
	}
	for _, want := range []string{`--owner "shared-owner" is already registered by a live replica on host "` + host + `"`,
		"started ", "registration expires ", "every replica needs its own --owner", "waiting up to 3s"} {
		if !strings.Contains(out, want) {
			t.Errorf("second replica's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "replica running") {
		t.Errorf("the second replica ran:\n%s", out)
	}

	// the listing: the first replica, live
	doc := listReplicas(t, d)
	if doc.Schema != "qlsched.replicas/v1" || len(doc.Replicas) != 1 || doc.Replicas[0].Owner != "shared-owner" ||
		!doc.Replicas[0].Live || doc.Replicas[0].Hostname != host || doc.Replicas[0].Version == "" || doc.Replicas[0].InstanceID == "" {
		t.Errorf("replicas while the first runs: %+v, want shared-owner live on %s", doc, host)
	}
	text := run(t, "replicas", "--database-url", d.URL("ql_admin"))
	if text.code != 0 || !strings.Contains(text.stdout, "OWNER") || !strings.Contains(text.stdout, "shared-owner") ||
		!strings.Contains(text.stdout, "live") {
		t.Errorf("replicas (text): exit %d\n%s%s", text.code, text.stdout, text.stderr)
	}

	if code := first.stop(t); code != 0 {
		t.Errorf("first replica: exit %d on SIGTERM:\n%s", code, first.all.String())
	}
	if doc := listReplicas(t, d); len(doc.Replicas) != 0 {
		t.Errorf("after a clean stop the registration is still there: %+v", doc)
	}
}

// A replica that crashed leaves its registration: the restart with the same --owner waits for it
// to expire (at most one TTL, saying so) and then takes it, instead of being refused for ever.
func TestARestartAfterACrashTakesTheOwnerOnceItsRegistrationExpires(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	bin := qlsched(t)
	args := []string{"--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0", "--owner", "crashy",
		"--registration-ttl", "3s"}
	first := startReplica(t, bin, args...)
	first.waitFor(t, 60*time.Second, "replica running", func(l string) bool { return strings.Contains(l, "replica running") })
	if err := first.cmd.Process.Kill(); err != nil { // SIGKILL: no release
		t.Fatal(err)
	}
	first.exitWithin(t, 30*time.Second)
	if doc := listReplicas(t, d); len(doc.Replicas) != 1 {
		t.Fatalf("the crashed replica left no registration: %+v", doc)
	}

	restart := startReplica(t, bin, args...)
	restart.waitFor(t, 30*time.Second, "the wait for the crashed registration", func(l string) bool {
		return strings.Contains(l, `--owner \"crashy\" is registered by host`) && strings.Contains(l, "waiting up to 3s")
	})
	restart.waitFor(t, 30*time.Second, "replica running", func(l string) bool { return strings.Contains(l, "replica running") })
	restart.tookExpiredRegistrationAndStops(t)
}

// A replica whose heartbeat finds its registration taken stops claiming and exits 1, saying why.
func TestAReplicaWhoseRegistrationIsTakenStops(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	r := startReplica(t, qlsched(t), "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0", "--owner", "taken",
		"--registration-ttl", "3s")
	r.waitFor(t, 60*time.Second, "replica running", func(l string) bool { return strings.Contains(l, "replica running") })
	d.Exec(t, "UPDATE control_core.replicas SET instance_id = gen_random_uuid() WHERE owner = 'taken'")
	code := r.exitWithin(t, 30*time.Second)
	out := r.all.String()
	if code != 1 || !strings.Contains(out, "replica registration lost") || !strings.Contains(out, "stopping claims") {
		t.Errorf("replica whose registration was taken: exit %d, want 1 with 'replica registration lost … stopping claims':\n%s", code, out)
	}
	// it released nothing of the new holder's
	su := d.Pool(t, "")
	var n int
	if err := su.QueryRow(context.Background(), "SELECT count(*) FROM control_core.replicas WHERE owner = 'taken'").Scan(&n); err != nil || n != 1 {
		t.Errorf("the new holder's row: %d rows, %v; want 1", n, err)
	}
}
