package dispatch_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/dispatch"
)

// BenchmarkPassAB times one placement pass over 8 waiting polls of one label set (capacity 4
// each) and 32 queued Runs: the polls served together (one read, the offers concurrently: after)
// against one after the other (a read and an offer each: before), alternating pass by pass in one
// sitting, b.N passes a side. Each pass places every Run; they are withdrawn and replaced between
// passes, outside the timing. go test ./dispatch -run '^$' -bench PassAB -benchtime 100x.
func BenchmarkPassAB(b *testing.B) {
	f := newFx(b)
	c := f.token("w")
	ss := make([]dispatch.Session, 8)
	for i := range ss {
		ss[i] = f.session(c, 4, nil)
	}
	pl := dispatch.NewPlacer(f.store, nil)
	took := map[bool][]time.Duration{}
	reads := map[bool]int64{}
	for i := range 2 * b.N {
		after := i%2 == 1
		runs := f.queue("p", 32)
		began := time.Now()
		var got map[uuid.UUID][]dispatch.Offer
		var n int64
		if after {
			got, n = pl.PassOver(bg, c, ss)
		} else {
			got, n = pl.PassPollByPoll(bg, c, ss)
		}
		took[after] = append(took[after], time.Since(began))
		reads[after] += n
		var offers []uuid.UUID
		for _, of := range got {
			for _, o := range of {
				offers = append(offers, o.OfferID)
			}
		}
		if len(offers) != len(runs) {
			b.Fatalf("pass (after %v) placed %d of %d Runs", after, len(offers), len(runs))
		}
		if _, err := f.store.Withdraw(bg, offers); err != nil {
			b.Fatal(err)
		}
		for _, r := range runs {
			f.cancel(r)
		}
	}
	for _, after := range []bool{false, true} {
		d := took[after]
		slices.Sort(d)
		q := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
		side := map[bool]string{false: "poll-by-poll", true: "together"}[after]
		b.ReportMetric(ms(q(0.5)), side+"-p50-ms")
		b.Logf("%s: a pass over 8 polls and 32 Runs, %d passes: p50 %.2f ms, p99 %.2f ms, %.1f candidate reads a pass",
			side, len(d), ms(q(0.5)), ms(q(0.99)), float64(reads[after])/float64(len(d)))
	}
}
