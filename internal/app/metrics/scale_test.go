package metrics_test

import (
	"context"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/app/metrics"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// The database gauges' statement and a scrape at QL_METRICS_SCALE schedule rows (default 100000),
// all waiting for initialisation as after a mass publish, timed; docs/operations.md quotes it.
// Run: go test -run '^$' -bench ScrapeAtScale -benchtime 1x ./internal/app/metrics/
func BenchmarkScrapeAtScale(b *testing.B) {
	t := b
	n, _ := strconv.Atoi(os.Getenv("QL_METRICS_SCALE"))
	if n <= 0 {
		n = 100_000
	}
	ctx := context.Background()
	d := testpg.New(t)
	rows := strconv.Itoa(n)
	d.Exec(t, `SET statement_timeout = 0; SET session_replication_role = replica;
		INSERT INTO control_core.projects (project_id, state, revision, content_digest) VALUES ('p', 'active', 1, repeat('a', 64));
		INSERT INTO control_core.triggers (project_id, trigger_id, head_revision) SELECT 'p', 't' || g, 1 FROM generate_series(1, `+rows+`) g;
		INSERT INTO control_core.trigger_revisions (project_id, trigger_id, revision, kind, cron_spec, timezone,
		        misfire_policy, misfire_grace_ms, enabled, task_id, task_revision, content_digest)
		    SELECT 'p', 't' || g, 1, 'cron', '* * * * *', 'UTC', 'skip', 60000, true, 'task', 1, repeat('a', 64) FROM generate_series(1, `+rows+`) g;
		INSERT INTO control_core.trigger_schedules (project_id, trigger_id, trigger_revision, next_fire_at_ms, state_version, claim_version, updated_at_ms)
		    SELECT 'p', 't' || g, 1, NULL, 1, 0, control_core.db_now_ms() FROM generate_series(1, `+rows+`) g;
		ANALYZE control_core.trigger_schedules, control_core.trigger_revisions, control_core.projects`)
	rt := d.Handle(t, "ql_runtime")
	read := metrics.DatabaseBacklog(rt)
	for i := range 3 {
		start := time.Now()
		b, err := read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Backlog statement %d: %s, %+v", i+1, time.Since(start).Round(time.Millisecond), b)
	}
	co := coordinator.New(coordinator.DefaultConfig("scale"), nil)
	m := metrics.New(co, metrics.NewMeasurements("scale"), func() bool { return true }, read, time.Second)
	if err := m.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Stop(ctx) }()
	var slowest time.Duration
	defer func() { b.ReportMetric(float64(slowest.Microseconds())/1000, "slowest-scrape-ms") }()
	eventually.True(t, 30*time.Second, "a reading", func() bool {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return exportedValue(rec.Body.String(), "qlsched_schedules_uninitialised") > 0
	})
	for range 50 { // scrapes while the loop reads every second
		start := time.Now()
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		slowest = max(slowest, time.Since(start))
		time.Sleep(40 * time.Millisecond) // a scrape rate, not synchronisation
	}
	t.Logf("slowest of 50 scrapes over 2 s at %d uninitialised rows: %s", n, slowest.Round(time.Microsecond))
}

func exportedValue(body, name string) float64 {
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			v, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			return v
		}
	}
	return -1
}
