package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/schedule"
)

// A skip trigger stalled for years (its cursor moved back to an occurrence in 2020 while a replica runs)
// loses every yearly occurrence since: the replica counts them on /metrics
// (qlsched_missed_occurrences_total) and in the schedule row, and trigger show prints the count and
// the last one, in text and JSON.
func TestStalledSkipTriggerShowsItsMissedOccurrences(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	db := []string{"--database-url", d.URL("ql_admin")}
	// yearly on the first of a month half a year away: with "0 0 1 1 *", during the first minute
	// of a year (UTC) that year's occurrence was within the grace, admitted instead of counted
	month := (int(time.Now().UTC().Month())+5)%12 + 1
	yearly := fmt.Sprintf("0 0 1 %d *", month)
	publish(t, db,
		[]string{"project", "create", "--project", "p"},
		[]string{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", `{"image":"x"}`},
		[]string{"trigger", "publish", "--project", "p", "--trigger", "yearly", "--task", "k", "--cron", yearly, "--misfire", "skip"})
	show := []string{"trigger", "show", "--project", "p", "--trigger", "yearly"}
	if doc := jsonDoc(t, "qlsched.trigger-show/v1", append(show, db...)...); doc["missed_total"] != float64(0) || doc["last_missed_for_ms"] != nil {
		t.Errorf("a new trigger: missed_total %v, last_missed_for_ms %v; want 0 and null", doc["missed_total"], doc["last_missed_for_ms"])
	}

	_, addr := startRunJSON(t, "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0",
		"--cadence", "50ms", "--owner", "missed-1")

	eventually.True(t, 20*time.Second, "the replica initialised the trigger", func() bool {
		return jsonDoc(t, "qlsched.trigger-show/v1", append(show, db...)...)["next_fire_at_ms"] != nil
	})
	// the stall: the cursor years back, as after a long outage (arranged as the owner)
	var nowMs int64
	d.Exec(t, `UPDATE control_core.trigger_schedules SET next_fire_at_ms = $1::bigint, state_version = state_version + 1
		WHERE project_id = 'p' AND trigger_id = 'yearly'`, time.Date(2020, time.Month(month), 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	if err := d.Pool(t, "").QueryRow(t.Context(), `SELECT control_core.db_now_ms()`).Scan(&nowMs); err != nil {
		t.Fatal(err)
	}
	// every first of the month from 2020 on, all months from now: older than the grace, skipped
	want, last := 0, time.Time{}
	for y := 2020; !time.Date(y, time.Month(month), 1, 0, 0, 0, 0, time.UTC).After(time.UnixMilli(nowMs)); y++ {
		want, last = want+1, time.Date(y, time.Month(month), 1, 0, 0, 0, 0, time.UTC)
	}

	var doc map[string]any
	eventually.True(t, 20*time.Second, "the replica skipped the missed occurrences", func() bool {
		doc = jsonDoc(t, "qlsched.trigger-show/v1", append(show, db...)...)
		return doc["missed_total"] != float64(0)
	})
	if doc["missed_total"] != float64(want) || doc["last_missed_for_ms"] != float64(last.UnixMilli()) ||
		doc["last_missed_for"] != last.Format(time.RFC3339) {
		t.Errorf("trigger show JSON: missed_total %v, last_missed_for_ms %v, last_missed_for %v; want %d, %d, %s",
			doc["missed_total"], doc["last_missed_for_ms"], doc["last_missed_for"], want, last.UnixMilli(), last.Format(time.RFC3339))
	}
	r := run(t, append(show, db...)...)
	line := regexp.MustCompile(fmt.Sprintf(`(?m)^missed +%d, the last %s \(passed over without a Run: skip, grace 1m0s\)$`,
		want, regexp.QuoteMeta(last.Format("2006-01-02T15:04:05.000Z07:00"))))
	if r.code != 0 || !line.MatchString(r.stdout) {
		t.Errorf("trigger show: exit %d\n%s\nwant a line matching %s", r.code, r.stdout, line)
	}
	if got := scrape(t, "http://"+addr+"/metrics")["qlsched_missed_occurrences_total"]; got != float64(want) {
		t.Errorf("/metrics: qlsched_missed_occurrences_total %v; want %d", got, want)
	}
	if !strings.Contains(r.stdout, "last scheduled") {
		t.Errorf("trigger show lost its other rows:\n%s", r.stdout)
	}
}

// trigger show --help says the count is a lower bound past the decision's cap (MaxMissedCount).
func TestTriggerShowHelpSaysTheMissedCapIsALowerBound(t *testing.T) {
	t.Parallel()
	r := run(t, "trigger", "show", "--help")
	text := strings.Join(strings.Fields(r.stdout), " ")
	if want := fmt.Sprintf("one decision counts at most %s, so after an outage of more occurrences than that the total is a lower bound",
		"10,000"); r.code != 0 || !strings.Contains(text, want) || schedule.MaxMissedCount != 10_000 {
		t.Errorf("trigger show --help: exit %d, lacks %q (MaxMissedCount %d):\n%s", r.code, want, schedule.MaxMissedCount, r.stdout)
	}
}
