package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Execution is one run of an occurrence's job, as the job itself logged it: the key and scheduled
// second of the occurrence (Unix ms) and when the job started, Unix ms on the same host's clock.
type Execution struct {
	Key      string
	SecondMs int64
	AtMs     int64
}

// ExecResult is the audit of the whole loop of one system by scheduled second: was each
// occurrence executed, how often, how late.
type ExecResult struct {
	Expected     int64 // keys × seconds of the window
	ExactlyOnce  int64 // occurrences executed once, no more
	AtLeastOnce  int64 // occurrences executed at least once (exactly once included)
	ExtraExecs   int64 // executions beyond the first of an occurrence
	Late         int64 // occurrences whose first execution started more than the bound after their second
	MissedQueued int64 // admitted, never executed (within the settle window)
	MissedNever  int64 // never admitted (so never executed)
	LagP50Ms     int64 // first execution − scheduled second (p99: the value at index ⌊n·0.99⌋ of the sorted lags)
	LagP99Ms     int64
	LagMaxMs     int64
}

// AuditExec counts, for every key and every second of w, the executions of the occurrence and
// whether it was admitted; an occurrence is late when its first execution started more than
// late after its scheduled second.
func AuditExec(keys []string, w Window, admissions []Admission, execs []Execution, late time.Duration) ExecResult {
	var r ExecResult
	type occ struct {
		key string
		sec int64
	}
	admitted := map[occ]bool{}
	for _, a := range admissions {
		admitted[occ{a.Key, a.SecondMs}] = true
	}
	count, first := map[occ]int{}, map[occ]int64{}
	for _, e := range execs {
		o := occ{e.Key, e.SecondMs}
		if count[o] == 0 || e.AtMs < first[o] {
			first[o] = e.AtMs
		}
		count[o]++
	}
	var lags []int64
	for _, k := range keys {
		for m := w.FromMs; m < w.ToMs; m += 1000 {
			o := occ{k, m}
			r.Expected++
			n := count[o]
			switch {
			case n == 0 && admitted[o]:
				r.MissedQueued++
				continue
			case n == 0:
				r.MissedNever++
				continue
			case n == 1:
				r.ExactlyOnce++
			}
			r.AtLeastOnce++
			r.ExtraExecs += int64(n - 1)
			lag := first[o] - m
			lags = append(lags, lag)
			if lag > late.Milliseconds() {
				r.Late++
			}
		}
	}
	if n := len(lags); n > 0 {
		slices.Sort(lags)
		r.LagP50Ms, r.LagP99Ms, r.LagMaxMs = lags[n/2], lags[n*99/100], lags[n-1]
	}
	return r
}

// ExecRow is one system's line of the whole-loop table.
type ExecRow struct {
	System   string
	Jobs     int    // N
	Procs    string // the processes, e.g. "3 run + 2 dispatch + 3 workers"
	Window   Window
	Late     time.Duration
	Result   ExecResult
	Injected map[Kind]int
	Aimed    int
}

// ExecTable prints rows as one Markdown table.
func ExecTable(rows []ExecRow) string {
	var b strings.Builder
	b.WriteString("| system | N | processes | audited | expected | executed exactly once | at least once (extra executions) | late (bound) | missed: admitted, not executed / never admitted | first execution lag p50 / p99 / max | faults: kill / stop / restart / stop-all (at holder) |\n")
	b.WriteString("| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |\n")
	pct := func(n, d int64) float64 { return 100 * float64(n) / float64(max(d, 1)) }
	for _, r := range rows {
		x := r.Result
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %d | %d (%.2f %%) | %d (%.2f %%) (%d) | %d (> %s) | %d / %d | %d / %d / %d ms | %d / %d / %d / %d (%d) |\n",
			r.System, r.Jobs, r.Procs, time.Duration(r.Window.Seconds())*time.Second, x.Expected,
			x.ExactlyOnce, pct(x.ExactlyOnce, x.Expected), x.AtLeastOnce, pct(x.AtLeastOnce, x.Expected), x.ExtraExecs,
			x.Late, r.Late, x.MissedQueued, x.MissedNever, x.LagP50Ms, x.LagP99Ms, x.LagMaxMs,
			r.Injected[Kill], r.Injected[Stop], r.Injected[Restart], r.Injected[StopAll], r.Aimed)
	}
	return b.String()
}
