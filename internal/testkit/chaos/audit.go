package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

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
			lags = append(lags, a.AdmittedMs-a.SecondMs)
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
}

// Table prints rows as one Markdown table, the form docs/performance.md keeps.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| system | N × R | audited | expected | exactly once | missed (gaps, longest) | duplicated | lag p50 / p99 / max | faults: kill / stop / restart / stop-all (at leader) |\n")
	b.WriteString("| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |\n")
	for _, r := range rows {
		x := r.Result
		fmt.Fprintf(&b, "| %s | %d × %d | %s | %d | %d (%.2f %%) | %d (%d, %d s) | %d | %d / %d / %d ms | %d / %d / %d / %d (%d) |\n",
			r.System, r.Jobs, r.Procs, time.Duration(r.Window.Seconds())*time.Second, x.Expected, x.ExactlyOnce,
			100*float64(x.ExactlyOnce)/float64(max(x.Expected, 1)), x.Missed, x.Gaps, x.LongestGapS, x.Duplicated,
			x.LagP50Ms, x.LagP99Ms, x.LagMaxMs,
			r.Injected[Kill], r.Injected[Stop], r.Injected[Restart], r.Injected[StopAll], r.Aimed)
	}
	return b.String()
}
