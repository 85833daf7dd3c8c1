package coordinator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/schedule"
)

// BenchmarkMassPublishInitialisation measures a mass publish next to a running trigger: two
// replicas at the documented defaults (budget 16, cadence 1 s; single mode and --admit-batch 16)
// admit an every-second trigger; then 20,000 triggers are published at once (rows waiting for
// initialisation, written in one transaction). It reports how long until every row is
// initialised, and the running trigger's occurrences from the publish to the end: how many are
// missing and the admission lag (queued minus scheduled time), p50 and max.
// Run: go test -run '^$' -bench BenchmarkMassPublishInitialisation -benchtime 1x ./coordinator/
func BenchmarkMassPublishInitialisation(b *testing.B) {
	for _, batch := range []int{1, 16} {
		b.Run(fmt.Sprintf("admit_batch_%d", batch), func(b *testing.B) {
			for b.Loop() {
				massPublish(b, batch, 20_000)
			}
		})
	}
}

func massPublish(b *testing.B, batch, triggers int) {
	ctx := context.Background()
	f := newFixture(b)
	f.trigger("running", "* * * * * *", schedule.MisfireSkip)
	var lcs []*Lifecycle
	var cs []*Coordinator
	for i := range 2 {
		c := f.coordinator(fmt.Sprintf("r%d", i+1), f.d.Handle(b, "ql_runtime"), func(cfg *Config) { cfg.AdmitBatch = batch })
		lc := NewLifecycle(c, c.cfg)
		if err := lc.Start(ctx); err != nil {
			b.Fatal(err)
		}
		cs, lcs = append(cs, c), append(lcs, lc)
	}
	defer func() {
		for _, lc := range lcs {
			_ = lc.Stop(ctx)
		}
	}()
	runs := func() int { return f.count(`SELECT count(*) FROM control_core.runs WHERE trigger_id = 'running'`) }
	for deadline := time.Now().Add(30 * time.Second); runs() < 3; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the running trigger was not admitted 3 times within 30 s")
		}
	}
	published := int64(f.count(`SELECT control_core.db_now_ms()`))
	start := time.Now()
	f.bulkUninitialised(triggers)
	publish := time.Since(start) // the insert's transaction and its ANALYZE: the rows are claimable from its commit
	var initialised time.Duration
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if f.uninitialised() == 0 {
			initialised = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d rows still wait for initialisation after 5 minutes", f.uninitialised())
		}
	}
	time.Sleep(5 * time.Second) // the running trigger after the publish, at ease again
	for _, lc := range lcs {
		_ = lc.Stop(ctx)
	}
	end := int64(f.count(`SELECT control_core.db_now_ms()`)) - 2000 // occurrences the replicas had time for
	var admitted, expected, p50, maxLag int
	err := f.su.QueryRow(ctx, `WITH o AS (
			SELECT g AS at FROM generate_series(($1::bigint / 1000 + 1) * 1000, $2::bigint, 1000) g),
		r AS (SELECT scheduled_for_ms, queued_at_ms - scheduled_for_ms AS lag FROM control_core.runs
		      WHERE trigger_id = 'running' AND scheduled_for_ms > $1 AND scheduled_for_ms <= $2)
		SELECT (SELECT count(*) FROM r)::int, (SELECT count(*) FROM o)::int,
		       coalesce((SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY lag) FROM r), 0)::int,
		       coalesce((SELECT max(lag) FROM r), 0)::int`, published, end).Scan(&admitted, &expected, &p50, &maxLag)
	if err != nil {
		b.Fatal(err)
	}
	var st Snapshot
	for _, c := range cs {
		s := c.Stats.Snapshot()
		st.Inits, st.Admits, st.Races, st.Errors, st.Claims = st.Inits+s.Inits, st.Admits+s.Admits, st.Races+s.Races, st.Errors+s.Errors, st.Claims+s.Claims
	}
	b.ReportMetric(initialised.Seconds(), "init_s")
	b.ReportMetric(publish.Seconds(), "publish_s")
	b.ReportMetric(float64(expected-admitted), "missed")
	b.ReportMetric(float64(p50), "lag_p50_ms")
	b.ReportMetric(float64(maxLag), "lag_max_ms")
	b.Logf("admit batch %d: %d triggers published in %s, all initialised %s after the publish began, by two replicas (inits %d, races %d, errors %d, claims %d); "+
		"running trigger: %d of %d occurrences since the publish admitted, lag p50 %d ms, max %d ms (grace 60 s)",
		batch, triggers, publish.Round(time.Millisecond), initialised.Round(time.Millisecond), st.Inits, st.Races, st.Errors, st.Claims, admitted, expected, p50, maxLag)
	f.audit()
}
