package metrics_test

import (
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/app/metrics"
	"github.com/qlcontrol/controlcore/internal/base/buildinfo"
)

var buildInfoLine = regexp.MustCompile(`(?m)^qlsched_build_info\{(.*)\} (\S+)$`)

// A replica's /metrics carries qlsched_build_info 1 with the labels --version prints, and its
// owner, like every other series.
func TestBuildInfoGauge(t *testing.T) {
	t.Parallel()
	co := coordinator.New(coordinator.DefaultConfig("build-info-test"), nil) // never runs a round
	m := metrics.New(co, metrics.NewMeasurements("replica-b"), func() bool { return true }, nil, time.Minute)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	match := buildInfoLine.FindStringSubmatch(rec.Body.String())
	if match == nil || match[2] != "1" {
		t.Fatalf("no qlsched_build_info 1 in /metrics:\n%s", rec.Body.String())
	}
	want := buildinfo.Read().Labels()
	want["owner"] = "replica-b"
	got := map[string]string{}
	for _, kv := range regexp.MustCompile(`(\w+)="([^"]*)"`).FindAllStringSubmatch(match[1], -1) {
		got[kv[1]] = kv[2]
	}
	if len(got) != len(want) {
		t.Errorf("labels %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s=%q, want %q (all: %s)", k, got[k], v, strings.TrimSpace(match[1]))
		}
	}
}
