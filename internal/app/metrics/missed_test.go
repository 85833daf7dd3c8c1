package metrics_test

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/app/metrics"
)

// qlsched_missed_occurrences_total counts what the coordinator's Observer hands it, by project
// and policy, with the project label bounded: past MaxMissedProjects projects the rest are
// counted under project="_other", so a replica never exports more than 2 × (bound + 1) series.
func TestMissedOccurrencesByProjectAreBounded(t *testing.T) {
	t.Parallel()
	meas := metrics.NewMeasurements("missed-test")
	co := coordinator.New(coordinator.DefaultConfig("missed-test"), nil) // never runs a round
	m := metrics.New(co, meas, func() bool { return true }, nil, time.Minute)
	missed := meas.Observer().Missed
	for i := range metrics.MaxMissedProjects + 5 {
		missed(fmt.Sprintf("p%03d", i), "skip", 2)
	}
	missed("p000", "fire_once", 7)
	missed("p000", "skip", 1)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	series := map[string]string{}
	for line := range strings.SplitSeq(rec.Body.String(), "\n") {
		if name, value, ok := strings.Cut(line, " "); ok && strings.HasPrefix(name, "qlsched_missed_occurrences_total{") {
			series[name] = value
		}
	}
	key := func(project, policy string) string {
		return fmt.Sprintf(`qlsched_missed_occurrences_total{owner="missed-test",policy=%q,project=%q}`, policy, project)
	}
	for k, want := range map[string]string{
		key("p000", "skip"): "3", key("p000", "fire_once"): "7", key(fmt.Sprintf("p%03d", metrics.MaxMissedProjects-1), "skip"): "2",
		key(metrics.OtherProject, "skip"): "10", // the five projects past the bound, 2 each
	} {
		if series[k] != want {
			t.Errorf("%s = %q; want %s", k, series[k], want)
		}
	}
	if n := len(series); n != metrics.MaxMissedProjects+2 {
		t.Errorf("%d series; want %d (the bounded projects, _other, one fire_once)", n, metrics.MaxMissedProjects+2)
	}
}
