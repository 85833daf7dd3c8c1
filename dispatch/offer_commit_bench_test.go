package dispatch_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/dispatch"
)

// BenchmarkOfferCommitAB times one offer of one Run, statement by statement and committed
// durably (before) against pipelined and committed asynchronously (after), alternating Run by
// Run in one sitting, b.N Runs a side. The difference is the WAL flush: run it against a server
// with fsync on (the test server has it off), e.g. QL_TEST_DATABASE_URL=postgres://…
// go test ./dispatch -run '^$' -bench OfferCommitAB -benchtime 300x.
func BenchmarkOfferCommitAB(b *testing.B) {
	f := newFx(b)
	f.durableStore()
	if got := f.str(`SELECT current_setting('fsync')`); got != "on" {
		b.Logf("fsync is %s on this server: the WAL flush costs nothing, only the round trips differ", got)
	}
	c := f.token("w")
	s := f.session(c, 1, nil)
	took := map[bool][]time.Duration{}
	for i := range 2 * b.N {
		after := i%2 == 1
		run := f.queue("p", 1)[0]
		cands := []dispatch.Candidate{{RunID: run, ProjectID: "p"}}
		began := time.Now()
		var n int
		var err error
		if after {
			var offers []dispatch.Offer
			offers, err = f.store.Offer(bg, c, s.ID, cands)
			n = len(offers)
		} else {
			n, err = f.store.OfferStatementByStatement(bg, c, s.ID, cands)
		}
		took[after] = append(took[after], time.Since(began))
		if err != nil || n != 1 {
			b.Fatalf("offer (after %v): %d offers, %v", after, n, err)
		}
		var offer uuid.UUID
		if err := f.su.QueryRow(bg, `SELECT offer_id FROM control_core.dispatch_offers WHERE state = 'offered'`).Scan(&offer); err != nil {
			b.Fatal(err)
		}
		if _, err := f.store.Withdraw(bg, []uuid.UUID{offer}); err != nil {
			b.Fatal(err)
		}
		f.cancel(run)
	}
	for _, after := range []bool{false, true} {
		d := took[after]
		slices.Sort(d)
		q := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
		side := map[bool]string{false: "before", true: "after"}[after]
		b.ReportMetric(ms(q(0.5)), side+"-p50-ms")
		b.ReportMetric(ms(q(0.99)), side+"-p99-ms")
		b.Logf("%s: one offer over %d Runs: p50 %.2f ms, p99 %.2f ms, max %.2f ms", side, len(d), ms(q(0.5)), ms(q(0.99)), ms(d[len(d)-1]))
	}
}
