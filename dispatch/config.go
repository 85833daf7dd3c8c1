package dispatch

import (
	"fmt"
	"time"
)

// Config holds a dispatcher's timings and bounds (qlsched dispatch flags). The zero value of a
// field means its default; Validate checks the result before any connection.
type Config struct {
	OfferTTL          time.Duration // an unacked offer expires (X) after this: 1 s…5 min, default 10 s
	LeaseTTL          time.Duration // lease and session TTL: 5 s…1 h and ≥ 3 × SweepInterval, default 30 s
	PollMaxWait       time.Duration // longest long poll: 1 s…60 s, default 25 s
	PlacementInterval time.Duration // probe for ready work while polls wait: 5 ms…1 s, default 25 ms
	SweepInterval     time.Duration // sweep period: 100 ms…1 min, default 1 s
	SweepBatch        int           // rows per sweep statement: 1…1024, default 128
	MaxProjects       int           // projects per placement read: 1…1024, default 64
	ScanCap           int           // ready Runs read per project: 1…1024, default 64
	DrainTimeout      time.Duration // bound on a drain: 1 s…10 min, default 10 s
}

// Defaults.
const (
	DefaultOfferTTL          = 10 * time.Second
	DefaultLeaseTTL          = 30 * time.Second
	DefaultPollMaxWait       = 25 * time.Second
	DefaultPlacementInterval = 25 * time.Millisecond
	DefaultSweepInterval     = time.Second
	DefaultSweepBatch        = 128
	DefaultMaxProjects       = 64
	DefaultScanCap           = 64
	DefaultDrainTimeout      = 10 * time.Second
)

// ConfigError names the field that is out of bounds; cmd/ maps Field to its flag.
type ConfigError struct {
	Field string
	Value string
	Want  string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("dispatch config: %s = %s: want %s", e.Field, e.Value, e.Want)
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	setD := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	setI := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	setD(&c.OfferTTL, DefaultOfferTTL)
	setD(&c.LeaseTTL, DefaultLeaseTTL)
	setD(&c.PollMaxWait, DefaultPollMaxWait)
	setD(&c.PlacementInterval, DefaultPlacementInterval)
	setD(&c.SweepInterval, DefaultSweepInterval)
	setI(&c.SweepBatch, DefaultSweepBatch)
	setI(&c.MaxProjects, DefaultMaxProjects)
	setI(&c.ScanCap, DefaultScanCap)
	setD(&c.DrainTimeout, DefaultDrainTimeout)
	return c
}

// Validate checks c (after WithDefaults) against the bounds of docs/dispatch.md.
func (c Config) Validate() error {
	durs := []struct {
		field    string
		v        time.Duration
		min, max time.Duration
	}{
		{"OfferTTL", c.OfferTTL, time.Second, 5 * time.Minute},
		{"LeaseTTL", c.LeaseTTL, 5 * time.Second, time.Hour},
		{"PollMaxWait", c.PollMaxWait, time.Second, time.Minute},
		{"PlacementInterval", c.PlacementInterval, 5 * time.Millisecond, time.Second},
		{"SweepInterval", c.SweepInterval, 100 * time.Millisecond, time.Minute},
		{"DrainTimeout", c.DrainTimeout, time.Second, 10 * time.Minute},
	}
	for _, d := range durs {
		if d.v < d.min || d.v > d.max {
			return &ConfigError{Field: d.field, Value: d.v.String(), Want: fmt.Sprintf("%s…%s", d.min, d.max)}
		}
	}
	ints := []struct {
		field string
		v     int
	}{{"SweepBatch", c.SweepBatch}, {"MaxProjects", c.MaxProjects}, {"ScanCap", c.ScanCap}}
	for _, i := range ints {
		if i.v < 1 || i.v > 1024 {
			return &ConfigError{Field: i.field, Value: fmt.Sprint(i.v), Want: "1…1024"}
		}
	}
	// A lease must outlive three sweeps, or expiry would be judged later than a third of its TTL.
	if c.LeaseTTL < 3*c.SweepInterval {
		return &ConfigError{Field: "LeaseTTL", Value: c.LeaseTTL.String(), Want: fmt.Sprintf("≥ 3 × SweepInterval (%s)", 3*c.SweepInterval)}
	}
	return nil
}

// HeartbeatInterval is a third of the lease TTL: two heartbeats may be lost before expiry.
func (c Config) HeartbeatInterval() time.Duration { return c.LeaseTTL / 3 }
