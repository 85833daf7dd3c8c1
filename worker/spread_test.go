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
	c, err := worker.NewClient(worker.ClientOptions{Dispatchers: urls, Token: testToken, Spread: name,
		RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
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
