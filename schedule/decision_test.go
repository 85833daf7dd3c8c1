package schedule

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// ms parses an RFC 3339 time into Unix milliseconds.
func ms(t testing.TB, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("bad test time %q: %v", s, err)
	}
	return v.UnixMilli()
}

// utc formats Unix milliseconds for failure messages and comparisons.
func utc(v int64) string {
	if v == NoOccurrence {
		return "NoOccurrence"
	}
	return time.UnixMilli(v).UTC().Format("2006-01-02T15:04:05.000Z")
}

func mustSchedule(t testing.TB, spec, zone string) *Schedule {
	t.Helper()
	s, err := ParseSchedule(spec, zone)
	if err != nil {
		t.Fatalf("ParseSchedule(%q, %q): unexpected error: %v", spec, zone, err)
	}
	return s
}

func TestDecisionParseMisfirePolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want MisfirePolicy
		ok   bool
	}{
		{"skip", MisfireSkip, true},
		{"fire_once", MisfireFireOnce, true},
		{"", "", false},
		{"fire-once", "", false},
		{"SKIP", "", false},
		{"backfill", "", false},
	} {
		got, err := ParseMisfirePolicy(tc.in)
		if tc.ok {
			if err != nil || got != tc.want {
				t.Errorf("ParseMisfirePolicy(%q) = %q, %v; want %q, nil", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrInvalidMisfirePolicy) || !strings.Contains(err.Error(), "skip") || !strings.Contains(err.Error(), "fire_once") {
			t.Errorf("ParseMisfirePolicy(%q) = %q, %v; want an ErrInvalidMisfirePolicy naming skip and fire_once", tc.in, got, err)
		}
	}
}

func TestParseScheduleErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, spec, zone string
		want             []string // every fragment must appear in the message
	}{
		{"empty spec", "", "UTC", []string{"cron spec is empty"}},
		{"blank spec", "   ", "UTC", []string{"cron spec is empty"}},
		{"every", "@every 5m", "UTC", []string{`"@every 5m"`, "@every is an interval trigger, not cron"}},
		{"bare every", "@every", "UTC", []string{"@every is an interval trigger"}},
		{"TZ prefix", "TZ=UTC 0 * * * *", "UTC", []string{`"TZ=UTC 0 * * * *"`, "TZ=/CRON_TZ= prefix is not allowed"}},
		{"CRON_TZ prefix", "CRON_TZ=Europe/Berlin 0 * * * *", "Europe/Berlin", []string{"TZ=/CRON_TZ= prefix is not allowed"}},
		{"unknown descriptor", "@fortnightly", "UTC", []string{`"@fortnightly"`, "unknown descriptor"}},
		{"descriptor case", "@DAILY", "UTC", []string{"unknown descriptor"}},
		{"four fields", "0 * * *", "UTC", []string{"found 4 fields", "want 5"}},
		{"seven fields", "0 0 0 * * * *", "UTC", []string{"found 7 fields"}},
		{"minute range", "61 * * * *", "UTC", []string{`minute field "61"`, "above maximum"}},
		{"hour range", "0 24 * * *", "UTC", []string{`hour field "24"`, "above maximum"}},
		{"day-of-month range", "0 0 0 * *", "UTC", []string{`day-of-month field "0"`, "below minimum"}},
		{"month range", "0 0 * 13 *", "UTC", []string{`month field "13"`}},
		{"month name", "0 0 * foo *", "UTC", []string{`month field "foo"`}},
		{"day-of-week 7", "0 0 * * 7", "UTC", []string{`day-of-week field "7"`}},
		{"seconds range", "60 0 0 * * *", "UTC", []string{`seconds field "60"`}},
		{"zero step", "*/0 * * * *", "UTC", []string{`minute field "*/0"`, "step"}},
		{"30 February", "0 0 30 2 *", "UTC", []string{`"0 0 30 2 *" never fires`, "February"}},
		{"31st of short months", "0 0 31 4,6,9,11 *", "UTC", []string{"never fires"}},
		{"empty zone", "0 * * * *", "", []string{"time zone is empty", "IANA"}},
		{"Local zone", "0 * * * *", "Local", []string{`time zone "Local" depends on the host`}},
		{"the host's localtime", "0 * * * *", "localtime", []string{`time zone "localtime" depends on the host`}},
		{"posixrules", "0 * * * *", "posixrules", []string{`time zone "posixrules" depends on the host`}},
		{"a posix/ copy", "0 * * * *", "posix/Europe/Berlin", []string{`time zone "posix/Europe/Berlin" depends on the host`}},
		{"a right/ zone (leap seconds)", "0 * * * *", "right/UTC", []string{`time zone "right/UTC" depends on the host`}},
		{"unknown zone", "0 * * * *", "Mars/Olympus_Mons", []string{`time zone "Mars/Olympus_Mons" is not a known IANA time zone`}},
		{"path zone", "0 * * * *", "../../etc/passwd", []string{`time zone "../../etc/passwd" is not a known IANA time zone`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := ParseSchedule(tc.spec, tc.zone)
			if err == nil {
				t.Fatalf("ParseSchedule(%q, %q) = %v, nil; want an error", tc.spec, tc.zone, s)
			}
			if !errors.Is(err, ErrInvalidSchedule) {
				t.Errorf("ParseSchedule(%q, %q) error %q does not wrap ErrInvalidSchedule", tc.spec, tc.zone, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ParseSchedule(%q, %q) error %q; want it to contain %q", tc.spec, tc.zone, err, w)
				}
			}
		})
	}
}

func TestParseScheduleAccepts(t *testing.T) {
	t.Parallel()
	const from = "2024-05-15T10:20:30Z" // a Wednesday
	for _, tc := range []struct {
		spec, zone string
		want       []string // successive Next results from `from`
	}{
		{"@yearly", "UTC", []string{"2025-01-01T00:00:00.000Z", "2026-01-01T00:00:00.000Z"}},
		{"@annually", "UTC", []string{"2025-01-01T00:00:00.000Z"}},
		{"@monthly", "UTC", []string{"2024-06-01T00:00:00.000Z", "2024-07-01T00:00:00.000Z"}},
		{"@weekly", "UTC", []string{"2024-05-19T00:00:00.000Z", "2024-05-26T00:00:00.000Z"}},
		{"@daily", "UTC", []string{"2024-05-16T00:00:00.000Z"}},
		{"@midnight", "UTC", []string{"2024-05-16T00:00:00.000Z"}},
		{"@hourly", "UTC", []string{"2024-05-15T11:00:00.000Z", "2024-05-15T12:00:00.000Z"}},
		{"@daily", "Asia/Kolkata", []string{"2024-05-15T18:30:00.000Z"}},
		{"*/15 * * * * *", "UTC", []string{"2024-05-15T10:20:45.000Z", "2024-05-15T10:21:00.000Z"}},
		{"30 * * * * *", "UTC", []string{"2024-05-15T10:21:30.000Z"}},
		{"0 0 12 * * *", "UTC", []string{"2024-05-15T12:00:00.000Z", "2024-05-16T12:00:00.000Z"}},
		{"  5 4 * * *  ", "UTC", []string{"2024-05-16T04:05:00.000Z"}},
		{"0 9 * jan-mar,may mon-fri", "UTC", []string{"2024-05-16T09:00:00.000Z", "2024-05-17T09:00:00.000Z", "2024-05-20T09:00:00.000Z"}},
		{"0 0 1 * ?", "UTC", []string{"2024-06-01T00:00:00.000Z"}},
		{"0 0 13 * 5", "UTC", []string{"2024-05-17T00:00:00.000Z", "2024-05-24T00:00:00.000Z"}}, // day-of-month OR day-of-week
	} {
		t.Run(tc.spec+"/"+tc.zone, func(t *testing.T) {
			t.Parallel()
			s := mustSchedule(t, tc.spec, tc.zone)
			if s.Spec() != tc.spec || s.TimeZone() != tc.zone {
				t.Errorf("Spec(), TimeZone() = %q, %q; want %q, %q", s.Spec(), s.TimeZone(), tc.spec, tc.zone)
			}
			at := ms(t, from)
			for i, want := range tc.want {
				at = s.Next(at)
				if got := utc(at); got != want {
					t.Fatalf("occurrence %d after %s: got %s, want %s", i+1, from, got, want)
				}
			}
		})
	}
}

func TestScheduleNextIsStrictlyAfter(t *testing.T) {
	t.Parallel()
	s := mustSchedule(t, "0 0 * * *", "UTC")
	for _, tc := range []struct{ after, want int64 }{
		{0, 86_400_000},
		{-1, 0},
		{-86_400_001, -86_400_000},
		{-86_400_000, 0},
		{86_399_999, 86_400_000},
		{86_400_000, 2 * 86_400_000},
	} {
		if got := s.Next(tc.after); got != tc.want {
			t.Errorf("Next(%d) = %d, want %d", tc.after, got, tc.want)
		}
	}
	if got := s.Next(maxSupportedMs); got != NoOccurrence {
		t.Errorf("Next(year 10000) = %d, want NoOccurrence", got)
	}
}

// TestScheduleDST pins down the documented behaviour at offset changes in three
// DST regimes (North America, Europe, the southern hemisphere), a 30-minute shift
// and a midnight gap. robfig/cron alone differs: it drops a fixed time that falls
// in a gap and fires a repeated fixed time twice.
func TestScheduleDST(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, zone, spec, from string
		want                   []string
	}{
		// America/New_York 2024: 02:00 EST → 03:00 EDT on 10 Mar (07:00Z); 02:00 EDT → 01:00 EST on 3 Nov (06:00Z).
		{"NY gap fixed fires after the gap", "America/New_York", "30 2 * * *", "2024-03-09T12:00:00Z",
			[]string{"2024-03-10T07:00:00.000Z", "2024-03-11T06:30:00.000Z"}},
		{"NY gap two fixed times collapse", "America/New_York", "0,30 2 * * *", "2024-03-09T12:00:00Z",
			[]string{"2024-03-10T07:00:00.000Z", "2024-03-11T06:00:00.000Z", "2024-03-11T06:30:00.000Z"}},
		{"NY gap merges with 03:00", "America/New_York", "0 2,3 * * *", "2024-03-09T12:00:00Z",
			[]string{"2024-03-10T07:00:00.000Z", "2024-03-11T06:00:00.000Z", "2024-03-11T07:00:00.000Z"}},
		{"NY gap seconds field", "America/New_York", "15 30 2 * * *", "2024-03-09T12:00:00Z",
			[]string{"2024-03-10T07:00:00.000Z", "2024-03-11T06:30:15.000Z"}},
		{"NY gap hourly wildcard", "America/New_York", "0 * * * *", "2024-03-10T05:30:00Z",
			[]string{"2024-03-10T06:00:00.000Z", "2024-03-10T07:00:00.000Z", "2024-03-10T08:00:00.000Z"}},
		{"NY gap wildcard skips 02:30", "America/New_York", "30 * * * *", "2024-03-10T06:00:00Z",
			[]string{"2024-03-10T06:30:00.000Z", "2024-03-10T07:30:00.000Z"}},
		{"NY fall-back fixed fires once", "America/New_York", "30 1 * * *", "2024-11-02T12:00:00Z",
			[]string{"2024-11-03T05:30:00.000Z", "2024-11-04T06:30:00.000Z"}},
		{"NY fall-back fixed seconds field", "America/New_York", "0 30 1 * * *", "2024-11-02T12:00:00Z",
			[]string{"2024-11-03T05:30:00.000Z", "2024-11-04T06:30:00.000Z"}},
		{"NY fall-back daily", "America/New_York", "@daily", "2024-11-02T12:00:00Z",
			[]string{"2024-11-03T04:00:00.000Z", "2024-11-04T05:00:00.000Z"}},
		{"NY fall-back hourly wildcard", "America/New_York", "0 * * * *", "2024-11-03T03:30:00Z",
			[]string{"2024-11-03T04:00:00.000Z", "2024-11-03T05:00:00.000Z", "2024-11-03T06:00:00.000Z", "2024-11-03T07:00:00.000Z"}},
		{"NY fall-back minute wildcard", "America/New_York", "*/30 1 * * *", "2024-11-03T04:50:00Z",
			[]string{"2024-11-03T05:00:00.000Z", "2024-11-03T05:30:00.000Z", "2024-11-03T06:00:00.000Z", "2024-11-03T06:30:00.000Z", "2024-11-04T06:00:00.000Z"}},
		{"NY fall-back inside the repeat", "America/New_York", "45 1 * * *", "2024-11-03T06:10:00Z", // 01:10 EST, second copy
			[]string{"2024-11-04T06:45:00.000Z"}},

		// Europe/Berlin 2024: 02:00 CET → 03:00 CEST on 31 Mar (01:00Z); 03:00 CEST → 02:00 CET on 27 Oct (01:00Z).
		{"Berlin gap fixed", "Europe/Berlin", "30 2 * * *", "2024-03-30T12:00:00Z",
			[]string{"2024-03-31T01:00:00.000Z", "2024-04-01T00:30:00.000Z"}},
		{"Berlin gap wildcard", "Europe/Berlin", "*/20 * * * *", "2024-03-31T00:30:00Z",
			[]string{"2024-03-31T00:40:00.000Z", "2024-03-31T01:00:00.000Z", "2024-03-31T01:20:00.000Z"}},
		{"Berlin fall-back fixed", "Europe/Berlin", "30 2 * * *", "2024-10-26T12:00:00Z",
			[]string{"2024-10-27T00:30:00.000Z", "2024-10-28T01:30:00.000Z"}},
		{"Berlin fall-back fixed list", "Europe/Berlin", "0,20,40 2 * * *", "2024-10-27T00:30:00Z",
			[]string{"2024-10-27T00:40:00.000Z", "2024-10-28T01:00:00.000Z"}},
		{"Berlin fall-back wildcard", "Europe/Berlin", "*/20 * * * *", "2024-10-27T00:50:00Z",
			[]string{"2024-10-27T01:00:00.000Z", "2024-10-27T01:20:00.000Z", "2024-10-27T01:40:00.000Z"}},

		// Australia/Sydney 2024: 03:00 AEDT → 02:00 AEST on 7 Apr (6 Apr 16:00Z); 02:00 AEST → 03:00 AEDT on 6 Oct (5 Oct 16:00Z).
		{"Sydney gap fixed", "Australia/Sydney", "30 2 * * *", "2024-10-05T00:00:00Z",
			[]string{"2024-10-05T16:00:00.000Z", "2024-10-06T15:30:00.000Z"}},
		{"Sydney fall-back fixed", "Australia/Sydney", "30 2 * * *", "2024-04-06T00:00:00Z",
			[]string{"2024-04-06T15:30:00.000Z", "2024-04-07T16:30:00.000Z"}},
		{"Sydney fall-back hourly wildcard", "Australia/Sydney", "0 * * * *", "2024-04-06T14:30:00Z",
			[]string{"2024-04-06T15:00:00.000Z", "2024-04-06T16:00:00.000Z", "2024-04-06T17:00:00.000Z"}},

		// Australia/Lord_Howe 2024 shifts by 30 minutes: 02:00 +11 → 01:30 +1030 on 7 Apr (6 Apr 15:00Z);
		// 02:00 +1030 → 02:30 +11 on 6 Oct (5 Oct 15:30Z).
		{"Lord Howe fall-back fixed", "Australia/Lord_Howe", "45 1 * * *", "2024-04-06T12:00:00Z",
			[]string{"2024-04-06T14:45:00.000Z", "2024-04-07T15:15:00.000Z"}},
		{"Lord Howe gap fixed", "Australia/Lord_Howe", "15 2 * * *", "2024-10-05T12:00:00Z",
			[]string{"2024-10-05T15:30:00.000Z", "2024-10-06T15:15:00.000Z"}},

		// America/Sao_Paulo 2018: midnight did not exist on 4 Nov (00:00 -03 → 01:00 -02 at 03:00Z).
		{"Sao Paulo midnight gap", "America/Sao_Paulo", "0 0 * * *", "2018-11-02T12:00:00Z",
			[]string{"2018-11-03T03:00:00.000Z", "2018-11-04T03:00:00.000Z", "2018-11-05T02:00:00.000Z"}},
		// Beyond its transition table (2037) Go derives offsets from the zone's rule and, on
		// the last day of a leap year, reports a zone period that already ended.
		{"rule-derived offsets, leap year end, south", "Australia/Sydney", "0 0 29 2 *", "2040-02-28T13:00:00Z",
			[]string{"2044-02-28T13:00:00.000Z", "2048-02-28T13:00:00.000Z"}},
		{"rule-derived offsets, leap year end, north", "America/New_York", "@daily", "2040-12-30T12:00:00Z",
			[]string{"2040-12-31T05:00:00.000Z", "2041-01-01T05:00:00.000Z"}},
		{"rule-derived offsets, DST gap", "America/New_York", "30 2 * * *", "2044-03-12T12:00:00Z",
			[]string{"2044-03-13T07:00:00.000Z", "2044-03-14T06:30:00.000Z"}},

		{"Sao Paulo midnight gap wildcard", "America/Sao_Paulo", "0 * * * *", "2018-11-04T01:30:00Z",
			[]string{"2018-11-04T02:00:00.000Z", "2018-11-04T03:00:00.000Z", "2018-11-04T04:00:00.000Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := mustSchedule(t, tc.spec, tc.zone)
			at := ms(t, tc.from)
			for i, want := range tc.want {
				at = s.Next(at)
				if got := utc(at); got != want {
					t.Fatalf("%s %q occurrence %d after %s: got %s (%s), want %s",
						tc.zone, tc.spec, i+1, tc.from, got, time.UnixMilli(at).In(s.loc).Format("2006-01-02 15:04:05 MST"), want)
				}
			}
		})
	}
}

func TestScheduleLeapDay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		zone, from string
		want       []string
	}{
		{"UTC", "2023-01-01T00:00:00Z", []string{"2024-02-29T00:00:00.000Z", "2028-02-29T00:00:00.000Z", "2032-02-29T00:00:00.000Z"}},
		{"UTC", "2024-02-29T00:00:00Z", []string{"2028-02-29T00:00:00.000Z"}},
		// 2100 is not a leap year: eight years apart, beyond robfig's own five-year search.
		{"UTC", "2097-03-01T00:00:00Z", []string{"2104-02-29T00:00:00.000Z"}},
		{"Europe/Berlin", "2024-01-01T00:00:00Z", []string{"2024-02-28T23:00:00.000Z", "2028-02-28T23:00:00.000Z"}},
	} {
		s := mustSchedule(t, "0 0 29 2 *", tc.zone)
		at := ms(t, tc.from)
		for i, want := range tc.want {
			at = s.Next(at)
			if got := utc(at); got != want {
				t.Errorf("0 0 29 2 * in %s, occurrence %d after %s: got %s, want %s", tc.zone, i+1, tc.from, got, want)
				break
			}
		}
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	ptr := func(v int64) *int64 { return &v }
	const minute, hour = time.Minute, time.Hour
	for _, tc := range []struct {
		name, spec, zone string
		policy           MisfirePolicy
		grace            time.Duration
		cursor           *int64
		now              string
		want             Decision
	}{
		{"init", "0 * * * *", "UTC", MisfireSkip, minute, nil, "2024-01-01T10:20:00Z",
			Decision{Kind: DecisionInit, NextFireAtMs: ms(t, "2024-01-01T11:00:00Z")}},
		{"init on an occurrence is strictly after", "0 * * * *", "UTC", MisfireFireOnce, minute, nil, "2024-01-01T10:00:00Z",
			Decision{Kind: DecisionInit, NextFireAtMs: ms(t, "2024-01-01T11:00:00Z")}},
		{"not due", "0 * * * *", "UTC", MisfireSkip, minute, ptr(ms(t, "2024-01-01T11:00:00Z")), "2024-01-01T10:59:59.999Z",
			Decision{Kind: DecisionNotDue, NextFireAtMs: ms(t, "2024-01-01T11:00:00Z")}},
		{"fire exactly on time", "0 * * * *", "UTC", MisfireSkip, minute, ptr(ms(t, "2024-01-01T11:00:00Z")), "2024-01-01T11:00:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T11:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T12:00:00Z")}},
		{"late within the grace (skip)", "0 * * * *", "UTC", MisfireSkip, minute, ptr(ms(t, "2024-01-01T11:00:00Z")), "2024-01-01T11:00:59.999Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T11:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T12:00:00Z")}},
		{"late within the grace (fire_once)", "0 * * * *", "UTC", MisfireFireOnce, minute, ptr(ms(t, "2024-01-01T11:00:00Z")), "2024-01-01T11:00:59.999Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T11:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T12:00:00Z")}},
		// The hourly case: 59 minutes late is beyond a 60 s grace, and the policy decides.
		{"hourly 59 min late, grace 60 s, skip", "0 * * * *", "UTC", MisfireSkip, minute, ptr(ms(t, "2024-01-01T11:00:00Z")), "2024-01-01T11:59:00Z",
			Decision{Kind: DecisionSkip, NextFireAtMs: ms(t, "2024-01-01T12:00:00Z"), Missed: 1}},
		{"hourly 59 min late, grace 60 s, fire_once", "0 * * * *", "UTC", MisfireFireOnce, minute, ptr(ms(t, "2024-01-01T11:00:00Z")), "2024-01-01T11:59:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T11:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T12:00:00Z"), CatchUp: true}},
		{"hourly 59 min late, grace 1 h, skip", "0 * * * *", "UTC", MisfireSkip, hour, ptr(ms(t, "2024-01-01T11:00:00Z")), "2024-01-01T11:59:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T11:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T12:00:00Z")}},
		// The every-second case: the round comes 1.1 s late. Within the grace both due
		// occurrences are on time: the first is admitted now, its successor (still due) by the
		// next claim of the row.
		{"every second 1.1 s late, grace 60 s, skip", "* * * * * *", "UTC", MisfireSkip, minute, ptr(ms(t, "2024-01-01T10:00:00Z")), "2024-01-01T10:00:01.100Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T10:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T10:00:01Z")}},
		{"every second 1.1 s late, its successor, grace 60 s, skip", "* * * * * *", "UTC", MisfireSkip, minute, ptr(ms(t, "2024-01-01T10:00:01Z")), "2024-01-01T10:00:01.100Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T10:00:01Z"), NextFireAtMs: ms(t, "2024-01-01T10:00:02Z")}},
		{"every second 1.1 s late, grace 1 s, skip", "* * * * * *", "UTC", MisfireSkip, time.Second, ptr(ms(t, "2024-01-01T10:00:00Z")), "2024-01-01T10:00:01.100Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T10:00:01Z"), NextFireAtMs: ms(t, "2024-01-01T10:00:02Z"), Missed: 1}},
		{"every second 1.1 s late, grace 1 s, fire_once", "* * * * * *", "UTC", MisfireFireOnce, time.Second, ptr(ms(t, "2024-01-01T10:00:00Z")), "2024-01-01T10:00:01.100Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T10:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T10:00:01Z"), CatchUp: true}},
		{"two due, the later on time, skip", "0 * * * *", "UTC", MisfireSkip, minute, ptr(ms(t, "2024-01-01T11:00:00Z")), "2024-01-01T12:00:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T12:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T13:00:00Z"), Missed: 1}},
		{"two due, the later on time, fire_once", "0 * * * *", "UTC", MisfireFireOnce, minute, ptr(ms(t, "2024-01-01T11:00:00Z")), "2024-01-01T12:00:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T11:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T12:00:00Z"), CatchUp: true}},
		// A three-hour outage of an hourly job with a 60 s grace, the round 30 s after 12:00:
		// 09:00, 10:00, 11:00 are missed, 12:00 is on time.
		{"3-hour outage, grace 60 s, skip", "0 * * * *", "UTC", MisfireSkip, minute, ptr(ms(t, "2024-01-01T09:00:00Z")), "2024-01-01T12:00:30Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T12:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T13:00:00Z"), Missed: 3}},
		{"3-hour outage, grace 60 s, fire_once", "0 * * * *", "UTC", MisfireFireOnce, minute, ptr(ms(t, "2024-01-01T09:00:00Z")), "2024-01-01T12:00:30Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T11:00:00Z"), NextFireAtMs: ms(t, "2024-01-01T12:00:00Z"), Missed: 2, CatchUp: true}},
		// The same outage of an every-second job: 09:00:00 … 11:59:29 are missed (10,769, counted
		// to the cap), 11:59:30 … 12:00:30 are on time (61 Runs, one per claim of the row).
		{"3-hour outage every second, grace 60 s, skip", "* * * * * *", "UTC", MisfireSkip, minute, ptr(ms(t, "2024-01-01T09:00:00Z")), "2024-01-01T12:00:30Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T11:59:30Z"), NextFireAtMs: ms(t, "2024-01-01T11:59:31Z"), Missed: MaxMissedCount}},
		{"3-hour outage every second, grace 60 s, fire_once", "* * * * * *", "UTC", MisfireFireOnce, minute, ptr(ms(t, "2024-01-01T09:00:00Z")), "2024-01-01T12:00:30Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-01T11:59:29Z"), NextFireAtMs: ms(t, "2024-01-01T11:59:30Z"), Missed: MaxMissedCount, CatchUp: true}},
		// Hourly job, three-day outage: 1 Jan 11:00 … 4 Jan 11:00 are 73 due occurrences, all beyond the grace.
		{"3-day outage, skip", "0 * * * *", "UTC", MisfireSkip, minute, ptr(ms(t, "2024-01-01T11:00:00Z")), "2024-01-04T11:30:00Z",
			Decision{Kind: DecisionSkip, NextFireAtMs: ms(t, "2024-01-04T12:00:00Z"), Missed: 73}},
		{"3-day outage, fire_once", "0 * * * *", "UTC", MisfireFireOnce, minute, ptr(ms(t, "2024-01-01T11:00:00Z")), "2024-01-04T11:30:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-04T11:00:00Z"), NextFireAtMs: ms(t, "2024-01-04T12:00:00Z"), Missed: 72, CatchUp: true}},
		{"3-day outage, grace 24 h, skip", "0 * * * *", "UTC", MisfireSkip, 24 * hour, ptr(ms(t, "2024-01-01T11:00:00Z")), "2024-01-04T11:30:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-01-03T12:00:00Z"), NextFireAtMs: ms(t, "2024-01-03T13:00:00Z"), Missed: 49}},
		{"unknown policy acts as skip", "0 * * * *", "UTC", MisfirePolicy("bogus"), minute, ptr(ms(t, "2024-01-01T11:00:00Z")), "2024-01-04T11:30:00Z",
			Decision{Kind: DecisionSkip, NextFireAtMs: ms(t, "2024-01-04T12:00:00Z"), Missed: 73}},
		{"a negative grace counts as 0", "0 * * * *", "UTC", MisfireSkip, -hour, ptr(ms(t, "2024-01-01T11:00:00Z")), "2024-01-01T11:00:00.001Z",
			Decision{Kind: DecisionSkip, NextFireAtMs: ms(t, "2024-01-01T12:00:00Z"), Missed: 1}},
		// Daily 02:30 Berlin across the spring-forward gap: 30 Mar 02:30 CET, 31 Mar 03:00 CEST (gap), 1 Apr 02:30 CEST.
		{"outage across a DST gap, fire_once", "30 2 * * *", "Europe/Berlin", MisfireFireOnce, minute, ptr(ms(t, "2024-03-30T01:30:00Z")), "2024-04-01T12:00:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-04-01T00:30:00Z"), NextFireAtMs: ms(t, "2024-04-02T00:30:00Z"), Missed: 2, CatchUp: true}},
		{"outage across a DST repeat, skip", "30 2 * * *", "Europe/Berlin", MisfireSkip, minute, ptr(ms(t, "2024-10-26T00:30:00Z")), "2024-10-28T12:00:00Z",
			Decision{Kind: DecisionSkip, NextFireAtMs: ms(t, "2024-10-29T01:30:00Z"), Missed: 3}},
		// The gap's occurrence (31 Mar 03:00 CEST = 01:00Z) is late from 03:00 CEST, not from a
		// 02:30 that never existed: 60 s after it is on time, 60.001 s is not.
		{"DST gap occurrence at the grace's end", "30 2 * * *", "Europe/Berlin", MisfireSkip, minute, ptr(ms(t, "2024-03-31T01:00:00Z")), "2024-03-31T01:01:00Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-03-31T01:00:00Z"), NextFireAtMs: ms(t, "2024-04-01T00:30:00Z")}},
		{"DST gap occurrence past the grace", "30 2 * * *", "Europe/Berlin", MisfireSkip, minute, ptr(ms(t, "2024-03-31T01:00:00Z")), "2024-03-31T01:01:00.001Z",
			Decision{Kind: DecisionSkip, NextFireAtMs: ms(t, "2024-04-01T00:30:00Z"), Missed: 1}},
		// New York falls back on 3 Nov: "0 * * * *" fires at 01:00 EDT (05:00Z) and 01:00 EST (06:00Z).
		// 30 s after the second 01:00 the first is an hour late, the second on time.
		{"DST repeat, the first 01:00 missed, skip", "0 * * * *", "America/New_York", MisfireSkip, minute, ptr(ms(t, "2024-11-03T05:00:00Z")), "2024-11-03T06:00:30Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-11-03T06:00:00Z"), NextFireAtMs: ms(t, "2024-11-03T07:00:00Z"), Missed: 1}},
		{"DST repeat, the first 01:00 missed, fire_once", "0 * * * *", "America/New_York", MisfireFireOnce, minute, ptr(ms(t, "2024-11-03T05:00:00Z")), "2024-11-03T06:00:30Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-11-03T05:00:00Z"), NextFireAtMs: ms(t, "2024-11-03T06:00:00Z"), CatchUp: true}},
		{"DST repeat, both 01:00 within a 2 h grace", "0 * * * *", "America/New_York", MisfireSkip, 2 * hour, ptr(ms(t, "2024-11-03T05:00:00Z")), "2024-11-03T06:00:30Z",
			Decision{Kind: DecisionFire, ScheduledForMs: ms(t, "2024-11-03T05:00:00Z"), NextFireAtMs: ms(t, "2024-11-03T06:00:00Z")}},
		// Leap-day job down for a century: 2000, 2004 … 2096 are 25 due occurrences; 2100 is no leap year.
		{"leap day, century outage", "0 0 29 2 *", "UTC", MisfireSkip, minute, ptr(ms(t, "2000-02-29T00:00:00Z")), "2101-01-01T00:00:00Z",
			Decision{Kind: DecisionSkip, NextFireAtMs: ms(t, "2104-02-29T00:00:00Z"), Missed: 25}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := mustSchedule(t, tc.spec, tc.zone)
			got := Decide(s, tc.policy, tc.grace.Milliseconds(), tc.cursor, ms(t, tc.now))
			got.LastMissedMs = 0 // TestDecideLastMissed checks it
			if got != tc.want {
				t.Errorf("Decide(%q %s, %s, grace %s, cursor %s, now %s)\n got %s\nwant %s",
					tc.spec, tc.zone, tc.policy, tc.grace, cursorString(tc.cursor), tc.now, decisionString(got), decisionString(tc.want))
			}
		})
	}
}

func cursorString(c *int64) string {
	if c == nil {
		return "NULL"
	}
	return utc(*c)
}

func decisionString(d Decision) string {
	return fmt.Sprintf("%s scheduled=%s next=%s missed=%d catchUp=%t",
		d.Kind, utc(d.ScheduledForMs), utc(d.NextFireAtMs), d.Missed, d.CatchUp)
}

// TestDecideIterationCap: a cursor years old on a dense spec must not walk every
// occurrence. The step count is asserted, not a wall-clock duration.
func TestDecideIterationCap(t *testing.T) {
	t.Parallel()
	const stepBudget = MaxMissedCount + 200
	for _, tc := range []struct {
		name, spec, zone, cursor, now string
		wantLatest, wantNext          string
	}{
		{"every second, 5 years", "* * * * * *", "UTC", "2019-06-01T12:00:00Z", "2024-06-01T12:00:00.500Z",
			"2024-06-01T12:00:00.000Z", "2024-06-01T12:00:01.000Z"},
		{"every second in January, latest far back", "* * * * 1 *", "UTC", "2020-01-01T00:00:00Z", "2024-12-15T00:00:00Z",
			"2024-01-31T23:59:59.000Z", "2025-01-01T00:00:00.000Z"},
		{"every second, now inside a fall-back repeat", "*/1 * * * * *", "Europe/Berlin", "2019-10-27T00:00:00Z", "2024-10-27T01:30:00.250Z",
			"2024-10-27T01:30:00.000Z", "2024-10-27T01:30:01.000Z"},
		{"every minute, 5 years, fixed hour", "* 3 * * *", "America/New_York", "2019-06-01T07:00:00Z", "2024-06-01T12:00:00Z",
			"2024-06-01T07:59:00.000Z", "2024-06-02T07:00:00.000Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := mustSchedule(t, tc.spec, tc.zone)
			cursor, now := ms(t, tc.cursor), ms(t, tc.now)

			// grace 0: every due occurrence before now is missed, the latest (before now) included
			skip, steps := decide(s, MisfireSkip, 0, &cursor, now)
			if steps > stepBudget {
				t.Errorf("skip took %d Next calls, want at most %d", steps, stepBudget)
			}
			if skip.Kind != DecisionSkip || skip.Missed != MaxMissedCount || utc(skip.NextFireAtMs) != tc.wantNext {
				t.Errorf("skip: got %s; want skip next=%s missed=%d (capped)", decisionString(skip), tc.wantNext, MaxMissedCount)
			}

			once, steps := decide(s, MisfireFireOnce, 0, &cursor, now)
			if steps > stepBudget {
				t.Errorf("fire_once took %d Next calls, want at most %d", steps, stepBudget)
			}
			if once.Kind != DecisionFire || !once.CatchUp || once.Missed != MaxMissedCount ||
				utc(once.ScheduledForMs) != tc.wantLatest || utc(once.NextFireAtMs) != tc.wantNext {
				t.Errorf("fire_once: got %s; want fire scheduled=%s next=%s missed=%d catchUp", decisionString(once), tc.wantLatest, tc.wantNext, MaxMissedCount)
			}
		})
	}
}

// wallMatches is an independent matcher of wall-clock fields (read as UTC)
// against robfig's parsed bit sets, used by the brute-force reference.
func wallMatches(s *cron.SpecSchedule, w time.Time) bool {
	bit := func(set uint64, v int) bool { return set&(1<<uint(v)) != 0 }
	if !bit(s.Second, w.Second()) || !bit(s.Minute, w.Minute()) || !bit(s.Hour, w.Hour()) || !bit(s.Month, int(w.Month())) {
		return false
	}
	dom, dow := bit(s.Dom, w.Day()), bit(s.Dow, int(w.Weekday()))
	if s.Dom&starBit != 0 || s.Dow&starBit != 0 {
		return dom && dow
	}
	return dom || dow
}

func wallOf(sec int64, loc *time.Location) time.Time {
	l := time.Unix(sec, 0).In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), 0, time.UTC)
}

// bruteNext is the documented rule computed the slow way, minute by minute, for
// five-field specs in zones whose offset changes fall on whole minutes: a fixed
// spec fires at a forward jump if a skipped wall-clock minute matches, and at a
// matching wall-clock minute unless the same wall-clock time was already shown in
// the previous three hours; a wildcard spec fires at every matching minute.
func bruteNext(s *Schedule, afterMs int64, horizonMinutes int) (int64, bool) {
	first := floorDiv(afterMs, 60_000) + 1
	for m := first; m < first+int64(horizonMinutes); m++ {
		sec := m * 60
		_, off := time.Unix(sec, 0).In(s.loc).Zone()
		_, prevOff := time.Unix(sec-1, 0).In(s.loc).Zone()
		if s.fixedTime && prevOff < off {
			for w := sec + int64(prevOff); w < sec+int64(off); w += 60 {
				if wallMatches(s.wall, time.Unix(w, 0).UTC()) {
					return sec * 1000, true
				}
			}
		}
		w := wallOf(sec, s.loc)
		if !wallMatches(s.wall, w) {
			continue
		}
		if s.fixedTime {
			repeated := false
			for k := int64(60); k <= 3*3600; k += 60 {
				if wallOf(sec-k, s.loc).Equal(w) {
					repeated = true
					break
				}
			}
			if repeated {
				continue
			}
		}
		return sec * 1000, true
	}
	return 0, false
}

var (
	propZones = []string{"UTC", "America/New_York", "Europe/Berlin", "Australia/Sydney", "Australia/Lord_Howe",
		"America/Sao_Paulo", "America/Havana", "Asia/Kolkata", "Pacific/Chatham", "America/Santiago"}
	propMinutes = []string{"*", "0", "30", "*/15", "5,35", "0-10", "59"}
	propHours   = []string{"*", "0", "1", "2", "3", "*/2", "1-3", "0,12", "23"}
	propDoms    = []string{"*", "*", "*", "*", "*", "1", "29", "1-7", "31"}
	propMonths  = []string{"*", "*", "*", "*", "*", "3", "10,11", "2", "4,10"}
	propDows    = []string{"*", "*", "*", "*", "0", "1-5", "6"}
)

func randomSpec(r *rand.Rand) string {
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	return strings.Join([]string{pick(propMinutes), pick(propHours), pick(propDoms), pick(propMonths), pick(propDows)}, " ")
}

// randomInstant returns a time between 2000 and 2040; a third of the time within
// two days of an offset change of loc, a third within three hours of one.
func randomInstant(r *rand.Rand, loc *time.Location) int64 {
	base := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() + r.Int64N(40*365*86_400_000)
	near := []int64{0, 2 * 86_400_000, 3 * 3_600_000}[r.IntN(3)]
	if near > 0 {
		if _, end := time.UnixMilli(base).In(loc).ZoneBounds(); !end.IsZero() {
			base = end.UnixMilli() + r.Int64N(2*near) - near
		}
	}
	return base
}

func TestScheduleNextMatchesBruteForce(t *testing.T) {
	t.Parallel()
	const seed = 20240310
	r := rand.New(rand.NewPCG(seed, 1))
	const horizon = 3 * 24 * 60
	for i := range 3000 {
		spec, zone := randomSpec(r), propZones[r.IntN(len(propZones))]
		s, err := ParseSchedule(spec, zone)
		if err != nil {
			if errors.Is(err, ErrInvalidSchedule) && strings.Contains(err.Error(), "never fires") {
				continue
			}
			t.Fatalf("case %d: ParseSchedule(%q, %q): %v", i, spec, zone, err)
		}
		after := randomInstant(r, s.loc)
		got := s.Next(after)
		want, found := bruteNext(s, after, horizon)
		switch {
		case found && got != want:
			t.Errorf("case %d (seed %d): %q in %s, Next(%s) = %s, brute force says %s",
				i, seed, spec, zone, utc(after), utc(got), utc(want))
		case !found && got <= after+horizon*60_000:
			t.Errorf("case %d (seed %d): %q in %s, Next(%s) = %s, brute force finds nothing within %d minutes",
				i, seed, spec, zone, utc(after), utc(got), horizon)
		}
	}
}

// TestDecideProperties checks Decide over many random (spec, zone, cursor, now):
// the invariants the admission relies on, and the rules against a plain walk of
// every due occurrence.
func TestDecideProperties(t *testing.T) {
	t.Parallel()
	const seed = 20241103
	r := rand.New(rand.NewPCG(seed, 2))
	specs := append([]string{"* * * * * *", "*/7 * * * * *", "@hourly", "@daily", "@weekly", "@monthly", "@yearly", "0 0 29 2 *"}, func() []string {
		var xs []string
		for range 40 {
			xs = append(xs, randomSpec(r))
		}
		return xs
	}()...)
	for i := range 3000 {
		spec, zone := specs[r.IntN(len(specs))], propZones[r.IntN(len(propZones))]
		s, err := ParseSchedule(spec, zone)
		if err != nil {
			continue // a random spec that never fires
		}
		policy := []MisfirePolicy{MisfireSkip, MisfireFireOnce}[r.IntN(2)]
		grace := []int64{0, 1_000, 60_000, 3_600_000, 86_400_000}[r.IntN(5)]
		base := randomInstant(r, s.loc)
		cursor := s.Next(base)
		spread := []int64{1_000, 3_600_000, 86_400_000, 10 * 86_400_000, 400 * 86_400_000}[r.IntN(5)]
		now := cursor - spread/10 + r.Int64N(spread)
		checkDecide(t, s, policy, grace, cursor, now, func() string {
			return fmt.Sprintf("case %d (seed %d) %s in %s %s grace=%dms cursor=%s now=%s", i, seed, spec, zone, policy, grace, utc(cursor), utc(now))
		})
	}
}

// checkDecide checks one decision of Decide against the invariants the admission relies on and
// against a plain walk of every due occurrence of s; label names the case.
func checkDecide(t *testing.T, s Occurrences, policy MisfirePolicy, grace, cursor, now int64, label func() string) {
	t.Helper()
	d, steps := decide(s, policy, grace, &cursor, now)
	if steps > MaxMissedCount+200 {
		t.Errorf("%s: %d Next calls", label(), steps)
	}
	if now < cursor {
		if d != (Decision{Kind: DecisionNotDue, NextFireAtMs: cursor}) {
			t.Errorf("%s: got %s, want not_due", label(), decisionString(d))
		}
		return
	}
	if d.NextFireAtMs <= cursor || s.Next(d.NextFireAtMs-1) != d.NextFireAtMs {
		t.Errorf("%s: next %s must be an occurrence after the cursor", label(), utc(d.NextFireAtMs))
	}
	if d.Kind != DecisionFire && d.NextFireAtMs <= now {
		t.Errorf("%s: %s must move the cursor past now, to %s", label(), d.Kind, utc(d.NextFireAtMs))
	}
	if d.Kind == DecisionFire && (d.ScheduledForMs > now || d.ScheduledForMs < cursor || d.NextFireAtMs != s.Next(d.ScheduledForMs)) {
		t.Errorf("%s: scheduled %s must lie in [cursor, now] and next be its successor", label(), utc(d.ScheduledForMs))
	}

	// The reference: F, the first on-time occurrence, found directly (the first one at or
	// after now - grace), and the missed ones before it walked one by one.
	first := s.Next(now - grace - 1)
	missed, latest := int64(0), int64(0)
	for o := cursor; o < first && missed <= MaxMissedCount+1; o = s.Next(o) {
		missed++
		latest = o
	}
	var want Decision
	switch {
	case missed == 0:
		want = Decision{Kind: DecisionFire, ScheduledForMs: cursor, NextFireAtMs: s.Next(cursor)}
	case policy == MisfireSkip && first <= now:
		want = Decision{Kind: DecisionFire, ScheduledForMs: first, NextFireAtMs: s.Next(first), Missed: min(missed, MaxMissedCount)}
	case policy == MisfireSkip:
		want = Decision{Kind: DecisionSkip, NextFireAtMs: first, Missed: min(missed, MaxMissedCount)}
	default:
		if missed > MaxMissedCount+1 {
			latest = d.ScheduledForMs // the walk was cut short; check L by its successor
			if s.Next(latest) != first {
				t.Errorf("%s: fired %s, but the first on-time occurrence %s is not its successor", label(), utc(latest), utc(first))
			}
		}
		want = Decision{Kind: DecisionFire, ScheduledForMs: latest, NextFireAtMs: first, Missed: min(missed-1, MaxMissedCount), CatchUp: true}
	}
	// LastMissedMs: the latest occurrence passed over, an occurrence whose successor is F
	// (skip) or the Run fired (fire_once); 0 when none is passed over.
	switch last := d.LastMissedMs; {
	case d.Missed == 0 && last != 0:
		t.Errorf("%s: last missed %s with nothing missed", label(), utc(last))
	case d.Missed > 0 && (s.Next(last-1) != last || last < cursor):
		t.Errorf("%s: last missed %s is not an occurrence at or after the cursor", label(), utc(last))
	case d.Missed > 0 && policy == MisfireSkip && s.Next(last) != first:
		t.Errorf("%s: last missed %s is not the one before F %s", label(), utc(last), utc(first))
	case d.Missed > 0 && policy == MisfireFireOnce && s.Next(last) != d.ScheduledForMs:
		t.Errorf("%s: last missed %s is not the one before the Run %s", label(), utc(last), utc(d.ScheduledForMs))
	}
	d.LastMissedMs = 0
	if d != want {
		t.Errorf("%s:\n got %s\nwant %s", label(), decisionString(d), decisionString(want))
	}
}

// every is a trigger kind that is not cron, for the test below: every periodMs, at the instants
// phaseMs + k·periodMs.
type every struct{ periodMs, phaseMs int64 }

func (e every) Next(afterMs int64) int64 {
	return e.phaseMs + (floorDiv(afterMs-e.phaseMs, e.periodMs)+1)*e.periodMs
}

// Decide needs of a trigger kind only its Occurrences: over a kind that is not cron (periods
// from 250 ms to a day, none on whole seconds or minutes) it keeps the same invariants and rules
// as over cron, so a new kind brings its Next and nothing else of the decision.
func TestDecideOverAnotherKindOfTrigger(t *testing.T) {
	t.Parallel()
	const seed = 20261206
	r := rand.New(rand.NewPCG(seed, 3))
	periods := []int64{250, 1_000, 7_001, 90_000, 3_600_000, 86_400_000}
	for i := range 2000 {
		e := every{periodMs: periods[r.IntN(len(periods))]}
		e.phaseMs = r.Int64N(e.periodMs)
		policy := []MisfirePolicy{MisfireSkip, MisfireFireOnce}[r.IntN(2)]
		grace := []int64{0, 1_000, 60_000, 3_600_000, 86_400_000}[r.IntN(5)]
		cursor := e.Next(ms(t, "2024-01-01T00:00:00Z") + r.Int64N(400*86_400_000))
		spread := []int64{1_000, 3_600_000, 86_400_000, 10 * 86_400_000, 400 * 86_400_000}[r.IntN(5)]
		now := cursor - spread/10 + r.Int64N(spread)
		if r.IntN(3) == 0 { // some occurrence exactly the grace late, or 1 ms beyond it
			now = max(e.Next(now-1), cursor) + grace + r.Int64N(2)
		}
		checkDecide(t, e, policy, grace, cursor, now, func() string {
			return fmt.Sprintf("case %d (seed %d) every %d ms from %d %s grace=%dms cursor=%s now=%s", i, seed, e.periodMs, e.phaseMs, policy, grace, utc(cursor), utc(now))
		})
	}
	// and an init: the first occurrence strictly after now, even when now is one
	e := every{periodMs: 90_000, phaseMs: 500}
	if d := Decide(e, MisfireSkip, 0, nil, 90_500); d != (Decision{Kind: DecisionInit, NextFireAtMs: 180_500}) {
		t.Errorf("init at an occurrence: got %s", decisionString(d))
	}
}

func BenchmarkDecide(b *testing.B) {
	for _, bc := range []struct {
		name, spec, zone string
		policy           MisfirePolicy
		cursor, now      string
	}{
		{"on_time_hourly", "0 * * * *", "Europe/Berlin", MisfireSkip, "2024-06-01T10:00:00Z", "2024-06-01T10:00:00.350Z"},
		{"outage_3d_fire_once", "0 * * * *", "America/New_York", MisfireFireOnce, "2024-06-01T10:00:00Z", "2024-06-04T10:30:00Z"},
		{"capped_every_second_5y", "* * * * * *", "Europe/Berlin", MisfireFireOnce, "2019-06-01T10:00:00Z", "2024-06-01T10:00:00.350Z"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := mustSchedule(b, bc.spec, bc.zone)
			cursor, now := ms(b, bc.cursor), ms(b, bc.now)
			for b.Loop() {
				_ = Decide(s, bc.policy, DefaultMisfireGrace.Milliseconds(), &cursor, now)
			}
		})
	}
}
