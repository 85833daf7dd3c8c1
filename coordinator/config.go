package coordinator

import (
	"fmt"
	"regexp"
	"time"

	"github.com/qlcontrol/controlcore/internal/base/limits"
)

// Defaults and bounds of the ADR's bounded lifecycle.
const (
	DefaultBudget = 16
	MaxBudget     = 256 // hard cap of claims per round
	DefaultLease  = 30 * time.Second
	MinLease      = time.Second
	// MaxLease bounds how long a replica that died holding claims keeps their triggers from
	// being taken over. A lease only has to outlive one round (at most MaxCadence apart, each
	// statement bounded by the statement timeout); anything beyond 10 minutes only delays
	// recovery, and an unbounded one could hold a claim for years.
	MaxLease            = 10 * time.Minute
	DefaultCadence      = time.Second
	MinCadence          = 10 * time.Millisecond
	MaxCadence          = time.Minute
	DefaultDrainTimeout = 10 * time.Second
	MinDrainTimeout     = time.Second
	MaxDrainTimeout     = 10 * time.Minute
	DefaultAdmitRetries = 5 // serialization failures retried per admit
	MaxAdmitRetries     = 20
	// DefaultBackoffCap bounds the wait after rounds that failed in a row (cadence, doubling
	// per failure). A failed round holds no claim, so waiting delays no other replica; the cap
	// is how late a replica resumes after the fault is repaired, and a fleet against a read-only
	// or locked-out database sends one claim per replica per cap. The default lease: 30 s.
	DefaultBackoffCap = 30 * time.Second
	MaxBackoffCap     = 10 * time.Minute
	// DefaultNotReadyAfter failed rounds in a row turn the replica not ready: one failure (a
	// terminated backend, a failover) is routine and the next round succeeds; three in a row,
	// about 3 s at the default cadence, are a fault that outlasts a round.
	DefaultNotReadyAfter = 3
	MaxNotReadyAfter     = 100
	// DefaultInitBatch rows waiting for initialisation are claimed by one statement and written
	// back by one (docs/scheduling.md, Initialisation); DefaultInitBudget of them at most per
	// round, after which the round claims due rows past the ones still waiting.
	DefaultInitBatch  = 1000
	MaxInitBatch      = 10_000
	DefaultInitBudget = 2000
	MaxInitBudget     = 100_000
)

// Config bounds one replica's coordinator. Validate runs before any connection is opened.
type Config struct {
	Owner string // claim_owner written into the fence; unique per replica
	// Budget bounds a round's admission claims, 1 … 256: the rows claimed to be decided and
	// admitted (or skipped, or released). Rows initialised in bulk (InitBatch, InitBudget) do not
	// spend it; a row waiting for initialisation that the admission claim takes does.
	Budget       int
	Lease        time.Duration // claim lease, 1 s … 10 min and ≥ 2 × Cadence
	Cadence      time.Duration // time between round starts, 10 ms … 1 min
	DrainTimeout time.Duration // how long Stop waits for the current round, 1 s … 10 min
	AdmitRetries int           // serialization-failure retries per admit, 0 … 20
	// AdmitBatch is how many rows one claim statement takes and one SERIALIZABLE transaction
	// admits (each row fenced and verified on its own); 1, the default, is the ADR's one-row
	// claim. 1 … Budget.
	AdmitBatch int
	// BackoffCap is the most the lifecycle waits after a failed round: the wait starts at
	// Cadence and doubles with each failure in a row. Cadence … 10 min.
	BackoffCap time.Duration
	// NotReadyAfter is how many rounds must fail in a row before the lifecycle reports the
	// replica not ready (ready again after the first round that succeeds). 1 … 100.
	NotReadyAfter int
	// InitBatch is how many rows waiting for initialisation (a new or republished trigger, no
	// cursor yet) one statement claims and one statement writes back, 1 … 10,000.
	InitBatch int
	// InitBudget bounds the rows a round initialises, InitBatch … 100,000: once a round has
	// initialised this many, it claims its due rows past the ones still waiting, so a mass publish
	// never keeps a running trigger waiting longer than one round's initialisation.
	InitBudget int
}

func (c Config) batch() int { return max(c.AdmitBatch, 1) }

// DefaultConfig returns the ADR's defaults for owner.
func DefaultConfig(owner string) Config {
	return Config{Owner: owner, Budget: DefaultBudget, Lease: DefaultLease, Cadence: DefaultCadence,
		DrainTimeout: DefaultDrainTimeout, AdmitRetries: DefaultAdmitRetries, AdmitBatch: 1,
		BackoffCap: DefaultBackoffCap, NotReadyAfter: DefaultNotReadyAfter,
		InitBatch: DefaultInitBatch, InitBudget: DefaultInitBudget}
}

// ownerPattern: trigger_schedules.claim_owner holds at most limits.MaxOwner characters.
var ownerPattern = regexp.MustCompile(fmt.Sprintf(`^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,%d}$`, limits.MaxOwner-1))

// ConfigError names the Config field that is out of bounds, its value and what is allowed. It
// speaks of fields, not of command-line flags: a command maps Field to its own flag name.
type ConfigError struct {
	Field string // the Config field: "Budget", "Lease" …
	Value string // the value as given
	Want  string // the allowed range, in words
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("coordinator config %s %s: want %s", e.Field, e.Value, e.Want)
}

// Validate checks every bound.
func (c Config) Validate() error {
	switch {
	case !ownerPattern.MatchString(c.Owner):
		return &ConfigError{"Owner", fmt.Sprintf("%q", c.Owner), fmt.Sprintf("1 to %d characters of [A-Za-z0-9_.:@-], starting with a letter or digit", limits.MaxOwner)}
	case c.Budget < 1 || c.Budget > MaxBudget:
		return &ConfigError{"Budget", fmt.Sprint(c.Budget), fmt.Sprintf("1 … %d claims per round", MaxBudget)}
	case c.Cadence < MinCadence || c.Cadence > MaxCadence:
		return &ConfigError{"Cadence", c.Cadence.String(), fmt.Sprintf("%s … %s", MinCadence, MaxCadence)}
	case c.Lease < MinLease || c.Lease > MaxLease || c.Lease < 2*c.Cadence:
		return &ConfigError{"Lease", c.Lease.String(), fmt.Sprintf("%s … %s and at least 2 × cadence (%s)", MinLease, MaxLease, 2*c.Cadence)}
	case c.Lease%time.Millisecond != 0:
		return &ConfigError{"Lease", c.Lease.String(), "whole milliseconds"}
	case c.DrainTimeout < MinDrainTimeout || c.DrainTimeout > MaxDrainTimeout:
		return &ConfigError{"DrainTimeout", c.DrainTimeout.String(), fmt.Sprintf("%s … %s", MinDrainTimeout, MaxDrainTimeout)}
	case c.AdmitBatch < 1 || c.AdmitBatch > c.Budget:
		return &ConfigError{"AdmitBatch", fmt.Sprint(c.AdmitBatch), fmt.Sprintf("1 … budget (%d)", c.Budget)}
	case c.AdmitRetries < 0 || c.AdmitRetries > MaxAdmitRetries:
		return &ConfigError{"AdmitRetries", fmt.Sprint(c.AdmitRetries), fmt.Sprintf("0 … %d", MaxAdmitRetries)}
	case c.BackoffCap < c.Cadence || c.BackoffCap > MaxBackoffCap:
		return &ConfigError{"BackoffCap", c.BackoffCap.String(), fmt.Sprintf("cadence (%s) … %s", c.Cadence, MaxBackoffCap)}
	case c.NotReadyAfter < 1 || c.NotReadyAfter > MaxNotReadyAfter:
		return &ConfigError{"NotReadyAfter", fmt.Sprint(c.NotReadyAfter), fmt.Sprintf("1 … %d failed rounds in a row", MaxNotReadyAfter)}
	case c.InitBatch < 1 || c.InitBatch > MaxInitBatch:
		return &ConfigError{"InitBatch", fmt.Sprint(c.InitBatch), fmt.Sprintf("1 … %d rows per statement", MaxInitBatch)}
	case c.InitBudget < c.InitBatch || c.InitBudget > MaxInitBudget:
		return &ConfigError{"InitBudget", fmt.Sprint(c.InitBudget), fmt.Sprintf("init batch (%d) … %d rows per round", c.InitBatch, MaxInitBudget)}
	}
	return nil
}
