package dispatcher_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/app/dispatcher"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/workerproto"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// fixture is one dispatcher on a database of its own, serving over httptest, with a live
// worker token, a revoked one, and admitted Runs of project p.
type fixture struct {
	db      *testpg.DB
	d       *dispatcher.Dispatcher
	srv     *httptest.Server
	token   string
	revoked string
	logs    *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newFixture publishes project p with task k (spec) and an every-second trigger, admits runs Runs
// through the real coordinator, disables the trigger, and starts a dispatcher as the runtime role.
func newFixture(t *testing.T, runs int) *fixture {
	t.Helper()
	return newFixtureTask(t, runs, admin.TaskSpec{})
}

// newFixtureTask is newFixture with task k's retry policy from task (its other fields are the
// fixture's).
func newFixtureTask(t *testing.T, runs int, task admin.TaskSpec) *fixture {
	t.Helper()
	ctx := context.Background()
	d := testpg.New(t)
	pub := admin.NewPublisher(d.Handle(t, "ql_admin"))
	if _, err := pub.CreateProject(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	task.Project, task.Task, task.ExecutorSpec = "p", "k", []byte(`{"command":["true"]}`)
	if _, err := pub.PublishTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.PublishTrigger(ctx, admin.TriggerSpec{Project: "p", Trigger: "t", Task: "k", Cron: "* * * * * *",
		TimeZone: "UTC", Misfire: "skip", Enabled: true}); err != nil {
		t.Fatal(err)
	}
	rt := d.Handle(t, "ql_runtime")
	co := coordinator.New(coordinator.DefaultConfig("protocol-test"), coordinator.NewStore(rt))
	eventually.True(t, 30*time.Second, fmt.Sprintf("%d admitted Runs", runs), func() bool {
		co.Round(ctx, nil)
		return count(t, d, `SELECT count(*) FROM control_core.runs`) >= runs
	})
	if _, err := pub.DisableTrigger(ctx, "p", "t"); err != nil {
		t.Fatal(err)
	}
	f := &fixture{db: d, logs: &lockedBuffer{}}
	var hashRevoked string
	f.token, _, _ = dispatch.NewWorkerToken()
	f.revoked, hashRevoked, _ = dispatch.NewWorkerToken()
	d.Exec(t, `INSERT INTO control_core.worker_tokens (worker_token_id, name, token_hash) VALUES
		(gen_random_uuid(), 'live', $1), (gen_random_uuid(), 'old', $2)`, dispatch.HashToken(f.token), hashRevoked)
	d.Exec(t, `UPDATE control_core.worker_tokens SET revoked_at_ms = control_core.db_now_ms() WHERE name = 'old'`)
	cfg := dispatch.Config{PlacementInterval: 5 * time.Millisecond, SweepInterval: 100 * time.Millisecond, LeaseTTL: 5 * time.Second,
		OfferTTL: 2 * time.Second}.WithDefaults()
	log := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	disp, err := dispatcher.Start(ctx, rt, dispatcher.Options{Config: cfg, Names: d.Names, Owner: "protocol-test", Log: log,
		GaugeInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.d = disp
	f.srv = httptest.NewServer(disp.Handler())
	t.Cleanup(func() {
		f.srv.CloseClientConnections()
		f.srv.Close()
		if err := disp.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
		for _, secret := range []string{f.token, f.revoked, "qlc_"} {
			if strings.Contains(f.logs.String(), secret) {
				t.Errorf("a token reached the log:\n%s", f.logs.String())
			}
		}
	})
	return f
}

func count(t *testing.T, d *testpg.DB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := d.Pool(t, "").QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// answer is one HTTP exchange.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) code() string {
	var e workerproto.ErrorBody
	_ = json.Unmarshal(a.body, &e)
	return e.Error.Code
}

func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("answer %d %q: %v", a.status, a.body, err)
	}
}

func (f *fixture) do(t *testing.T, token, method, path string, body any) answer {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, f.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, raw}
}

func (f *fixture) register(t *testing.T, capacity int) workerproto.RegisterResponse {
	t.Helper()
	a := f.do(t, f.token, "POST", workerproto.PathSessions, workerproto.RegisterRequest{Name: "w1", Capacity: capacity, Protocol: 1})
	if a.status != http.StatusCreated {
		t.Fatalf("register: %d %s", a.status, a.body)
	}
	var s workerproto.RegisterResponse
	a.decode(t, &s)
	return s
}

// pollOne polls until the session has an offer.
func (f *fixture) pollOne(t *testing.T, sid string) workerproto.Offer {
	t.Helper()
	a := f.do(t, f.token, "POST", workerproto.PollPath(sid), workerproto.PollRequest{WaitMs: 10000, MaxOffers: 1})
	var p workerproto.PollResponse
	a.decode(t, &p)
	if a.status != http.StatusOK || len(p.Offers) != 1 {
		t.Fatalf("poll: %d %s; want 200 with one offer", a.status, a.body)
	}
	return p.Offers[0]
}

func (f *fixture) ack(t *testing.T, sid string, o workerproto.Offer) workerproto.AckResponse {
	t.Helper()
	a := f.do(t, f.token, "POST", workerproto.AckPath(o.OfferID), workerproto.AckRequest{SessionID: sid, CallbackToken: o.CallbackToken})
	if a.status != http.StatusOK {
		t.Fatalf("ack: %d %s", a.status, a.body)
	}
	var l workerproto.AckResponse
	a.decode(t, &l)
	return l
}

func completion(sid string, o workerproto.Offer, version int64, outcome string) workerproto.CompleteRequest {
	zero := 0
	r := workerproto.CompleteRequest{SessionID: sid, CallbackToken: o.CallbackToken, LeaseVersion: version, Outcome: outcome,
		ExitCode: &zero, OutputTail: "hi\n", DurationMs: 12}
	if outcome == workerproto.OutcomeFailed {
		one := 1
		r.ExitCode, r.Error = &one, &workerproto.AttemptError{Kind: workerproto.KindExitStatus, Message: "exit status 1"}
	}
	return r
}

// The whole loop over HTTP, and the answers of §4 to each request that must not be honoured.
func TestProtocolLoopAndItsStatusCodes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	s := f.register(t, 1)
	if s.LeaseTTLMs != 5000 || s.HeartbeatIntervalMs != 5000/3 || s.OutputTailMaxBytes != workerproto.OutputTailMaxBytes {
		t.Errorf("register answered %+v; want the lease TTL 5000 and a third of it", s)
	}
	o := f.pollOne(t, s.SessionID)
	if o.AttemptNo != 1 || o.Project != "p" || o.Task != "k" || !strings.HasPrefix(o.CallbackToken, dispatch.CallbackTokenPrefix) ||
		string(o.Spec) != `{"command": ["true"]}` && string(o.Spec) != `{"command":["true"]}` {
		t.Errorf("offer %+v", o)
	}

	// A foreign or malformed callback token, or a session not of this token: the offer stays.
	other := f.do(t, f.token, "POST", workerproto.AckPath(o.OfferID), workerproto.AckRequest{SessionID: s.SessionID, CallbackToken: "qlc_wrong"})
	if other.status/100 != 4 || other.status == http.StatusOK {
		t.Errorf("ack with a wrong callback token: %d %s; want a 4xx", other.status, other.body)
	}
	l := f.ack(t, s.SessionID, o)
	if l.LeaseVersion != 1 || l.LeaseExpiresInMs <= 0 || l.LeaseExpiresInMs > 5000 {
		t.Errorf("ack answered %+v; want lease version 1 expiring within 5 s", l)
	}
	if again := f.ack(t, s.SessionID, o); again.LeaseVersion != 1 {
		t.Errorf("ack replay answered lease version %d; want the same lease (1)", again.LeaseVersion)
	}
	hb := f.do(t, f.token, "POST", workerproto.HeartbeatPath(s.SessionID), workerproto.HeartbeatRequest{Leases: []workerproto.LeaseRef{{AttemptID: o.AttemptID, LeaseVersion: 1}}})
	var h workerproto.HeartbeatResponse
	hb.decode(t, &h)
	if hb.status != http.StatusOK || len(h.Leases) != 1 || h.Leases[0].Status != workerproto.LeaseRenewed {
		t.Errorf("heartbeat: %d %s; want the lease renewed", hb.status, hb.body)
	}
	if a := f.do(t, f.token, "DELETE", workerproto.SessionPath(s.SessionID), nil); a.status != http.StatusConflict || a.code() != workerproto.CodeLeasesActive {
		t.Errorf("close with a lease active: %d %s; want 409 leases_active", a.status, a.body)
	}
	if a := f.do(t, f.token, "POST", workerproto.CompletePath(o.AttemptID), completion(s.SessionID, o, 2, workerproto.OutcomeSucceeded)); a.status != http.StatusConflict || a.code() != workerproto.CodeLeaseLost {
		t.Errorf("complete with another lease version: %d %s; want 409 lease_lost", a.status, a.body)
	}
	done := f.do(t, f.token, "POST", workerproto.CompletePath(o.AttemptID), completion(s.SessionID, o, 1, workerproto.OutcomeSucceeded))
	var c workerproto.CompleteResponse
	done.decode(t, &c)
	if done.status != http.StatusOK || c.RunState != workerproto.RunSucceeded || c.Replay {
		t.Fatalf("complete: %d %s; want 200 succeeded, not a replay", done.status, done.body)
	}
	replay := f.do(t, f.token, "POST", workerproto.CompletePath(o.AttemptID), completion(s.SessionID, o, 1, workerproto.OutcomeSucceeded))
	replay.decode(t, &c)
	if replay.status != http.StatusOK || !c.Replay || c.RunState != workerproto.RunSucceeded {
		t.Errorf("replayed complete: %d %s; want 200 replay:true", replay.status, replay.body)
	}
	if a := f.do(t, f.token, "POST", workerproto.CompletePath(o.AttemptID), completion(s.SessionID, o, 1, workerproto.OutcomeFailed)); a.status != http.StatusConflict || a.code() != workerproto.CodeLeaseLost {
		t.Errorf("a second complete with another outcome: %d %s; want 409 lease_lost", a.status, a.body)
	}
	if n := count(t, f.db, `SELECT count(*) FROM control_core.attempts WHERE run_id = $1::uuid AND state = 'succeeded'`, o.RunID); n != 1 {
		t.Errorf("%d succeeded Attempts; want 1", n)
	}
	if n := count(t, f.db, `SELECT count(*) FROM control_core.runs WHERE run_id = $1::uuid AND state = 'succeeded' AND finished_at_ms IS NOT NULL`, o.RunID); n != 1 {
		t.Errorf("the Run is not succeeded with its finish time")
	}
	if a := f.do(t, f.token, "POST", workerproto.DrainPath(s.SessionID), "{}"); a.status != http.StatusOK {
		t.Errorf("drain: %d %s", a.status, a.body)
	}
	if a := f.do(t, f.token, "DELETE", workerproto.SessionPath(s.SessionID), nil); a.status != http.StatusNoContent {
		t.Errorf("close: %d %s; want 204", a.status, a.body)
	}
	if a := f.do(t, f.token, "POST", workerproto.PollPath(s.SessionID), workerproto.PollRequest{WaitMs: 10, MaxOffers: 1}); a.status != http.StatusGone || a.code() != workerproto.CodeSessionGone {
		t.Errorf("poll of a closed session: %d %s; want 410 session_gone", a.status, a.body)
	}
}

// A rejected offer is gone: its ACK answers 409 offer_gone and the Run is queued again.
func TestProtocolRejectedOfferIsGone(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	s := f.register(t, 1)
	o := f.pollOne(t, s.SessionID)
	if a := f.do(t, f.token, "POST", workerproto.RejectPath(o.OfferID), workerproto.RejectRequest{SessionID: s.SessionID, CallbackToken: o.CallbackToken, Reason: "busy"}); a.status != http.StatusOK {
		t.Fatalf("reject: %d %s", a.status, a.body)
	}
	if a := f.do(t, f.token, "POST", workerproto.AckPath(o.OfferID), workerproto.AckRequest{SessionID: s.SessionID, CallbackToken: o.CallbackToken}); a.status != http.StatusConflict || a.code() != workerproto.CodeOfferGone {
		t.Errorf("ack of a rejected offer: %d %s; want 409 offer_gone", a.status, a.body)
	}
	if n := count(t, f.db, `SELECT count(*) FROM control_core.runs WHERE run_id = $1::uuid AND state = 'queued'`, o.RunID); n != 1 {
		t.Error("the rejected Run is not queued again")
	}
	if n := count(t, f.db, `SELECT count(*) FROM control_core.run_leases`); n != 0 {
		t.Errorf("%d leases after an ack of a rejected offer; want none", n)
	}
}

// A lease the sweep expired is lost: the late completion is refused (409 lease_lost) and the
// Attempt stays expired, its Run retried or failed by the sweep, never by the report.
func TestProtocolLateCompletionAfterLeaseExpiryIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	s := f.register(t, 1)
	o := f.pollOne(t, s.SessionID)
	f.ack(t, s.SessionID, o)
	eventually.True(t, 30*time.Second, "the lease expired by the sweep", func() bool {
		return count(t, f.db, `SELECT count(*) FROM control_core.run_leases WHERE attempt_id = $1::uuid AND state = 'expired'`, o.AttemptID) == 1
	})
	a := f.do(t, f.token, "POST", workerproto.CompletePath(o.AttemptID), completion(s.SessionID, o, 1, workerproto.OutcomeSucceeded))
	if a.status != http.StatusConflict || a.code() != workerproto.CodeLeaseLost {
		t.Errorf("late complete: %d %s; want 409 lease_lost", a.status, a.body)
	}
	if n := count(t, f.db, `SELECT count(*) FROM control_core.attempts WHERE attempt_id = $1::uuid AND state = 'expired'`, o.AttemptID); n != 1 {
		t.Error("the Attempt is not expired after the refused report")
	}
}

// Requests that are refused before or by the first fence write nothing: no session row.
func TestProtocolRefusalsWriteNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	reg := workerproto.RegisterRequest{Name: "w1", Capacity: 1, Protocol: 1}
	unknown, _, _ := dispatch.NewWorkerToken()
	big := `{"name":"w1","capacity":1,"protocol":1,"labels":{"a":"` + strings.Repeat("x", 70<<10) + `"}}`
	cases := []struct {
		name, token, method, path string
		body                      any
		status                    int
		code                      string
		message                   string // a part the message must have
	}{
		{"no token", "", "POST", workerproto.PathSessions, reg, 401, workerproto.CodeUnauthorized, ""},
		{"malformed token", "qlw_short", "POST", workerproto.PathSessions, reg, 401, workerproto.CodeUnauthorized, ""},
		{"unknown token", unknown, "POST", workerproto.PathSessions, reg, 401, workerproto.CodeUnauthorized, ""},
		{"revoked token", f.revoked, "POST", workerproto.PathSessions, reg, 401, workerproto.CodeUnauthorized, ""},
		{"revoked token polls", f.revoked, "POST", workerproto.PollPath("00000000-0000-0000-0000-000000000001"), workerproto.PollRequest{WaitMs: 1, MaxOffers: 1}, 401, workerproto.CodeUnauthorized, ""},
		{"body over 64 KiB", f.token, "POST", workerproto.PathSessions, big, 413, workerproto.CodeTooLarge, "65536"},
		{"unknown field", f.token, "POST", workerproto.PathSessions, `{"name":"w1","capacity":1,"protocol":1,"colour":"red"}`, 400, workerproto.CodeUnknownField, `"colour"`},
		{"not JSON", f.token, "POST", workerproto.PathSessions, `{"name":`, 400, workerproto.CodeBadRequest, ""},
		{"two values", f.token, "POST", workerproto.PathSessions, `{"name":"w1","capacity":1,"protocol":1} {}`, 400, workerproto.CodeBadRequest, "more than one"},
		{"wrong type", f.token, "POST", workerproto.PathSessions, `{"name":"w1","capacity":"many","protocol":1}`, 400, workerproto.CodeBadRequest, `"capacity"`},
		{"capacity out of bounds", f.token, "POST", workerproto.PathSessions, workerproto.RegisterRequest{Name: "w1", Capacity: 257, Protocol: 1}, 400, workerproto.CodeBadRequest, "capacity"},
		{"protocol 2", f.token, "POST", workerproto.PathSessions, workerproto.RegisterRequest{Name: "w1", Capacity: 1, Protocol: 2}, 400, workerproto.CodeBadRequest, "protocol"},
		{"version 2", f.token, "POST", "/v2/sessions", reg, 404, workerproto.CodeUnsupportedVersion, "v1"},
		{"version 0", f.token, "POST", "/v0", reg, 404, workerproto.CodeUnsupportedVersion, "v1"},
		{"no such endpoint", f.token, "POST", "/v1/nothing", reg, 404, workerproto.CodeNotFound, ""},
		{"wrong method", f.token, "GET", workerproto.PathSessions, nil, 405, workerproto.CodeMethodNotAllowed, "POST"},
		{"session not a UUID", f.token, "POST", workerproto.PollPath("x"), workerproto.PollRequest{WaitMs: 1, MaxOffers: 1}, 404, workerproto.CodeNotFound, ""},
		{"unknown session", f.token, "POST", workerproto.PollPath("00000000-0000-0000-0000-000000000001"), workerproto.PollRequest{WaitMs: 1, MaxOffers: 1}, 404, workerproto.CodeNotFound, ""},
		{"unknown attempt", f.token, "POST", workerproto.CompletePath("00000000-0000-0000-0000-000000000001"),
			completion("00000000-0000-0000-0000-000000000002", workerproto.Offer{CallbackToken: "qlc_x"}, 1, workerproto.OutcomeSucceeded), 404, workerproto.CodeNotFound, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := f.do(t, c.token, c.method, c.path, c.body)
			if a.status != c.status || a.code() != c.code {
				t.Fatalf("%d %s; want %d %s", a.status, a.body, c.status, c.code)
			}
			var e workerproto.ErrorBody
			a.decode(t, &e)
			if !strings.Contains(e.Error.Message, c.message) {
				t.Errorf("message %q lacks %q", e.Error.Message, c.message)
			}
			if c.status == 401 {
				if got := a.header.Get("WWW-Authenticate"); got != workerproto.AuthenticateHeader {
					t.Errorf("WWW-Authenticate %q; want %q", got, workerproto.AuthenticateHeader)
				}
				if e.Error.Message != "" {
					t.Errorf("a 401 with detail %q; want none", e.Error.Message)
				}
			}
			if strings.Contains(string(a.body), "xxxxxxxx") || strings.Contains(string(a.body), "red") {
				t.Errorf("the answer quotes the request's values: %s", a.body)
			}
		})
	}
	if n := count(t, f.db, `SELECT count(*) FROM control_core.worker_sessions`); n != 0 {
		t.Errorf("%d sessions written by refused requests; want none", n)
	}
	if n := count(t, f.db, `SELECT count(*) FROM control_core.dispatch_offers`); n != 0 {
		t.Errorf("%d offers written by refused requests; want none", n)
	}
}

// Withdraw answers a waiting poll with no offers and dispatcher_stopping, and later polls too;
// heartbeats still work; after Stop every request is 503.
func TestProtocolWithdrawAndStop(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	s := f.register(t, 1)
	o := f.pollOne(t, s.SessionID) // the one Run: the next poll waits
	f.ack(t, s.SessionID, o)
	got := make(chan answer, 1)
	go func() {
		got <- f.do(t, f.token, "POST", workerproto.PollPath(s.SessionID), workerproto.PollRequest{WaitMs: 30000, MaxOffers: 1})
	}()
	eventually.True(t, 10*time.Second, "the poll waiting in the placer", func() bool { return f.d.WaitingPolls() == 1 })
	began := time.Now()
	f.d.Withdraw()
	var a answer
	select {
	case a = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting poll was not answered 10 s after Withdraw")
	}
	var p workerproto.PollResponse
	a.decode(t, &p)
	if a.status != http.StatusOK || !p.DispatcherStopping || len(p.Offers) != 0 || time.Since(began) > 5*time.Second {
		t.Errorf("poll during withdraw: %d %s; want 200, no offers, dispatcher_stopping", a.status, a.body)
	}
	if ok, _ := f.d.Ready(); ok {
		t.Error("ready after Withdraw")
	}
	late := f.do(t, f.token, "POST", workerproto.PollPath(s.SessionID), workerproto.PollRequest{WaitMs: 30000, MaxOffers: 1})
	if late.decode(t, &p); late.status != http.StatusOK || !p.DispatcherStopping {
		t.Errorf("poll after Withdraw: %d %s; want 200 dispatcher_stopping at once", late.status, late.body)
	}
	hb := f.do(t, f.token, "POST", workerproto.HeartbeatPath(s.SessionID), workerproto.HeartbeatRequest{Leases: []workerproto.LeaseRef{{AttemptID: o.AttemptID, LeaseVersion: 1}}})
	if hb.status != http.StatusOK {
		t.Errorf("heartbeat after Withdraw: %d %s; want 200", hb.status, hb.body)
	}
	if err := f.d.Stop(context.Background()); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if err := f.d.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if a := f.do(t, f.token, "POST", workerproto.HeartbeatPath(s.SessionID), workerproto.HeartbeatRequest{}); a.status != http.StatusServiceUnavailable || a.code() != workerproto.CodeUnavailable {
		t.Errorf("request after Stop: %d %s; want 503 unavailable", a.status, a.body)
	}
}

// Random bodies on every endpoint never get a 5xx other than 503, nor crash the server.
func TestProtocolSurvivesArbitraryBodies(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	s := f.register(t, 1)
	paths := []string{workerproto.PathSessions, workerproto.PollPath(s.SessionID), workerproto.HeartbeatPath(s.SessionID),
		workerproto.DrainPath(s.SessionID), workerproto.AckPath(s.SessionID), workerproto.RejectPath(s.SessionID),
		workerproto.CompletePath(s.SessionID)}
	seeds := []string{``, `{}`, `[]`, `null`, `{"leases":null}`, `{"leases":[{}]}`, `{"wait_ms":-1,"max_offers":0}`,
		`{"wait_ms":1,"max_offers":1}`, `{"session_id":"` + s.SessionID + `","callback_token":"qlc_x"}`, `{"outcome":"succeeded","lease_version":1}`,
		`{"outcome":"failed","lease_version":1,"error":{"kind":"spawn","message":"\u0000"}}`, `{"labels":{"":""}}`, `"\ud800"`,
		`{"capacity":1e400}`, `{"name":"w","capacity":1,"protocol":1,"labels":{"k":"v"}}`, "\xff\xfe", `{"a":` + strings.Repeat("[", 10000)}
	for _, path := range paths {
		for i, body := range seeds {
			for _, cut := range []int{len(body), len(body) / 2} {
				a := f.do(t, f.token, "POST", path, body[:cut])
				if a.status >= 500 && a.status != http.StatusServiceUnavailable {
					t.Errorf("POST %s seed %d cut %d: %d %s", path, i, cut, a.status, a.body)
				}
			}
		}
	}
}
