package dispatcher_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/workerproto"
)

// Findings of a hostile review (issue 32, "Bad input"), each a request the dispatcher took or
// answered loosely: every one is refused with a 4xx and a JSON error body naming the reason, and
// none writes a row.
func TestProtocolRefusesLooseInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	s := f.register(t, 1)
	sid := s.SessionID
	unknown, _, _ := dispatch.NewWorkerToken()
	big := `{"name":"w1","capacity":1,"protocol":1,"labels":{"a":"` + strings.Repeat("x", 70<<10) + `"}}`
	lease := `{"attempt_id":"00000000-0000-0000-0000-000000000001","lease_version":1}`
	cases := []struct {
		name, token, path string
		body              string
		twoAuth           bool
		status            int
		code, message     string
	}{
		// (a) two Authorization headers: which one counts is ambiguous.
		{"two Authorization headers", f.token, workerproto.PathSessions, `{"name":"w1","capacity":1,"protocol":1}`, true, 400, workerproto.CodeBadRequest, "Authorization"},
		// (b) keys are matched exactly and once.
		{"miscased key", f.token, workerproto.PathSessions, `{"name":"w1","Capacity":1,"protocol":1}`, false, 400, workerproto.CodeUnknownField, `"Capacity"`},
		{"miscased nested key", f.token, workerproto.HeartbeatPath(sid), `{"leases":[{"Attempt_ID":"00000000-0000-0000-0000-000000000001","lease_version":1}]}`, false, 400, workerproto.CodeUnknownField, `"leases[].Attempt_ID"`},
		{"duplicate key", f.token, workerproto.PathSessions, `{"name":"w1","capacity":1,"capacity":2,"protocol":1}`, false, 400, workerproto.CodeBadRequest, `duplicate key "capacity"`},
		{"duplicate label key", f.token, workerproto.PathSessions, `{"name":"w1","capacity":1,"protocol":1,"labels":{"z":"a","z":"b"}}`, false, 400, workerproto.CodeBadRequest, `duplicate key "labels.z"`},
		{"duplicate key in drain", f.token, workerproto.DrainPath(sid), `{"x":1,"x":1}`, false, 400, workerproto.CodeUnknownField, `"x"`},
		{"nested too deep", f.token, workerproto.PathSessions, `{"labels":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, false, 400, workerproto.CodeBadRequest, "deeper"},
		// (c) text that is not UTF-8 is refused, never stored as U+FFFD.
		{"tail not UTF-8", f.token, workerproto.CompletePath(sid), `{"session_id":"` + sid + `","callback_token":"qlc_x","lease_version":1,"outcome":"succeeded","output_tail":"a` + "\xff" + `b","duration_ms":1}`, false, 400, workerproto.CodeBadRequest, "UTF-8"},
		{"tail with a lone surrogate", f.token, workerproto.CompletePath(sid), `{"session_id":"` + sid + `","callback_token":"qlc_x","lease_version":1,"outcome":"succeeded","output_tail":"a\ud800b","duration_ms":1}`, false, 400, workerproto.CodeBadRequest, "surrogate"},
		{"reason with a lone low surrogate", f.token, workerproto.RejectPath(sid), `{"session_id":"` + sid + `","callback_token":"qlc_x","reason":"\udc00"}`, false, 400, workerproto.CodeBadRequest, "surrogate"},
		// (e) the token is checked before the body is read.
		{"unknown token, body over 64 KiB", unknown, workerproto.PathSessions, big, false, 401, workerproto.CodeUnauthorized, ""},
		{"revoked token, body over 64 KiB", f.revoked, workerproto.PollPath(sid), big, false, 401, workerproto.CodeUnauthorized, ""},
		// (f) wait_ms 0 is refused, not read as the longest wait.
		{"wait_ms 0", f.token, workerproto.PollPath(sid), `{"wait_ms":0,"max_offers":1}`, false, 400, workerproto.CodeBadRequest, "wait_ms"},
		// (g) a heartbeat lists at most the session's capacity (1).
		{"more leases than capacity", f.token, workerproto.HeartbeatPath(sid), `{"leases":[` + lease + `,` + lease + `]}`, false, 400, workerproto.CodeBadRequest, "capacity"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest("POST", f.srv.URL+c.path, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Add("Authorization", "Bearer "+c.token)
			if c.twoAuth {
				req.Header.Add("Authorization", "Bearer "+unknown)
			}
			a := send(t, f, req)
			if a.status != c.status || a.code() != c.code {
				t.Fatalf("%d %s; want %d %s", a.status, a.body, c.status, c.code)
			}
			var e workerproto.ErrorBody
			a.decode(t, &e)
			if !strings.Contains(e.Error.Message, c.message) {
				t.Errorf("message %q lacks %q", e.Error.Message, c.message)
			}
			if strings.Contains(string(a.body), unknown) || strings.Contains(string(a.body), "xxxx") {
				t.Errorf("the answer quotes the request: %s", a.body)
			}
		})
	}
	if n := count(t, f.db, `SELECT count(*) FROM control_core.worker_sessions`); n != 1 {
		t.Errorf("%d sessions; want the fixture's one", n)
	}
	// The refused heartbeat renewed nothing: a heartbeat with the capacity's worth still works.
	if a := f.do(t, f.token, "POST", workerproto.HeartbeatPath(sid), `{"leases":[`+lease+`]}`); a.status != http.StatusOK {
		t.Errorf("heartbeat within capacity: %d %s", a.status, a.body)
	}
}

func send(t *testing.T, f *fixture, req *http.Request) answer {
	t.Helper()
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return answer{resp.StatusCode, resp.Header, []byte(b.String())}
}

// (d) A token holds at most dispatch.MaxSessionsPerToken live sessions; a closed one frees a place.
func TestProtocolBoundsSessionsPerToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	var first string
	for i := range dispatch.MaxSessionsPerToken {
		s := f.register(t, 1)
		if i == 0 {
			first = s.SessionID
		}
	}
	reg := workerproto.RegisterRequest{Name: "w1", Capacity: 1, Protocol: 1}
	a := f.do(t, f.token, "POST", workerproto.PathSessions, reg)
	if a.status != http.StatusConflict || a.code() != workerproto.CodeTooManySessions {
		t.Fatalf("register %d: %d %s; want 409 too_many_sessions", dispatch.MaxSessionsPerToken+1, a.status, a.body)
	}
	if n := count(t, f.db, `SELECT count(*) FROM control_core.worker_sessions`); n != dispatch.MaxSessionsPerToken {
		t.Errorf("%d sessions; want %d", n, dispatch.MaxSessionsPerToken)
	}
	if a := f.do(t, f.token, "DELETE", workerproto.SessionPath(first), nil); a.status != http.StatusNoContent {
		t.Fatalf("close: %d %s", a.status, a.body)
	}
	f.register(t, 1) // the closed session's place
}

// (h) A repeated drain is answered 200 with already_draining; (i) on a cancelled Run a report of
// cancelled after a refused success is 200 cancelled, and a success again 409 run_cancelled.
func TestProtocolRepeatedDrainAndReportsOnACancelledRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	s := f.register(t, 1)
	o := f.pollOne(t, s.SessionID)
	f.ack(t, s.SessionID, o)
	pub := admin.NewPublisher(f.db.Handle(t, "ql_admin"))
	if _, err := pub.CancelRun(context.Background(), uuid.MustParse(o.RunID), "test"); err != nil {
		t.Fatal(err)
	}
	path := workerproto.CompletePath(o.AttemptID)
	if a := f.do(t, f.token, "POST", path, completion(s.SessionID, o, 1, workerproto.OutcomeSucceeded)); a.status != http.StatusConflict || a.code() != workerproto.CodeRunCancelled {
		t.Fatalf("success on a cancelled Run: %d %s; want 409 run_cancelled", a.status, a.body)
	}
	var c workerproto.CompleteResponse
	a := f.do(t, f.token, "POST", path, completion(s.SessionID, o, 1, workerproto.OutcomeCancelled))
	if a.decode(t, &c); a.status != http.StatusOK || c.RunState != workerproto.RunCancelled || !c.Replay {
		t.Errorf("cancelled after the refused success: %d %s; want 200 cancelled, replay", a.status, a.body)
	}
	if a := f.do(t, f.token, "POST", path, completion(s.SessionID, o, 1, workerproto.OutcomeFailed)); a.status != http.StatusConflict || a.code() != workerproto.CodeRunCancelled {
		t.Errorf("failed after: %d %s; want 409 run_cancelled", a.status, a.body)
	}
	if n := count(t, f.db, `SELECT count(*) FROM control_core.attempts WHERE attempt_id = $1::uuid AND state = 'cancelled'`, o.AttemptID); n != 1 {
		t.Error("the Attempt is not cancelled")
	}

	for i, want := range []bool{false, true, true} {
		var d workerproto.DrainResponse
		a := f.do(t, f.token, "POST", workerproto.DrainPath(s.SessionID), "{}")
		if a.decode(t, &d); a.status != http.StatusOK || d.AlreadyDraining != want || d.WithdrawnOffers != 0 || d.ActiveLeases != 0 {
			t.Errorf("drain %d: %d %s; want 200 already_draining %v", i+1, a.status, a.body, want)
		}
	}
}
