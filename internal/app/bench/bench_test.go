package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/testbin"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// The bench's bookkeeping, not its speed: every trigger of a backlog is admitted exactly once,
// the report's counts agree with the database, and both replica kinds report what they measure.
func TestBacklogReportsWhatTheDatabaseHolds(t *testing.T) {
	bin := testbin.Command(t, "qlsched")
	for _, tc := range []struct {
		name      string
		processes bool
		batch     int
	}{{"in-process single", false, 1}, {"processes single", true, 1}, {"processes batch", true, 16}} {
		t.Run(tc.name, func(t *testing.T) {
			d := testpg.New(t)
			cfg := Config{URL: d.URL(""), Scenario: Backlog, Triggers: 300, Every: "minute", Replicas: 2,
				Duration: time.Minute, Budget: 64, Cadence: 10 * time.Millisecond, Batch: tc.batch,
				Processes: tc.processes, Exe: bin, RuntimeURL: d.URL("ql_runtime")}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			rep, err := Run(context.Background(), cfg, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			// A minute boundary during the run makes every trigger due once more, so the replicas
			// may admit some next occurrences too before they stop: the report must agree with the
			// database, and every trigger's backlog occurrence must be there.
			var runs, triggers int64
			if err := d.Pool(t, "").QueryRow(context.Background(),
				"SELECT count(*), count(DISTINCT trigger_id) FROM control_core.runs WHERE scheduled_for_ms < $1", ceilingEpochMs).Scan(&runs, &triggers); err != nil {
				t.Fatal(err)
			}
			switch {
			case rep.Admits != runs || triggers != 300 || rep.Admits < 300 || rep.Duplicates != 0:
				// errors, races and retries say whether claims were left to expire (a lease outlives
				// the run) while other triggers went on to their next minute's occurrence
				t.Errorf("admits %d, runs %d of %d triggers, duplicates %d (errors %d, races %d, retries %d); want admits = runs ≥ 300, 300 triggers, 0 duplicates",
					rep.Admits, runs, triggers, rep.Duplicates, rep.Errors, rep.Races, rep.Retries)
			case rep.CeilingPerSecond <= 0 || rep.AdmitsPerSecond <= 0 || rep.Ratio <= 0:
				t.Errorf("ceiling %.0f/s, admits %.0f/s, ratio %.2f: want all measured", rep.CeilingPerSecond, rep.AdmitsPerSecond, rep.Ratio)
			case (tc.batch == 1) != (rep.CeilingAfterPerSecond > 0) ||
				tc.batch == 1 && rep.CeilingPerSecond != (rep.CeilingBeforePerSecond+rep.CeilingAfterPerSecond)/2:
				t.Errorf("batch %d: ceiling %.0f/s, before %.0f/s, after %.0f/s: want the mean of both phases in single mode only",
					tc.batch, rep.CeilingPerSecond, rep.CeilingBeforePerSecond, rep.CeilingAfterPerSecond)
			case (tc.batch > 1) != (rep.BatchCeilingPerSecond > 0 && rep.BatchRatio > 0):
				t.Errorf("batch %d: batch ceiling %.0f/s, ratio %.2f: want measured in batch mode only", tc.batch, rep.BatchCeilingPerSecond, rep.BatchRatio)
			case rep.ClaimP99Ms <= 0 || rep.AnonRSSMiB <= 0 || rep.AnonRSSMiB >= rep.RSSMiB || rep.Replica != map[bool]string{false: "in-process", true: "process"}[tc.processes]:
				t.Errorf("claim p99 %.2fms, rss %.1f MiB (anonymous %.1f), replica kind %q: want measured, the anonymous part below the whole",
					rep.ClaimP99Ms, rep.RSSMiB, rep.AnonRSSMiB, rep.Replica)
			}
		})
	}
}

func TestProcessesNeedARuntimeURLWithADatabaseURL(t *testing.T) {
	cfg := Config{URL: "postgres://x@127.0.0.1:1/x", Scenario: Backlog, Triggers: 1, Every: "minute", Replicas: 1,
		Duration: time.Second, Budget: 1, Cadence: time.Second, Batch: 1, Processes: true}
	if err := cfg.Validate(); err == nil {
		t.Error("--processes with --database-url and no --runtime-url validated")
	}
}

// The burst scenario's bookkeeping: one burst of every trigger at a minute boundary, admitted
// exactly once, with its figures and the batch ceiling present. Not a timing assertion.
func TestBurstReportsEachBurst(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 16} {
		t.Run(fmt.Sprintf("batch %d", batch), func(t *testing.T) {
			t.Parallel() // each waits for a minute boundary
			cfg := Config{URL: testpg.New(t).URL(""), Scenario: Burst, Triggers: 200, Every: "minute", Replicas: 2, Bursts: 1,
				Duration: time.Minute, Budget: 64, Cadence: 10 * time.Millisecond, Batch: batch}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			rep, err := Run(context.Background(), cfg, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Bursts) != 1 {
				t.Fatalf("%d bursts reported, want 1", len(rep.Bursts))
			}
			b := rep.Bursts[0]
			wantCeilingBatch := batch
			if batch == 1 {
				wantCeilingBatch = DefaultBurstCeilingBatch
			}
			switch {
			case rep.Duplicates != 0 || b.Admitted != 200 || b.Missing != 0:
				t.Errorf("burst admitted %d, missing %d, duplicates %d; want 200, 0, 0", b.Admitted, b.Missing, rep.Duplicates)
			case b.ScheduledAt.Second() != 0 || b.ScheduledAt.Nanosecond() != 0:
				t.Errorf("burst at %s, want a minute boundary", b.ScheduledAt)
			case b.DrainSeconds <= 0 || b.PerSecond <= 0 || b.LagMaxMs < b.LagP99Ms || b.LagP99Ms < b.LagP50Ms:
				t.Errorf("drain %.3fs, %.0f/s, lag p50 %.0f p99 %.0f max %.0f ms: want measured and ordered",
					b.DrainSeconds, b.PerSecond, b.LagP50Ms, b.LagP99Ms, b.LagMaxMs)
			case rep.BatchCeilingPerSecond <= 0 || b.Ratio <= 0 || rep.CeilingBatch != wantCeilingBatch:
				t.Errorf("batch ceiling %.0f/s of %d rows (want %d), ratio %.2f: want measured", rep.BatchCeilingPerSecond, rep.CeilingBatch, wantCeilingBatch, b.Ratio)
			case rep.Rounds <= 0:
				t.Errorf("rounds %d: want counted", rep.Rounds)
			}
		})
	}
}

func TestBurstValidation(t *testing.T) {
	base := Config{Scenario: Burst, Triggers: 1, Every: "minute", Replicas: 1, Bursts: 1,
		Duration: time.Second, Budget: 1, Cadence: time.Second, Batch: 1}
	for _, tc := range []struct {
		name string
		mut  func(*Config)
		want string
	}{
		{"no bursts", func(c *Config) { c.Bursts = 0 }, "--bursts"},
		{"eleven bursts", func(c *Config) { c.Bursts = 11 }, "--bursts"},
		{"processes", func(c *Config) { c.Processes = true }, "--processes"},
		{"every second", func(c *Config) { c.Every = "second" }, "--every"},
		{"profile", func(c *Config) { c.CPUProfileDir = t.TempDir() }, "--cpu-profile with --scenario burst"},
	} {
		c := base
		tc.mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error naming %s", tc.name, err, tc.want)
		}
	}
	if err := base.Validate(); err != nil {
		t.Errorf("a valid burst config: %v", err)
	}
}

func TestCPUProfileValidation(t *testing.T) {
	base := Config{Scenario: Backlog, Triggers: 1, Every: "minute", Replicas: 1,
		Duration: time.Second, Budget: 1, Cadence: time.Second, Batch: 1}
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		dir, want string // want "": valid
	}{
		{t.TempDir(), ""},
		{missing, "--cpu-profile " + missing + ": want an existing directory"},
	} {
		c := base
		c.CPUProfileDir = tc.dir
		err := c.Validate()
		if (tc.want == "" && err != nil) || (tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want))) {
			t.Errorf("--cpu-profile %s: %v; want %q", tc.dir, err, tc.want)
		}
	}
}
