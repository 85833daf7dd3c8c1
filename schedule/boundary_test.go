package schedule

import (
	"errors"
	"testing"
	"time"
)

// The misfire grace at its boundaries (docs/scheduling.md: a due occurrence o is on time when
// now - o <= grace): an occurrence exactly grace late is on time, one millisecond more is missed,
// both when the missed ones are counted one by one and when, past MaxMissedCount, the latest missed
// one, L, is found by the bounded search.
func TestDecideAtTheBoundaries(t *testing.T) {
	t.Parallel()
	ptr := func(v int64) *int64 { return &v }
	hourly := mustSchedule(t, "0 * * * *", "UTC")
	everySecond := mustSchedule(t, "* * * * * *", "UTC")
	far := ms(t, "2024-01-01T10:00:00Z") - (MaxMissedCount+5_000)*1000 // more missed seconds than the count's cap
	grace := DefaultMisfireGrace.Milliseconds()
	for _, tc := range []struct {
		name   string
		s      *Schedule
		policy MisfirePolicy
		cursor int64
		now    string
		want   Decision
	}{
		{"exactly the grace late, skip", hourly, MisfireSkip, ms(t, "2024-01-01T10:00:00Z"), "2024-01-01T10:01:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T10:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T11:00:00Z")}},
		{"exactly the grace late, fire_once", hourly, MisfireFireOnce, ms(t, "2024-01-01T10:00:00Z"), "2024-01-01T10:01:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T10:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T11:00:00Z")}},
		{"1 ms beyond the grace, skip", hourly, MisfireSkip, ms(t, "2024-01-01T10:00:00Z"), "2024-01-01T10:01:00.001Z",
			Decision{Kind: DecisionSkip, NextFireAtMs: ms(t, "2024-01-01T11:00:00Z"), Missed: 1}},
		{"1 ms beyond the grace, fire_once", hourly, MisfireFireOnce, ms(t, "2024-01-01T10:00:00Z"), "2024-01-01T10:01:00.001Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T10:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T11:00:00Z"), CatchUp: true}},
		{"three due, the last exactly the grace late, skip", hourly, MisfireSkip, ms(t, "2024-01-01T10:00:00Z"), "2024-01-01T12:01:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T12:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T13:00:00Z"), Missed: 2}},
		{"three due, the last exactly the grace late, fire_once", hourly, MisfireFireOnce, ms(t, "2024-01-01T10:00:00Z"), "2024-01-01T12:01:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T11:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T12:00:00Z"), Missed: 1, CatchUp: true}},
		{"past the count's cap, one exactly the grace late, skip", everySecond, MisfireSkip, far, "2024-01-01T10:00:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T09:59:00Z"), NextFireAtMs: ms(t, "2024-01-01T09:59:01Z"), Missed: MaxMissedCount}},
		{"past the count's cap, one exactly the grace late, fire_once", everySecond, MisfireFireOnce, far, "2024-01-01T10:00:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T09:58:59Z"), NextFireAtMs: ms(t, "2024-01-01T09:59:00Z"), Missed: MaxMissedCount, CatchUp: true}},
		{"past the count's cap, one 1 ms beyond the grace, fire_once", everySecond, MisfireFireOnce, far, "2024-01-01T10:00:00.001Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T09:59:00Z"), NextFireAtMs: ms(t, "2024-01-01T09:59:01Z"), Missed: MaxMissedCount, CatchUp: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Decide(tc.s, tc.policy, grace, ptr(tc.cursor), ms(t, tc.now))
			got.LastMissedMs = 0 // TestDecideLastMissed checks it
			if got != tc.want {
				t.Errorf("Decide(grace %d ms, cursor %s, now %s)\n got %s\nwant %s", grace, utc(tc.cursor), tc.now, decisionString(got), decisionString(tc.want))
			}
		})
	}
}

// CheckMisfireGrace accepts whole milliseconds from MinMisfireGrace to MaxMisfireGrace.
func TestCheckMisfireGrace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"1s", true}, {"60s", true}, {"24h", true}, {"1500ms", true},
		{"0s", false}, {"999ms", false}, {"24h0m0.001s", false}, {"-1s", false}, {"1.0005s", false},
	} {
		g, err := time.ParseDuration(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckMisfireGrace(g); (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidMisfireGrace)) {
			t.Errorf("CheckMisfireGrace(%s) = %v; want ok %t", tc.in, err, tc.ok)
		}
	}
}
