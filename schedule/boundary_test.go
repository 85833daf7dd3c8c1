package schedule

import "testing"

// The misfire rule at its boundaries (docs/scheduling.md: "the cursor and every later occurrence
// <= now" are due, and fire_once fires the latest of them, L): an occurrence exactly at now is due,
// both when the due ones are counted one by one and when, past MaxMissedCount, L is found by the
// bounded search.
func TestDecideAtTheBoundaries(t *testing.T) {
	t.Parallel()
	ptr := func(v int64) *int64 { return &v }
	hourly := mustSchedule(t, "0 * * * *", "UTC")
	everySecond := mustSchedule(t, "* * * * * *", "UTC")
	far := ms(t, "2024-01-01T10:00:00Z") - (MaxMissedCount+5_000)*1000 // more due seconds than the count's cap
	for _, tc := range []struct {
		name   string
		s      *Schedule
		policy MisfirePolicy
		cursor int64
		now    string
		want   Decision
	}{
		{"three due, the last exactly now, fire_once", hourly, MisfireFireOnce, ms(t, "2024-01-01T10:00:00Z"), "2024-01-01T12:00:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T12:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T13:00:00Z"), Missed: 2, CatchUp: true}},
		{"three due, the last exactly now, skip", hourly, MisfireSkip, ms(t, "2024-01-01T10:00:00Z"), "2024-01-01T12:00:00Z",
			Decision{Kind: DecisionSkip, NextFireAtMs: ms(t, "2024-01-01T13:00:00Z"), Missed: 3}},
		{"past the count's cap, the latest exactly now, fire_once", everySecond, MisfireFireOnce, far, "2024-01-01T10:00:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T10:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T10:00:01Z"), Missed: MaxMissedCount, CatchUp: true}},
		{"past the count's cap, the latest just before now, fire_once", everySecond, MisfireFireOnce, far, "2024-01-01T10:00:00.999Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T10:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T10:00:01Z"), Missed: MaxMissedCount, CatchUp: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Decide(tc.s, tc.policy, ptr(tc.cursor), ms(t, tc.now)); got != tc.want {
				t.Errorf("Decide(cursor %s, now %s)\n got %s\nwant %s", utc(tc.cursor), tc.now, decisionString(got), decisionString(tc.want))
			}
		})
	}
}
