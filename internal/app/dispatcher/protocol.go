package dispatcher

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/workerproto"
)

// otherVersion is a path of a protocol version this dispatcher does not speak (/v2/…, /v0/…).
var otherVersion = regexp.MustCompile(`^/v[0-9]+(/|$)`)

// endpoint is one protocol operation: its name (metrics, logs) and its body. It returns the
// status and response, or the error to answer; status 0 without an error means it answered.
type endpoint struct {
	name   string
	method string
	serve  func(c *call) (int, any, *apiError)
}

// call is one authenticated request.
type call struct {
	w    http.ResponseWriter
	r    *http.Request
	ctx  context.Context
	cred dispatch.Credential
}

// routes maps the paths of protocol v1 (§4). Patterns carry no method: a wrong method is a
// JSON 405 of our own rather than ServeMux's plain-text one.
func (d *Dispatcher) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/sessions", d.serve(endpoint{"register", http.MethodPost, d.register}))
	mux.Handle("/v1/sessions/{sid}", d.serve(endpoint{"close", http.MethodDelete, d.close}))
	mux.Handle("/v1/sessions/{sid}/poll", d.serve(endpoint{"poll", http.MethodPost, d.poll}))
	mux.Handle("/v1/sessions/{sid}/heartbeat", d.serve(endpoint{"heartbeat", http.MethodPost, d.heartbeat}))
	mux.Handle("/v1/sessions/{sid}/drain", d.serve(endpoint{"drain", http.MethodPost, d.drain}))
	mux.Handle("/v1/offers/{oid}/ack", d.serve(endpoint{"ack", http.MethodPost, d.ack}))
	mux.Handle("/v1/offers/{oid}/reject", d.serve(endpoint{"reject", http.MethodPost, d.reject}))
	mux.Handle("/v1/attempts/{aid}/complete", d.serve(endpoint{"complete", http.MethodPost, d.complete}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, workerproto.PathPrefix+"/") && otherVersion.MatchString(r.URL.Path) {
			d.requests.WithLabelValues("other", workerproto.CodeUnsupportedVersion).Inc()
			writeError(w, fail(workerproto.CodeUnsupportedVersion, "this dispatcher speaks protocol v%d (%s/…)", workerproto.Version, workerproto.PathPrefix))
			return
		}
		d.requests.WithLabelValues("other", workerproto.CodeNotFound).Inc()
		writeError(w, fail(workerproto.CodeNotFound, "no such endpoint in protocol v%d", workerproto.Version))
	})
	return mux
}

// serve wraps an endpoint: in-flight accounting for Stop, method, authentication (a missing or
// malformed token is refused before any database work, an unknown or revoked one before the body
// is read; two Authorization headers are refused), the recovery that keeps a bug in one
// request from reaching the server, and the metrics. It never logs a header or a body.
func (d *Dispatcher) serve(e endpoint) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := "ok"
		defer func() { d.requests.WithLabelValues(e.name, code).Inc() }()
		if !d.enter() {
			code = workerproto.CodeUnavailable
			writeError(w, fail(code, "dispatcher stopping"))
			return
		}
		defer d.inflight.Done()
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				code = workerproto.CodeUnavailable
				d.log.Error("protocol handler panicked", "endpoint", e.name, "panic", p)
				writeError(w, fail(code, "internal error"))
			}
		}()
		if r.Method != e.method {
			w.Header().Set("Allow", e.method)
			code = workerproto.CodeMethodNotAllowed
			writeError(w, fail(code, "%s wants %s", e.name, e.method))
			return
		}
		if twoAuthorizations(r) {
			code = workerproto.CodeBadRequest
			writeError(w, fail(code, "more than one Authorization header"))
			return
		}
		token := bearer(r)
		if !dispatch.WellFormed(token, dispatch.WorkerTokenPrefix) {
			code = workerproto.CodeUnauthorized
			writeError(w, fail(code, ""))
			return
		}
		// The token is checked before the body is read: an unknown or revoked token costs one
		// indexed read, never up to MaxBodyBytes of reading. Every statement checks it again.
		cred := dispatch.CredentialFor(token)
		if err := d.store.Authenticate(r.Context(), cred); err != nil {
			aerr := d.storeError(e.name, err)
			code = aerr.code
			writeError(w, aerr)
			return
		}
		status, body, aerr := e.serve(&call{w: w, r: r, ctx: r.Context(), cred: cred})
		if aerr != nil {
			code = aerr.code
			writeError(w, aerr)
			return
		}
		switch status {
		case 0: // the endpoint wrote its answer itself (poll)
		case http.StatusNoContent:
			w.WriteHeader(status)
		default:
			writeJSON(w, status, body)
		}
	})
}

// storeError maps a transition's error onto the protocol (§4). Sentinels are the lost fences
// the store diagnosed; anything else is the database (503, retryable, logged without input).
func (d *Dispatcher) storeError(endpoint string, err error) *apiError {
	switch {
	case errors.Is(err, dispatch.ErrUnauthorized):
		return fail(workerproto.CodeUnauthorized, "")
	case errors.Is(err, dispatch.ErrNotFound):
		return fail(workerproto.CodeNotFound, "no such %s for this token", subject(endpoint))
	case errors.Is(err, dispatch.ErrOfferGone):
		return fail(workerproto.CodeOfferGone, "the offer expired, was withdrawn or was rejected")
	case errors.Is(err, dispatch.ErrLeaseLost):
		return fail(workerproto.CodeLeaseLost, "the lease expired, belongs to another session or has another version")
	case errors.Is(err, dispatch.ErrRunCancelled):
		return fail(workerproto.CodeRunCancelled, "the Run was cancelled")
	case errors.Is(err, dispatch.ErrSessionGone):
		return fail(workerproto.CodeSessionGone, "the session expired or was closed: register again")
	case errors.Is(err, dispatch.ErrSessionDraining):
		return fail(workerproto.CodeSessionDraining, "the session is draining: no new offers")
	case errors.Is(err, dispatch.ErrLeasesActive):
		return fail(workerproto.CodeLeasesActive, "the session still holds active leases")
	case errors.Is(err, dispatch.ErrStopping):
		return fail(workerproto.CodeUnavailable, "dispatcher stopping")
	case errors.Is(err, dispatch.ErrTooManySessions):
		return fail(workerproto.CodeTooManySessions, "the token holds %d live sessions: close one or let it expire", dispatch.MaxSessionsPerToken)
	case errors.Is(err, dispatch.ErrTooManyLeases):
		return fail(workerproto.CodeBadRequest, "leases: more than the session's capacity")
	case errors.Is(err, dispatch.ErrBusy):
		return fail(workerproto.CodeUnavailable, "the Run is busy: retry")
	case errors.Is(err, dispatch.ErrBadValue):
		return fail(workerproto.CodeBadRequest, "a value of the request cannot be stored")
	}
	var fe *workerproto.FieldError
	if errors.As(err, &fe) {
		return fail(workerproto.CodeBadRequest, "%s", fe.Error())
	}
	if errors.Is(err, context.Canceled) {
		// the client went away: nobody reads the answer
		return fail(workerproto.CodeUnavailable, "request cancelled")
	}
	d.log.Warn("protocol request failed", "endpoint", endpoint, "err", err)
	return fail(workerproto.CodeUnavailable, "database unavailable: retry")
}

func subject(endpoint string) string {
	switch endpoint {
	case "ack", "reject":
		return "offer"
	case "complete":
		return "attempt"
	}
	return "session"
}

// pathID parses the {name} UUID of the path; a malformed one names nothing that exists.
func pathID(c *call, name, what string) (uuid.UUID, *apiError) {
	id, err := uuid.Parse(c.r.PathValue(name))
	if err != nil {
		return uuid.Nil, fail(workerproto.CodeNotFound, "no such %s", what)
	}
	return id, nil
}

// bodyID parses a UUID field of the body.
func bodyID(field, s string) (uuid.UUID, *apiError) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fail(workerproto.CodeBadRequest, "%s: want a UUID", field)
	}
	return id, nil
}

// readBody decodes the request body into req and, when the type has bounds, checks them: every
// endpoint reads its body this one way.
func readBody(c *call, req any) *apiError {
	if e := decode(c.w, c.r, req); e != nil {
		return e
	}
	return bounds(req)
}

// bounds runs the request type's own check (workerproto), if it has one.
func bounds(req any) *apiError {
	if v, ok := req.(interface{ Validate() error }); ok {
		return validate(v.Validate())
	}
	return nil
}

// validate maps a request's bounds error, naming the field.
func validate(err error) *apiError {
	if err == nil {
		return nil
	}
	var fe *workerproto.FieldError
	if errors.As(err, &fe) {
		return fail(workerproto.CodeBadRequest, "%s", fe.Error())
	}
	return fail(workerproto.CodeBadRequest, "request out of bounds")
}

func (d *Dispatcher) register(c *call) (int, any, *apiError) {
	var req workerproto.RegisterRequest
	if e := readBody(c, &req); e != nil {
		return 0, nil, e
	}
	s, err := d.store.Register(c.ctx, c.cred, dispatch.Registration{Name: req.Name, Capacity: req.Capacity, Labels: req.Labels, Protocol: req.Protocol})
	if err != nil {
		return 0, nil, d.storeError("register", err)
	}
	return http.StatusCreated, workerproto.RegisterResponse{SessionID: s.ID.String(), HeartbeatIntervalMs: s.HeartbeatIntervalMs,
		LeaseTTLMs: s.LeaseTTLMs, PollMaxWaitMs: s.PollMaxWaitMs, OutputTailMaxBytes: workerproto.OutputTailMaxBytes}, nil
}

// poll waits for offers. Offers placed for a poll whose answer cannot be delivered (the client
// went away) are withdrawn at once (W) rather than left to expire.
func (d *Dispatcher) poll(c *call) (int, any, *apiError) {
	sid, e := pathID(c, "sid", "session")
	if e != nil {
		return 0, nil, e
	}
	var req workerproto.PollRequest
	if e := readBody(c, &req); e != nil {
		return 0, nil, e
	}
	if d.withdrawn.Load() {
		return http.StatusOK, workerproto.PollResponse{Offers: []workerproto.Offer{}, DispatcherStopping: true}, nil
	}
	wait := min(time.Duration(req.WaitMs)*time.Millisecond, d.cfg.PollMaxWait)
	d.polling.Add(1)
	offers, err := d.placer.Poll(c.ctx, c.cred, sid, req.MaxOffers, wait)
	d.polling.Add(-1)
	if errors.Is(err, dispatch.ErrStopping) {
		return http.StatusOK, workerproto.PollResponse{Offers: []workerproto.Offer{}, DispatcherStopping: true}, nil
	}
	if err != nil {
		return 0, nil, d.storeError("poll", err)
	}
	resp := workerproto.PollResponse{Offers: make([]workerproto.Offer, 0, len(offers))}
	for _, o := range offers {
		resp.Offers = append(resp.Offers, wireOffer(o))
	}
	if len(offers) > 0 && c.ctx.Err() != nil {
		d.withdraw(offers)
		return 0, nil, fail(workerproto.CodeUnavailable, "request cancelled")
	}
	if len(offers) > 0 {
		writeJSON(c.w, http.StatusOK, resp)
		if err := http.NewResponseController(c.w).Flush(); err != nil || c.ctx.Err() != nil {
			d.withdraw(offers)
		}
		return 0, nil, nil
	}
	return http.StatusOK, resp, nil
}

// withdraw gives back offers whose poll answer was not delivered; best effort (they expire
// after the offer TTL otherwise).
func (d *Dispatcher) withdraw(offers []dispatch.Offer) {
	ids := make([]uuid.UUID, len(offers))
	for i, o := range offers {
		ids[i] = o.OfferID
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n, err := d.store.Withdraw(ctx, ids); err != nil {
		d.log.Warn("withdraw undelivered offers", "offers", len(ids), "err", err)
	} else {
		d.log.Info("undelivered offers withdrawn", "offers", n)
	}
}

func wireOffer(o dispatch.Offer) workerproto.Offer {
	return workerproto.Offer{OfferID: o.OfferID.String(), AttemptID: o.AttemptID.String(), RunID: o.RunID.String(),
		AttemptNo: o.AttemptNo, MaxAttempts: o.MaxAttempts, CallbackToken: o.CallbackToken, ExpiresInMs: o.ExpiresInMs,
		Project: o.ProjectID, Task: o.TaskID, TaskRevision: o.TaskRevision, Trigger: o.TriggerID,
		ScheduledForMs: o.ScheduledForMs, Spec: o.Spec}
}

func (d *Dispatcher) ack(c *call) (int, any, *apiError) {
	oid, e := pathID(c, "oid", "offer")
	if e != nil {
		return 0, nil, e
	}
	var req workerproto.AckRequest
	if e := readBody(c, &req); e != nil {
		return 0, nil, e
	}
	sid, e := bodyID("session_id", req.SessionID)
	if e != nil {
		return 0, nil, e
	}
	l, err := d.store.Ack(c.ctx, c.cred, oid, sid, req.CallbackToken)
	if err != nil {
		return 0, nil, d.storeError("ack", err)
	}
	d.loop.started(l)
	return http.StatusOK, workerproto.AckResponse{LeaseVersion: l.LeaseVersion, LeaseExpiresInMs: l.LeaseExpiresInMs,
		HeartbeatIntervalMs: l.HeartbeatIntervalMs}, nil
}

func (d *Dispatcher) reject(c *call) (int, any, *apiError) {
	oid, e := pathID(c, "oid", "offer")
	if e != nil {
		return 0, nil, e
	}
	var req workerproto.RejectRequest
	if e := readBody(c, &req); e != nil {
		return 0, nil, e
	}
	sid, e := bodyID("session_id", req.SessionID)
	if e != nil {
		return 0, nil, e
	}
	if err := d.store.Reject(c.ctx, c.cred, oid, sid, req.CallbackToken, req.Reason); err != nil {
		return 0, nil, d.storeError("reject", err)
	}
	d.placer.Kick()
	return http.StatusOK, workerproto.RejectResponse{}, nil
}

func (d *Dispatcher) heartbeat(c *call) (int, any, *apiError) {
	sid, e := pathID(c, "sid", "session")
	if e != nil {
		return 0, nil, e
	}
	var req workerproto.HeartbeatRequest
	if e := readBody(c, &req); e != nil {
		return 0, nil, e
	}
	refs := make([]dispatch.LeaseRef, len(req.Leases))
	for i, l := range req.Leases {
		id, e := bodyID("leases[].attempt_id", l.AttemptID)
		if e != nil {
			return 0, nil, e
		}
		refs[i] = dispatch.LeaseRef{AttemptID: id, LeaseVersion: l.LeaseVersion}
	}
	res, err := d.store.Heartbeat(c.ctx, c.cred, sid, refs)
	if err != nil {
		return 0, nil, d.storeError("heartbeat", err)
	}
	resp := workerproto.HeartbeatResponse{SessionExpiresInMs: res.SessionExpiresInMs, Leases: make([]workerproto.LeaseStatus, len(res.Leases))}
	for i, l := range res.Leases {
		resp.Leases[i] = workerproto.LeaseStatus{AttemptID: l.AttemptID.String(), Status: string(l.Status), LeaseExpiresInMs: l.LeaseExpiresInMs}
	}
	return http.StatusOK, resp, nil
}

func (d *Dispatcher) complete(c *call) (int, any, *apiError) {
	aid, e := pathID(c, "aid", "attempt")
	if e != nil {
		return 0, nil, e
	}
	var req workerproto.CompleteRequest
	if e := readBody(c, &req); e != nil {
		return 0, nil, e
	}
	sid, e := bodyID("session_id", req.SessionID)
	if e != nil {
		return 0, nil, e
	}
	rep := dispatch.Report{SessionID: sid, CallbackToken: req.CallbackToken, LeaseVersion: req.LeaseVersion,
		Outcome: dispatch.Outcome(req.Outcome), ExitCode: req.ExitCode, Signal: req.Signal, OutputTail: req.OutputTail,
		OutputTruncated: req.OutputTruncated, DurationMs: req.DurationMs}
	if req.Error != nil {
		rep.ErrorKind, rep.ErrorMessage = req.Error.Kind, req.Error.Message
	}
	res, err := d.store.Complete(c.ctx, c.cred, aid, rep)
	d.loop.completed(rep.Outcome, res) // also a report refused for a cancelled Run: it ended the Attempt
	if err != nil {
		return 0, nil, d.storeError("complete", err)
	}
	d.placer.Kick() // a slot of the session is free
	return http.StatusOK, workerproto.CompleteResponse{RunState: res.RunState, Replay: res.Replay}, nil
}

func (d *Dispatcher) drain(c *call) (int, any, *apiError) {
	sid, e := pathID(c, "sid", "session")
	if e != nil {
		return 0, nil, e
	}
	var req workerproto.DrainRequest
	if e := readBody(c, &req); e != nil {
		return 0, nil, e
	}
	res, err := d.store.Drain(c.ctx, c.cred, sid)
	if err != nil {
		return 0, nil, d.storeError("drain", err)
	}
	d.placer.Kick()
	return http.StatusOK, workerproto.DrainResponse{WithdrawnOffers: res.WithdrawnOffers, ActiveLeases: res.ActiveLeases,
		AlreadyDraining: res.AlreadyDraining}, nil
}

func (d *Dispatcher) close(c *call) (int, any, *apiError) {
	sid, e := pathID(c, "sid", "session")
	if e != nil {
		return 0, nil, e
	}
	if err := d.store.Close(c.ctx, c.cred, sid); err != nil {
		return 0, nil, d.storeError("close", err)
	}
	return http.StatusNoContent, nil, nil
}
