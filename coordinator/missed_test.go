package coordinator

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/schedule"
)

// A stalled trigger (its cursor years in the past) loses occurrences to its misfire policy; the
// decision's count of them reaches the Observer (the replica's qlsched_missed_occurrences_total)
// and the schedule row (missed_total, last_missed_for_ms), in the write that advances the cursor:
// under skip every missed occurrence, under fire_once all but the one its catch-up Run fires. A
// second stall (skip) adds to the row's count.
func TestMissedOccurrencesAreCounted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy schedule.MisfirePolicy
		// of the yearly occurrences from the cursor to now (all missed, the cursor the first),
		// how many are passed over without a Run, and the latest of those
		admitted int // 0 under skip, 1 (the latest) under fire_once
		admits   int64
		stalls   int64 // fire_once's second stall would admit its catch-up occurrence again: one
	}{
		{schedule.MisfireSkip, 0, 0, 2},
		{schedule.MisfireFireOnce, 1, 1, 1},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFixture(t)
			// 1 January ("0 0 1 1 *") was on time, not missed, during the first minute of a year
			// (UTC), and the counts were one short: a yearly cron months away (farYearly) instead
			yearly := farYearly()
			f.trigger("yearly", yearly, tc.policy)
			sched, err := schedule.ParseSchedule(yearly, "UTC")
			if err != nil {
				t.Fatal(err)
			}
			cursor := sched.Next(time.Date(2019, 12, 31, 0, 0, 0, 0, time.UTC).UnixMilli()) // the first in 2020
			stall := func() {
				f.exec(`UPDATE control_core.trigger_schedules SET next_fire_at_ms = $1::bigint, state_version = state_version + 1
					WHERE project_id = 'p' AND trigger_id = 'yearly'`, cursor)
			}
			var (
				mu       sync.Mutex
				observed = map[[2]string]int64{}
			)
			co := f.coordinatorWith("r1", f.rt, []Option{WithObserver(Observer{Missed: func(project, policy string, n int64) {
				mu.Lock()
				defer mu.Unlock()
				observed[[2]string{project, policy}] += n
			}})})
			var nowMs int64
			if err := f.su.QueryRow(ctx, `SELECT control_core.db_now_ms()`).Scan(&nowMs); err != nil {
				t.Fatal(err)
			}
			var occurrences []int64 // from the cursor to now, months from the latest
			for at := cursor; at <= nowMs; at = sched.Next(at) {
				occurrences = append(occurrences, at)
			}
			want := int64(len(occurrences) - tc.admitted)
			wantLast := occurrences[want-1]
			for round := int64(1); round <= tc.stalls; round++ {
				stall()
				co.Round(ctx, nil)
				var total, last int64
				if err := f.su.QueryRow(ctx, `SELECT missed_total, coalesce(last_missed_for_ms, -1) FROM control_core.trigger_schedules
					WHERE project_id = 'p' AND trigger_id = 'yearly'`).Scan(&total, &last); err != nil {
					t.Fatal(err)
				}
				if total != round*want || last != wantLast {
					t.Errorf("after stall %d: missed_total %d, last_missed_for_ms %s; want %d and %s", round, total,
						time.UnixMilli(last).UTC(), round*want, time.UnixMilli(wantLast).UTC())
				}
				mu.Lock()
				got := observed[[2]string{"p", string(tc.policy)}]
				mu.Unlock()
				if got != round*want || len(observed) != 1 {
					t.Errorf("after stall %d: observed %v; want %d for p/%s", round, observed, round*want, tc.policy)
				}
				if st := co.Stats.Snapshot(); st.Admits != round*tc.admits || st.Errors != 0 {
					t.Errorf("after stall %d: %+v; want %d admits, no error", round, st, round*tc.admits)
				}
			}
		})
	}
}

// Occurrences within the grace are on time: nothing is counted as missed.
func TestOnTimeOccurrencesAreNotMissed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.dueOnce("a")
	co := f.coordinatorWith("r1", f.rt, []Option{WithObserver(Observer{Missed: func(string, string, int64) {
		t.Error("an on-time occurrence was counted as missed")
	}})})
	co.Round(ctx, nil)
	if n := f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE missed_total <> 0 OR last_missed_for_ms IS NOT NULL`); n != 0 {
		t.Errorf("%d rows count missed occurrences; want none", n)
	}
	if st := co.Stats.Snapshot(); st.Admits != 1 {
		t.Errorf("%+v; want 1 admit", st)
	}
}

// A trigger republished while its project is paused is not decided "as after an outage" on
// resume: the new revision cleared its cursor (reset_schedule), so the resume initialises it at
// the next occurrence, and the occurrences of the pause are neither fired nor counted as missed.
// project pause --help says so (it promised every missed occurrence of a pause was counted).
func TestRepublishWhilePausedCountsNothingMissed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	// a yearly cron months away (farYearly): with "0 0 1 1 *" a New Year's midnight between the
	// initialisation and the check left a cursor behind now
	yearly := farYearly()
	f.trigger("yearly", yearly, schedule.MisfireSkip)
	co := f.coordinatorWith("r1", f.rt, []Option{WithObserver(Observer{Missed: func(string, string, int64) {
		t.Error("a republished trigger's pause was counted as missed")
	}})})
	co.Round(ctx, nil) // initialised
	if _, err := f.admin.PauseProject(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	// the pause lasts years: the cursor 1 January 2020
	f.exec(`UPDATE control_core.trigger_schedules SET next_fire_at_ms = $1::bigint, state_version = state_version + 1
		WHERE project_id = 'p' AND trigger_id = 'yearly'`, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	f.trigger("yearly", yearly, schedule.MisfireFireOnce) // republished while paused
	if _, err := f.admin.ResumeProject(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	co.Round(ctx, nil)
	if n := f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE missed_total <> 0 OR last_missed_for_ms IS NOT NULL
		OR next_fire_at_ms IS NULL OR next_fire_at_ms < control_core.db_now_ms()`); n != 0 {
		t.Errorf("%d rows count missed occurrences or were not initialised past now; want none", n)
	}
	if st := co.Stats.Snapshot(); st.Admits != 0 || st.Skips != 0 || st.Inits != 2 || st.Errors != 0 {
		t.Errorf("%+v; want two inits, nothing admitted or skipped", st)
	}
}
