package main

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// readyz returns /readyz's status and body.
func readyz(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read /readyz: %v", err)
	}
	return resp.StatusCode, strings.TrimSpace(string(body))
}

var recoveredLine = regexp.MustCompile(`failed_rounds=(\d+) failed_for=\S+`)

// A replica whose claim statement fails round after round (the DBA revoked the runtime's UPDATE
// on the schedules) backs off instead of spinning, turns /readyz 503 with the count and the
// error after --not-ready-after rounds (qlsched_ready 0, qlsched_consecutive_failed_rounds), and
// logs the change once, not per round; when the privilege is granted again, the next round
// admits, /readyz answers 200 and one line says how many rounds failed. /healthz stays 200.
func TestRunBacksOffAndTurnsNotReadyWhileRoundsFail(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	publishEverySecond(t, d, "t")
	r := startReplica(t, qlsched(t), "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0",
		"--cadence", "100ms", "--backoff-cap", "400ms", "--not-ready-after", "3", "--owner", "r1")
	line := r.waitFor(t, 60*time.Second, "replica running", func(l string) bool { return httpAddrLog.MatchString(l) })
	base := "http://" + httpAddrLog.FindStringSubmatch(line)[1]
	eventually.True(t, 20*time.Second, "an admit on /metrics", func() bool { return scrape(t, base+"/metrics")["qlsched_admits_total"] >= 1 })
	if code, body := readyz(t, base); code != http.StatusOK {
		t.Fatalf("/readyz %d %q while admitting, want 200", code, body)
	}

	d.Exec(t, "REVOKE UPDATE ON control_core.trigger_schedules FROM ql_runtime")
	revoked := time.Now()
	r.waitFor(t, 20*time.Second, "the not-ready line", func(l string) bool { return strings.Contains(l, "not ready: rounds failed in a row") })
	eventually.NoError(t, 20*time.Second, "/readyz 503 naming the failed rounds and the error", func() error {
		if code, body := readyz(t, base); code != http.StatusServiceUnavailable ||
			!strings.Contains(body, "rounds failed in a row") || !strings.Contains(body, "SQLSTATE 42501") {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	})
	// six failed rounds: 100+200+400+400+400 ms of backoff, so a few seconds at most
	var values map[string]float64
	eventually.NoError(t, 20*time.Second, "6 consecutive failed rounds on /metrics", func() error {
		if values = scrape(t, base+"/metrics"); values["qlsched_consecutive_failed_rounds"] < 6 {
			return fmt.Errorf("qlsched_consecutive_failed_rounds %v", values["qlsched_consecutive_failed_rounds"])
		}
		return nil
	})
	elapsed := time.Since(revoked)
	if values["qlsched_ready"] != 0 || values["qlsched_failed_rounds_total"] < values["qlsched_consecutive_failed_rounds"] {
		t.Errorf("qlsched_ready %v, qlsched_failed_rounds_total %v, qlsched_consecutive_failed_rounds %v; want 0 and total ≥ consecutive",
			values["qlsched_ready"], values["qlsched_failed_rounds_total"], values["qlsched_consecutive_failed_rounds"])
	}
	// backing off, a round at most every 400 ms after the first three: spinning, it was hundreds
	if most := 4 + elapsed.Seconds()/0.4; values["qlsched_failed_rounds_total"] > most {
		t.Errorf("%v failed rounds %s after the revoke; with the backoff at most %.0f", values["qlsched_failed_rounds_total"], elapsed, most)
	}
	if code := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d while rounds fail, want 200 (a restart repairs nothing)", code)
	}

	d.Exec(t, "GRANT UPDATE ON control_core.trigger_schedules TO ql_runtime")
	recovered := r.waitFor(t, 20*time.Second, "the recovery line", func(l string) bool { return strings.Contains(l, "rounds recovered") })
	eventually.NoError(t, 20*time.Second, "/readyz 200 and a new admit after the grant", func() error {
		now := scrape(t, base+"/metrics")
		if code, body := readyz(t, base); code != http.StatusOK {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		if now["qlsched_ready"] != 1 || now["qlsched_consecutive_failed_rounds"] != 0 || now["qlsched_admits_total"] <= values["qlsched_admits_total"] {
			return fmt.Errorf("qlsched_ready %v, qlsched_consecutive_failed_rounds %v, admits %v (before: %v)", now["qlsched_ready"],
				now["qlsched_consecutive_failed_rounds"], now["qlsched_admits_total"], values["qlsched_admits_total"])
		}
		return nil
	})
	if m := recoveredLine.FindStringSubmatch(recovered); m == nil || atoi(m[1]) < 6 {
		t.Errorf("the recovery line lacks failed_rounds ≥ 6 and failed_for: %s", recovered)
	}
	if code := r.stop(t); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	all := r.all.String()
	for msg, want := range map[string]int{"round failed; backing off": 1, "not ready: rounds failed in a row": 1,
		"rounds recovered": 1, "claim failed": 0} {
		if n := strings.Count(all, msg); n != want {
			t.Errorf("%q logged %d times, want %d:\n%s", msg, n, want, all)
		}
	}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}
