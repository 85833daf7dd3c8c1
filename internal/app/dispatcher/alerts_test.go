package dispatcher_test

import (
	"bufio"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
)

// exported returns every sample name the fixture's dispatcher carries on /metrics, histogram
// series included (once p's queue is in the gauges, so the per-project series are there too).
func (f *fixture) exported(t *testing.T) map[string]bool {
	t.Helper()
	eventually.True(t, 10*time.Second, "p's queue in the gauges", func() bool {
		_, ok := f.scrape(t)[series("qlsched_dispatch_queue_runs", `project="p"`)]
		return ok
	})
	rec := httptest.NewRecorder()
	f.d.Metrics().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	names := map[string]bool{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 4 || fields[0] != "#" || fields[1] != "TYPE" {
			continue
		}
		names[fields[2]] = true
		if fields[3] == "histogram" || fields[3] == "summary" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[fields[2]+suffix] = true
			}
		}
	}
	return names
}

type alertRules struct {
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
	dispatchBlock = regexp.MustCompile("(?s)### Dispatcher alerts.*?```yaml\n(.*?)```")
	metricName    = regexp.MustCompile(`\bqlsched_[a-z_]+\b`)
	// the database gauges are global (the same on every replica): aggregated with max, never sum
	globalGauge = regexp.MustCompile(`\bqlsched_dispatch_(queue_runs|queue_oldest_age_seconds|worker_sessions|free_capacity)\b`)
	maxOfGauge  = regexp.MustCompile(`max(?: by \([a-z, ]*\))? ?\(qlsched_dispatch_(queue_runs|queue_oldest_age_seconds|worker_sessions|free_capacity)\b`)
	// the counters are per replica: summed over replicas
	counter      = regexp.MustCompile(`\bqlsched_dispatch_[a-z_]+_total\b`)
	sumOfCounter = regexp.MustCompile(`sum\((?:rate|increase)\(qlsched_dispatch_[a-z_]+_total\b`)
)

// The dispatcher's example alert rules (docs/operations.md, "Dispatcher alerts", copied in
// README.md) parse, name only metrics a dispatcher exports, aggregate the global gauges with max
// and the per-replica counters with sum, and keep the properties the text promises: the queue's
// age is alerted on per project, so is a queue with no live worker, lease expiries, stale gauges,
// and no dispatcher at all.
func TestDispatcherAlertRulesNameExportedMetrics(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	block := dispatchBlock.FindSubmatch(doc)
	if block == nil {
		t.Fatal("docs/operations.md: no ```yaml block under ### Dispatcher alerts")
	}
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if c := dispatchBlock.FindSubmatch(readme); c == nil || string(c[1]) != string(block[1]) {
		t.Error("README.md's dispatcher alert rules (```yaml under ### Dispatcher alerts) differ from docs/operations.md's")
	}
	var r alertRules
	if err := yaml.UnmarshalStrict(block[1], &r); err != nil {
		t.Fatalf("alert rules: %v", err)
	}
	have := newFixture(t, 1).exported(t)
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
					t.Errorf("%s: %s is not a metric a dispatcher exports", rule.Alert, name)
				}
			}
			if n, m := len(globalGauge.FindAllString(rule.Expr, -1)), len(maxOfGauge.FindAllString(rule.Expr, -1)); n != m {
				t.Errorf("%s: %d of %d global gauges taken with max: %q", rule.Alert, m, n, rule.Expr)
			}
			if n, m := len(counter.FindAllString(rule.Expr, -1)), len(sumOfCounter.FindAllString(rule.Expr, -1)); n != m {
				t.Errorf("%s: %d of %d counters summed over replicas: %q", rule.Alert, m, n, rule.Expr)
			}
		}
	}
	for _, c := range []struct{ alert, want string }{
		{"QlschedDispatcherNotReady", "or vector(0)"}, // no dispatcher: no series at all
		{"QlschedDispatchQueueOldest", "max by (project) (qlsched_dispatch_queue_oldest_age_seconds)"},
		{"QlschedDispatchNoLiveWorkers", `qlsched_dispatch_worker_sessions{state="active"}`},
		{"QlschedDispatchNoLiveWorkers", "qlsched_dispatch_queue_oldest_age_seconds"}, // work waits: a ready Run, not a Run in backoff
		{"QlschedDispatchLeasesExpiring", "qlsched_dispatch_leases_expired_total"},
		{"QlschedDispatchOffersExpiring", "qlsched_dispatch_offers_expired_total"},    // a Run offered over and over stays dispatching, out of the queue gauges
		{"QlschedDispatchGaugesStale", "qlsched_dispatch_gauges_reading_age_seconds"}, // the gauges are background readings
	} {
		expr, ok := alerts[c.alert]
		if !ok {
			t.Errorf("no alert %s", c.alert)
		} else if !strings.Contains(expr, c.want) {
			t.Errorf("%s: %q does not contain %q", c.alert, expr, c.want)
		}
	}
}
