package chaos

import (
	"reflect"
	"testing"
	"time"
)

func TestGapsAndTies(t *testing.T) {
	t.Parallel()
	w := Window{FromMs: 10_000, ToMs: 30_000} // seconds 10 … 29
	var adm []Admission
	admit := func(key string, from, to int64) { // seconds [from, to)
		for s := from; s < to; s++ {
			adm = append(adm, Admission{Key: key, SecondMs: s * 1000, AdmittedMs: s*1000 + 5})
		}
	}
	admit("a", 10, 12) // a: missed 12 … 14 (a killed holder), then 18 … 19 (a stop of every process)
	admit("a", 15, 18)
	admit("a", 20, 30)
	admit("b", 10, 25) // b: missed 25 … 26, tied to nothing (its fault held other keys)
	admit("b", 27, 30)
	admit("c", 10, 21) // c: missed 21, a stop whose holder held c; 22, then again 23 … 29 after a stop too late to be its cause
	admit("c", 22, 23)
	gaps := Gaps([]string{"a", "b", "c"}, w, adm)
	wantGaps := []Gap{{"a", 12_000, 3}, {"a", 18_000, 2}, {"b", 25_000, 2}, {"c", 21_000, 1}, {"c", 23_000, 7}}
	if !reflect.DeepEqual(gaps, wantGaps) {
		t.Fatalf("Gaps:\n got %v\nwant %v", gaps, wantGaps)
	}
	faults := []Applied{
		{AtMs: 11_050, UntilMs: 13_000, Kind: Kill, Owners: []string{"r1"}, Keys: []string{"a"}},    // before a's gap: not its cause
		{AtMs: 12_060, UntilMs: 14_000, Kind: Kill, Owners: []string{"r2"}, Keys: []string{"a"}},    // a's first gap
		{AtMs: 17_900, UntilMs: 19_500, Kind: StopAll, Owners: []string{"r1", "r2", "r3"}},          // a's second gap (18 s within [16.9 s, 19.5 s])
		{AtMs: 21_010, UntilMs: 23_000, Kind: Stop, Owners: []string{"r3"}, Keys: []string{"c"}},    // c's gap at 21
		{AtMs: 25_030, UntilMs: 25_030, Kind: Restart, Owners: []string{"r1"}, Keys: []string{"a"}}, // b's gap: held a, not b
		{AtMs: 27_100, UntilMs: 29_000, Kind: Stop, Owners: []string{"r2"}, Keys: []string{"c"}},    // c's gap from 23: 4.1 s after it, more than lease + 1 s
	}
	got := Tie(gaps, faults, 3*time.Second)
	want := Ties{ByKind: map[Kind]int64{Kill: 3, StopAll: 2, Stop: 1}, Faults: 3, Untied: 9,
		Unknown: []Gap{{"b", 25_000, 2}, {"c", 23_000, 7}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Tie:\n got %+v\nwant %+v", got, want)
	}
	// A longer lease reaches further: the stop 4.1 s after c's second gap is its cause at 30 s.
	if got := Tie(gaps, faults, 30*time.Second); got.ByKind[Stop] != 8 || got.Untied != 2 {
		t.Errorf("Tie with a 30 s lease: %+v; want 8 stop, 2 untied", got)
	}
}

func TestQlschedLogRefusals(t *testing.T) {
	t.Parallel()
	q := &Qlsched{}
	for _, line := range []string{
		`{"level":"INFO","msg":"admit lost its fence (race)","trigger":"t0001"}`,
		`{"level":"INFO","msg":"skip lost its fence (race)"}`,
		`{"level":"ERROR","msg":"admit failed","error":"ERROR: duplicate key value violates unique constraint \"runs_occurrence_key\" (SQLSTATE 23505)"}`,
		`{"level":"INFO","msg":"admit refused: a revision changed since the claim; claim left to expire"}`,
		`{"level":"INFO","msg":"replica running"}`,
		`not json, lost its fence (race)`,
	} {
		q.observe([]byte(line))
	}
	if f, u := q.Refused(); f != 2 || u != 1 {
		t.Errorf("Refused() = %d fence, %d unique; want 2, 1", f, u)
	}
}
