package dispatcher_test

import (
	"bufio"
	"fmt"
	"math"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/workerproto"
)

// scrape reads the dispatcher's /metrics into series → value ("name{label="v",…}" as printed;
// the owner label is the fixture's).
func (f *fixture) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	f.d.Metrics().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := map[string]float64{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// series names one series of the fixture's dispatcher: name{owner,extra labels (sorted)}.
func series(name string, labels ...string) string {
	labels = append(labels, `owner="protocol-test"`)
	sort.Strings(labels) // as the text format prints them
	return name + `{` + strings.Join(labels, ",") + `}`
}

func (f *fixture) metricIs(t *testing.T, what, name string, want float64, labels ...string) {
	t.Helper()
	key := series(name, labels...)
	var got float64
	eventually.True(t, 10*time.Second, fmt.Sprintf("%s: %s = %v", what, key, want), func() bool {
		got = f.scrape(t)[key]
		return got == want
	})
}

// The loop's metrics on a real database and a real dispatcher: the database gauges show the
// queue of project p (depth, age of its oldest Run) and the worker sessions with their free
// capacity; the counters and histograms move on a real ACK, completions, a retry, an offer the
// sweeper expired and a lease it expired.
func TestMetricsFollowTheLoop(t *testing.T) {
	t.Parallel()
	f := newFixtureTask(t, 2, admin.TaskSpec{MaxAttempts: 2, RetryBackoff: new(time.Duration)})
	queued := count(t, f.db, `SELECT count(*) FROM control_core.runs WHERE state = 'queued'`)
	if queued < 2 {
		t.Fatalf("%d queued Runs; want 2 or more", queued)
	}
	depth, age := series("qlsched_dispatch_queue_runs", `project="p"`), series("qlsched_dispatch_queue_oldest_age_seconds", `project="p"`)
	f.metricIs(t, "queue depth of p before any worker", "qlsched_dispatch_queue_runs", float64(queued), `project="p"`)
	m := f.scrape(t)
	// the age is the oldest queued Run's, by database time, read at most an interval ago
	var oldestMs int
	oldestMs = count(t, f.db, `SELECT (control_core.db_now_ms() - min(coalesce(retry_at_ms, scheduled_for_ms, queued_at_ms)))::int
		FROM control_core.runs WHERE state = 'queued'`)
	if m[age] <= 0 || m[age] > float64(oldestMs)/1000 {
		t.Errorf("%s = %v; want above 0 and at most the oldest queued Run's age now, %d ms", age, m[age], oldestMs)
	}
	f.metricIs(t, "no live session", "qlsched_dispatch_worker_sessions", 0, `state="active"`)
	for _, c := range []struct {
		name string
		want float64
	}{
		{series("qlsched_dispatch_free_capacity"), 0},
		{series("qlsched_dispatch_start_latency_seconds_count"), 0},
		{series("qlsched_dispatch_attempts_finished_total", `outcome="succeeded"`), 0},
		{series("qlsched_dispatch_attempts_finished_total", `outcome="expired"`), 0},
		{series("qlsched_dispatch_retries_total"), 0},
	} {
		if got, ok := m[c.name]; !ok || got != c.want {
			t.Errorf("before any worker: %s = %v (present %v); want %v", c.name, got, ok, c.want)
		}
	}

	s := f.register(t, 2)
	f.metricIs(t, "one active session", "qlsched_dispatch_worker_sessions", 1, `state="active"`)
	f.metricIs(t, "its free capacity", "qlsched_dispatch_free_capacity", 2)

	// A real ACK: the start latency is the Run's queue time to its lease's grant, by database time.
	o := f.pollOne(t, s.SessionID)
	f.ack(t, s.SessionID, o)
	waitMs := count(t, f.db, `SELECT (l.granted_at_ms - r.queued_at_ms)::int FROM control_core.run_leases l
		JOIN control_core.runs r ON r.run_id = l.run_id WHERE l.attempt_id = $1::uuid`, o.AttemptID)
	f.ack(t, s.SessionID, o) // a replay starts nothing
	m = f.scrape(t)
	if n, sum := m[series("qlsched_dispatch_start_latency_seconds_count")], m[series("qlsched_dispatch_start_latency_seconds_sum")]; n != 1 || math.Abs(sum-float64(waitMs)/1000) > 1e-9 {
		t.Errorf("start latency: count %v sum %v; want one observation of %d ms (the replayed ACK not counted)", n, sum, waitMs)
	}
	f.metricIs(t, "one slot leased", "qlsched_dispatch_free_capacity", 1)
	f.metricIs(t, "the started Run left the queue", "qlsched_dispatch_queue_runs", float64(queued-1), `project="p"`)

	// A failed report: its Run is queued again (MaxAttempts 2): one failed outcome, one retry.
	if a := f.do(t, f.token, "POST", workerproto.CompletePath(o.AttemptID), completion(s.SessionID, o, 1, workerproto.OutcomeFailed)); a.status != 200 {
		t.Fatalf("complete failed: %d %s", a.status, a.body)
	}
	ranMs := count(t, f.db, `SELECT (finished_at_ms - started_at_ms)::int FROM control_core.attempts WHERE attempt_id = $1::uuid`, o.AttemptID)
	m = f.scrape(t)
	if got := m[series("qlsched_dispatch_attempts_finished_total", `outcome="failed"`)]; got != 1 {
		t.Errorf("failed outcomes %v; want 1", got)
	}
	if got := m[series("qlsched_dispatch_retries_total")]; got != 1 {
		t.Errorf("retries %v; want 1 (the failed Run queued again)", got)
	}
	if n, sum := m[series("qlsched_dispatch_attempt_duration_seconds_count")], m[series("qlsched_dispatch_attempt_duration_seconds_sum")]; n != 1 || math.Abs(sum-float64(ranMs)/1000) > 1e-9 {
		t.Errorf("attempt duration: count %v sum %v; want one observation of %d ms", n, sum, ranMs)
	}

	// A succeeded report on the next Run.
	o2 := f.pollOne(t, s.SessionID)
	f.ack(t, s.SessionID, o2)
	if a := f.do(t, f.token, "POST", workerproto.CompletePath(o2.AttemptID), completion(s.SessionID, o2, 1, workerproto.OutcomeSucceeded)); a.status != 200 {
		t.Fatalf("complete succeeded: %d %s", a.status, a.body)
	}
	if got := f.scrape(t)[series("qlsched_dispatch_attempts_finished_total", `outcome="succeeded"`)]; got != 1 {
		t.Errorf("succeeded outcomes %v; want 1", got)
	}

	// An offer left unanswered past its expiry: the sweeper expires it.
	o3 := f.pollOne(t, s.SessionID)
	f.db.Exec(t, `UPDATE control_core.dispatch_offers SET expires_at_ms = offered_at_ms + 1 WHERE offer_id = $1::uuid`, o3.OfferID)
	f.metricIs(t, "the offer the sweeper expired", "qlsched_dispatch_offers_expired_total", 1)

	// A lease left without heartbeats past its expiry: the sweeper expires it (outcome expired).
	o4 := f.pollOne(t, s.SessionID)
	f.ack(t, s.SessionID, o4)
	f.db.Exec(t, `UPDATE control_core.run_leases SET expires_at_ms = granted_at_ms + 1 WHERE attempt_id = $1::uuid`, o4.AttemptID)
	f.metricIs(t, "the lease the sweeper expired", "qlsched_dispatch_leases_expired_total", 1)
	m = f.scrape(t)
	if got := m[series("qlsched_dispatch_attempts_finished_total", `outcome="expired"`)]; got != 1 {
		t.Errorf("expired outcomes %v; want 1", got)
	}
	// every retry is an Attempt after a Run's first
	retries := count(t, f.db, `SELECT count(*) FROM control_core.attempts WHERE attempt_no > 1`)
	if got := m[series("qlsched_dispatch_retries_total")]; got != float64(retries) || retries < 1 {
		t.Errorf("retries %v; want the %d Attempts after a first (the failed report's, and the expired lease's when it was a first)", got, retries)
	}
	if got := m[series("qlsched_dispatch_start_latency_seconds_count")]; got != 3 {
		t.Errorf("start latency observations %v; want 3 (three ACKs started a Run)", got)
	}
	if _, ok := m[depth]; !ok && count(t, f.db, `SELECT count(*) FROM control_core.runs WHERE state = 'queued'`) > 0 {
		t.Errorf("no %s while p has queued Runs", depth)
	}
}
