package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/dispatch"
)

// BenchmarkGaugesAtScale measures one read of the loop's database gauges (Store.Gauges: LoopQueue
// and LoopWorkers) beside 100,000 finished Runs, with 10,000 queued Runs (all counted) and with
// 150,000 (past the budget of dispatch.GaugeQueueCap), spread over 41 projects. It asserts the
// budget: the counts add up to the queue below it, and to at most the budget plus one per project
// above it.
// Run: nice -n 10 go test -run '^$' -bench BenchmarkGaugesAtScale -benchtime 20x ./dispatch/
func BenchmarkGaugesAtScale(b *testing.B) {
	for _, size := range []struct {
		name   string
		queued int
	}{{"queued_10k", 10_000}, {"queued_150k", 150_000}} {
		b.Run(size.name, func(b *testing.B) {
			f := newFx(b)
			f.bulkQueue(100_000, size.queued)
			f.exec(`VACUUM ANALYZE control_core.runs`)
			ctx := context.Background()
			var g dispatch.Gauges
			var total time.Duration
			n := 0
			for b.Loop() {
				start := time.Now()
				var err error
				if g, err = f.store.Gauges(ctx); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				n++
			}
			var sum int64
			for _, q := range g.Queues {
				sum += q.Queued
			}
			if len(g.Queues) != 41 || (size.queued <= dispatch.GaugeQueueCap && sum != int64(size.queued)) ||
				(size.queued > dispatch.GaugeQueueCap && (sum < dispatch.GaugeQueueCap || sum > dispatch.GaugeQueueCap+41)) {
				b.Errorf("%d projects, %d queued counted; want 41 projects and %d (up to the budget %d)", len(g.Queues), sum, size.queued, dispatch.GaugeQueueCap)
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(n), "ns/read")
			b.Logf("%s: %d projects, %d queued counted, mean read %.1f ms", size.name, len(g.Queues), sum, float64(total.Microseconds())/float64(n)/1000)
		})
	}
}
