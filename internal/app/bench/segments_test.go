package bench

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/db"
)

// The segments join the dispatchers' Debug lines (as the JSON handler writes them) with the
// Runs' database times: each Run's notification is the first at its dispatcher at or after its
// admission, a pass started before it counts as placed before the notification.
func TestSegmentsJoinTheTraceWithTheRuns(t *testing.T) {
	r1, r2, r3 := uuid.New(), uuid.New(), uuid.New()
	tr := newSegTrace(2)
	for i, line := range []string{
		`{"msg":"dispatch wake notification","at_ms":1010}`,
		`{"msg":"dispatch wake notification","at_ms":2020}`,
		`{"msg":"dispatch offers delivered","run_ids":["` + r1.String() + `"],"woken":true,"pass_ms":1015,"answered_ms":1040}`,
		`{"msg":"dispatch offers delivered","run_ids":["` + r2.String() + `"],"woken":false,"pass_ms":2005,"answered_ms":2030}`,
		`{"msg":"something else","at_ms":1}`,
	} {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		tr.collect(map[int]int{0: 0, 1: 1, 2: 0, 3: 1, 4: 0}[i])(l)
	}
	for _, line := range []string{
		`{"msg":"admitted","run_id":"` + r1.String() + `","committed_ms":1004}`,
		`{"msg":"admitted","run_id":"` + r2.String() + `","committed_ms":2008}`,
		`{"msg":"claimed","run_id":"` + r3.String() + `","committed_ms":3008}`,
	} {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		tr.collectAdmits(l)
	}
	rows := []db.BenchLoopRunTimesRow{
		{RunID: r1, QueuedAtMs: 1000, OfferedAtMs: 1030, StartedAtMs: 1060},
		{RunID: r2, QueuedAtMs: 2000, OfferedAtMs: 2010, StartedAtMs: 2050},
		{RunID: r3, QueuedAtMs: 3000, OfferedAtMs: 3010, StartedAtMs: 3050}, // no delivery line
	}
	var file strings.Builder
	segs, sum := tr.segments(rows, &file)
	if want := r1.String() + "\t1000\t1004\t1010\t1015\t1030\t1040\t1060\t0\ttrue\n"; !strings.HasPrefix(file.String(), want) {
		t.Errorf("the per-Run file begins %q, want %q", file.String(), want)
	}
	if n := strings.Count(file.String(), "\n"); n != 2 {
		t.Errorf("the per-Run file has %d lines, want 2 (the traced Runs)", n)
	}
	want := map[string][2]int64{ // name → Run 1's and Run 2's value
		segAdmitCommit:   {4, 8},
		segCommitNotify:  {6, 12},
		segNotifyPass:    {5, 0}, // Run 2's pass started before its notification
		segPassOffer:     {15, 5},
		segOfferAnswered: {10, 20},
		segAnsweredAck:   {20, 20},
		segTotal:         {60, 50},
	}
	if len(segs) != len(want) {
		t.Fatalf("%d segments, want %d", len(segs), len(want))
	}
	for _, s := range segs {
		w := want[s.Name]
		if s.Runs != 2 || s.MaxMs != max(w[0], w[1]) || s.P50Ms != float64(w[0]+w[1])/2 {
			t.Errorf("segment %s = %+v, want 2 Runs, p50 %v, max %d", s.Name, s, float64(w[0]+w[1])/2, max(w[0], w[1]))
		}
	}
	if sum.PlacedBy[0] != 1 || sum.PlacedBy[1] != 1 || sum.Woken != 1 || sum.BeforeNotify != 1 || sum.Untraced != 1 {
		t.Errorf("summary %+v, want placed by [1 1], 1 woken, 1 before its notification, 1 untraced", sum)
	}
}

func TestPercentileContInterpolates(t *testing.T) {
	for _, c := range []struct {
		v    []int64
		p    float64
		want float64
	}{{nil, 0.5, 0}, {[]int64{7}, 0.99, 7}, {[]int64{0, 10}, 0.5, 5}, {[]int64{0, 100}, 0.99, 99}} {
		if got := percentileCont(c.v, c.p); got != c.want {
			t.Errorf("percentileCont(%v, %v) = %v, want %v", c.v, c.p, got, c.want)
		}
	}
}
