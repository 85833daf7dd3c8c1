package schedule

import (
	"testing"
	"time"
)

// TestDecideLastMissed checks Decision.LastMissedMs: the latest occurrence the decision passes
// over without a Run (under skip the latest missed one, under fire_once the one before the Run
// it fires), 0 when it passes over none; also past the count's cap, where it is searched for.
func TestDecideLastMissed(t *testing.T) {
	t.Parallel()
	const minute = time.Minute
	for _, tc := range []struct {
		name, spec string
		policy     MisfirePolicy
		cursor     string
		now        string
		wantMissed int64
		wantLast   string // "" = 0
	}{
		{"on time", "0 * * * *", MisfireSkip, "2024-01-01T12:00:00Z", "2024-01-01T12:00:30Z", 0, ""},
		{"3-hour outage, skip", "0 * * * *", MisfireSkip, "2024-01-01T09:00:00Z", "2024-01-01T12:00:30Z", 3, "2024-01-01T11:00:00Z"},
		{"3-hour outage, fire_once", "0 * * * *", MisfireFireOnce, "2024-01-01T09:00:00Z", "2024-01-01T12:00:30Z", 2, "2024-01-01T10:00:00Z"},
		{"one missed, fire_once fires it", "0 * * * *", MisfireFireOnce, "2024-01-01T11:00:00Z", "2024-01-01T11:30:00Z", 0, ""},
		{"3-day outage, skip", "0 * * * *", MisfireSkip, "2024-01-01T11:00:00Z", "2024-01-04T11:30:00Z", 73, "2024-01-04T11:00:00Z"},
		{"3-day outage, fire_once", "0 * * * *", MisfireFireOnce, "2024-01-01T11:00:00Z", "2024-01-04T11:30:00Z", 72, "2024-01-04T10:00:00Z"},
		{"every second past the cap, skip", "* * * * * *", MisfireSkip, "2024-01-01T09:00:00Z", "2024-01-01T12:00:30Z", MaxMissedCount, "2024-01-01T11:59:29Z"},
		{"every second past the cap, fire_once", "* * * * * *", MisfireFireOnce, "2024-01-01T09:00:00Z", "2024-01-01T12:00:30Z", MaxMissedCount, "2024-01-01T11:59:28Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := mustSchedule(t, tc.spec, "UTC")
			cursor := ms(t, tc.cursor)
			d := Decide(s, tc.policy, minute.Milliseconds(), &cursor, ms(t, tc.now))
			var want int64
			if tc.wantLast != "" {
				want = ms(t, tc.wantLast)
			}
			if d.Missed != tc.wantMissed || d.LastMissedMs != want {
				t.Errorf("Decide(%s, cursor %s, now %s) = missed %d, last %d (%s); want missed %d, last %s",
					tc.policy, tc.cursor, tc.now, d.Missed, d.LastMissedMs, utc(d.LastMissedMs), tc.wantMissed, tc.wantLast)
			}
		})
	}
}
