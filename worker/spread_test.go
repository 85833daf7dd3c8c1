package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/worker"
)

// startNamed runs a Runner named name over urls, its client spread by that name (as qlworker's).
func startNamed(t *testing.T, name string, urls []string) {
	t.Helper()
	startWorker(t, name, worker.ClientOptions{Dispatchers: urls, Spread: name})
}

// startWorker runs a Runner named name (capacity 1) whose client has opts, with the test token
// and short retries.
func startWorker(t *testing.T, name string, opts worker.ClientOptions) {
	t.Helper()
	opts.Token, opts.RetryMin, opts.RetryMax = testToken, 10*time.Millisecond, 50*time.Millisecond
	c, err := worker.NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	r, err := worker.NewRunner(worker.Config{Client: c, Name: name, Capacity: 1, Handler: newBlockingHandler().handle,
		DrainGrace: time.Second, CallTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); r.HandBack(); <-done })
}

// Two workers named apart and given the same two dispatcher URLs register and poll on both
// dispatchers: without the spread both polled the first URL, and the second dispatcher's placer
// never had a poll to answer.
func TestWorkersSpreadOverTheDispatchers(t *testing.T) {
	d0, d1 := newFakeDispatcher(t), newFakeDispatcher(t)
	urls := []string{d0.srv.URL, d1.srv.URL}
	startNamed(t, "bench-0", urls)
	startNamed(t, "bench-1", urls)
	eventually.True(t, 10*time.Second, "both dispatchers answer polls", func() bool {
		return d0.count("poll") > 0 && d1.count("poll") > 0
	})
	if r0, r1 := d0.count("register"), d1.count("register"); r0 != 1 || r1 != 1 {
		t.Fatalf("registrations %d and %d, want one on each dispatcher", r0, r1)
	}
}

// A worker whose spread picks a dispatcher that is down fails over to the other and polls there.
func TestSpreadWorkerFailsOver(t *testing.T) {
	for _, name := range []string{"bench-0", "bench-1"} { // one starts at the closed URL, the other after it
		t.Run(name, func(t *testing.T) {
			up := newFakeDispatcher(t)
			startNamed(t, name, []string{closedURL(t), up.srv.URL})
			eventually.True(t, 10*time.Second, "the live dispatcher answers polls", func() bool { return up.count("poll") > 1 })
		})
	}
}

// A failover moves the polls off the worker's first dispatcher; once that one is back, a poll
// HomeRetry later goes to it again, and the polls stay there (before, the worker kept polling the
// dispatcher it had failed over to for good, so a restarted dispatcher never got its workers back).
func TestPollsGoBackToTheFirstDispatcher(t *testing.T) {
	home, other := newFakeDispatcher(t), newFakeDispatcher(t)
	home.mu.Lock()
	home.fail503["poll"] = 1 // the first poll fails over
	home.mu.Unlock()
	startWorker(t, "w", worker.ClientOptions{Dispatchers: []string{home.srv.URL, other.srv.URL}, HomeRetry: 300 * time.Millisecond})
	eventually.True(t, 10*time.Second, "the other dispatcher answers a poll", func() bool { return other.count("poll") > 0 })
	eventually.True(t, 10*time.Second, "a poll goes back to the first dispatcher", func() bool { return home.count("poll") > 1 })
	away := other.count("poll")
	eventually.True(t, 10*time.Second, "the first dispatcher answers the polls after", func() bool { return home.count("poll") > 3 })
	if n := other.count("poll"); n != away {
		t.Errorf("the other dispatcher got %d more polls after the worker went back", n-away)
	}
}
