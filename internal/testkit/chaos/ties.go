package chaos

import (
	"fmt"
	"slices"
	"time"
)

// Gap is one run of consecutive missed seconds of one key inside the audited window.
type Gap struct {
	Key     string
	FromMs  int64 // the first missed scheduled second
	Seconds int64
}

func (g Gap) String() string {
	return fmt.Sprintf("%s from %s for %d s", g.Key, time.UnixMilli(g.FromMs).UTC().Format("15:04:05"), g.Seconds)
}

// Gaps lists the gaps Audit counts, by key in the order of keys, then by second.
func Gaps(keys []string, w Window, admissions []Admission) []Gap {
	seen := map[string]map[int64]bool{}
	for _, a := range admissions {
		if a.SecondMs%1000 != 0 || a.SecondMs < w.FromMs || a.SecondMs >= w.ToMs {
			continue
		}
		if seen[a.Key] == nil {
			seen[a.Key] = map[int64]bool{}
		}
		seen[a.Key][a.SecondMs] = true
	}
	var out []Gap
	for _, k := range keys {
		var g *Gap
		for m := w.FromMs; m < w.ToMs; m += 1000 {
			switch {
			case seen[k][m]:
				g = nil
			case g == nil:
				out = append(out, Gap{Key: k, FromMs: m, Seconds: 1})
				g = &out[len(out)-1]
			default:
				g.Seconds++
			}
		}
	}
	return out
}

// Applied is one fault as the supervisor applied it: when (wall-clock ms, the server's host
// clock), until when (the planned SIGCONT or restart; AtMs for a graceful restart), to which
// processes, and the keys those processes held work for right after the signal and 300 ms later
// (Process.Holding; nil without it).
type Applied struct {
	AtMs, UntilMs int64
	Kind          Kind
	Owners        []string
	Keys          []string
}

// Ties is the attribution of a system's missed occurrences to the faults applied to it.
type Ties struct {
	ByKind  map[Kind]int64 // missed occurrences tied to a fault of each kind
	Faults  int            // distinct faults some miss is tied to
	Untied  int64          // missed occurrences tied to no fault
	Unknown []Gap          // the untied gaps
}

// Tie ties each gap to the fault that caused it, by the rule:
//
//   - a fault applied to a process that held the gap's key at that instant, at or after the
//     gap's first missed second (an occurrence is claimed only once it is due) and less than
//     lease + 1 s after it (a claim is never held longer than its lease): the claim it stranded;
//     the latest such fault if several;
//   - else a stop of every process (StopAll) whose span, widened by 1 s before it, contains the
//     gap's first missed second: nobody could decide the occurrence within its grace.
//
// A gap tied to neither is Untied (its occurrences, counted, and the gaps listed).
func Tie(gaps []Gap, faults []Applied, lease time.Duration) Ties {
	t := Ties{ByKind: map[Kind]int64{}}
	used := map[int]bool{}
	for _, g := range gaps {
		hit := -1
		for i, f := range faults {
			switch {
			case f.Kind != StopAll && slices.Contains(f.Keys, g.Key) &&
				f.AtMs >= g.FromMs && f.AtMs < g.FromMs+lease.Milliseconds()+1000:
				hit = i // faults are in order: the latest wins
			case f.Kind == StopAll && hit < 0 && g.FromMs >= f.AtMs-1000 && g.FromMs <= f.UntilMs:
				hit = i
			}
		}
		if hit < 0 {
			t.Untied += g.Seconds
			t.Unknown = append(t.Unknown, g)
			continue
		}
		t.ByKind[faults[hit].Kind] += g.Seconds
		used[hit] = true
	}
	t.Faults = len(used)
	return t
}
