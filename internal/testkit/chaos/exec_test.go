package chaos

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestAuditExecBySecond(t *testing.T) {
	t.Parallel()
	w := Window{FromMs: 10_000, ToMs: 14_000} // seconds 10 … 13
	adm := func(sec int64) Admission { return Admission{Key: "a", SecondMs: sec * 1000, AdmittedMs: sec*1000 + 5} }
	ex := func(sec, lagMs int64) Execution {
		return Execution{Key: "a", SecondMs: sec * 1000, AtMs: sec*1000 + lagMs}
	}
	// 10: once on time; 11: twice (the first at 300 ms); 12: admitted, never executed; 13: never
	// admitted; 9 and 14 are outside the window; 10 is executed once more for key b, not audited.
	got := AuditExec([]string{"a"}, w,
		[]Admission{adm(10), adm(11), adm(12), adm(14)},
		[]Execution{ex(9, 1), ex(10, 200), ex(11, 4000), ex(11, 300), ex(14, 1), {Key: "b", SecondMs: 10_000, AtMs: 10_001}},
		time.Second)
	want := ExecResult{Expected: 4, ExactlyOnce: 1, AtLeastOnce: 2, ExtraExecs: 1, MissedQueued: 1, MissedNever: 1,
		LagP50Ms: 300, LagP99Ms: 300, LagMaxMs: 300} // two lags, 200 and 300: index ⌊2·0.99⌋ = 1
	if !reflect.DeepEqual(got, want) {
		t.Errorf("AuditExec:\n got %+v\nwant %+v", got, want)
	}
	late := AuditExec([]string{"a"}, w, nil, []Execution{ex(10, 1001), ex(11, 1000)}, time.Second)
	if late.Late != 1 || late.AtLeastOnce != 2 || late.MissedNever != 2 {
		t.Errorf("late bound 1 s: got %+v; want 1 late (1001 ms), 2 executed, 2 never admitted", late)
	}
	table := ExecTable([]ExecRow{{System: "s", Jobs: 1, Procs: "1", Window: w, Late: time.Second, Result: got, Injected: map[Kind]int{Kill: 2}}})
	if !strings.Contains(table, "| s | 1 | 1 | 4s | 4 | 1 (25.00 %) | 2 (50.00 %) (1) | 0 (> 1s) | 1 / 1 | 300 / 300 / 300 ms | 2 / 0 / 0 / 0 (0) |") {
		t.Errorf("ExecTable:\n%s", table)
	}
}
