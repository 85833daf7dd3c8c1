package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/loopaudit"
	"github.com/qlcontrol/controlcore/workerproto"
)

// The bad-input gate of issue 32 against the real binaries (startLoop: `qlsched run`, two
// `qlsched dispatch`, two `qlworker`): a hostile client sends malformed, oversized, unknown,
// wrong-version, replayed and out-of-order requests over HTTP, and tasks whose specs no worker
// can run are published. Each gets a clear 4xx or a failed Attempt whose error names the reason;
// then no process panicked (each still serves), no Run is stuck, nothing ran twice.
func TestDispatchBadInputGate(t *testing.T) {
	t.Parallel()
	began := time.Now()
	execLog := filepath.Join(t.TempDir(), "executions")
	l := startLoop(t,
		// ok appends its Run to the execution log: a second execution would show twice.
		[]string{"ok", "--executor-spec", fmt.Sprintf(`{"command":["sh","-c","echo \"$QL_RUN_ID\" >> %s"],"timeout":"30s"}`, execLog)},
		[]string{"missing", "--executor-spec", `{"command":["/nonexistent/ql-no-such-program"]}`, "--max-attempts", "1"},
		[]string{"badtimeout", "--executor-spec", `{"command":["true"],"timeout":"forever"}`, "--max-attempts", "1"},
		[]string{"nocommand", "--executor-spec", `{"program":"true"}`, "--max-attempts", "1"})

	// A spec that is not a JSON object never reaches a worker: publish refuses it, naming the flag.
	for _, spec := range []string{"run true please", `["true"]`} {
		if r := run(t, append([]string{"task", "publish", "--project", "p", "--task", "nonjson", "--executor-spec", spec}, l.admin...)...); r.code == 0 ||
			!strings.Contains(r.stderr, "executor-spec") || strings.Contains(r.stderr, spec) {
			t.Errorf("publish of the spec %s: exit %d, stderr %q; want refused, naming --executor-spec without quoting it", spec, r.code, r.stderr)
		}
	}

	t.Logf("loop started after %v", time.Since(began).Round(time.Millisecond))
	h := hostile{t: t, url: l.urls[0], token: l.token}
	reg := `{"name":"hostile","capacity":1,"protocol":1}`
	for _, c := range []struct {
		what, method, path, body string
		status                   int
		code                     string
	}{
		{"malformed JSON", "POST", workerproto.PathSessions, `{"name":"hostile",`, 400, workerproto.CodeBadRequest},
		{"not an object", "POST", workerproto.PathSessions, `[1,2]`, 400, workerproto.CodeBadRequest},
		{"oversized body", "POST", workerproto.PathSessions, `{"name":"` + strings.Repeat("h", 80<<10) + `"}`, 413, workerproto.CodeTooLarge},
		{"unknown field", "POST", workerproto.PathSessions, `{"name":"hostile","capacity":1,"protocol":1,"colour":"red"}`, 400, workerproto.CodeUnknownField},
		{"miscased field", "POST", workerproto.PathSessions, `{"name":"hostile","Capacity":1,"protocol":1}`, 400, workerproto.CodeUnknownField},
		{"duplicate field", "POST", workerproto.PathSessions, `{"name":"hostile","capacity":1,"capacity":9,"protocol":1}`, 400, workerproto.CodeBadRequest},
		{"protocol 2 in the body", "POST", workerproto.PathSessions, `{"name":"hostile","capacity":1,"protocol":2}`, 400, workerproto.CodeBadRequest},
		{"protocol 2 in the path", "POST", "/v2/sessions", reg, 404, workerproto.CodeUnsupportedVersion},
		{"wrong method", "PUT", workerproto.PathSessions, reg, 405, workerproto.CodeMethodNotAllowed},
	} {
		h.expect(c.what, c.method, c.path, c.body, c.status, c.code)
	}

	// A session of its own, then an offer (the real workers compete for the same Runs).
	var s workerproto.RegisterResponse
	h.decode(h.expect("register", "POST", workerproto.PathSessions, reg, 201, ""), &s)
	var o workerproto.Offer
	eventually.True(t, 60*time.Second, "an offer for the hostile session", func() bool {
		var p workerproto.PollResponse
		h.decode(h.expect("poll", "POST", workerproto.PollPath(s.SessionID), `{"wait_ms":1000,"max_offers":1}`, 200, ""), &p)
		if len(p.Offers) == 0 {
			return false
		}
		o = p.Offers[0]
		return true
	})
	done := func(cb string, version int64, outcome string) string {
		return fmt.Sprintf(`{"session_id":%q,"callback_token":%q,"lease_version":%d,"outcome":%q,"duration_ms":1}`, s.SessionID, cb, version, outcome)
	}
	complete := workerproto.CompletePath(o.AttemptID)
	ack := fmt.Sprintf(`{"session_id":%q,"callback_token":%q}`, s.SessionID, o.CallbackToken)
	wrongCB := "qlc_" + strings.Repeat("W", 43)
	h.expect("report before ACK", "POST", complete, done(o.CallbackToken, 1, "succeeded"), 404, workerproto.CodeNotFound)
	h.expect("ACK with a wrong callback token", "POST", workerproto.AckPath(o.OfferID), fmt.Sprintf(`{"session_id":%q,"callback_token":%q}`, s.SessionID, wrongCB), 404, workerproto.CodeNotFound)
	h.expect("ACK", "POST", workerproto.AckPath(o.OfferID), ack, 200, "")
	h.expect("ACK replayed", "POST", workerproto.AckPath(o.OfferID), ack, 200, "")
	h.expect("report with a stale lease version", "POST", complete, done(o.CallbackToken, 2, "succeeded"), 409, workerproto.CodeLeaseLost)
	h.expect("report with a wrong callback token", "POST", complete, done(wrongCB, 1, "succeeded"), 404, workerproto.CodeNotFound)
	h.expect("report", "POST", complete, done(o.CallbackToken, 1, "succeeded"), 200, "")
	var c workerproto.CompleteResponse
	if h.decode(h.expect("report twice", "POST", complete, done(o.CallbackToken, 1, "succeeded"), 200, ""), &c); !c.Replay {
		t.Errorf("the second report answered replay:false")
	}
	h.expect("a different report after it", "POST", complete, done(o.CallbackToken, 1, "cancelled"), 409, workerproto.CodeLeaseLost)
	h.expect("ACK after the report", "POST", workerproto.AckPath(o.OfferID), ack, 409, workerproto.CodeOfferGone)
	h.expect("drain", "POST", workerproto.DrainPath(s.SessionID), `{}`, 200, "")
	h.expect("close", "DELETE", workerproto.SessionPath(s.SessionID), ``, 204, "")

	t.Logf("hostile requests done after %v", time.Since(began).Round(time.Millisecond))
	l.settle(t, 1, "ok", "missing", "badtimeout", "nocommand")
	t.Logf("every Run ended after %v", time.Since(began).Round(time.Millisecond))

	// Specs the worker cannot run: a failed Attempt whose error names the reason (but for the Run
	// the hostile client took and reported succeeded).
	for _, w := range []struct{ task, kind, says string }{
		{"missing", workerproto.KindSpawn, "cannot start the program"},
		{"badtimeout", workerproto.KindBadSpec, `"timeout"`},
		{"nocommand", workerproto.KindBadSpec, "an unknown field"},
	} {
		if n := l.count(t, `SELECT count(*) FROM control_core.attempts a JOIN control_core.runs r ON r.run_id = a.run_id
			WHERE r.task_id = $1 AND r.run_id <> $4::uuid AND (a.state <> 'failed' OR a.error->>'kind' <> $2 OR strpos(a.error->>'message', $3) = 0)`,
			w.task, w.kind, w.says, o.RunID); n != 0 {
			t.Errorf("task %s: %d Attempts not failed with %s naming %s", w.task, n, w.kind, w.says)
		}
		if n := l.count(t, `SELECT count(*) FROM control_core.runs WHERE task_id = $1 AND run_id <> $2::uuid AND state <> 'failed'`, w.task, o.RunID); n != 0 {
			t.Errorf("task %s: %d Runs not failed", w.task, n)
		}
	}

	// No panic: every process still serves and none wrote "panic"; no stuck Run (settle waited for
	// every Run to end); nothing ran twice.
	for _, u := range l.health {
		if code := get(t, u+"/readyz"); code != http.StatusOK {
			t.Errorf("%s/readyz: %d after the bad input; want 200", u, code)
		}
	}
	h.url = l.urls[1]
	h.expect("a request after it all", "POST", workerproto.PathSessions, `{"name":"after","capacity":1,"protocol":1}`, 201, "")
	for _, p := range append(append(l.workers, l.dispatchers...), l.sched) {
		if strings.Contains(strings.ToLower(p.all.String()), "panic") {
			t.Errorf("%s logged a panic:\n%s", filepath.Base(p.cmd.Path), p.all.String())
		}
	}
	loopaudit.Assert(t, l.su)
	if n := l.count(t, `SELECT count(*) FROM control_core.runs r WHERE (SELECT count(*) FROM control_core.attempts a
		WHERE a.run_id = r.run_id AND a.state = 'succeeded') > 1`); n != 0 {
		t.Errorf("%d Runs with more than one succeeded Attempt", n)
	}
	raw, err := os.ReadFile(execLog)
	if err != nil && !errors.Is(err, fs.ErrNotExist) { // none: the hostile client took ok's one Run
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, run := range strings.Fields(string(raw)) {
		if seen[run] {
			t.Errorf("Run %s executed twice", run)
		}
		seen[run] = true
	}
	if len(seen) == 0 {
		t.Error("no Run of task ok executed")
	}
	l.stop(t)
}

// hostile is a protocol client that sends whatever it is told.
type hostile struct {
	t          *testing.T
	url, token string
}

// expect sends body and checks the status and, for an error, that the body is a JSON error of
// code; it returns the body.
func (h hostile) expect(what, method, path, body string, status int, code string) []byte {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, bytes.NewBufferString(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s: %v", what, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		h.t.Errorf("%s: %d %s; want %d %s", what, resp.StatusCode, raw, status, code)
		return raw
	}
	if code != "" {
		var e workerproto.ErrorBody
		if err := json.Unmarshal(raw, &e); err != nil || e.Error.Code != code || e.Error.Message == "" {
			h.t.Errorf("%s: body %s; want a JSON error %s with a message", what, raw, code)
		}
	}
	return raw
}

func (h hostile) decode(raw []byte, v any) {
	h.t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		h.t.Fatalf("answer %s: %v", raw, err)
	}
}
