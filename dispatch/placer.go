package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Placer answers workers' long polls by placing Runs for the polling session (design §3.1): it
// keeps the waiting polls and one rotation cursor in memory and probes for ready work every
// PlacementInterval while a poll waits, and at once when a poll arrives or Kick is called.
// Nothing of it is durable: a dispatcher that dies loses only its waiting polls, and its offers
// expire (X).
type Placer struct {
	store *Store
	log   *slog.Logger

	mu       sync.Mutex
	waiting  map[uuid.UUID]*waiter // by session: a second poll answers the first with []
	order    []*waiter             // arrival order
	cursor   string                // rotation cursor: a project id
	stopping bool

	kick   chan struct{}
	wake   chan struct{} // an admission's notification (Waker): counted apart from kick
	woken  atomic.Int64  // passes started by a notification that delivered offers
	passes atomic.Int64  // passes run (tests)
	stop   context.CancelFunc
	done   chan struct{}

	afterRead func(read int) // tests: called after each candidate read of place, before its offer
}

type waiter struct {
	cred     Credential
	session  uuid.UUID
	labels   map[string]string
	slots    int
	capacity int          // the session's: an Offer statement never offers more than it holds free
	out      chan []Offer // buffered 1: the loop never blocks on a poll
	gone     chan error   // buffered 1: ErrStopping, or a session fence that failed at placement
}

// NewPlacer makes a placer over store; log receives identifiers and outcomes only (never tokens).
func NewPlacer(store *Store, log *slog.Logger) *Placer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Placer{store: store, log: log, waiting: map[uuid.UUID]*waiter{}, kick: make(chan struct{}, 1),
		wake: make(chan struct{}, 1)}
}

// Start runs the placement loop in a goroutine until ctx ends or Stop is called.
func (p *Placer) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		return errors.New("dispatch placer: already started")
	}
	ctx, p.stop = context.WithCancel(ctx)
	p.done = make(chan struct{})
	go p.loop(ctx)
	return nil
}

// Stop answers every waiting poll with ErrStopping, refuses new ones and waits for the loop to
// end (bounded by ctx).
func (p *Placer) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.stopping = true
	for _, w := range p.order {
		w.gone <- ErrStopping
	}
	p.waiting, p.order = map[uuid.UUID]*waiter{}, nil
	stop, done := p.stop, p.done
	p.mu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Kick asks for a placement pass now (a local handler freed capacity).
func (p *Placer) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Wake asks for a placement pass now because Runs were admitted (Waker: the admitting
// transaction's notification). It is Kick, counted apart: see WokenPlacements.
func (p *Placer) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// WokenPlacements is how many placement passes started by Wake delivered offers to a poll: the
// Runs those offers carry waited for no --placement-interval probe.
func (p *Placer) WokenPlacements() int64 { return p.woken.Load() }

// Poll waits up to wait (capped at PollMaxWait) for offers placed for the session, at most
// maxOffers, and returns at the first placed offer or at the deadline (an empty slice). A second
// poll of the same session answers the first with an empty slice. Errors: ErrUnauthorized,
// ErrNotFound, ErrSessionGone, ErrSessionDraining, ErrStopping (answer [] with
// dispatcher_stopping), ctx's error.
func (p *Placer) Poll(ctx context.Context, cred Credential, sessionID uuid.UUID, maxOffers int, wait time.Duration) ([]Offer, error) {
	if maxOffers < 1 {
		maxOffers = 1
	}
	if max := p.store.cfg.PollMaxWait; wait > max || wait <= 0 {
		wait = max
	}
	sess, err := p.store.Session(ctx, cred, sessionID)
	if err != nil {
		return nil, err
	}
	w := &waiter{cred: cred, session: sessionID, labels: sess.Labels, slots: min(maxOffers, sess.Capacity),
		capacity: sess.Capacity, out: make(chan []Offer, 1), gone: make(chan error, 1)}
	p.mu.Lock()
	if p.stopping {
		p.mu.Unlock()
		return nil, ErrStopping
	}
	if old := p.waiting[sessionID]; old != nil {
		p.removeLocked(old)
		old.out <- []Offer{}
	}
	p.waiting[sessionID] = w
	p.order = append(p.order, w)
	p.mu.Unlock()
	p.Kick()

	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case offers := <-w.out:
		return offers, nil
	case err := <-w.gone:
		return nil, err
	case <-timer.C:
	case <-ctx.Done():
	}
	p.mu.Lock()
	p.removeLocked(w)
	p.mu.Unlock()
	// The loop may have delivered just before the removal: the offers are the caller's.
	select {
	case offers := <-w.out:
		return offers, nil
	default:
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return []Offer{}, nil
}

func (p *Placer) removeLocked(w *waiter) {
	if p.waiting[w.session] == w {
		delete(p.waiting, w.session)
	}
	for i, o := range p.order {
		if o == w {
			p.order = append(p.order[:i:i], p.order[i+1:]...)
			break
		}
	}
}

// WakeGap is the least time between the start of a pass and a pass a notification starts
// (Wake): notifications arriving meanwhile coalesce into that one pass, so a storm of admissions
// runs at most one pass per WakeGap (the --placement-interval floor), not one after the other
// for as long as it lasts, each reading the queue for every waiting poll.
const WakeGap = 5 * time.Millisecond

func (p *Placer) loop(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(p.store.cfg.PlacementInterval)
	defer t.Stop()
	var last time.Time // the last pass's start
	for {
		woken := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.kick:
		case <-p.wake:
			woken = true
			if wait := WakeGap - time.Since(last); wait > 0 {
				gap := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					gap.Stop()
					return
				case <-gap.C:
				case <-p.kick: // a poll arrived: no reason to wait
					gap.Stop()
				}
			}
		}
		last = time.Now()
		p.passes.Add(1)
		p.pass(ctx, woken, last)
	}
}

// pass serves the waiting polls once, in arrival order; woken: a notification started it
// (counted, before its first delivery, in WokenPlacements); start: when it started (logged at
// Debug with each delivery: the loop bench's segments, docs/dispatch.md).
func (p *Placer) pass(ctx context.Context, woken bool, start time.Time) {
	delivered := 0
	p.mu.Lock()
	ws := append([]*waiter(nil), p.order...)
	p.mu.Unlock()
	var empty []*emptyRead // label sets whose read came back empty this pass
	for _, w := range ws {
		if ctx.Err() != nil {
			return
		}
		if e := findEmpty(empty, w.labels); e != nil && p.emptyForAny(ctx, e, w) {
			continue
		}
		offers, err := p.place(ctx, w)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if isFenceError(err) {
				p.mu.Lock()
				if p.waiting[w.session] == w {
					p.removeLocked(w)
					w.gone <- err
				}
				p.mu.Unlock()
				continue
			}
			p.log.Warn("dispatch placement failed", "session_id", w.session, "error", err)
			continue
		}
		if offers == nil {
			if findEmpty(empty, w.labels) == nil {
				empty = append(empty, &emptyRead{labels: w.labels})
			}
			continue
		}
		if len(offers) == 0 {
			continue // candidates raced away, twice (place read again at once): the next tick tries again
		}
		p.mu.Lock()
		ok := p.waiting[w.session] == w
		if ok {
			p.removeLocked(w)
			if woken && delivered == 0 {
				p.woken.Add(1)
			}
			delivered++
			w.out <- offers
		}
		p.mu.Unlock()
		if ok && p.log.Enabled(ctx, slog.LevelDebug) {
			ids := make([]string, len(offers))
			for i, o := range offers {
				ids[i] = o.RunID.String()
			}
			p.log.Debug("dispatch offers delivered", "session_id", w.session, "run_ids", ids, "woken", woken,
				"pass_ms", start.UnixMilli(), "answered_ms", time.Now().UnixMilli())
		}
		if !ok { // the poll ended meanwhile: nobody will ACK these
			// Withdraw tries an offer whose Run was locked again (at most withdrawTries statements,
			// 150 ms of backoff in all, on this loop): its Run is placed again now, not after the
			// offer TTL; an error says some were left to the offer sweep.
			ids := make([]uuid.UUID, len(offers))
			for i, o := range offers {
				ids[i] = o.OfferID
			}
			if _, err := p.store.Withdraw(context.WithoutCancel(ctx), ids); err != nil {
				p.log.Warn("dispatch withdraw of undelivered offers failed", "session_id", w.session, "error", err)
			}
		}
	}
}

// candidateSpare bounds the candidates place reads beyond a poll's slots (it reads 2 × slots, at
// most slots + candidateSpare): another dispatcher reading the same queue reads the same oldest
// Runs, and the Offer that loses the race to it skips them (locked or no longer queued); the
// spare ones fill the poll in the same pass instead of its waiting for the next probe.
const candidateSpare = 64

// offerCalls bounds the Offer statements of one read when the poll asks for fewer than the
// session's capacity (the statement caps at the free capacity, not at the poll's slots).
const offerCalls = 3

// place reads candidates and offers them; when candidates existed but every one raced away to
// another dispatcher's offer, it reads once more at once (the next probe is a tick away). nil:
// nothing to place for these labels; empty: candidates existed but none was offered.
func (p *Placer) place(ctx context.Context, w *waiter) ([]Offer, error) {
	for read := 1; ; read++ {
		cands, err := p.candidates(ctx, w)
		if err != nil {
			return nil, err
		}
		if len(cands) == 0 {
			return nil, nil
		}
		if p.afterRead != nil {
			p.afterRead(read)
		}
		offers, err := p.offer(ctx, w, cands)
		if err != nil {
			return nil, err
		}
		if len(offers) > 0 || read == 2 {
			return append([]Offer{}, offers...), nil
		}
	}
}

// candidates reads up to 2 × slots (at most slots + candidateSpare) Runs from the cursor,
// wrapping to the first project once when the projects after it gave fewer than wanted. The
// first slots of them are what a read of slots gives: the round robin orders every project's
// oldest before any project's second.
func (p *Placer) candidates(ctx context.Context, w *waiter) ([]Candidate, error) {
	want := w.slots + min(w.slots, candidateSpare)
	p.mu.Lock()
	after := p.cursor
	p.mu.Unlock()
	q := CandidateQuery{SessionID: w.session, Labels: w.labels, After: after, Slots: want}
	cands, _, err := p.store.Candidates(ctx, q)
	if err != nil {
		return nil, err
	}
	if len(cands) < want && after != "" {
		q.After = ""
		more, _, err := p.store.Candidates(ctx, q)
		if err != nil {
			return nil, err
		}
		seen := map[uuid.UUID]bool{}
		for _, c := range cands {
			seen[c.RunID] = true
		}
		for _, c := range more {
			if !seen[c.RunID] && len(cands) < want {
				cands = append(cands, c)
			}
		}
	}
	return cands, nil
}

// offer offers cands for the poll, at most its slots: when the poll asks for the session's whole
// capacity, one statement with every candidate (it caps at the free capacity, at most the slots),
// again while it offers some but fewer than the slots (a corrupt candidate took a slot);
// otherwise the first slots, then as many of the next as are still wanted; at most offerCalls
// statements. The cursor moves to the project of the last Run offered, and stays when none was:
// a poll whose session has no free capacity offers nothing, and moving the cursor for it would
// turn the rotation for the polls served in the same passes (with three projects, an idle
// session's two reads and a working one's offer moved it a whole turn: the working session got
// one project's Runs every pass). Candidates that raced away are no longer queued: the next read
// from the same cursor does not meet them.
func (p *Placer) offer(ctx context.Context, w *waiter, cands []Candidate) ([]Offer, error) {
	var got []Offer
	i := 0
	for calls := 0; i < len(cands) && len(got) < w.slots && calls < offerCalls; calls++ {
		n := len(cands) - i
		if w.slots < w.capacity {
			n = min(n, w.slots-len(got))
		}
		offers, err := p.store.Offer(ctx, w.cred, w.session, cands[i:i+n])
		if err != nil {
			if len(got) == 0 {
				return nil, err
			}
			// the offers made stand (the poll gets them); the next pass meets the error again
			p.log.Warn("dispatch placement failed after offers", "session_id", w.session, "error", err)
			break
		}
		got = append(got, offers...)
		// A statement given every candidate locks no more of them than the session has slots
		// free, and one it failed closed (P′: its revision no longer recomputes) took one of
		// those: when it offered some but fewer than the poll wants, the same candidates go again
		// (the ones offered or failed are no longer queued: the statement passes over them).
		if w.slots < w.capacity || len(offers) == 0 || len(got) >= w.slots {
			i += n
		}
	}
	if len(got) == 0 {
		return got, nil
	}
	offered := make(map[uuid.UUID]bool, len(got))
	for _, o := range got {
		offered[o.RunID] = true
	}
	var next string
	for _, c := range cands {
		if offered[c.RunID] {
			next = c.ProjectID
		}
	}
	p.mu.Lock()
	p.cursor = next
	p.mu.Unlock()
	return got, nil
}

func isFenceError(err error) bool {
	for _, e := range []error{ErrUnauthorized, ErrNotFound, ErrSessionGone, ErrSessionDraining} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// emptyRead is a label set whose candidate read came back empty in this pass. The read depends
// on the session too (a Run it rejected is never its candidate), so another session's poll with
// the same labels is skipped only once a read as no session (nothing rejected) is empty as well.
type emptyRead struct {
	labels     map[string]string
	checked    bool // the read as no session was made
	anySession bool // it came back empty: empty for every session of these labels
}

func findEmpty(es []*emptyRead, labels map[string]string) *emptyRead {
	for _, e := range es {
		if maps.Equal(e.labels, labels) {
			return e
		}
	}
	return nil
}

// emptyForAny tells whether e's labels have no candidate for any session, reading once per label
// set and pass (as no session, from the cursor as w's read would); an error reads as not empty:
// w's own placement meets it.
func (p *Placer) emptyForAny(ctx context.Context, e *emptyRead, w *waiter) bool {
	if !e.checked {
		cands, err := p.candidates(ctx, &waiter{session: uuid.Nil, labels: w.labels, slots: 1})
		e.checked, e.anySession = true, err == nil && len(cands) == 0
	}
	return e.anySession
}
