//go:build faults

package faults

import (
	"context"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/faultproxy"
)

// The network and pooler gates of the closed loop (issue 32): the same fixture as
// dispatch_gates_test.go, a fault between the dispatcher and PostgreSQL (a lost commit response),
// between a worker and the dispatcher (a partition), or PgBouncer in the dispatcher's path. Each
// ends with loopaudit's invariants and the execution audit.

// dbProxy starts a fault proxy in front of the gate's PostgreSQL server and returns it with the
// ql_runtime URL through it.
func (g *gate) dbProxy() (*faultproxy.Proxy, string) {
	g.t.Helper()
	u, err := url.Parse(g.runtime)
	if err != nil {
		g.t.Fatal(err)
	}
	p, err := faultproxy.Start(u.Host)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()
	return p, u.String()
}

// httpProxy starts a fault proxy in front of a dispatcher's worker URL and returns the URL
// through it. The proxy reads no PostgreSQL from HTTP: the first bytes ("POST", "GET ") are no
// start-up length it accepts, so it passes the connection through unparsed (Stats.Unparsed),
// Partition and Heal included.
func (g *gate) httpProxy(dispatcherURL string) (*faultproxy.Proxy, string) {
	g.t.Helper()
	u, err := url.Parse(dispatcherURL)
	if err != nil {
		g.t.Fatal(err)
	}
	p, err := faultproxy.Start(u.Host)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()
	return p, u.String()
}

// logElapsed logs how long a gate took after its fixture (binaries built, database cloned).
func logElapsed(t *testing.T, since time.Time) {
	t.Logf("gate: %s after the fixture", time.Since(since).Round(time.Millisecond))
}

func receiveDrop(t *testing.T, ch <-chan faultproxy.Drop, what string) faultproxy.Drop {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(30 * time.Second):
		t.Fatalf("the proxy saw no %s to swallow", what)
		return faultproxy.Drop{}
	}
}

// runAttempts renders a Run's Attempts as "attempt_no:state:worker", oldest first.
func (g *gate) runAttempts(run string) string {
	g.t.Helper()
	return g.text(`SELECT string_agg(attempt_no || ':' || state || ':' || coalesce(worker_id, '-'), ' ' ORDER BY attempt_no)
		FROM control_core.attempts WHERE run_id = $1`, run)
}

// events renders a Run's event types, in order.
func (g *gate) events(run string) string {
	g.t.Helper()
	return g.text(`SELECT string_agg(type, ' ' ORDER BY seq) FROM control_core.run_events WHERE run_id = $1`, run)
}

// commit-loss on ACK: the dispatcher's ACK statement (one statement, committed alone) runs and
// commits, and its answer is lost on the wire: the dispatcher sees a reset connection and answers
// 503. The worker retries its ACK, which finds the offer acked by its own session with its own
// callback token and gets the same lease back (A′). One lease, one execution, attempt 1 succeeds:
// had the retried ACK been refused, the worker would drop the offer and the Run would need a
// second lease and a second Attempt.
func TestGateDispatchCommitLossOnAck(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	defer logElapsed(t, time.Now())
	g.task("k", 2, "--sleep", "200ms")
	tok := g.token("fleet")
	g.scheduler()
	proxy, viaProxy := g.dbProxy()
	dropped := proxy.DropResponseTo("-- name: Ack :one")
	d := g.dispatcherOn("gate-dispatch", viaProxy)
	w := g.worker("worker-a", tok, 1)
	run := g.admit("k", 1)[0]
	drop := receiveDrop(t, dropped, "ACK answer")
	t.Logf("ACK answer swallowed on proxied connection %d: %q", drop.Conn, drop.Swallowed)
	if !slices.Contains(drop.Swallowed, "SELECT 1") {
		t.Fatalf("swallowed %q; want the ACK's one row (SELECT 1): the ACK did not grant the lease", drop.Swallowed)
	}
	g.settled(30 * time.Second)

	d.waitFor(t, regexp.MustCompile(`protocol request failed.*endpoint=ack`), "the ACK answered 503")
	if s := g.text(`SELECT state FROM control_core.runs WHERE run_id = $1`, run); s != "succeeded" {
		t.Errorf("Run %s; want succeeded", s)
	}
	if s := g.runAttempts(run); s != "1:succeeded:worker-a" {
		t.Errorf("attempts %q; want attempt 1 succeeded on worker-a (the retried ACK got the committed lease)", s)
	}
	if s := g.leases(run); s != "1:released" {
		t.Errorf("leases %q; want one lease, released by the report", s)
	}
	if strings.Contains(w.out.String(), "the offer is dropped") {
		t.Errorf("the worker dropped the offer after the lost ACK answer")
	}
	g.audit([]string{run}, true)
}

// commit-loss on completion: the report's statement (FinishAttempts) commits and its answer is
// lost; the dispatcher answers 503 and the worker reports again. The repeat finds the Attempt
// ended from its own lease with the same outcome and is answered as a replay (F‴): accepted
// once, nothing written twice, the job not run again.
func TestGateDispatchCommitLossOnCompletion(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	defer logElapsed(t, time.Now())
	g.task("k", 2, "--sleep", "200ms")
	tok := g.token("fleet")
	g.scheduler()
	proxy, viaProxy := g.dbProxy()
	// FinishAttempts is also the lease sweep's statement, which runs only for a due lease: none
	// is due here, so the first FinishAttempts is the report.
	dropped := proxy.DropResponseTo("-- name: FinishAttempts")
	g.dispatcherOn("gate-dispatch", viaProxy)
	w := g.worker("worker-a", tok, 1)
	run := g.admit("k", 1)[0]
	drop := receiveDrop(t, dropped, "completion answer")
	t.Logf("completion answer swallowed on proxied connection %d: %q", drop.Conn, drop.Swallowed)
	if !slices.Contains(drop.Swallowed, "SELECT 1") {
		t.Fatalf("swallowed %q; want the report's one row (SELECT 1): the report did not end the Attempt", drop.Swallowed)
	}
	g.settled(30 * time.Second)
	// The worker logs its report's final answer once: a replay, or the refusal of its repeat.
	if m := w.waitFor(t, regexp.MustCompile(`job reported.*|complete failed.*`), "the report's answer"); !regexp.MustCompile(`job reported.*outcome=succeeded.*run_state=succeeded.*replay=true`).MatchString(m[0]) {
		t.Errorf("the repeated report was not answered as a replay: %s", m[0])
	}

	if s := g.runAttempts(run); s != "1:succeeded:worker-a" {
		t.Errorf("attempts %q; want attempt 1 succeeded on worker-a", s)
	}
	if s := g.leases(run); s != "1:released" {
		t.Errorf("leases %q; want one lease, released by the report", s)
	}
	if n := g.scalar(`SELECT count(*) FROM control_core.run_events WHERE run_id = $1 AND type = 'run.succeeded'`, run); n != 1 {
		t.Errorf("%d run.succeeded events (%s); want exactly 1", n, g.events(run))
	}
	g.audit([]string{run}, true)
}

// partition worker ↔ dispatcher: a TCP fault proxy between worker-a and the dispatcher
// partitions while attempt 1's job runs. worker-a cannot renew; its watchdog kills the job
// before the lease's expiry; the sweep expires the lease; attempt 2 runs on worker-b (directly
// connected) and succeeds. After the heal, worker-a's late report reaches the dispatcher and is
// refused (lease_lost). At least once, and at most one execution per live lease: attempt 1's
// job was gone while its lease was still active, so before attempt 2 could be offered.
func TestGateDispatchPartitionWorker(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	defer logElapsed(t, time.Now())
	g.task("k", 2, "--first-sleep", "10m", "--sleep", "100ms")
	tok := g.token("fleet")
	g.scheduler()
	g.dispatcher("gate-dispatch")
	proxy, viaProxy := g.httpProxy(g.urls[0])
	a := g.workerAt("worker-a", tok, 1, viaProxy)
	run := g.admit("k", 1)[0]
	first := g.waitStarts(1)[0]
	if first.run != run || first.attempt != "1" {
		t.Fatalf("first execution %+v; want Run %s attempt 1", first, run)
	}
	eventually.True(t, 30*time.Second, "the Run running", func() bool {
		return g.text(`SELECT state FROM control_core.runs WHERE run_id = $1`, run) == "running"
	})
	proxy.Partition()
	healed := false
	defer func() {
		if !healed {
			proxy.Heal()
		}
	}()
	partitioned := time.Now()
	g.worker("worker-b", tok, 1) // polling by the time attempt 2 is queued: worker-a's late report is still on its way
	// The moment the job is gone: the database clock, the lease, and how many jobs had started.
	var now, expires int64
	var state string
	var starts int
	eventually.True(t, 3*gateLease, "attempt 1's job killed by its worker's watchdog", func() bool {
		if alive(first.pid) {
			return false
		}
		if err := g.su.QueryRow(context.Background(), `SELECT control_core.db_now_ms(), l.expires_at_ms, l.state
			FROM control_core.attempts a JOIN control_core.run_leases l ON l.run_lease_id = a.run_lease_id
			WHERE a.run_id = $1 AND a.attempt_no = 1`, run).Scan(&now, &expires, &state); err != nil {
			t.Fatal(err)
		}
		starts = countAll(g.executions(), "start")
		return true
	})
	t.Logf("job gone %s after the partition, %d ms before its lease's expiry (lease %s)",
		time.Since(partitioned).Round(time.Millisecond), expires-now, state)
	if now >= expires || state != "active" || starts != 1 {
		t.Errorf("attempt 1's job outlived its lease: gone at %d, lease %s expiring at %d, %d jobs started by then", now, state, expires, starts)
	}
	eventually.True(t, 30*time.Second, "attempt 2 running on worker-b", func() bool {
		return regexp.MustCompile(`^1:expired:worker-a 2:(running|succeeded):worker-b$`).MatchString(g.runAttempts(run))
	})
	t.Logf("attempt 2 running on worker-b %s after the partition", time.Since(partitioned).Round(time.Millisecond))
	proxy.Heal()
	healed = true
	refused := a.waitFor(t, regexp.MustCompile(`complete failed.*lease_lost`), "the late report refused")
	t.Logf("worker-a's late report refused %s after the partition: %s", time.Since(partitioned).Round(time.Millisecond), refused[0])
	g.settled(30 * time.Second)

	if s := g.text(`SELECT state FROM control_core.runs WHERE run_id = $1`, run); s != "succeeded" {
		t.Errorf("Run %s; want succeeded", s)
	}
	if s := g.runAttempts(run); s != "1:expired:worker-a 2:succeeded:worker-b" {
		t.Errorf("attempts %q; want attempt 1 expired on worker-a, attempt 2 succeeded on worker-b", s)
	}
	if s := g.leases(run); s != "1:expired 2:released" {
		t.Errorf("leases %q; want attempt 1's expired (the sweep), attempt 2's released (its report)", s)
	}
	log := g.executions()
	if count(log, run, "1", "start") != 1 || count(log, run, "1", "end") != 0 || count(log, run, "2", "start") != 1 || count(log, run, "2", "end") != 1 {
		t.Errorf("execution log %+v; want attempt 1 killed (no end), attempt 2 started and ended", log)
	}
	if s := proxy.Stats(); s.Unparsed == 0 || s.Partitions != 1 {
		t.Errorf("proxy stats %+v; want HTTP passed through unparsed and one partition", s)
	}
	g.audit([]string{run}, false)
}

// PgBouncer in transaction pooling between the dispatcher and PostgreSQL (detected: each
// statement in BEGIN … COMMIT with the connection's settings). Six Runs through two workers;
// mid-flight the console KILLs the database (every client and server connection dropped, new
// ones wait) and RESUMEs it. Every Run succeeds with exactly one succeeded Attempt and one
// execution: a transition cut by the KILL rolled back or, committed, is replayed on retry.
func TestGateDispatchThroughPgBouncer(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	defer logElapsed(t, time.Now())
	g.task("k", 1, "--sleep", "1s")
	tok := g.token("fleet")
	g.scheduler()
	// A KILL that catches a server login marks the pool failed for server_login_retry (default
	// 15 s: three gate leases, so every lease in flight would expire and the Runs fail for want
	// of a dispatcher, not for a fault of the loop); 1 s keeps the outage inside a lease.
	bouncer := g.d.StartPgBouncer(t, "transaction", "server_login_retry = 1")
	d := g.dispatcherOn("gate-dispatch", bouncer.URL("ql_runtime"))
	g.worker("worker-a", tok, 2)
	g.worker("worker-b", tok, 2)
	runs := g.admit("k", 6)
	g.waitStarts(2)
	bouncer.Console(t, "KILL "+g.d.Name)
	bouncer.Console(t, "RESUME "+g.d.Name)
	killed := time.Now()
	g.settled(60 * time.Second)
	t.Logf("every Run terminal %s after the KILL", time.Since(killed).Round(time.Millisecond))
	// The KILL reached the dispatcher: PgBouncer's FATAL on a connection of its pool.
	hit := d.waitFor(t, regexp.MustCompile(`level=WARN.*database removed`), "the KILL seen by the dispatcher")
	t.Logf("dispatcher: %s", hit[0])

	if n := g.scalar(`SELECT count(*) FROM control_core.runs r WHERE r.state <> 'succeeded'
		OR (SELECT count(*) FROM control_core.attempts a WHERE a.run_id = r.run_id AND a.state = 'succeeded') <> 1`); n != 0 {
		t.Errorf("%d Runs without exactly one succeeded Attempt: %s", n,
			g.text(`SELECT string_agg(run_id || ':' || state, ' ') FROM control_core.runs`))
	}
	g.audit(runs, true)
}
