package metrics_test

import (
	"bufio"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/app/metrics"
)

// exported returns every sample name a replica's /metrics carries, histogram series included.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	co := coordinator.New(coordinator.DefaultConfig("alerts-test"), nil) // never runs a round
	meas := metrics.NewMeasurements("alerts-test")
	meas.Observer().Missed("p", "skip", 1) // a labelled counter has no series until its first count
	m := metrics.New(co, meas, func() bool { return true }, nil, time.Minute)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	names := map[string]bool{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		names[f[2]] = true
		if f[3] == "histogram" || f[3] == "summary" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[f[2]+suffix] = true
			}
		}
	}
	return names
}

type rules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

var (
	yamlBlock  = regexp.MustCompile("(?s)## Alerts.*?```yaml\n(.*?)```")
	metricName = regexp.MustCompile(`\bqlsched_[a-z_]+\b`)
)

// The example alert rules in docs/operations.md parse, name only metrics a replica exports, and
// keep the properties the text promises: no-admits fires when no replica is up at all, the
// backlog's age is alerted on (its count stops growing at the cap), a replica whose rounds
// keep failing is alerted on, and so are rows waiting for initialisation and stale gauges.
func TestAlertRulesNameExportedMetrics(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	block := yamlBlock.FindSubmatch(doc)
	if block == nil {
		t.Fatal("docs/operations.md: no ```yaml block under ## Alerts")
	}
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if copy := yamlBlock.FindSubmatch(readme); copy == nil || string(copy[1]) != string(block[1]) {
		t.Error("README.md's alert rules (```yaml under ### Alerts) differ from docs/operations.md's")
	}
	var r rules
	if err := yaml.UnmarshalStrict(block[1], &r); err != nil {
		t.Fatalf("alert rules: %v", err)
	}
	have := exported(t)
	alerts := map[string]string{}
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			alerts[rule.Alert] = rule.Expr
			if rule.Alert == "" || rule.Expr == "" || rule.Annotations["summary"] == "" {
				t.Errorf("rule %+v: want alert, expr and a summary", rule)
			}
			if rule.For != "" {
				if _, err := time.ParseDuration(rule.For); err != nil {
					t.Errorf("%s: for %q: %v", rule.Alert, rule.For, err)
				}
			}
			if strings.Count(rule.Expr, "(") != strings.Count(rule.Expr, ")") || strings.Count(rule.Expr, "[") != strings.Count(rule.Expr, "]") {
				t.Errorf("%s: unbalanced brackets in %q", rule.Alert, rule.Expr)
			}
			names := metricName.FindAllString(rule.Expr, -1)
			if len(names) == 0 {
				t.Errorf("%s: names no qlsched metric: %q", rule.Alert, rule.Expr)
			}
			for _, name := range names {
				if !have[name] {
					t.Errorf("%s: %s is not a metric qlsched exports", rule.Alert, name)
				}
			}
		}
	}
	for _, c := range []struct{ alert, want string }{
		{"QlschedNoAdmitsWhileDue", "absent(qlsched_backlog_schedules)"}, // no replica: no series at all
		{"QlschedNoAdmitsWhileDue", "or vector(0)"},
		{"QlschedNotReady", "or vector(0)"},
		{"QlschedBacklogOldestOverdue", "qlsched_backlog_oldest_age_seconds"},
		{"QlschedRoundsFailing", "qlsched_consecutive_failed_rounds"},                                          // per replica: one that fails rounds while others admit
		{"QlschedInitialisationWaiting", "qlsched_schedules_uninitialised_oldest_age_seconds"},                 // the count alone cannot tell a stuck row from a steady stream of publishes
		{"QlschedDatabaseGaugesStale", "qlsched_backlog_reading_age_seconds"},                                  // the gauges are background readings: alerts on them go blind when the reads fail
		{"QlschedMissedOccurrences", "by (project, policy) (increase(qlsched_missed_occurrences_total[15m]))"}, // per project: which one lost occurrences
		// the counter's series is born at its first count (a labelled counter has no 0 before it),
		// and increase() reads a series' first sample as its start: a replica that comes back after
		// an outage and skips the backlog in its first round shows only that first sample, so the
		// alert also fires on a series that was absent 15 minutes ago (prometheus/prometheus#1673)
		{"QlschedMissedOccurrences", "(qlsched_missed_occurrences_total unless qlsched_missed_occurrences_total offset 15m)"},
	} {
		expr, ok := alerts[c.alert]
		if !ok {
			t.Errorf("no alert %s", c.alert)
		} else if !strings.Contains(expr, c.want) {
			t.Errorf("%s: %q does not contain %q", c.alert, expr, c.want)
		}
	}
}
