package worker_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/worker"
	"github.com/qlcontrol/controlcore/workerproto"
)

type runnerRun struct {
	cancel context.CancelFunc
	done   chan error
	runner *worker.Runner
}

func startRunner(t *testing.T, urls []string, h worker.Handler, tweak func(*worker.Config)) *runnerRun {
	t.Helper()
	c, err := worker.NewClient(worker.ClientOptions{Dispatchers: urls, Token: testToken, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cfg := worker.Config{Client: c, Name: "w1", Capacity: 1, Handler: h, DrainGrace: 5 * time.Second, CallTimeout: 2 * time.Second}
	if tweak != nil {
		tweak(&cfg)
	}
	r, err := worker.NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rr := &runnerRun{cancel: cancel, done: make(chan error, 1), runner: r}
	go func() { rr.done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); r.HandBack(); <-rr.done })
	return rr
}

// stop drains the runner and waits for Run to return.
func (rr *runnerRun) stop(t *testing.T) {
	t.Helper()
	rr.cancel()
	select {
	case err := <-rr.done:
		if err != nil {
			t.Fatalf("Run = %v, want nil after a drain", err)
		}
		rr.done <- nil
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// blockingHandler waits for its context and records why it ended.
type blockingHandler struct {
	started chan struct{}
	mu      sync.Mutex
	cause   error
	endedAt time.Time
	ended   chan struct{}
}

func newBlockingHandler() *blockingHandler {
	return &blockingHandler{started: make(chan struct{}, 1), ended: make(chan struct{})}
}

func (b *blockingHandler) handle(ctx context.Context, _ worker.Job) worker.Result {
	b.started <- struct{}{}
	<-ctx.Done()
	b.mu.Lock()
	b.cause, b.endedAt = context.Cause(ctx), time.Now()
	b.mu.Unlock()
	close(b.ended)
	return worker.Result{Outcome: workerproto.OutcomeFailed, Error: &workerproto.AttemptError{Kind: workerproto.KindExitStatus, Message: "killed"}}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(15 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestRunnerRunsAnOfferAndReportsIt(t *testing.T) {
	f := newFakeDispatcher(t)
	f.offers <- testOffer("1")
	var got worker.Job
	rr := startRunner(t, []string{f.srv.URL}, func(ctx context.Context, job worker.Job) worker.Result {
		got = job
		code := 0
		return worker.Result{Outcome: workerproto.OutcomeSucceeded, ExitCode: &code, OutputTail: "hello\n"}
	}, nil)
	eventually.True(t, 10*time.Second, "one completion", func() bool { return len(f.completesCopy()) == 1 })
	rr.stop(t)

	c := f.completesCopy()[0]
	if c.Outcome != workerproto.OutcomeSucceeded || c.CallbackToken != "qlc_secret-1" || c.LeaseVersion != 1 ||
		c.SessionID != "sess-1" || c.OutputTail != "hello\n" || c.ExitCode == nil || *c.ExitCode != 0 || c.Error != nil {
		t.Fatalf("completion = %+v", c)
	}
	if got.AttemptID != "attempt-1" || got.RunID != "run-1" || string(got.Spec) != `{"command":["true"]}` {
		t.Fatalf("handler saw job %+v", got)
	}
	calls := f.callsCopy()
	iDrain, iClose := slices.Index(calls, "drain"), slices.Index(calls, "close")
	if calls[0] != "register" || iDrain < 0 || iClose < iDrain || slices.Index(calls, "ack") > slices.Index(calls, "complete") {
		t.Fatalf("calls = %v, want register … ack … complete … drain, close", calls)
	}
}

func TestRunnerStopsACancelledJobAndReportsCancelled(t *testing.T) {
	f := newFakeDispatcher(t)
	f.leaseStatus["attempt-1"] = workerproto.LeaseCancel
	f.offers <- testOffer("1")
	h := newBlockingHandler()
	rr := startRunner(t, []string{f.srv.URL}, h.handle, nil)
	waitClosed(t, h.ended, "the handler to be stopped")
	eventually.True(t, 10*time.Second, "one completion", func() bool { return len(f.completesCopy()) == 1 })
	rr.stop(t)
	if !errors.Is(h.cause, worker.ErrCancelled) {
		t.Fatalf("handler's cause = %v, want ErrCancelled", h.cause)
	}
	c := f.completesCopy()[0]
	if c.Outcome != workerproto.OutcomeCancelled || c.Error == nil || c.Error.Kind != workerproto.KindCancelled {
		t.Fatalf("completion = %+v, want outcome cancelled, kind cancelled", c)
	}
}

func TestRunnerStopsALostJobAndDoesNotReport(t *testing.T) {
	f := newFakeDispatcher(t)
	f.leaseStatus["attempt-1"] = workerproto.LeaseLost
	f.offers <- testOffer("1")
	h := newBlockingHandler()
	rr := startRunner(t, []string{f.srv.URL}, h.handle, nil)
	waitClosed(t, h.ended, "the handler to be stopped")
	rr.stop(t) // Run returns after every job goroutine, report included, has ended
	if !errors.Is(h.cause, worker.ErrLeaseLost) {
		t.Fatalf("handler's cause = %v, want ErrLeaseLost", h.cause)
	}
	if n := f.count("complete"); n != 0 {
		t.Fatalf("%d completions of a lost lease, want none", n)
	}
}

func TestRunnerReplaysACompletionAnswered503(t *testing.T) {
	f := newFakeDispatcher(t)
	f.fail503["complete"] = 2
	f.offers <- testOffer("1")
	rr := startRunner(t, []string{f.srv.URL}, func(ctx context.Context, job worker.Job) worker.Result {
		return worker.Result{Outcome: workerproto.OutcomeFailed, Error: &workerproto.AttemptError{Kind: workerproto.KindExitStatus, Message: "exit 3"}}
	}, nil)
	eventually.True(t, 10*time.Second, "an accepted completion", func() bool { return len(f.completesCopy()) == 1 })
	rr.stop(t)
	f.mu.Lock()
	raw := f.completeRaw
	f.mu.Unlock()
	if len(raw) != 3 {
		t.Fatalf("%d complete requests, want 3 (two 503, then accepted)", len(raw))
	}
	for i := range raw {
		if !bytes.Equal(raw[i], raw[0]) {
			t.Fatalf("replay %d differs:\n%s\n%s", i, raw[i], raw[0])
		}
	}
}

func TestRunnerDrainHandsBackAfterTheGrace(t *testing.T) {
	f := newFakeDispatcher(t)
	f.offers <- testOffer("1")
	h := newBlockingHandler()
	rr := startRunner(t, []string{f.srv.URL}, h.handle, func(c *worker.Config) { c.DrainGrace = 300 * time.Millisecond })
	waitClosed(t, h.started, "the job to start")
	stopped := time.Now()
	rr.stop(t)
	if !errors.Is(h.cause, worker.ErrHandedBack) {
		t.Fatalf("handler's cause = %v, want ErrHandedBack", h.cause)
	}
	if d := h.endedAt.Sub(stopped); d < 300*time.Millisecond {
		t.Fatalf("job stopped %v after the drain began, before the 300ms grace", d)
	}
	cs := f.completesCopy()
	if len(cs) != 1 || cs[0].Outcome != workerproto.OutcomeHandedBack {
		t.Fatalf("completions = %+v, want one handed_back", cs)
	}
	calls := f.callsCopy()
	if !(slices.Index(calls, "drain") < slices.Index(calls, "complete") && slices.Index(calls, "complete") < slices.Index(calls, "close")) {
		t.Fatalf("calls = %v, want drain, complete, close in that order", calls)
	}
}

func TestRunnerHandBackEndsTheGraceAtOnce(t *testing.T) {
	f := newFakeDispatcher(t)
	f.offers <- testOffer("1")
	h := newBlockingHandler()
	rr := startRunner(t, []string{f.srv.URL}, h.handle, func(c *worker.Config) { c.DrainGrace = time.Hour })
	waitClosed(t, h.started, "the job to start")
	rr.cancel()
	rr.runner.HandBack()
	waitClosed(t, h.ended, "the handed-back job to stop")
	rr.stop(t)
	if !errors.Is(h.cause, worker.ErrHandedBack) {
		t.Fatalf("handler's cause = %v, want ErrHandedBack", h.cause)
	}
}

// The lease watchdog (D11) with the dispatcher gone: the fake closes its port right after the
// ack, so no heartbeat renews the 5 s lease. The job must be stopped at t0 + 5 s × 0.99 − 2 s
// (kill grace), and t0 ≤ the moment the fake answered the ack.
func TestLeaseWatchdogStopsTheJobWithTheDispatcherUnreachable(t *testing.T) {
	f := newFakeDispatcher(t)
	f.leaseTTLMs, f.hbIntervalMs = 5000, 1666
	f.onAck = func() { go f.srv.Close() }
	f.offers <- testOffer("1")
	h := newBlockingHandler()
	startRunner(t, []string{f.srv.URL}, h.handle, func(c *worker.Config) { c.CallTimeout = 300 * time.Millisecond })
	waitClosed(t, h.ended, "the watchdog to stop the job")
	if !errors.Is(h.cause, worker.ErrLeaseExpired) {
		t.Fatalf("handler's cause = %v, want ErrLeaseExpired", h.cause)
	}
	f.mu.Lock()
	ackAt := f.ackAt
	f.mu.Unlock()
	want := time.Duration(5000*0.99)*time.Millisecond - 2*time.Second
	got := h.endedAt.Sub(ackAt)
	// Lower bound: t0 precedes ackAt by a local round trip. Upper: timer and scheduling latency on
	// a loaded machine; without the kill grace the job would run 2 s longer.
	if got > want+500*time.Millisecond || got < want-time.Second {
		t.Fatalf("job stopped %v after the ack, want %v (lease × 0.99 − kill grace)", got, want)
	}
}

func TestLeaseDeadline(t *testing.T) {
	t0 := time.Now()
	if got, want := worker.LeaseDeadline(t0, 30_000, 2*time.Second).Sub(t0), 27_700*time.Millisecond; got != want {
		t.Fatalf("LeaseDeadline = t0 + %v, want t0 + %v", got, want)
	}
}

func TestRunnerReportsAHandlerPanicAsFailed(t *testing.T) {
	f := newFakeDispatcher(t)
	f.offers <- testOffer("1")
	rr := startRunner(t, []string{f.srv.URL}, func(ctx context.Context, job worker.Job) worker.Result { panic("boom") }, nil)
	eventually.True(t, 10*time.Second, "one completion", func() bool { return len(f.completesCopy()) == 1 })
	rr.stop(t)
	c := f.completesCopy()[0]
	if c.Outcome != workerproto.OutcomeFailed || c.Error == nil || c.Error.Kind != workerproto.KindHandler {
		t.Fatalf("completion = %+v, want failed/handler", c)
	}
}

func TestRunnerKeepsTheTailOfLongOutput(t *testing.T) {
	f := newFakeDispatcher(t)
	f.offers <- testOffer("1")
	out := strings.Repeat("h", 5000) + strings.Repeat("é", 5000) // the end is what matters
	rr := startRunner(t, []string{f.srv.URL}, func(ctx context.Context, job worker.Job) worker.Result {
		return worker.Result{Outcome: workerproto.OutcomeSucceeded, OutputTail: out}
	}, nil)
	eventually.True(t, 10*time.Second, "one completion", func() bool { return len(f.completesCopy()) == 1 })
	rr.stop(t)
	c := f.completesCopy()[0]
	if len(c.OutputTail) != workerproto.OutputTailMaxBytes || !c.OutputTruncated || !strings.HasSuffix(out, c.OutputTail) {
		t.Fatalf("tail of %d bytes (truncated %v), want the last %d bytes of the output", len(c.OutputTail), c.OutputTruncated, workerproto.OutputTailMaxBytes)
	}
}

func TestRunnerRefusedTokenEndsRun(t *testing.T) {
	f := newFakeDispatcher(t)
	c, err := worker.NewClient(worker.ClientOptions{Dispatchers: []string{f.srv.URL}, Token: "qlw_wrong"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := worker.NewRunner(worker.Config{Client: c, Name: "w1", Capacity: 1, Handler: func(context.Context, worker.Job) worker.Result { return worker.Result{} }})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Run(context.Background())
	if worker.ErrorCode(err) != workerproto.CodeUnauthorized {
		t.Fatalf("Run = %v, want unauthorized", err)
	}
	if strings.Contains(err.Error(), "qlw_wrong") {
		t.Fatalf("error %q holds the token", err)
	}
}

func TestClientFailsOverToTheNextDispatcher(t *testing.T) {
	f := newFakeDispatcher(t)
	f.fail503["drain"] = 1
	c, err := worker.NewClient(worker.ClientOptions{Dispatchers: []string{closedURL(t), f.srv.URL}, Token: testToken,
		RetryMin: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The closed port, then the fake's 503, then (the closed port again and) the fake.
	if _, err := c.Drain(ctx, "sess-1"); err != nil {
		t.Fatalf("Drain = %v, want success after failover", err)
	}
	if n := f.count("drain"); n != 2 {
		t.Fatalf("the fake saw %d drains, want 2 (a 503, then the answer)", n)
	}
}

func TestNewClientRefusesBadDispatchers(t *testing.T) {
	for _, urls := range [][]string{nil, {"ftp://x"}, {"http://"}, {"http://u:p@host"}, {"host:80"}} {
		if _, err := worker.NewClient(worker.ClientOptions{Dispatchers: urls, Token: testToken}); err == nil {
			t.Errorf("NewClient(%q) = nil error", urls)
		} else if strings.Contains(err.Error(), "u:p") {
			t.Errorf("error %q repeats the URL's credentials", err)
		}
	}
}

// Heartbeats renew the lease: a job that runs past the unrenewed deadline (5 s × 0.99 − 2 s)
// is not stopped while the dispatcher answers "renewed".
func TestHeartbeatsKeepALongJobAlive(t *testing.T) {
	f := newFakeDispatcher(t)
	f.leaseTTLMs, f.hbIntervalMs = 5000, 200
	f.offers <- testOffer("1")
	var cause error
	rr := startRunner(t, []string{f.srv.URL}, func(ctx context.Context, job worker.Job) worker.Result {
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return worker.Result{Outcome: workerproto.OutcomeFailed, Error: &workerproto.AttemptError{Kind: workerproto.KindExitStatus, Message: "stopped"}}
		case <-time.After(4 * time.Second):
			return worker.Result{Outcome: workerproto.OutcomeSucceeded}
		}
	}, nil)
	eventually.True(t, 15*time.Second, "one completion", func() bool { return len(f.completesCopy()) == 1 })
	rr.stop(t)
	if c := f.completesCopy()[0]; c.Outcome != workerproto.OutcomeSucceeded || cause != nil {
		t.Fatalf("completion %s, handler stopped by %v: want a renewed lease to let the job finish", c.Outcome, cause)
	}
}

// A poll answered 410 (the session expired) makes the Runner register a new session and go on.
func TestRunnerRegistersAgainWhenTheSessionIsGone(t *testing.T) {
	f := newFakeDispatcher(t)
	f.gone["poll"] = 1
	f.offers <- testOffer("1")
	rr := startRunner(t, []string{f.srv.URL}, func(ctx context.Context, job worker.Job) worker.Result {
		return worker.Result{Outcome: workerproto.OutcomeSucceeded}
	}, nil)
	eventually.True(t, 10*time.Second, "one completion", func() bool { return len(f.completesCopy()) == 1 })
	rr.stop(t)
	if n := f.count("register"); n != 2 {
		t.Fatalf("%d registrations, want 2 (the first session was gone)", n)
	}
	if c := f.completesCopy()[0]; c.SessionID != "sess-2" {
		t.Fatalf("completion on session %q, want the new one sess-2", c.SessionID)
	}
}

// The Runner never runs more jobs than its capacity, even when a dispatcher offers more than the
// poll asked for: the extra offer is rejected, not run.
func TestRunnerNeverRunsMoreThanItsCapacity(t *testing.T) {
	f := newFakeDispatcher(t)
	f.greedy = true
	for _, n := range []string{"1", "2", "3"} {
		f.offers <- testOffer(n)
	}
	var mu sync.Mutex
	running, most := 0, 0
	release := make(chan struct{})
	rr := startRunner(t, []string{f.srv.URL}, func(ctx context.Context, job worker.Job) worker.Result {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		select {
		case <-release:
		case <-ctx.Done(): // the test failed and its cleanup hands the jobs back
		}
		mu.Lock()
		running--
		mu.Unlock()
		return worker.Result{Outcome: workerproto.OutcomeSucceeded}
	}, func(c *worker.Config) { c.Capacity = 2 })
	eventually.True(t, 10*time.Second, "two jobs running and one offer rejected", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running == 2 && f.count("reject") == 1
	})
	close(release)
	eventually.True(t, 10*time.Second, "two completions", func() bool { return f.count("complete") == 2 })
	rr.stop(t)
	if most != 2 || f.count("ack") != 2 {
		t.Fatalf("at most %d jobs at once and %d acks, want 2 and 2 (capacity 2)", most, f.count("ack"))
	}
}

// The offers of one poll answer are acknowledged concurrently: the third ACK arrives while the
// first two are unanswered (one by one, the third waited for two ACK commits), and the capacity
// still bounds the jobs.
func TestRunnerAcksTheOffersOfOneAnswerConcurrently(t *testing.T) {
	f := newFakeDispatcher(t)
	f.greedy = true
	for _, n := range []string{"1", "2", "3"} {
		f.offers <- testOffer(n)
	}
	var mu sync.Mutex
	inflight, most := 0, 0
	all := make(chan struct{})
	f.ackEnter = func() {
		mu.Lock()
		inflight++
		most = max(most, inflight)
		if inflight == 3 {
			close(all)
		}
		mu.Unlock()
		select { // held until all three are in flight; one by one, each gives up after 2s
		case <-all:
		case <-time.After(2 * time.Second):
		}
		mu.Lock()
		inflight--
		mu.Unlock()
	}
	rr := startRunner(t, []string{f.srv.URL}, func(context.Context, worker.Job) worker.Result {
		return worker.Result{Outcome: workerproto.OutcomeSucceeded}
	}, func(c *worker.Config) { c.Capacity = 3 })
	eventually.True(t, 20*time.Second, "three ACKs", func() bool { return f.count("ack") == 3 })
	rr.stop(t)
	mu.Lock()
	defer mu.Unlock()
	if most != 3 {
		t.Fatalf("at most %d ACKs in flight at once, want 3 (the answer's offers acknowledged concurrently)", most)
	}
}
