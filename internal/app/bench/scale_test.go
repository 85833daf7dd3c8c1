package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/app/console"
	"github.com/qlcontrol/controlcore/internal/app/metrics"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testbin"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// The scale scenario's reads at CI size: the same data set (triggers through apply, history
// set-based) at two history sizes, small and 8×, and each read's database work (blocks touched:
// pg_stat_database blks_hit + blks_read of the test's database, which nothing else uses, around
// the read) at both. A read whose work grows with history fails, naming itself. No timing is
// asserted: this machine's timings are too noisy for CI.
//
// Grows: its blocks grew by more than a quarter of the pages the runs table grew by. A read that
// walks one project's Runs (of two) grows by half of them, one that walks every Run by all of
// them and more; a bounded read grows by at most a level of each index it descends per row shown
// (tens of blocks), and its first run per connection reads the catalogs (about 700 blocks, the
// same at both sizes).
func TestScaleReadsDoNotGrowWithHistory(t *testing.T) {
	bin := testbin.Command(t, "qlsched")
	ctx := context.Background()
	d := testpg.New(t)
	// the set-up's own pool is closed before each measurement: an idle session flushes its
	// statistics whenever it likes, into whichever read is measured then
	su, err := d.Config(t, "").Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { su.Close() }()
	ds := dataset{Projects: 2, Triggers: 400}
	const small = 4_000 // 10 Runs per trigger; then 8×
	if err := publishDataset(ctx, su, ds); err != nil {
		t.Fatal(err)
	}
	// a quiet database: no autovacuum touching blocks inside a measurement
	if _, err := su.Pool().Exec(ctx, `DO $$ DECLARE r record; BEGIN
		FOR r IN SELECT c.oid::regclass AS t FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		         WHERE n.nspname = 'control_core' AND c.relkind = 'r' LOOP
			EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false)', r.t);
		END LOOP; END $$`); err != nil {
		t.Fatal(err)
	}
	// the measuring session: reads the shared statistics directly, never a cached snapshot
	probe, err := pgx.Connect(ctx, d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(ctx)
	if _, err := probe.Exec(ctx, "SET stats_fetch_consistency = none"); err != nil {
		t.Fatal(err)
	}

	measure := func(r scaleRead) int64 {
		t.Helper()
		// min of two: a read's work is deterministic but for what a first run caches
		best := int64(-1)
		for range 2 {
			b0 := quietBlocks(t, probe)
			runRead(t, r, bin, d)
			if n := quietBlocks(t, probe) - b0; best < 0 || n < best {
				best = n
			}
		}
		return best
	}
	sizes := []int64{small, 8 * small}
	work := map[string][2]int64{}
	var runsPages [2]int64
	written := int64(0)
	for i, size := range sizes {
		if i > 0 {
			if su, err = d.Config(t, "").Open(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := writeHistory(ctx, su, ds, written, size, "scale", nil); err != nil {
			t.Fatal(err)
		}
		written = size
		if err := settle(ctx, su); err != nil {
			t.Fatal(err)
		}
		if err := su.Pool().QueryRow(ctx, "SELECT pg_relation_size('control_core.runs') / current_setting('block_size')::bigint").Scan(&runsPages[i]); err != nil {
			t.Fatal(err)
		}
		su.Close()
		for _, r := range scaleReads {
			w := work[r.Name]
			w[i] = measure(r)
			work[r.Name] = w
		}
	}
	for _, r := range scaleReads {
		w := work[r.Name]
		if w[1]-w[0] > (runsPages[1]-runsPages[0])/4 {
			t.Errorf("%s: %d blocks at %d Runs of history, %d at %d (the runs table grew by %d pages): its database work grows with history; want it bounded",
				r.Name, w[0], sizes[0], w[1], sizes[1], runsPages[1]-runsPages[0])
			continue
		}
		t.Logf("%s: %d blocks at %d Runs, %d at %d (runs table +%d pages)", r.Name, w[0], sizes[0], w[1], sizes[1], runsPages[1]-runsPages[0])
	}
}

// quietBlocks waits until no session but the probe's is connected to the test's database and its
// statistics are flushed (a session flushes them as it exits, just after it leaves
// pg_stat_activity: the count is read until two reads agree), and returns the blocks touched in
// the database so far.
func quietBlocks(t *testing.T, probe *pgx.Conn) int64 {
	t.Helper()
	ctx := context.Background()
	last := int64(-1)
	var blocks int64
	eventually.True(t, 30*time.Second, "the read's sessions to end and their statistics to be flushed", func() bool {
		var others int64
		err := probe.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()),
			(SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database())`).Scan(&others, &blocks)
		if err != nil {
			t.Fatal(err)
		}
		stable := others == 0 && blocks == last
		last = blocks
		return stable
	})
	return blocks
}

// runRead runs one read once: a CLI read with the built binary as the admin role; the console,
// the scrape's backlog statement and startup recovery in-process on a pool of their own, closed
// after, so that its session ends and flushes its statistics (`qlsched ui` and `qlsched run`
// keep theirs open).
func runRead(t *testing.T, r scaleRead, bin string, d *testpg.DB) {
	t.Helper()
	ctx := context.Background()
	project := scaleProject(0)
	open := func(role string) *dbconn.DB {
		cfg := d.Config(t, role)
		cfg.Pool.MaxConns = 1
		pool, err := cfg.Open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return pool
	}
	switch r.Kind {
	case readCLI:
		if _, _, err := timeCLI(ctx, bin, append(cleanEnv(), "QL_DATABASE_URL="+d.URL(d.Names.Admin)), r.args(project)); err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
	case readConsole:
		pool := open(d.Names.Admin)
		defer pool.Close()
		h, err := console.Handler(console.Options{Reader: admin.NewReader(pool), Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodGet, r.args(project)[0], nil)
		req.Host = "127.0.0.1"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", r.Name, rec.Code, strings.TrimSpace(rec.Body.String()))
		}
	case readMetrics:
		pool := open(d.Names.Runtime)
		defer pool.Close()
		if _, err := metrics.DatabaseBacklog(pool)(ctx); err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
	case readRecovery:
		pool := open(d.Names.Runtime)
		defer pool.Close()
		rep, err := coordinator.Recover(ctx, pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil || rep.Candidates != 0 {
			t.Fatalf("%s: %+v, %v: want no candidate (the history is pristine)", r.Name, rep, err)
		}
	default:
		panic(fmt.Sprint("read kind ", r.Kind))
	}
}

func TestScaleValidation(t *testing.T) {
	base := Config{Scenario: Scale, Triggers: 100, Projects: 4, HistoryRuns: 1000, Samples: 3, MassPublish: 10,
		InitWait: time.Minute, Exe: "/bin/qlsched"}
	for _, tc := range []struct {
		name string
		mut  func(*Config)
		want string
	}{
		{"no binary", func(c *Config) { c.Exe = "" }, "binary"},
		{"no projects", func(c *Config) { c.Projects = 0 }, "--projects"},
		{"fewer triggers than projects", func(c *Config) { c.Triggers = 3 }, "--triggers"},
		{"negative history", func(c *Config) { c.HistoryRuns = -1 }, "--history-runs"},
		{"no samples", func(c *Config) { c.Samples = 0 }, "--samples"},
		{"no wait", func(c *Config) { c.InitWait = 0 }, "--init-wait"},
		{"database without runtime url", func(c *Config) { c.URL = "postgres://x@127.0.0.1:1/x" }, "--runtime-url"},
	} {
		c := base
		tc.mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error naming %s", tc.name, err, tc.want)
		}
	}
	if err := base.Validate(); err != nil {
		t.Errorf("a valid scale config: %v", err)
	}
}
