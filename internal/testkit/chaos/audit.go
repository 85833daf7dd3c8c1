package chaos

import (
	"fmt"
	"slices"
	"strings"

	"github.com/qlcontrol/controlcore/schedule"
)

// GraceColumn is the lateness of the table's middle column: qlsched's default misfire grace
// (60 s). Both systems are judged by it, and by 1 s, and by whether they admitted at all.
const GraceColumn = schedule.DefaultMisfireGrace

// Admission is one occurrence a system admitted (a qlsched Run, a River job): the key it belongs
// to (trigger, periodic job), its scheduled second and when it was admitted, both in Unix ms.
type Admission struct {
	Key        string
	SecondMs   int64
	AdmittedMs int64
}

// Window is the audited span of scheduled seconds, [FromMs, ToMs), whole seconds.
type Window struct{ FromMs, ToMs int64 }

// Seconds is the number of scheduled seconds in the window.
func (w Window) Seconds() int64 { return (w.ToMs - w.FromMs) / 1000 }

// Result is the audit of one system by scheduled second.
type Result struct {
	Expected    int64 // keys × seconds of the window
	ExactlyOnce int64 // occurrences admitted once, no more
	Missed      int64 // occurrences never admitted
	Duplicated  int64 // admissions beyond the first of an occurrence
	Gaps        int64 // runs of consecutive missed seconds of one key
	GapsResumed int64 // gaps after which the key was admitted again (in or after the window)
	LongestGapS int64 // the longest gap, seconds
	OffSecond   int64 // admissions whose scheduled second is not a whole second (a caller's bug)
	LagP50Ms    int64 // admitted − scheduled second, over the first admission of each occurrence (p99: the value at index ⌊n·0.99⌋ of the sorted lags)
	LagP99Ms    int64
	LagMaxMs    int64

	// The lateness columns, over the occurrences of the window by their first admission:
	// admitted within 1 s of the scheduled second (lag ≤ 1000 ms), within GraceColumn, ever
	// (by the end of the settle wait: Expected − Missed). Late backfills and catch-ups count
	// in the last two alike.
	Within1s, WithinGrace, Ever int64
}

// Audit counts, for every key and every second of w, how often the occurrence was admitted.
func Audit(keys []string, w Window, admissions []Admission) Result {
	var r Result
	byKey := map[string]map[int64]int{}
	last := map[string]int64{} // the latest admitted second of each key
	var lags []int64
	first := map[string]map[int64]bool{}
	for _, a := range admissions {
		if a.SecondMs%1000 != 0 {
			r.OffSecond++
			continue
		}
		if a.SecondMs > last[a.Key] {
			last[a.Key] = a.SecondMs
		}
		if a.SecondMs < w.FromMs || a.SecondMs >= w.ToMs {
			continue
		}
		if byKey[a.Key] == nil {
			byKey[a.Key], first[a.Key] = map[int64]int{}, map[int64]bool{}
		}
		byKey[a.Key][a.SecondMs]++
		if byKey[a.Key][a.SecondMs] == 1 {
			lag := a.AdmittedMs - a.SecondMs
			lags = append(lags, lag)
			if lag <= 1000 {
				r.Within1s++
			}
			if lag <= GraceColumn.Milliseconds() {
				r.WithinGrace++
			}
		}
	}
	for _, k := range keys {
		var gap int64
		endGap := func(resumed bool) {
			if gap == 0 {
				return
			}
			r.Gaps++
			if resumed {
				r.GapsResumed++
			}
			r.LongestGapS = max(r.LongestGapS, gap)
			gap = 0
		}
		for m := w.FromMs; m < w.ToMs; m += 1000 {
			r.Expected++
			switch n := byKey[k][m]; {
			case n == 0:
				r.Missed++
				gap++
			case n == 1:
				endGap(true)
				r.ExactlyOnce++
			default:
				endGap(true)
				r.Duplicated += int64(n - 1)
			}
		}
		endGap(last[k] >= w.ToMs)
	}
	r.Ever = r.Expected - r.Missed
	if n := len(lags); n > 0 {
		slices.Sort(lags)
		r.LagP50Ms, r.LagP99Ms, r.LagMaxMs = lags[n/2], lags[n*99/100], lags[n-1]
	}
	return r
}

// Row is one system's line of the comparison table.
type Row struct {
	System   string
	Jobs     int // N: triggers or periodic jobs, each every second
	Procs    int // R
	Window   Window
	Result   Result
	Injected map[Kind]int
	Aimed    int
	Started  int // processes started, restarts included
	// Ties attributes the misses to the faults applied (nil: the system records no claims to
	// tie them by, shown as —).
	Ties *Ties
	// Refused are the duplicate attempts the system refused, over the whole soak: by a fence
	// (-1: the system has none) and by a unique key (-1: not counted).
	RefusedFence, RefusedUnique int64
}

// Table prints rows as one Markdown table, the form docs/performance.md keeps.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| system | N × R | expected | admitted within 1 s | within 60 s | ever | missed (gaps, longest) | misses tied to: kill / stop / restart / stop-all; untied | duplicated | duplicate attempts refused: fence / unique key | lag p50 / p99 / max | faults applied: kill / stop / restart / stop-all (at leader) |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | --- | --- |\n")
	pct := func(n, of int64) string { return fmt.Sprintf("%d (%.2f %%)", n, 100*float64(n)/float64(max(of, 1))) }
	count := func(n int64) string {
		if n < 0 {
			return "—"
		}
		return fmt.Sprint(n)
	}
	for _, r := range rows {
		x := r.Result
		ties := "—"
		if t := r.Ties; t != nil {
			ties = fmt.Sprintf("%d / %d / %d / %d; %d", t.ByKind[Kill], t.ByKind[Stop], t.ByKind[Restart], t.ByKind[StopAll], t.Untied)
		}
		fmt.Fprintf(&b, "| %s | %d × %d | %d | %s | %s | %s | %d (%d, %d s) | %s | %d | %s / %s | %d / %d / %d ms | %d / %d / %d / %d (%d) |\n",
			r.System, r.Jobs, r.Procs, x.Expected, pct(x.Within1s, x.Expected), pct(x.WithinGrace, x.Expected), pct(x.Ever, x.Expected),
			x.Missed, x.Gaps, x.LongestGapS, ties, x.Duplicated, count(r.RefusedFence), count(r.RefusedUnique),
			x.LagP50Ms, x.LagP99Ms, x.LagMaxMs,
			r.Injected[Kill], r.Injected[Stop], r.Injected[Restart], r.Injected[StopAll], r.Aimed)
	}
	return b.String()
}
