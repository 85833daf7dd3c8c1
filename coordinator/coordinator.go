package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Stats are the coordinator's counters, safe to read while it runs.
type Stats struct {
	Rounds   atomic.Int64
	Claims   atomic.Int64 // schedule rows claimed
	Admits   atomic.Int64 // Runs admitted
	Skips    atomic.Int64 // occurrences passed over by the skip policy (claims ended by a skip)
	Releases atomic.Int64 // claims ended without a Run: initialisation or not yet due
	Races    atomic.Int64 // fenced writes that found the fence or the schedule changed
	Stale    atomic.Int64 // admits refused because a revision changed since the claim
	Corrupt  atomic.Int64 // admits refused because a digest no longer matches its row
	Retries  atomic.Int64 // serialization failures retried
	Errors   atomic.Int64 // anything else that went wrong (logged)
	// Takeovers counts claims that replaced an expired claim of some replica (this one included).
	Takeovers atomic.Int64
}

// Snapshot is a plain copy of Stats.
type Snapshot struct {
	Rounds, Claims, Admits, Skips, Releases, Races, Stale, Corrupt, Retries, Errors, Takeovers int64
}

// Snapshot copies the counters.
func (s *Stats) Snapshot() Snapshot {
	return Snapshot{s.Rounds.Load(), s.Claims.Load(), s.Admits.Load(), s.Skips.Load(), s.Releases.Load(),
		s.Races.Load(), s.Stale.Load(), s.Corrupt.Load(), s.Retries.Load(), s.Errors.Load(), s.Takeovers.Load()}
}

// Observer receives measurements as they happen (for metrics); nil fields are skipped. Set it
// before the lifecycle starts.
type Observer struct {
	Round func(d time.Duration, claimed int)
	Claim func(d time.Duration)
	// Admitted gets the admission lag: the admit's database time minus the scheduled time.
	Admitted func(lag time.Duration)
	// AdmitCall gets the duration of every admit call, whatever its outcome (retries included).
	AdmitCall func(d time.Duration)
	// Error gets the class of a counted error: claim, admit, init, release, skip, decide, corrupt.
	Error func(class string)
}

// Coordinator runs rounds for one replica.
type Coordinator struct {
	// Observe receives measurements.
	Observe Observer
	cfg     Config
	store   *Store
	log     *slog.Logger
	Stats   Stats
	// NewRunID allocates a Run identity; it is called only for an admit.
	NewRunID func() uuid.UUID

	schedMu   sync.Mutex
	schedules map[[2]string]*Schedule // parsed (spec, zone) pairs
}

// New returns a coordinator; cfg must have passed Validate. log is the low-sensitivity
// diagnostic sink: it receives identifiers and outcomes, never DSNs, passwords or payloads.
func New(cfg Config, store *Store, log *slog.Logger) *Coordinator {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Coordinator{cfg: cfg, store: store, log: log.With("owner", cfg.Owner), NewRunID: uuid.New,
		schedules: map[[2]string]*Schedule{}}
}

// Round claims at most Budget rows, one at a time, and ends each claim under its fence. It
// returns how many rows it claimed. Claiming stops early when no row is claimable or when stop
// is closed (the claim in hand is still finished). Errors are counted and logged, never returned
// to the caller's loop.
func (c *Coordinator) Round(ctx context.Context, stop <-chan struct{}) (claimed int) {
	c.Stats.Rounds.Add(1)
	if c.Observe.Round != nil {
		start := time.Now()
		defer func() { c.Observe.Round(time.Since(start), claimed) }()
	}
	for claimed < c.cfg.Budget {
		select {
		case <-stop:
			return claimed
		default:
		}
		if ctx.Err() != nil {
			return claimed
		}
		start := time.Now()
		claim, err := c.store.Claim(ctx, c.cfg.Owner, c.cfg.Lease)
		if c.Observe.Claim != nil && err == nil {
			c.Observe.Claim(time.Since(start))
		}
		if err != nil {
			c.fail("claim", err)
			return claimed
		}
		if claim == nil {
			return claimed
		}
		claimed++
		c.Stats.Claims.Add(1)
		if claim.Takeover {
			c.Stats.Takeovers.Add(1)
			c.log.Info("took over an expired claim", "project", claim.ProjectID, "trigger", claim.TriggerID,
				"revision", claim.TriggerRevision, "next_fire_at_ms", claim.NextFireAtMs.Int64)
		}
		c.handle(ctx, claim)
	}
	return claimed
}

func (c *Coordinator) handle(ctx context.Context, claim *Claim) {
	// every line about a schedule names it, its revision, its occurrence and (via c.log) the owner
	log := c.log.With("project", claim.ProjectID, "trigger", claim.TriggerID, "revision", claim.TriggerRevision,
		"next_fire_at_ms", claim.NextFireAtMs.Int64)
	sched, err := c.schedule(claim.CronSpec, claim.Timezone)
	if err != nil {
		// A published spec that no longer parses is corrupt: fail closed. The claim is left to
		// expire, which also spaces out the retries.
		c.corrupt()
		log.Error("unusable cron spec or time zone; claim left to expire", "err", err)
		return
	}
	policy, err := ParseMisfirePolicy(claim.MisfirePolicy)
	if err != nil {
		c.corrupt()
		log.Error("unusable misfire policy; claim left to expire", "err", err)
		return
	}
	d := Decide(sched, policy, cursorOf(claim), claim.NowMs)
	switch d.Kind {
	case DecisionFire:
		c.admit(ctx, log, claim, d)
	case DecisionSkip:
		c.advance(ctx, log, claim, d.NextFireAtMs, &c.Stats.Skips, "skip", "missed", d.Missed)
	case DecisionInit:
		c.advance(ctx, log, claim, d.NextFireAtMs, &c.Stats.Releases, "init")
	case DecisionNotDue:
		c.advance(ctx, log, claim, claim.NextFireAtMs.Int64, &c.Stats.Releases, "release")
	default:
		c.fail("decide", fmt.Errorf("unknown decision %q for %s/%s", d.Kind, claim.ProjectID, claim.TriggerID))
	}
}

func (c *Coordinator) admit(ctx context.Context, log *slog.Logger, claim *Claim, d Decision) {
	log = log.With("scheduled_for_ms", d.ScheduledForMs)
	start := time.Now()
	admitted, outcome, err := c.store.Admit(ctx, claim, d.ScheduledForMs, d.NextFireAtMs, c.NewRunID(), c.cfg.AdmitRetries)
	if c.Observe.AdmitCall != nil {
		c.Observe.AdmitCall(time.Since(start))
	}
	c.Stats.Retries.Add(int64(admitted.Retries))
	switch {
	case err != nil:
		c.fail("admit", err, "project", claim.ProjectID, "trigger", claim.TriggerID, "scheduled_for_ms", d.ScheduledForMs)
	case outcome == Written:
		c.Stats.Admits.Add(1)
		lag := time.Duration(admitted.AdmittedAtMs-d.ScheduledForMs) * time.Millisecond
		if c.Observe.Admitted != nil {
			c.Observe.Admitted(lag)
		}
		log.Debug("admitted", "run_id", admitted.RunID, "lag_ms", lag.Milliseconds(), "catch_up", d.CatchUp)
	case outcome == Race:
		c.Stats.Races.Add(1)
		log.Info("admit lost its fence (race)")
	case outcome == Stale:
		c.Stats.Stale.Add(1)
		log.Info("admit refused: a revision changed since the claim; claim left to expire")
	case outcome == Corrupt:
		c.corrupt()
		log.Error("admit refused: a content or execution digest does not match its row; claim left to expire")
	}
}

func (c *Coordinator) advance(ctx context.Context, log *slog.Logger, claim *Claim, next int64, counter *atomic.Int64, what string, attrs ...any) {
	outcome, err := c.store.Advance(ctx, claim, next)
	switch {
	case err != nil:
		c.fail(what, err, "project", claim.ProjectID, "trigger", claim.TriggerID)
	case outcome == Race:
		c.Stats.Races.Add(1)
		log.Info(what + " lost its fence (race)")
	default:
		counter.Add(1)
		log.Debug(what, append(attrs, "next_fire_at_ms", next)...)
	}
}

func (c *Coordinator) fail(what string, err error, attrs ...any) {
	if errors.Is(err, context.Canceled) {
		return // stopping
	}
	c.Stats.Errors.Add(1)
	if c.Observe.Error != nil {
		c.Observe.Error(what)
	}
	c.log.Error(what+" failed", append(attrs, "err", err)...)
}

func (c *Coordinator) corrupt() {
	c.Stats.Corrupt.Add(1)
	if c.Observe.Error != nil {
		c.Observe.Error("corrupt")
	}
}

// schedule parses (spec, zone) once per coordinator.
func (c *Coordinator) schedule(spec, zone string) (*Schedule, error) {
	key := [2]string{spec, zone}
	c.schedMu.Lock()
	defer c.schedMu.Unlock()
	if s, ok := c.schedules[key]; ok {
		return s, nil
	}
	s, err := ParseSchedule(spec, zone)
	if err != nil {
		return nil, err
	}
	if len(c.schedules) >= 10000 { // bound the cache; parsing again is cheap
		clear(c.schedules)
	}
	c.schedules[key] = s
	return s, nil
}
