package chaos

import (
	"reflect"
	"testing"
	"time"
)

func TestAuditBySecond(t *testing.T) {
	t.Parallel()
	w := Window{FromMs: 10_000, ToMs: 15_000} // seconds 10 … 14
	adm := func(key string, sec, lagMs int64) Admission {
		return Admission{Key: key, SecondMs: sec * 1000, AdmittedMs: sec*1000 + lagMs}
	}
	tests := []struct {
		name string
		in   []Admission
		want Result
	}{
		{"every second once", []Admission{adm("a", 10, 5), adm("a", 11, 5), adm("a", 12, 5), adm("a", 13, 5), adm("a", 14, 7)},
			Result{Expected: 5, ExactlyOnce: 5, LagP50Ms: 5, LagP99Ms: 7, LagMaxMs: 7, Within1s: 5, WithinGrace: 5, Ever: 5}},
		{"a duplicated occurrence is not exactly once; its lag is the first admission's",
			[]Admission{adm("a", 10, 1), adm("a", 11, 1), adm("a", 11, 900), adm("a", 12, 1), adm("a", 13, 1), adm("a", 14, 1)},
			Result{Expected: 5, ExactlyOnce: 4, Duplicated: 1, LagP50Ms: 1, LagP99Ms: 1, LagMaxMs: 1, Within1s: 5, WithinGrace: 5, Ever: 5}},
		{"a gap that resumes inside the window, seconds outside ignored",
			[]Admission{adm("a", 9, 1), adm("a", 10, 1), adm("a", 13, 1500), adm("a", 14, 1), adm("a", 15, 1)},
			Result{Expected: 5, ExactlyOnce: 3, Missed: 2, Gaps: 1, GapsResumed: 1, LongestGapS: 2, LagP50Ms: 1, LagP99Ms: 1500, LagMaxMs: 1500, Within1s: 2, WithinGrace: 3, Ever: 3}},
		{"a gap at the end resumes after the window",
			[]Admission{adm("a", 10, 1), adm("a", 11, 1), adm("a", 12, 1), adm("a", 16, 1)},
			Result{Expected: 5, ExactlyOnce: 3, Missed: 2, Gaps: 1, GapsResumed: 1, LongestGapS: 2, LagP50Ms: 1, LagP99Ms: 1, LagMaxMs: 1, Within1s: 3, WithinGrace: 3, Ever: 3}},
		{"a gap that never resumes; a key never admitted is one gap of every second",
			[]Admission{adm("a", 10, 1), adm("a", 11, 1), adm("a", 12, 1), adm("a", 13, 1), adm("a", 14, 1)},
			Result{Expected: 10, ExactlyOnce: 5, Missed: 5, Gaps: 1, LongestGapS: 5, LagP50Ms: 1, LagP99Ms: 1, LagMaxMs: 1, Within1s: 5, WithinGrace: 5, Ever: 5}},
		{"lateness columns: ≤ 1 s, ≤ 60 s (qlsched's default grace), ever; a late backfill counts in the last two",
			[]Admission{adm("a", 10, 1000), adm("a", 11, 1001), adm("a", 12, 60_000), adm("a", 13, 60_001), adm("a", 14, 3_600_000)},
			Result{Expected: 5, ExactlyOnce: 5, LagP50Ms: 60_000, LagP99Ms: 3_600_000, LagMaxMs: 3_600_000, Within1s: 1, WithinGrace: 3, Ever: 5}},
		{"an admission off a whole second is counted, not audited",
			[]Admission{{Key: "a", SecondMs: 10_500, AdmittedMs: 10_600}},
			Result{Expected: 5, Missed: 5, Gaps: 1, LongestGapS: 5, OffSecond: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			keys := []string{"a"}
			if tt.want.Expected == 10 {
				keys = append(keys, "b")
			}
			if got := Audit(keys, w, tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Audit:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestPlanIsTheSeedsAndHasEveryKind(t *testing.T) {
	t.Parallel()
	c := DefaultPlanConfig(42, 45*time.Second)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	a, b := NewPlan(c), NewPlan(c)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two plans from one seed differ")
	}
	if reflect.DeepEqual(a, NewPlan(DefaultPlanConfig(43, 45*time.Second))) {
		t.Error("plans from seeds 42 and 43 are the same")
	}
	kinds := map[Kind]int{}
	var prev time.Duration
	for _, f := range a {
		kinds[f.Kind]++
		if f.At <= prev || f.At >= c.Duration || f.At%time.Second > 120*time.Millisecond {
			t.Errorf("fault at %s (previous %s): want increasing, inside %s, 0–120 ms after a whole second", f.At, prev, c.Duration)
		}
		prev = f.At
	}
	for _, k := range []Kind{Kill, Stop, Restart} {
		if kinds[k] == 0 {
			t.Errorf("45 s plan of seed 42 has no %s: %v", k, kinds)
		}
	}
}
