package coordinator

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/schedule"
)

// Stats are the coordinator's counters, safe to read while it runs.
type Stats struct {
	Rounds atomic.Int64
	// Saturated counts rounds that claimed their whole budget: such a round waits out the
	// cadence before the next, so a replica that saturates admits at most Capacity per second
	// and anything due beyond it waits (and, under fire_once, folds into one occurrence).
	Saturated atomic.Int64
	Claims    atomic.Int64 // schedule rows claimed (the initialisation's claims included)
	Admits    atomic.Int64 // Runs admitted
	Skips     atomic.Int64 // occurrences passed over by the skip policy (claims ended by a skip)
	Releases  atomic.Int64 // claims ended without a Run: initialisation or not yet due
	// Inits counts the Releases that were initialisations: a row without a cursor (a new or
	// republished trigger) given its first one, in a batch or by the admission claim. Each is
	// counted in Releases first, then here.
	Inits   atomic.Int64
	Races   atomic.Int64 // fenced writes that found the fence or the schedule changed
	Stale   atomic.Int64 // admits refused because a revision changed since the claim
	Corrupt atomic.Int64 // admits refused because a digest no longer matches its row
	Retries atomic.Int64 // serialization failures retried
	Errors  atomic.Int64 // anything else that went wrong (logged)
	// Takeovers counts claims that replaced an expired claim of some replica (this one included).
	Takeovers atomic.Int64
	// FailedRounds counts the Lifecycle's rounds that failed: their claim statement failed (a
	// read-only server, a lost privilege, a dead connection) or they panicked. A round cut by
	// Stop's drain bound is not one.
	FailedRounds atomic.Int64
	// FailingRounds is a gauge, not a counter: the Lifecycle's rounds that failed in a row up to
	// the last one (0 once a round succeeds). The Lifecycle backs off and turns not ready on it.
	FailingRounds atomic.Int64
}

// Snapshot is a plain copy of Stats.
type Snapshot struct {
	Rounds, Saturated, Claims, Admits, Skips, Inits, Releases, Races, Stale, Corrupt, Retries, Errors, Takeovers int64
	FailedRounds, FailingRounds                                                                                  int64
}

// Snapshot copies the counters. Outcomes are read before Claims and Claims before Rounds: a
// claim is counted before its outcome and a round before its claims, so a snapshot taken while
// the coordinator runs still has Claims >= Admits+Skips+Releases+… and never a claim without its
// round. Inits is read before Releases, which is counted first: Inits <= Releases.
func (s *Stats) Snapshot() Snapshot {
	var out Snapshot
	out.Inits = s.Inits.Load()
	out.Admits, out.Skips, out.Releases = s.Admits.Load(), s.Skips.Load(), s.Releases.Load()
	out.Races, out.Stale, out.Corrupt = s.Races.Load(), s.Stale.Load(), s.Corrupt.Load()
	out.Retries, out.Errors, out.Takeovers = s.Retries.Load(), s.Errors.Load(), s.Takeovers.Load()
	out.Claims = s.Claims.Load()
	out.Saturated = s.Saturated.Load() // counted after its round: read before Rounds
	out.FailedRounds, out.FailingRounds = s.FailedRounds.Load(), s.FailingRounds.Load()
	out.Rounds = s.Rounds.Load()
	return out
}

// Observer receives measurements as they happen (for metrics); nil fields are skipped. It is
// given to New (WithObserver), so it is in place before the first round and never changes.
type Observer struct {
	Round func(d time.Duration, claimed int)
	Claim func(d time.Duration)
	// Admitted gets the admission lag: the admit's database time minus the scheduled time.
	Admitted func(lag time.Duration)
	// AdmitCall gets the duration of every admit call, whatever its outcome (retries included).
	AdmitCall func(d time.Duration)
	// Error gets the class of a counted error: claim, admit, init, release, skip, decide, corrupt.
	Error func(class string)
	// Init gets every initialisation batch: its duration (claim, decisions and write-back), the
	// rows it claimed and how many of them it initialised.
	Init func(d time.Duration, claimed, initialised int)
	// Missed gets the occurrences a written decision passed over without a Run (n > 0): a skip
	// that advanced the cursor, or an admit after a skip or a fire_once catch-up. They are the
	// counts the same write added to the row's missed_total (Decision.Missed).
	Missed func(project, policy string, n int64)
}

// Coordinator runs rounds for one replica.
type Coordinator struct {
	observe Observer
	cfg     Config
	store   *Store
	log     *slog.Logger
	Stats   Stats
	// newRunID, when set, allocates every Run identity instead of a RunIDs source per admission;
	// it is called only for an admit.
	newRunID func() uuid.UUID

	schedMu   sync.Mutex
	schedules map[[2]string]*schedule.Schedule // parsed (spec, zone) pairs

	// ahead is the next round's first claim, sent by a saturated round while its last batch was
	// handled (lookAhead); nil: none. Only the Lifecycle's loop goroutine touches it.
	ahead <-chan claimBatch
}

// RunIDs returns the source of the Run identities of one admission, single or batch: they share
// a random 48-bit prefix, then count up (12 bits), then end in 62 random bits (version 8, RFC
// 9562's custom layout; 110 random bits in all). One admission's Runs thus sit side by side in
// the runs key, and concurrent admissions far apart. Both matter under SERIALIZABLE, where the
// foreign-key checks of the Attempt and the events read the runs key and lock its leaf pages:
//   - random identities (version 4) spread a batch of 128 over 128 leaves: four replicas
//     drained a 50,000 burst at 0.69–0.73 × the batch ceiling, against 0.85–0.86 with v7;
//   - time-ordered ones (version 7) put every admission on the right-edge leaf, where concurrent
//     admits read and write the same page and abort each other: four single-mode replicas
//     retried a quarter of their admits in a burst and dropped claims, against 0.01 %
//     (docs/performance.md, third sitting).
//
// A source serves one admission, from one goroutine: its counter wraps after 4,096 identities
// (a batch holds at most MaxBudget), which would cost locality, never uniqueness.
func RunIDs() func() uuid.UUID {
	var prefix [6]byte
	_, _ = rand.Read(prefix[:]) // crypto/rand.Read never fails (it crashes the program instead)
	n := 0
	return func() uuid.UUID {
		var id uuid.UUID
		copy(id[:6], prefix[:])
		id[6], id[7] = 0x80|byte(n>>8)&0x0f, byte(n) // version 8, counter
		_, _ = rand.Read(id[8:])
		id[8] = 0x80 | id[8]&0x3f // RFC 9562 variant
		n++
		return id
	}
}

// Option sets up a Coordinator at construction: what New takes besides the bounds and the store.
// Nothing of a Coordinator is set after New, so nothing races with its rounds.
type Option func(*Coordinator)

// WithLogger sets the low-sensitivity diagnostic sink: it receives identifiers and outcomes,
// never DSNs, passwords or payloads. Without it (or with nil) nothing is logged.
func WithLogger(log *slog.Logger) Option {
	return func(c *Coordinator) {
		if log != nil {
			c.log = log
		}
	}
}

// WithObserver sets the receiver of measurements (metrics, the bench).
func WithObserver(o Observer) Option { return func(c *Coordinator) { c.observe = o } }

// WithRunIDs makes next allocate every Run identity instead of a RunIDs source per admission
// (tests count or refuse the allocations); it is called only for an admit.
func WithRunIDs(next func() uuid.UUID) Option { return func(c *Coordinator) { c.newRunID = next } }

// New returns a coordinator; cfg must have passed Validate.
func New(cfg Config, store *Store, opts ...Option) *Coordinator {
	c := &Coordinator{cfg: cfg, store: store, log: slog.New(slog.DiscardHandler), schedules: map[[2]string]*schedule.Schedule{}}
	for _, o := range opts {
		o(c)
	}
	c.log = c.log.With("owner", cfg.Owner)
	return c
}

// Capacity is the most occurrences per second this replica can admit: a round that claims its
// whole budget waits out the cadence before the next one, so budget ÷ cadence (16/s at the
// defaults), whatever the database could do.
func (c *Coordinator) Capacity() float64 { return capacity(c.cfg) }

func capacity(cfg Config) float64 { return float64(cfg.Budget) / cfg.Cadence.Seconds() }

// Round claims at most Budget rows and ends each claim under its fence; once a claim reaches the
// rows waiting for initialisation, it initialises them in batches that do not spend the budget
// (initialise), then claims on. Rows are claimed
// AdmitBatch at a time (1: the ADR's one-row claim) and the fired ones among them admitted in one
// transaction. It returns how many rows it claimed. Claiming stops early when no row is
// claimable or when stop is closed (the claims in hand are still finished). Errors are counted
// and logged, never returned to the caller's loop.
//
// In batch mode, while one batch is handled, the next is already being claimed, on a second
// connection (if the pool has one; otherwise they take turns): a replica otherwise leaves the
// database waiting for the claim's round trip and run after every admit. Batches are still
// handled one after the other, so a replica has at most one claim and one admission in flight,
// and the first claim of a round overlaps nothing (rounds never do), except under a Lifecycle,
// whose saturated rounds send the next round's first claim ahead (roundAhead). When stop closes during a
// handle, the batch already claimed ahead is handled too: up to two batches finish after a Stop.
// Single mode (the ADR's one-row claim) claims nothing ahead: its admit is one short
// transaction, and a row claimed ahead would be one more claim held by an admit that hangs (a
// partition, a lost pooler), to expire uncounted by the round that ran into it. Its next claim
// instead goes behind the admit's COMMIT in the same round trip (Store.AdmitThenClaim) and runs
// only once the admit committed, so an admit that hangs or fails holds no claim of it; what a lost
// response of that round trip leaves held until the lease expires is the one row it claimed, as
// a lost response of a claim sent alone always did (taken over after the lease, admitted late).
// The admit's outcome is read after the claim ran and committed, one more commit before the
// replica sees it (the Run itself is committed before the claim runs).
func (c *Coordinator) Round(ctx context.Context, stop <-chan struct{}) (claimed int) {
	claimed, err := c.round(ctx, stop)
	if err != nil {
		c.log.Error("claim failed", "err", err)
	}
	return claimed
}

// round is Round, except that a claim statement's failure is returned instead of logged (it is
// counted either way): the Lifecycle logs when its rounds start and stop failing, not each one.
// A claim cancelled by ctx (Stop's drain bound) is no failure.
func (c *Coordinator) round(ctx context.Context, stop <-chan struct{}) (claimed int, err error) {
	return c.roundAhead(ctx, stop, nil)
}

// roundAhead is round; in batch mode, when the round spends its budget on full claims and
// lookAhead (nil: never) says the next round will start at once, it sends the next round's
// first claim while its own last batch is handled, and keeps it in c.ahead, where the next round
// takes it instead of sending its first claim then. A saturated replica (rounds longer than the
// cadence, each claiming its whole budget) thus has a claim in flight during every admit, as
// within a round, instead of leaving the database idle for one claim's round trip and run at
// every round boundary: with budget 256 and batch 128 that was every other claim. Still at most
// one claim and one admission in flight, each round at most its budget; the Lifecycle finishes a
// claim sent ahead when it stops (finishAhead).
func (c *Coordinator) roundAhead(ctx context.Context, stop <-chan struct{}, lookAhead func() bool) (claimed int, err error) {
	c.Stats.Rounds.Add(1)
	defer func() {
		if claimed >= c.cfg.Budget {
			c.Stats.Saturated.Add(1)
		}
	}()
	if c.observe.Round != nil {
		start := time.Now()
		defer func() { c.observe.Round(time.Since(start), claimed) }()
	}
	// initialised: this round ran its initialisation (at most once a round); past: it stopped at
	// its bound with rows still waiting, so the claims that follow start past them.
	initialised, past := false, false
	// claim sends the next claim unless the budget is spent or the round is stopped; nil: none.
	// overlapped: it runs while the batch before it is handled.
	mayClaim := func(n int) bool {
		select {
		case <-stop:
			return false
		default:
		}
		return n > 0 && ctx.Err() == nil
	}
	claimPast := func(n int, overlapped, past bool) <-chan claimBatch {
		if !mayClaim(n) {
			return nil
		}
		out := make(chan claimBatch, 1)
		go func() {
			start := time.Now()
			defer func() { // off the round's goroutine, a panic would escape the Lifecycle's recover
				if r := recover(); r != nil {
					out <- claimBatch{asked: n, err: fmt.Errorf("claim panicked: %v", r)}
				}
			}()
			// Past the rows waiting for initialisation when this round initialised its bound of
			// them and some remain: the ADR's order would give every claim to them.
			claims, err := c.store.claimDue(ctx, c.cfg.Owner, c.cfg.Lease, n, past)
			out <- claimBatch{claims: claims, asked: n, overlapped: overlapped, took: time.Since(start), err: err}
		}()
		return out
	}
	claim := func(n int, overlapped bool) <-chan claimBatch {
		return claimPast(n, overlapped, past) // past read here, on the round's goroutine
	}
	var next <-chan claimBatch
	defer func() {
		// A handle that panicked (the Lifecycle recovers it) leaves the claim sent ahead: the
		// round waits for it, so rounds still never overlap, and leaves its rows to expire.
		if next != nil {
			if got := <-next; got.err == nil {
				c.Stats.Claims.Add(int64(len(got.claims)))
			}
		}
	}()
	next, c.ahead = c.ahead, nil
	if next == nil {
		next = claim(min(c.cfg.batch(), c.cfg.Budget), false)
	}
	for next != nil {
		got := <-next
		next = nil // received: nothing in flight until the next claim is sent
		if got.err != nil {
			return claimed, c.claimFailed(got.err)
		}
		if c.observe.Claim != nil && !got.carried { // a carried claim's time is its admit call's
			c.observe.Claim(got.took)
		}
		// The claim reached the rows waiting for initialisation (first in its order): they are
		// initialised in batches next, so no claim is sent ahead into them, and the waiting rows
		// of this claim spend no budget either (a batch-mode claim may be all of them, and would
		// otherwise end the round before its due rows).
		waits := waiting(got.claims)
		initNow := !initialised && waits > 0
		spent := len(got.claims)
		if initNow {
			spent -= waits
		}
		claimed += spent
		c.Stats.Claims.Add(int64(len(got.claims)))
		rest := min(c.cfg.batch(), c.cfg.Budget-claimed)
		full := len(got.claims) == got.asked
		if full && c.cfg.batch() > 1 && !initNow {
			next = claim(rest, true)
			if next == nil && rest <= 0 && lookAhead != nil && lookAhead() {
				// the next round's first claim: a fresh round claims from the ADR's order (not past)
				c.ahead = claimPast(min(c.cfg.batch(), c.cfg.Budget), true, false)
			}
		}
		// The one-row mode sends the claim that follows a full claim behind the admit, in its
		// round trip (Store.AdmitThenClaim), when the claimed row fires.
		var carry *NextClaim
		if full && c.cfg.batch() == 1 && !initNow && mayClaim(rest) {
			carry = &NextClaim{Owner: c.cfg.Owner, Lease: c.cfg.Lease, N: rest, PastUninitialised: past}
		}
		carried := c.handleThen(ctx, got.claims, carry)
		if carried != nil {
			ready := make(chan claimBatch, 1)
			ready <- *carried
			next = ready
			continue
		}
		if initNow {
			initialised = true
			drained, err := c.initialise(ctx, stop)
			if err != nil {
				return claimed, c.claimFailed(err)
			}
			past = !drained
			next = claim(rest, false) // whatever fell due meanwhile, in the order from there
			continue
		}
		// A short claim means nothing more is claimable now, unless it ran while the batch
		// before it was handled: that batch's rows were held then, and may be due again now (a
		// late trigger's next occurrence), so one more claim asks after it. In single mode a
		// full claim is followed here, after its admit.
		if next == nil && (full || got.overlapped) {
			next = claim(rest, false)
		}
	}
	return claimed, nil
}

// finishAhead handles the claim a round sent ahead for the next one (roundAhead), if any: the
// Lifecycle calls it when its loop ends, so a Stop leaves no claim of it to expire.
func (c *Coordinator) finishAhead(ctx context.Context) {
	ahead := c.ahead
	c.ahead = nil
	if ahead == nil {
		return
	}
	got := <-ahead
	if got.err != nil {
		return
	}
	c.Stats.Claims.Add(int64(len(got.claims)))
	c.handle(ctx, got.claims)
}

// waiting counts the claimed rows waiting for initialisation.
func waiting(claims []*Claim) (n int) {
	for _, c := range claims {
		if c.CursorMs == nil {
			n++
		}
	}
	return n
}

// initialise runs when a round's claim reaches the rows waiting for initialisation (no cursor:
// new or republished triggers), which are first in the claim's order. Their decision needs no
// Run, so they are claimed InitBatch at a time by one statement, decided in Go, and written back
// by one statement, without spending the round's Budget. It stops when a claim comes back short
// (drained: no such row is claimable now, so the admission claims that follow keep the ADR's
// whole order), when it has initialised InitBudget rows, or when stop closes (drained false: the
// admission claims then start past the rows still waiting, docs/scheduling.md, Initialisation).
// A claim statement's error is returned.
func (c *Coordinator) initialise(ctx context.Context, stop <-chan struct{}) (drained bool, err error) {
	batch := max(c.cfg.InitBatch, 1)
	budget := max(c.cfg.InitBudget, batch)
	for done := 0; done < budget; {
		select {
		case <-stop:
			return false, nil
		default:
		}
		if ctx.Err() != nil {
			return false, nil
		}
		n := min(batch, budget-done)
		start := time.Now()
		claims, err := c.store.ClaimInit(ctx, c.cfg.Owner, c.cfg.Lease, n)
		if err != nil {
			return false, err
		}
		c.Stats.Claims.Add(int64(len(claims)))
		inits := c.initBatch(ctx, claims)
		if c.observe.Init != nil && len(claims) > 0 {
			c.observe.Init(time.Since(start), len(claims), inits)
		}
		done += len(claims)
		if len(claims) < n {
			return true, nil
		}
	}
	return false, nil
}

// initBatch decides claims of uninitialised rows and writes the first cursors back in one
// statement, each row under its own fence. A decision other than init (none is expected for a
// row without a cursor) is ended as handle ends it. It returns how many rows it initialised.
func (c *Coordinator) initBatch(ctx context.Context, claims []*Claim) (initialised int) {
	var (
		items  []InitItem
		others []*Claim
	)
	for _, claim := range claims {
		d, ok := c.decide(claim)
		if ok && d.Kind != schedule.DecisionInit {
			others = append(others, claim) // handle counts its takeover
			continue
		}
		if claim.Takeover {
			c.Stats.Takeovers.Add(1)
			c.claimLog(claim).Info("took over an expired claim")
		}
		if ok {
			items = append(items, InitItem{Claim: claim, First: d.NextFireAtMs})
		}
	}
	if len(others) > 0 {
		c.handle(ctx, others)
	}
	if len(items) == 0 {
		return 0
	}
	written, err := c.store.Initialise(ctx, items)
	if err != nil {
		c.fail("init", err, "rows", len(items))
		return 0
	}
	for i, ok := range written {
		if ok {
			initialised++
			continue
		}
		c.Stats.Races.Add(1)
		c.claimLog(items[i].Claim).Info("init lost its fence (race)")
	}
	c.Stats.Releases.Add(int64(initialised))
	c.Stats.Inits.Add(int64(initialised)) // after Releases (Snapshot)
	if c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.Debug("initialised", "rows", initialised, "races", len(items)-initialised)
	}
	return initialised
}

// claimBatch is one claim statement's outcome: the claims, how many were asked for, whether it
// ran while the batch before it was handled, its duration.
type claimBatch struct {
	claims     []*Claim
	asked      int
	overlapped bool
	carried    bool // sent behind an admit (Store.AdmitThenClaim); took is 0
	took       time.Duration
	err        error
}

// handle decides every claim, ends the ones without a Run on their own, and admits the fired
// ones together.
func (c *Coordinator) handle(ctx context.Context, claims []*Claim) {
	c.handleThen(ctx, claims, nil)
}

// handleThen is handle; when then is not nil and the claims make exactly one admission, the admit
// carries then, the round's next claim (Store.AdmitThenClaim), and handleThen returns that
// claim's result if it ran, or its error if it failed after the admit committed; nil otherwise
// (the admit failed and the server skipped the claim: the round claims on its own).
func (c *Coordinator) handleThen(ctx context.Context, claims []*Claim, then *NextClaim) (carried *claimBatch) {
	var (
		fires     []AdmitItem
		decisions []schedule.Decision
	)
	newRunID := c.newRunID
	if newRunID == nil {
		var ids func() uuid.UUID
		newRunID = func() uuid.UUID { // one source per admission, made at its first Run
			if ids == nil {
				ids = RunIDs()
			}
			return ids()
		}
	}
	for _, claim := range claims {
		if claim.Takeover {
			c.Stats.Takeovers.Add(1)
			c.claimLog(claim).Info("took over an expired claim")
		}
		d, ok := c.decide(claim)
		if !ok {
			continue
		}
		switch d.Kind {
		case schedule.DecisionFire:
			fires = append(fires, AdmitItem{Claim: claim, ScheduledFor: d.ScheduledForMs, Next: d.NextFireAtMs, RunID: newRunID(),
				Missed: d.Missed, LastMissed: d.LastMissedMs})
			decisions = append(decisions, d)
		case schedule.DecisionSkip:
			if c.advanceMissed(ctx, claim, d, &c.Stats.Skips, "skip", "missed", d.Missed) {
				c.missed(claim, d.Missed)
			}
		case schedule.DecisionInit:
			if c.advance(ctx, claim, d.NextFireAtMs, &c.Stats.Releases, "init") {
				c.Stats.Inits.Add(1) // after Releases (Snapshot)
			}
		case schedule.DecisionNotDue:
			c.advance(ctx, claim, d.NextFireAtMs, &c.Stats.Releases, "release") // the unchanged cursor
		default:
			c.fail("decide", fmt.Errorf("unknown decision %q", d.Kind), "project", claim.ProjectID, "trigger", claim.TriggerID,
				"revision", claim.TriggerRevision, "next_fire_at_ms", claim.cursorAttr())
		}
	}
	if len(fires) == 0 {
		return nil
	}
	start := time.Now()
	var results []AdmitResult
	if then != nil && len(fires) == 1 {
		res, claims, ran, claimErr := c.store.AdmitThenClaim(ctx, fires[0], c.cfg.AdmitRetries, *then)
		results = []AdmitResult{res}
		switch {
		case ran:
			carried = &claimBatch{claims: claims, asked: then.N, carried: true}
		case claimErr != nil: // the claim's own failure ends the round as that of a claim sent alone
			carried = &claimBatch{asked: then.N, carried: true, err: fmt.Errorf("claim: %w", claimErr)}
		}
	} else {
		results = c.store.AdmitBatch(ctx, fires, c.cfg.AdmitRetries)
	}
	if c.observe.AdmitCall != nil {
		c.observe.AdmitCall(time.Since(start))
	}
	retries := 0
	for i, r := range results {
		retries = max(retries, r.Retries) // the batch's transaction was retried, not each item
		c.admitted(ctx, fires[i], decisions[i], r)
	}
	c.Stats.Retries.Add(int64(retries))
	return carried
}

// claimLog is the logger of every line about a claim: it names the schedule, its revision, its
// occurrence and (via c.log) the owner. It is built only for a line that is written: a burst
// claims thousands of rows a second, and a logger's attributes are formatted when it is built.
func (c *Coordinator) claimLog(claim *Claim) *slog.Logger {
	return c.log.With("project", claim.ProjectID, "trigger", claim.TriggerID, "revision", claim.TriggerRevision,
		"next_fire_at_ms", claim.cursorAttr())
}

// decide parses the claim's schedule and runs the pure decision. A published spec, zone or
// policy that no longer parses is corrupt: it fails closed, and the claim is left to expire,
// which also spaces out the retries.
func (c *Coordinator) decide(claim *Claim) (schedule.Decision, bool) {
	sched, err := c.schedule(claim.CronSpec, claim.TimeZone)
	if err != nil {
		c.corrupt()
		c.claimLog(claim).Error("unusable cron spec or time zone; claim left to expire", "err", err)
		return schedule.Decision{}, false
	}
	policy, err := schedule.ParseMisfirePolicy(claim.MisfirePolicy)
	if err != nil {
		c.corrupt()
		c.claimLog(claim).Error("unusable misfire policy; claim left to expire", "err", err)
		return schedule.Decision{}, false
	}
	// The observation is the claim's ClaimedAtMs, the clock's lower bound the claim wrote
	// (ADR-0107), so the admit can verify the decision against the row itself.
	return schedule.Decide(sched, policy, claim.MisfireGraceMs, claim.CursorMs, claim.ClaimedAtMs), true
}

func (c *Coordinator) admitted(ctx context.Context, it AdmitItem, d schedule.Decision, r AdmitResult) {
	log := func() *slog.Logger { return c.claimLog(it.Claim).With("scheduled_for_ms", it.ScheduledFor) }
	switch {
	case r.Err != nil:
		c.fail("admit", r.Err, "project", it.Claim.ProjectID, "trigger", it.Claim.TriggerID, "revision", it.Claim.TriggerRevision,
			"scheduled_for_ms", it.ScheduledFor)
	case r.Outcome == Written:
		c.Stats.Admits.Add(1)
		c.missed(it.Claim, d.Missed)
		lag := time.Duration(r.AdmittedAtMs-it.ScheduledFor) * time.Millisecond
		if c.observe.Admitted != nil {
			c.observe.Admitted(lag)
		}
		if c.log.Enabled(ctx, slog.LevelDebug) {
			log().Debug("admitted", "run_id", r.RunID, "lag_ms", lag.Milliseconds(), "catch_up", d.CatchUp, "missed", d.Missed, "committed_ms", r.CommittedAtMs)
		}
	case r.Outcome == Race:
		c.Stats.Races.Add(1)
		log().Info("admit lost its fence (race)")
	case r.Outcome == Stale:
		c.Stats.Stale.Add(1)
		log().Info("admit refused: a revision changed since the claim; claim left to expire")
	case r.Outcome == Corrupt:
		c.corrupt()
		log().Error("admit refused: a content or execution digest does not match its row; claim left to expire")
	}
}

// missed hands the occurrences a written decision passed over to the Observer.
func (c *Coordinator) missed(claim *Claim, n int64) {
	if n > 0 && c.observe.Missed != nil {
		c.observe.Missed(claim.ProjectID, claim.MisfirePolicy, n)
	}
}

// advance ends claim with next as its cursor and counts it in counter; it reports whether it wrote.
func (c *Coordinator) advance(ctx context.Context, claim *Claim, next int64, counter *atomic.Int64, what string, attrs ...any) bool {
	return c.advanceMissed(ctx, claim, schedule.Decision{NextFireAtMs: next}, counter, what, attrs...)
}

// advanceMissed is advance to d.NextFireAtMs that also counts d's missed occurrences into the
// row, in the same statement.
func (c *Coordinator) advanceMissed(ctx context.Context, claim *Claim, d schedule.Decision, counter *atomic.Int64, what string, attrs ...any) bool {
	next := d.NextFireAtMs
	outcome, err := c.store.AdvanceMissed(ctx, claim, next, d.Missed, d.LastMissedMs)
	switch {
	case err != nil:
		c.fail(what, err, "project", claim.ProjectID, "trigger", claim.TriggerID, "revision", claim.TriggerRevision,
			"next_fire_at_ms", claim.cursorAttr())
	case outcome == Race:
		c.Stats.Races.Add(1)
		c.claimLog(claim).Info(what + " lost its fence (race)")
	default:
		counter.Add(1)
		if c.log.Enabled(ctx, slog.LevelDebug) {
			c.claimLog(claim).Debug(what, append(attrs, "advanced_to_ms", next)...) // the logger names the old cursor
		}
		return true
	}
	return false
}

func (c *Coordinator) fail(what string, err error, attrs ...any) {
	if errors.Is(err, context.Canceled) {
		return // stopping
	}
	c.Stats.Errors.Add(1)
	if c.observe.Error != nil {
		c.observe.Error(what)
	}
	c.log.Error(what+" failed", append(attrs, "err", err)...)
}

// claimFailed counts a claim statement's error, unless it is a cancellation (stopping): nil then.
func (c *Coordinator) claimFailed(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	c.Stats.Errors.Add(1)
	if c.observe.Error != nil {
		c.observe.Error("claim")
	}
	return err
}

func (c *Coordinator) corrupt() {
	c.Stats.Corrupt.Add(1)
	if c.observe.Error != nil {
		c.observe.Error("corrupt")
	}
}

// schedule parses (spec, zone) once per coordinator.
func (c *Coordinator) schedule(spec, zone string) (*schedule.Schedule, error) {
	key := [2]string{spec, zone}
	c.schedMu.Lock()
	defer c.schedMu.Unlock()
	if s, ok := c.schedules[key]; ok {
		return s, nil
	}
	s, err := schedule.ParseSchedule(spec, zone)
	if err != nil {
		return nil, err
	}
	if len(c.schedules) >= 10000 { // bound the cache; parsing again is cheap
		clear(c.schedules)
	}
	c.schedules[key] = s
	return s, nil
}
