package worker_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/workerproto"
)

const testToken = "qlw_test-token"

// fakeDispatcher speaks just enough of protocol v1 for the Runner's tests: one session, offers
// the test queues, leases of version 1, and a record of every call. The real dispatcher and its
// end-to-end tests live in internal/app/dispatcher.
type fakeDispatcher struct {
	t   *testing.T
	srv *httptest.Server

	offers chan workerproto.Offer

	mu             sync.Mutex
	leaseTTLMs     int64
	hbIntervalMs   int64
	leaseStatus    map[string]string // attempt id → heartbeat answer (default renewed)
	fail503        map[string]int    // endpoint name → 503 answers still to give
	gone           map[string]int    // endpoint name → 410 session_gone answers still to give
	greedy         bool              // a poll answers every queued offer, whatever max_offers says
	calls          []string          // endpoint names in arrival order
	completes      []workerproto.CompleteRequest
	completeRaw    [][]byte
	ackAt          time.Time
	onAck          func()
	ackEnter       func() // called as an ACK arrives, before it is answered
	sessionsIssued int
}

func newFakeDispatcher(t *testing.T) *fakeDispatcher {
	f := &fakeDispatcher{
		t: t, offers: make(chan workerproto.Offer, 16),
		leaseTTLMs: 30_000, hbIntervalMs: 100,
		leaseStatus: map[string]string{}, fail503: map[string]int{}, gone: map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sessions", f.register)
	mux.HandleFunc("POST /v1/sessions/{sid}/poll", f.poll)
	mux.HandleFunc("POST /v1/sessions/{sid}/heartbeat", f.heartbeat)
	mux.HandleFunc("POST /v1/sessions/{sid}/drain", f.drain)
	mux.HandleFunc("DELETE /v1/sessions/{sid}", f.close)
	mux.HandleFunc("POST /v1/offers/{oid}/ack", f.ack)
	mux.HandleFunc("POST /v1/offers/{oid}/reject", f.reject)
	mux.HandleFunc("POST /v1/attempts/{aid}/complete", f.complete)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			w.Header().Set("WWW-Authenticate", workerproto.AuthenticateHeader)
			writeJSON(w, http.StatusUnauthorized, workerproto.ErrorBody{Error: workerproto.ErrorDetail{Code: workerproto.CodeUnauthorized}})
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads a body strictly, as the real dispatcher does.
func (f *fakeDispatcher) decode(r *http.Request, v any) []byte {
	var raw json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
		f.t.Errorf("%s %s: bad JSON: %v", r.Method, r.URL.Path, err)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		f.t.Errorf("%s %s: %v", r.Method, r.URL.Path, err)
	}
	return raw
}

// record notes a call and reports whether it should be answered 503.
func (f *fakeDispatcher) record(name string, w http.ResponseWriter) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
	if f.fail503[name] > 0 {
		f.fail503[name]--
		writeJSON(w, http.StatusServiceUnavailable, workerproto.ErrorBody{Error: workerproto.ErrorDetail{Code: workerproto.CodeUnavailable, Message: "test"}})
		return true
	}
	if f.gone[name] > 0 {
		f.gone[name]--
		writeJSON(w, http.StatusGone, workerproto.ErrorBody{Error: workerproto.ErrorDetail{Code: workerproto.CodeSessionGone}})
		return true
	}
	return false
}

func (f *fakeDispatcher) register(w http.ResponseWriter, r *http.Request) {
	var req workerproto.RegisterRequest
	f.decode(r, &req)
	if f.record("register", w) {
		return
	}
	if err := req.Validate(); err != nil {
		writeJSON(w, http.StatusBadRequest, workerproto.ErrorBody{Error: workerproto.ErrorDetail{Code: workerproto.CodeBadRequest, Message: err.Error()}})
		return
	}
	f.mu.Lock()
	f.sessionsIssued++
	resp := workerproto.RegisterResponse{SessionID: fmt.Sprintf("sess-%d", f.sessionsIssued), HeartbeatIntervalMs: f.hbIntervalMs, LeaseTTLMs: f.leaseTTLMs,
		PollMaxWaitMs: 1000, OutputTailMaxBytes: workerproto.OutputTailMaxBytes}
	f.mu.Unlock()
	writeJSON(w, http.StatusCreated, resp)
}

func (f *fakeDispatcher) poll(w http.ResponseWriter, r *http.Request) {
	var req workerproto.PollRequest
	f.decode(r, &req)
	if f.record("poll", w) {
		return
	}
	resp := workerproto.PollResponse{Offers: []workerproto.Offer{}}
	select {
	case o := <-f.offers:
		resp.Offers = append(resp.Offers, o)
		f.mu.Lock()
		greedy := f.greedy
		f.mu.Unlock()
		for greedy && len(f.offers) > 0 { // a misbehaving dispatcher: more than max_offers
			resp.Offers = append(resp.Offers, <-f.offers)
		}
	case <-time.After(time.Duration(req.WaitMs) * time.Millisecond):
	case <-r.Context().Done():
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (f *fakeDispatcher) ack(w http.ResponseWriter, r *http.Request) {
	var req workerproto.AckRequest
	f.decode(r, &req)
	if f.record("ack", w) {
		return
	}
	f.mu.Lock()
	enter := f.ackEnter
	f.mu.Unlock()
	if enter != nil {
		enter()
	}
	f.mu.Lock()
	f.ackAt = time.Now()
	onAck := f.onAck
	resp := workerproto.AckResponse{LeaseVersion: 1, LeaseExpiresInMs: f.leaseTTLMs, HeartbeatIntervalMs: f.hbIntervalMs}
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
	if onAck != nil {
		onAck()
	}
}

func (f *fakeDispatcher) reject(w http.ResponseWriter, r *http.Request) {
	var req workerproto.RejectRequest
	f.decode(r, &req)
	if f.record("reject", w) {
		return
	}
	writeJSON(w, http.StatusOK, workerproto.RejectResponse{})
}

func (f *fakeDispatcher) heartbeat(w http.ResponseWriter, r *http.Request) {
	var req workerproto.HeartbeatRequest
	f.decode(r, &req)
	if f.record("heartbeat", w) {
		return
	}
	f.mu.Lock()
	resp := workerproto.HeartbeatResponse{SessionExpiresInMs: f.leaseTTLMs, Leases: []workerproto.LeaseStatus{}}
	for _, l := range req.Leases {
		st := f.leaseStatus[l.AttemptID]
		if st == "" {
			st = workerproto.LeaseRenewed
		}
		exp := f.leaseTTLMs
		if st == workerproto.LeaseLost {
			exp = 0
		}
		resp.Leases = append(resp.Leases, workerproto.LeaseStatus{AttemptID: l.AttemptID, Status: st, LeaseExpiresInMs: exp})
	}
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

func (f *fakeDispatcher) complete(w http.ResponseWriter, r *http.Request) {
	var req workerproto.CompleteRequest
	raw := f.decode(r, &req)
	f.mu.Lock()
	f.completeRaw = append(f.completeRaw, raw)
	f.mu.Unlock()
	if f.record("complete", w) {
		return
	}
	if err := req.Validate(); err != nil {
		writeJSON(w, http.StatusBadRequest, workerproto.ErrorBody{Error: workerproto.ErrorDetail{Code: workerproto.CodeBadRequest, Message: err.Error()}})
		return
	}
	f.mu.Lock()
	replay := len(f.completes) > 0
	if !replay {
		f.completes = append(f.completes, req)
	}
	f.mu.Unlock()
	state := map[string]string{workerproto.OutcomeSucceeded: workerproto.RunSucceeded, workerproto.OutcomeFailed: workerproto.RunFailed,
		workerproto.OutcomeCancelled: workerproto.RunCancelled, workerproto.OutcomeHandedBack: workerproto.RunQueued}[req.Outcome]
	writeJSON(w, http.StatusOK, workerproto.CompleteResponse{RunState: state, Replay: replay})
}

func (f *fakeDispatcher) drain(w http.ResponseWriter, r *http.Request) {
	var req workerproto.DrainRequest
	f.decode(r, &req)
	if f.record("drain", w) {
		return
	}
	writeJSON(w, http.StatusOK, workerproto.DrainResponse{})
}

func (f *fakeDispatcher) close(w http.ResponseWriter, r *http.Request) {
	if f.record("close", w) {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeDispatcher) callsCopy() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeDispatcher) count(name string) int {
	n := 0
	for _, c := range f.callsCopy() {
		if c == name {
			n++
		}
	}
	return n
}

func (f *fakeDispatcher) completesCopy() []workerproto.CompleteRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]workerproto.CompleteRequest(nil), f.completes...)
}

// testOffer is an offer of attempt n.
func testOffer(n string) workerproto.Offer {
	return workerproto.Offer{
		OfferID: "offer-" + n, AttemptID: "attempt-" + n, RunID: "run-" + n, AttemptNo: 1, MaxAttempts: 1,
		CallbackToken: "qlc_secret-" + n, ExpiresInMs: 10_000, Project: "p", Task: "t", TaskRevision: 1,
		Spec: json.RawMessage(`{"command":["true"]}`),
	}
}

// closedURL is the URL of a port nothing listens on.
func closedURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}
