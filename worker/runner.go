package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/qlcontrol/controlcore/workerproto"
)

// Job is one Attempt the Runner has acknowledged: the handler runs it once.
type Job struct {
	RunID          string
	AttemptID      string
	AttemptNo      int
	MaxAttempts    int
	Project        string
	Task           string
	TaskRevision   int64
	Trigger        string // "" for a manual Run
	ScheduledForMs *int64
	// Spec is the execution spec, as the dispatcher verified it. It may hold secrets: never log it.
	Spec json.RawMessage
}

// Result is what a Handler reports. Outcome is workerproto.OutcomeSucceeded or OutcomeFailed
// (with Error); the Runner reports cancelled, handed_back or nothing when it stopped the job.
// OutputTail may be longer than the protocol allows: the Runner keeps its last 8192 bytes.
type Result struct {
	Outcome         string
	ExitCode        *int
	Signal          string
	Error           *workerproto.AttemptError
	OutputTail      string
	OutputTruncated bool
}

// Handler runs one job. Its ctx ends when the job must stop: the Run was cancelled, the lease was
// lost or its local deadline passed, or the drain grace ended; context.Cause(ctx) says which
// (ErrCancelled, ErrLeaseLost, ErrLeaseExpired, ErrHandedBack). It must then return within the
// Runner's KillGrace: the lease deadline leaves exactly that much time.
type Handler func(ctx context.Context, job Job) Result

// Why a job's context ended (context.Cause).
var (
	ErrCancelled    = errors.New("the Run was cancelled")
	ErrLeaseLost    = errors.New("the dispatcher reports the lease lost")
	ErrLeaseExpired = errors.New("the lease's local deadline passed without a renewal")
	ErrHandedBack   = errors.New("the drain grace ended: the job is handed back")
)

// LeaseEpsilon is the clock-rate drift the lease deadline allows for (D11): the worker's clock
// may run up to 1 % slow against the database's.
const LeaseEpsilon = 0.01

// LeaseDeadline is the local end of a lease (D11): t0 is when the granting or renewing request
// was sent (monotonic clock), expiresInMs the lease time the dispatcher answered, killGrace the
// time a stopped job needs to end. The database set its expiry from a time ≥ t0, so a job stopped
// by this deadline has ended before the database may expire the lease.
func LeaseDeadline(t0 time.Time, expiresInMs int64, killGrace time.Duration) time.Time {
	valid := time.Duration(float64(expiresInMs) * (1 - LeaseEpsilon) * float64(time.Millisecond))
	return t0.Add(valid - killGrace)
}

// Config configures a Runner.
type Config struct {
	Client   *Client
	Name     string // the worker name (workerproto.NamePattern)
	Capacity int    // jobs at once, 1…256
	Labels   map[string]string
	Handler  Handler
	// DrainGrace is how long running jobs may go on after the Run context ends (default 30 s);
	// then they are stopped and reported handed_back.
	DrainGrace time.Duration
	// KillGrace is how long a stopped job takes at most to end (default 2 s: SIGTERM, then
	// SIGKILL). The lease deadline is this much before the lease's end.
	KillGrace time.Duration
	// CallTimeout bounds the calls of the way out (drain, close, the report of a job whose lease
	// passed its local deadline). Default 10 s.
	CallTimeout time.Duration
	Logger      *slog.Logger
}

// Runner registers a session and runs offered jobs until its context ends, then drains.
type Runner struct {
	cfg     Config
	log     *slog.Logger
	client  *Client
	handBck chan struct{}
	handOne sync.Once

	mu     sync.Mutex
	sess   *session
	jobs   map[string]*job // by attempt id
	acking int             // slots held by ACKs in flight (take): counted with jobs against Capacity
	freed  chan struct{}   // a slot came free or the session changed (buffer 1)
	jobsWG sync.WaitGroup
}

type session struct {
	id                string
	heartbeatInterval time.Duration
	leaseTTL          time.Duration
	pollMaxWait       time.Duration
}

// NewRunner checks the configuration; it opens no connection.
func NewRunner(cfg Config) (*Runner, error) {
	if cfg.Client == nil || cfg.Handler == nil {
		return nil, errors.New("worker: a Runner needs a Client and a Handler")
	}
	reg := workerproto.RegisterRequest{Name: cfg.Name, Capacity: cfg.Capacity, Labels: cfg.Labels, Protocol: workerproto.Version}
	if err := reg.Validate(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if cfg.DrainGrace <= 0 {
		cfg.DrainGrace = 30 * time.Second
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = 2 * time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{
		cfg: cfg, log: log.With("worker", cfg.Name), client: cfg.Client,
		handBck: make(chan struct{}), jobs: map[string]*job{}, freed: make(chan struct{}, 1),
	}, nil
}

// HandBack ends the drain grace at once: running jobs are stopped and reported handed_back.
// Meant for a second SIGTERM; before the Run context ends it makes the grace zero.
func (r *Runner) HandBack() { r.handOne.Do(func() { close(r.handBck) }) }

// Run registers, polls and runs jobs until ctx ends or the dispatcher refuses the worker (401,
// a bad registration). Then it drains: no new offers, running jobs get DrainGrace, the rest
// are handed back, and the session is closed. It returns nil after a drain ctx started.
func (r *Runner) Run(ctx context.Context) error {
	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBg()
	var hbWG sync.WaitGroup
	hbWG.Go(func() { r.heartbeats(bg) })

	err := r.serve(ctx)
	r.drain(bg)
	stopBg()
	hbWG.Wait()
	return err
}

// ---- the poll loop

func (r *Runner) serve(ctx context.Context) error {
	backoff := newBackoff()
	for ctx.Err() == nil {
		sess, err := r.ensureSession(ctx)
		if err != nil {
			return err
		}
		if sess == nil {
			return nil // ctx ended before a dispatcher answered the registration
		}
		free := r.waitFree(ctx)
		if free == 0 {
			continue // ctx ended, or the session changed
		}
		wait := sess.pollMaxWait
		if wait <= 0 || wait > workerproto.MaxPollWaitMs*time.Millisecond {
			wait = 25 * time.Second
		}
		resp, err := r.client.Poll(ctx, sess.id, workerproto.PollRequest{WaitMs: wait.Milliseconds(), MaxOffers: free})
		switch code := ErrorCode(err); {
		case err == nil:
			backoff.reset()
		case ctx.Err() != nil:
			return nil
		case code == workerproto.CodeSessionGone || code == workerproto.CodeNotFound:
			r.log.Warn("session gone: registering a new one", "session_id", sess.id, "code", code)
			r.dropSession(sess, "session_gone")
			continue
		case code == workerproto.CodeUnauthorized:
			return fmt.Errorf("worker: the dispatcher refuses the token (revoked?): %w", err)
		case code == workerproto.CodeSessionDraining:
			return fmt.Errorf("worker: session %s is draining: %w", sess.id, err)
		default:
			r.log.Warn("poll failed", "session_id", sess.id, "err", err)
			if !sleepCtx(ctx, backoff.next()) {
				return nil
			}
			continue
		}
		// One base for every offer of this answer. The offers are acknowledged concurrently (each
		// ACK is a commit: one by one, the last offer of a full answer waited for every other's),
		// and the next poll waits for all of them, so the slots it asks for are counted after.
		inHand := time.Now()
		if len(resp.Offers) == 1 {
			r.take(ctx, sess, resp.Offers[0], inHand)
		} else {
			var acks sync.WaitGroup
			for _, o := range resp.Offers {
				acks.Go(func() { r.take(ctx, sess, o, inHand) })
			}
			acks.Wait()
		}
		if resp.DispatcherStopping {
			r.client.failover()
		}
	}
	return nil
}

func (r *Runner) ensureSession(ctx context.Context) (*session, error) {
	r.mu.Lock()
	sess := r.sess
	r.mu.Unlock()
	if sess != nil {
		return sess, nil
	}
	backoff := newBackoff()
	for {
		resp, err := r.client.Register(ctx, workerproto.RegisterRequest{
			Name: r.cfg.Name, Capacity: r.cfg.Capacity, Labels: r.cfg.Labels, Protocol: workerproto.Version,
		})
		if err == nil {
			sess = &session{
				id:                resp.SessionID,
				heartbeatInterval: time.Duration(resp.HeartbeatIntervalMs) * time.Millisecond,
				leaseTTL:          time.Duration(resp.LeaseTTLMs) * time.Millisecond,
				pollMaxWait:       time.Duration(resp.PollMaxWaitMs) * time.Millisecond,
			}
			if sess.heartbeatInterval <= 0 {
				sess.heartbeatInterval = max(sess.leaseTTL/3, time.Second)
			}
			r.mu.Lock()
			r.sess = sess
			r.mu.Unlock()
			r.log.Info("session registered", "session_id", sess.id, "capacity", r.cfg.Capacity,
				"lease_ttl_ms", resp.LeaseTTLMs, "heartbeat_interval_ms", resp.HeartbeatIntervalMs)
			return sess, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		if !retryable(err) {
			return nil, fmt.Errorf("worker: %w", err)
		}
		r.log.Warn("register failed; retrying", "err", err)
		if !sleepCtx(ctx, backoff.next()) {
			return nil, nil
		}
	}
}

// dropSession forgets a session the dispatcher no longer knows: every lease of it is lost.
func (r *Runner) dropSession(sess *session, why string) {
	r.mu.Lock()
	if r.sess == sess {
		r.sess = nil
	}
	var lost []*job
	for _, j := range r.jobs {
		if j.sessionID == sess.id {
			lost = append(lost, j)
		}
	}
	r.mu.Unlock()
	for _, j := range lost {
		r.log.Warn("lease lost with its session", "attempt_id", j.offer.AttemptID, "reason", why)
		j.stop(ErrLeaseLost)
	}
	r.signalFree()
}

// waitFree returns the free slots once there are any (0 when ctx ended).
func (r *Runner) waitFree(ctx context.Context) int {
	for {
		r.mu.Lock()
		free := r.cfg.Capacity - len(r.jobs)
		r.mu.Unlock()
		if free > 0 {
			return free
		}
		select {
		case <-ctx.Done():
			return 0
		case <-r.freed:
		}
	}
}

func (r *Runner) signalFree() {
	select {
	case r.freed <- struct{}{}:
	default:
	}
}

// take acknowledges one offer and starts its job, or rejects it when the Runner is stopping or
// full (a dispatcher never offers more than asked; this is the backstop).
func (r *Runner) take(ctx context.Context, sess *session, o workerproto.Offer, inHand time.Time) {
	log := r.log.With("offer_id", o.OfferID, "attempt_id", o.AttemptID, "run_id", o.RunID)
	// The dispatcher, not this deadline, decides whether the offer is still live (in database
	// time): the deadline only bounds the retries. It counts from when the poll's answer was in
	// hand, never from when the long poll was sent (an offer made late in a poll would be given
	// up before it was ever ACKed), and leaves one CallTimeout past the offer's expiry, so an ACK
	// whose answer was lost is replayed and answered with its lease, which is never left to
	// expire with no job behind it. One base for all the answer's offers bounds how long the
	// poll loop can wait on an unreachable dispatcher: one deadline, not one per offer.
	actx, cancel := context.WithDeadline(context.WithoutCancel(ctx), inHand.Add(time.Duration(o.ExpiresInMs)*time.Millisecond+r.cfg.CallTimeout))
	defer cancel()
	r.mu.Lock()
	full := len(r.jobs)+r.acking >= r.cfg.Capacity
	stopping := ctx.Err() != nil
	if !full && !stopping {
		r.acking++ // the slot is this ACK's until its job starts or the ACK fails
	}
	r.mu.Unlock()
	if stopping || full {
		reason := "worker stopping"
		if full {
			reason = "worker at capacity"
		}
		if err := r.client.Reject(actx, o.OfferID, workerproto.RejectRequest{SessionID: sess.id, CallbackToken: o.CallbackToken, Reason: reason}); err != nil {
			log.Warn("reject failed; the offer will expire", "err", err)
		}
		return
	}
	t0 := time.Now() // D11: measured when the granting request is sent
	ack, err := r.client.Ack(actx, o.OfferID, workerproto.AckRequest{SessionID: sess.id, CallbackToken: o.CallbackToken})
	if err != nil {
		r.mu.Lock()
		r.acking--
		r.mu.Unlock()
		log.Warn("ack failed; the offer is dropped", "err", err)
		return
	}
	jctx, stop := context.WithCancelCause(context.Background())
	j := &job{offer: o, sessionID: sess.id, leaseVersion: ack.LeaseVersion, ctx: jctx, cancel: stop, leaseTTL: sess.leaseTTL}
	j.arm(LeaseDeadline(t0, ack.LeaseExpiresInMs, r.cfg.KillGrace))
	r.mu.Lock()
	r.acking--
	r.jobs[o.AttemptID] = j
	r.mu.Unlock()
	log.Info("job started", "attempt_no", o.AttemptNo, "lease_version", ack.LeaseVersion)
	r.jobsWG.Go(func() { r.runJob(j, log) })
}

// ---- one job

type job struct {
	offer        workerproto.Offer
	sessionID    string
	leaseVersion int64
	leaseTTL     time.Duration
	ctx          context.Context
	cancel       context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time
	timer    *time.Timer
	expired  bool
}

// arm sets the lease deadline; the watchdog stops the job when it passes.
func (j *job) arm(deadline time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.expired {
		return // a lease that passed its local deadline is never revived
	}
	j.deadline = deadline
	if j.timer == nil {
		j.timer = time.AfterFunc(time.Until(deadline), j.watchdog)
		return
	}
	j.timer.Reset(time.Until(deadline))
}

func (j *job) watchdog() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.expired {
		return
	}
	if left := time.Until(j.deadline); left > 0 { // renewed while this call was on its way
		j.timer.Reset(left)
		return
	}
	j.expired = true
	j.cancel(ErrLeaseExpired)
}

func (j *job) disarm() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.expired = true
	if j.timer != nil {
		j.timer.Stop()
	}
}

// stop ends the job's context with why (the first cause wins).
func (j *job) stop(why error) { j.cancel(why) }

func (r *Runner) runJob(j *job, log *slog.Logger) {
	defer func() {
		r.mu.Lock()
		delete(r.jobs, j.offer.AttemptID)
		r.mu.Unlock()
		r.signalFree()
	}()
	started := time.Now()
	res := r.callHandler(j)
	duration := time.Since(started)
	j.disarm()
	cause := context.Cause(j.ctx)
	if j.ctx.Err() == nil {
		cause = nil
	}
	j.cancel(nil)
	if errors.Is(cause, ErrLeaseLost) {
		log.Warn("job stopped: lease lost; not reported", "duration_ms", duration.Milliseconds())
		return
	}
	report := r.report(j, res, cause, duration)
	ctx, cancel := context.WithTimeout(context.Background(), max(2*j.leaseTTL, 30*time.Second))
	if errors.Is(cause, ErrLeaseExpired) {
		// The dispatcher was unreachable for a whole lease: one short try (it accepts a report
		// of a lease it has not yet swept), then the sweep retries the Run.
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), r.cfg.CallTimeout)
	}
	defer cancel()
	resp, err := r.client.Complete(ctx, j.offer.AttemptID, report)
	if err != nil {
		log.Warn("complete failed", "outcome", report.Outcome, "err", err)
		return
	}
	log.Info("job reported", "outcome", report.Outcome, "run_state", resp.RunState, "replay", resp.Replay,
		"duration_ms", report.DurationMs)
}

func (r *Runner) callHandler(j *job) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("handler panicked", "attempt_id", j.offer.AttemptID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			res = Result{Outcome: workerproto.OutcomeFailed, Error: &workerproto.AttemptError{
				Kind: workerproto.KindHandler, Message: "the handler panicked"}}
		}
	}()
	o := j.offer
	return r.cfg.Handler(j.ctx, Job{
		RunID: o.RunID, AttemptID: o.AttemptID, AttemptNo: o.AttemptNo, MaxAttempts: o.MaxAttempts,
		Project: o.Project, Task: o.Task, TaskRevision: o.TaskRevision, Trigger: o.Trigger,
		ScheduledForMs: o.ScheduledForMs, Spec: o.Spec,
	})
}

// report turns a handler's result and the reason its job was stopped into the completion.
func (r *Runner) report(j *job, res Result, cause error, d time.Duration) workerproto.CompleteRequest {
	rep := workerproto.CompleteRequest{
		SessionID: j.sessionID, CallbackToken: j.offer.CallbackToken, LeaseVersion: j.leaseVersion,
		Outcome: res.Outcome, ExitCode: res.ExitCode, Signal: workerproto.TruncateUTF8(workerproto.StorableText(res.Signal), 32),
		Error: res.Error, DurationMs: d.Milliseconds(),
	}
	rep.OutputTail, rep.OutputTruncated = TailUTF8(res.OutputTail, workerproto.OutputTailMaxBytes)
	rep.OutputTruncated = rep.OutputTruncated || res.OutputTruncated
	switch {
	case errors.Is(cause, ErrCancelled):
		// A success would be refused (run_cancelled): the Run is cancelled whatever the job did.
		rep.Outcome = workerproto.OutcomeCancelled
		rep.Error = &workerproto.AttemptError{Kind: workerproto.KindCancelled, Message: "the Run was cancelled; the job was stopped"}
	case errors.Is(cause, ErrHandedBack) && res.Outcome != workerproto.OutcomeSucceeded:
		rep.Outcome = workerproto.OutcomeHandedBack
		rep.Error = &workerproto.AttemptError{Kind: workerproto.KindCancelled, Message: "the worker stopped: drain grace ended, the job was handed back"}
	case errors.Is(cause, ErrLeaseExpired) && res.Outcome != workerproto.OutcomeSucceeded:
		rep.Outcome = workerproto.OutcomeFailed
		rep.Error = &workerproto.AttemptError{Kind: workerproto.KindLeaseLost, Message: "no lease renewal before the local deadline; the job was stopped"}
	case res.Outcome == workerproto.OutcomeSucceeded:
		rep.Error = nil
	case res.Outcome == workerproto.OutcomeFailed:
		if rep.Error == nil || !workerproto.ValidKind(rep.Error.Kind) {
			rep.Error = &workerproto.AttemptError{Kind: workerproto.KindHandler, Message: "the handler failed without a valid error kind"}
		}
	default:
		rep.Outcome = workerproto.OutcomeFailed
		rep.Error = &workerproto.AttemptError{Kind: workerproto.KindHandler,
			Message: fmt.Sprintf("the handler returned outcome %q", workerproto.TruncateUTF8(res.Outcome, 32))}
	}
	if rep.Error != nil {
		e := *rep.Error
		e.Message = workerproto.TruncateUTF8(workerproto.StorableText(e.Message), workerproto.MaxMessageBytes)
		rep.Error = &e
	}
	return rep
}

// TailUTF8 keeps the last n bytes of s, from a rune start, as storable text (invalid bytes and
// NUL become U+FFFD), and says whether it cut anything.
func TailUTF8(s string, n int) (string, bool) {
	s = workerproto.StorableText(s)
	if len(s) <= n {
		return s, false
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:], true
}

// ---- heartbeats

// heartbeats renews the session and its leases every heartbeat interval, counted from the start
// of the previous heartbeat (a slow answer must not stretch the period).
func (r *Runner) heartbeats(ctx context.Context) {
	for {
		r.mu.Lock()
		sess := r.sess
		r.mu.Unlock()
		next := time.Now().Add(time.Second) // no session yet: look again soon
		if sess != nil {
			next = time.Now().Add(sess.heartbeatInterval)
			r.heartbeat(ctx, sess)
		}
		if !sleepCtx(ctx, time.Until(next)) {
			return
		}
	}
}

func (r *Runner) heartbeat(ctx context.Context, sess *session) {
	r.mu.Lock()
	held := map[string]*job{}
	req := workerproto.HeartbeatRequest{Leases: []workerproto.LeaseRef{}}
	for id, j := range r.jobs {
		if j.sessionID == sess.id {
			held[id] = j
			req.Leases = append(req.Leases, workerproto.LeaseRef{AttemptID: id, LeaseVersion: j.leaseVersion})
		}
	}
	r.mu.Unlock()
	hctx, cancel := context.WithTimeout(ctx, sess.heartbeatInterval)
	defer cancel()
	t0 := time.Now() // D11: the renewal counts from before the request was sent
	resp, err := r.client.Heartbeat(hctx, sess.id, req)
	switch {
	case ErrorCode(err) == workerproto.CodeSessionGone || ErrorCode(err) == workerproto.CodeNotFound:
		r.log.Warn("heartbeat: session gone; every lease is lost", "session_id", sess.id)
		r.dropSession(sess, "session_gone")
		return
	case err != nil:
		if ctx.Err() == nil {
			r.log.Warn("heartbeat failed; leases run to their local deadline", "session_id", sess.id, "leases", len(req.Leases), "err", err)
		}
		return
	}
	for _, l := range resp.Leases {
		j := held[l.AttemptID]
		if j == nil {
			continue
		}
		switch l.Status {
		case workerproto.LeaseRenewed:
			j.arm(LeaseDeadline(t0, l.LeaseExpiresInMs, r.cfg.KillGrace))
		case workerproto.LeaseCancel:
			// The lease is still renewed so that the cancelled report lands.
			j.arm(LeaseDeadline(t0, l.LeaseExpiresInMs, r.cfg.KillGrace))
			r.log.Info("run cancelled: stopping the job", "attempt_id", l.AttemptID)
			j.stop(ErrCancelled)
		case workerproto.LeaseLost:
			r.log.Warn("lease lost: stopping the job", "attempt_id", l.AttemptID)
			j.stop(ErrLeaseLost)
		}
	}
}

// ---- drain

func (r *Runner) drain(ctx context.Context) {
	r.mu.Lock()
	sess := r.sess
	n := len(r.jobs)
	r.mu.Unlock()
	if sess != nil {
		dctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		resp, err := r.client.Drain(dctx, sess.id)
		cancel()
		if err != nil {
			r.log.Warn("drain failed; the session's offers will expire", "session_id", sess.id, "err", err)
		} else {
			r.log.Info("draining", "session_id", sess.id, "withdrawn_offers", resp.WithdrawnOffers, "running", n)
		}
	}
	done := make(chan struct{})
	go func() { r.jobsWG.Wait(); close(done) }()
	grace := time.NewTimer(r.cfg.DrainGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
	case <-r.handBck:
	}
	r.mu.Lock()
	for _, j := range r.jobs {
		j.stop(ErrHandedBack)
	}
	r.mu.Unlock()
	<-done
	r.mu.Lock()
	sess = r.sess
	r.mu.Unlock()
	if sess == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	if err := r.client.Close(cctx, sess.id); err != nil {
		r.log.Warn("close failed; the session will expire", "session_id", sess.id, "err", err)
		return
	}
	r.log.Info("session closed", "session_id", sess.id)
}

// ---- helpers

type backoff struct{ cur time.Duration }

func newBackoff() *backoff { return &backoff{} }
func (b *backoff) reset()  { b.cur = 0 }
func (b *backoff) next() time.Duration {
	b.cur = min(max(2*b.cur, 200*time.Millisecond), 10*time.Second)
	return b.cur/2 + rand.N(b.cur/2+1)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
