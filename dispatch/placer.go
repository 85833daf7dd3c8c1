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
	reads  atomic.Int64  // candidate reads (tests)
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

// pass serves the waiting polls once: polls whose labels are equal as one group (offerAtOnce),
// the groups in the arrival order of their first poll, and what a group leaves one poll at a
// time in arrival order (serveOne); woken: a notification started it (counted, before its first
// delivery, in WokenPlacements); start: when it started (logged at Debug with each delivery: the
// loop bench's segments, docs/dispatch.md).
func (p *Placer) pass(ctx context.Context, woken bool, start time.Time) {
	p.mu.Lock()
	ws := append([]*waiter(nil), p.order...)
	p.mu.Unlock()
	ps := &passState{woken: woken, start: start}
	for _, g := range byLabels(ws) {
		if len(g) > 1 {
			g = p.offerAtOnce(ctx, g, ps)
		}
		for _, w := range g {
			if ctx.Err() != nil {
				return
			}
			p.serveOne(ctx, w, ps)
		}
	}
}

// passState is what one pass's deliveries share.
type passState struct {
	woken     bool
	start     time.Time
	delivered int          // under Placer.mu
	empty     []*emptyRead // label sets whose read came back empty this pass
}

// byLabels splits polls into groups of equal labels, each in arrival order, the groups in the
// order of their first poll.
func byLabels(ws []*waiter) [][]*waiter {
	var gs [][]*waiter
next:
	for _, w := range ws {
		for i, g := range gs {
			if maps.Equal(g[0].labels, w.labels) {
				gs[i] = append(g, w)
				continue next
			}
		}
		gs = append(gs, []*waiter{w})
	}
	return gs
}

// serveOne places for one poll (place: its own read and offer) and answers it.
func (p *Placer) serveOne(ctx context.Context, w *waiter, ps *passState) {
	if e := findEmpty(ps.empty, w.labels); e != nil && p.emptyForAny(ctx, e, w) {
		return
	}
	offers, err := p.place(ctx, w)
	switch {
	case err != nil:
		p.failed(ctx, w, err)
	case offers == nil:
		if findEmpty(ps.empty, w.labels) == nil {
			ps.empty = append(ps.empty, &emptyRead{labels: w.labels})
		}
	case len(offers) > 0: // none: candidates raced away, twice (place read again at once): the next tick tries again
		p.deliver(ctx, w, offers, ps)
	}
}

// offerParallel is how many Offer statements offerAtOnce runs at a time: half the dispatcher's
// pool (each holds a connection, and the workers' ACKs and reports need the others), at least one.
func (p *Placer) offerParallel() int {
	return max(1, p.store.db.MaxConns()/2)
}

// offerAtOnce serves polls with equal labels from one candidate read, made as no session (each
// Offer re-checks its own session's rejections and free slots): each poll is offered its share of
// the candidates (as many as its slots, in arrival order), the shares' Offers run concurrently
// (at most offerParallel at a time) and each poll is answered as its Offer returns. A burst of
// Runs so reaches every waiting poll after one read and one offer round trip, where one poll
// after another waited for a read and an offer per poll before it (the second poll of a pass was
// the tail of admitted → running, docs/dispatch.md). It returns the polls it answered nothing,
// in arrival order, for serveOne (which reads again, as its session, with spare candidates):
// their share raced away to another dispatcher or was rejected, their session had no slot free,
// or there was no share left for them while the read may not have held every ready Run.
func (p *Placer) offerAtOnce(ctx context.Context, g []*waiter, ps *passState) []*waiter {
	slots := 0
	for _, w := range g {
		slots += w.slots
	}
	read := &waiter{session: uuid.Nil, labels: g[0].labels, slots: slots}
	cands, err := p.candidates(ctx, read)
	if err != nil {
		return g // each poll's own read meets it
	}
	if len(cands) == 0 {
		return nil // nothing ready for these labels, for any session
	}
	type share struct {
		w      *waiter
		cands  []Candidate
		offers []Offer
		failed bool // its offer failed: failed() ended the poll or logged it for the next pass
	}
	shares := make([]*share, 0, len(g))
	for i := 0; len(shares) < len(g) && i < len(cands); {
		w := g[len(shares)]
		n := min(w.slots, len(cands)-i)
		shares = append(shares, &share{w: w, cands: cands[i : i+n]})
		i += n
	}
	sem := make(chan struct{}, p.offerParallel())
	var wg sync.WaitGroup
	for _, s := range shares {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			offers, err := p.store.Offer(ctx, s.w.cred, s.w.session, s.cands)
			switch {
			case err != nil:
				s.failed = true
				p.failed(ctx, s.w, err)
			case len(offers) > 0:
				s.offers = offers
				p.deliver(ctx, s.w, offers, ps)
			}
		}()
	}
	wg.Wait()
	// The cursor moves to the project of the last Run offered, in the read's order (offer).
	offered, all := map[uuid.UUID]bool{}, true
	for _, s := range shares {
		for _, o := range s.offers {
			offered[o.RunID] = true
		}
	}
	next := ""
	for _, c := range cands {
		if offered[c.RunID] {
			next = c.ProjectID
		} else {
			all = false
		}
	}
	if next != "" {
		p.mu.Lock()
		p.cursor = next
		p.mu.Unlock()
	}
	// The read held every ready Run and each was offered: the polls without one have nothing to
	// read again.
	complete := all && len(cands) < read.slots+min(read.slots, candidateSpare)
	var left []*waiter
	for i, w := range g {
		if complete || ctx.Err() != nil {
			break
		}
		if i >= len(shares) || len(shares[i].offers) == 0 && !shares[i].failed {
			left = append(left, w)
		}
	}
	return left
}

// failed ends a poll whose session fence failed at placement (its Poll returns the error); any
// other error is logged and the poll waits for the next pass.
func (p *Placer) failed(ctx context.Context, w *waiter, err error) {
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
		return
	}
	p.log.Warn("dispatch placement failed", "session_id", w.session, "error", err)
}

// deliver answers a poll with offers; when the poll ended meanwhile, nobody will ACK them and
// they are withdrawn.
func (p *Placer) deliver(ctx context.Context, w *waiter, offers []Offer, ps *passState) {
	p.mu.Lock()
	ok := p.waiting[w.session] == w
	if ok {
		p.removeLocked(w)
		if ps.woken && ps.delivered == 0 {
			p.woken.Add(1)
		}
		ps.delivered++
		w.out <- offers
	}
	p.mu.Unlock()
	if ok && p.log.Enabled(ctx, slog.LevelDebug) {
		ids := make([]string, len(offers))
		for i, o := range offers {
			ids[i] = o.RunID.String()
		}
		p.log.Debug("dispatch offers delivered", "session_id", w.session, "run_ids", ids, "woken", ps.woken,
			"pass_ms", ps.start.UnixMilli(), "answered_ms", time.Now().UnixMilli())
	}
	if !ok {
		ids := make([]uuid.UUID, len(offers))
		for i, o := range offers {
			ids[i] = o.OfferID
		}
		if _, err := p.store.Withdraw(context.WithoutCancel(ctx), ids); err != nil {
			p.log.Warn("dispatch withdraw of undelivered offers failed", "session_id", w.session, "error", err)
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
	p.reads.Add(1)
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
// capacity, one statement with every candidate (it caps at the free capacity, at most the slots);
// otherwise the first slots, then as many of the next as are still wanted, at most offerCalls
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
		i += n
		if err != nil {
			if len(got) == 0 {
				return nil, err
			}
			// the offers made stand (the poll gets them); the next pass meets the error again
			p.log.Warn("dispatch placement failed after offers", "session_id", w.session, "error", err)
			break
		}
		got = append(got, offers...)
	}
	if len(got) == 0 {
		return got, nil
	}
	offered := make(map[uuid.UUID]bool, len(got))
	for _, o := range got {
		offered[o.RunID] = true
	}
	var next string
	for _, c := range cands[:i] {
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
