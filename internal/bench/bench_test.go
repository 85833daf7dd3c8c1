package bench

import (
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// The bench's bookkeeping, not its speed: every trigger of a backlog is admitted exactly once,
// the report's counts agree with the database, and both replica kinds report what they measure.
func TestBacklogReportsWhatTheDatabaseHolds(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "qlsched")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/qlsched").CombinedOutput(); err != nil {
		t.Fatalf("build qlsched: %v\n%s", err, out)
	}
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
				t.Errorf("admits %d, runs %d of %d triggers, duplicates %d; want admits = runs ≥ 300, 300 triggers, 0 duplicates",
					rep.Admits, runs, triggers, rep.Duplicates)
			case rep.CeilingPerSecond <= 0 || rep.AdmitsPerSecond <= 0 || rep.Ratio <= 0:
				t.Errorf("ceiling %.0f/s, admits %.0f/s, ratio %.2f: want all measured", rep.CeilingPerSecond, rep.AdmitsPerSecond, rep.Ratio)
			case (tc.batch == 1) != (rep.CeilingAfterPerSecond > 0) ||
				tc.batch == 1 && rep.CeilingPerSecond != (rep.CeilingBeforePerSecond+rep.CeilingAfterPerSecond)/2:
				t.Errorf("batch %d: ceiling %.0f/s, before %.0f/s, after %.0f/s: want the mean of both phases in single mode only",
					tc.batch, rep.CeilingPerSecond, rep.CeilingBeforePerSecond, rep.CeilingAfterPerSecond)
			case (tc.batch > 1) != (rep.BatchCeilingPerSecond > 0 && rep.BatchRatio > 0):
				t.Errorf("batch %d: batch ceiling %.0f/s, ratio %.2f: want measured in batch mode only", tc.batch, rep.BatchCeilingPerSecond, rep.BatchRatio)
			case rep.ClaimP99Ms <= 0 || rep.RSSMiB <= 0 || rep.Replica != map[bool]string{false: "in-process", true: "process"}[tc.processes]:
				t.Errorf("claim p99 %.2fms, rss %.1f MiB, replica kind %q: want measured", rep.ClaimP99Ms, rep.RSSMiB, rep.Replica)
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
