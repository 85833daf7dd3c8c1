package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/qlcontrol/controlcore/workerproto"
)

// APIError is an error answer of the dispatcher: the HTTP status and the body's code and message.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	if e.Message != "" {
		return fmt.Sprintf("dispatcher answered %d %s: %s", e.Status, e.Code, e.Message)
	}
	return fmt.Sprintf("dispatcher answered %d %s", e.Status, e.Code)
}

// ErrorCode is the protocol error code of err ("" when err is not an answer of the dispatcher).
func ErrorCode(err error) string {
	var api *APIError
	if errors.As(err, &api) {
		return api.Code
	}
	return ""
}

// netError: the dispatcher could not be reached or its answer could not be read.
type netError struct{ err error }

func (e *netError) Error() string { return e.err.Error() }
func (e *netError) Unwrap() error { return e.err }

// retryable: the dispatcher is unavailable (503, or a proxy in front of it answered 502/504) or
// could not be reached. Any other answer, and any error of our own, is final for this request.
func retryable(err error) bool {
	var api *APIError
	if errors.As(err, &api) {
		switch api.Status {
		case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	var ne *netError
	return errors.As(err, &ne)
}

// ClientOptions configure a Client.
type ClientOptions struct {
	// Dispatchers are the base URLs of the dispatcher replicas ("https://d1:8443"); any replica
	// serves any request, so a request that finds one unreachable or unavailable tries the next.
	Dispatchers []string
	// Token is the worker token (qlw_…), sent as a Bearer token. It is never logged.
	Token string
	// Transport carries the requests (TLS settings); nil is http.DefaultTransport.
	Transport http.RoundTripper
	// RequestTimeout bounds each request other than a poll (a poll waits wait_ms +
	// PollTimeoutSlackMs). Zero is 10 s.
	RequestTimeout time.Duration
	// RetryMin and RetryMax bound the exponential backoff between retries of idempotent calls.
	// Zero is 100 ms and 2 s.
	RetryMin, RetryMax time.Duration
	// Spread is a stable key of this worker (its name): the dispatcher its requests go to first
	// is chosen by the key's hash, so workers named apart spread over the dispatchers instead of
	// every one polling the first URL (a long poll waits on one dispatcher, whose placer alone
	// can answer it). Empty: the first URL. Failover moves on from there as before.
	Spread string
	// AllowPlaintext lets an http:// URL name another host than this one's loopback: without it
	// the token would cross the network in clear text, so such a URL is refused.
	AllowPlaintext bool
	// HomeRetry is how long the polls stay at another dispatcher after a failover moved them off
	// the first one (Spread's, or the first URL) before a poll tries that one again: a restarted
	// dispatcher gets its workers back instead of the others keeping them for good. Zero is 30 s.
	HomeRetry time.Duration
}

// Client speaks protocol v1 to a set of dispatcher replicas: one method per endpoint. The
// idempotent calls (ack, reject, heartbeat, complete, drain, close) are retried with backoff on
// 503 and network errors until their context ends, moving to the next dispatcher each time;
// register and poll are tried once per call (the Runner loops over them).
type Client struct {
	urls    []string
	token   string
	http    *http.Client
	timeout time.Duration
	minWait time.Duration
	maxWait time.Duration
	cur     atomic.Uint32 // index of the dispatcher the next request goes to
	home    uint32        // the first dispatcher's index (spreadStart)
	// homeRetry and awaySince: a poll tries home again homeRetry after the polls were first seen
	// elsewhere (awaySince, unix ns; 0 at home).
	homeRetry time.Duration
	awaySince atomic.Int64
}

// NewClient checks the options and returns a Client. It opens no connection.
func NewClient(opts ClientOptions) (*Client, error) {
	if len(opts.Dispatchers) == 0 {
		return nil, errors.New("worker: no dispatcher URL")
	}
	urls := make([]string, 0, len(opts.Dispatchers))
	for i, raw := range opts.Dispatchers {
		// The URL is not quoted: a mistyped one may hold a secret.
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("worker: dispatcher URL %d of %d: want http(s)://host[:port][/path]", i+1, len(opts.Dispatchers))
		}
		if u.User != nil {
			return nil, fmt.Errorf("worker: dispatcher URL of host %q holds credentials; use the token", u.Host)
		}
		if u.Scheme == "http" && !opts.AllowPlaintext && !workerproto.Loopback(u.Hostname()) {
			return nil, fmt.Errorf("worker: dispatcher URL %d of %d is http:// to host %q, not loopback: the token would cross the network in clear text; use https:// (or allow plaintext)", i+1, len(opts.Dispatchers), u.Hostname())
		}
		urls = append(urls, strings.TrimRight(u.String(), "/"))
	}
	if opts.Token == "" {
		return nil, errors.New("worker: empty token")
	}
	if strings.ContainsAny(opts.Token, " \t\r\n") {
		return nil, errors.New("worker: the token holds white space")
	}
	c := &Client{
		urls: urls, token: opts.Token,
		http:    &http.Client{Transport: opts.Transport},
		timeout: opts.RequestTimeout, minWait: opts.RetryMin, maxWait: opts.RetryMax,
	}
	c.home = spreadStart(opts.Spread, len(urls))
	c.cur.Store(c.home)
	c.homeRetry = opts.HomeRetry
	if c.homeRetry <= 0 {
		c.homeRetry = 30 * time.Second
	}
	if c.timeout <= 0 {
		c.timeout = 10 * time.Second
	}
	if c.minWait <= 0 {
		c.minWait = 100 * time.Millisecond
	}
	if c.maxWait <= 0 {
		c.maxWait = 2 * time.Second
	}
	if c.maxWait < c.minWait {
		c.maxWait = c.minWait
	}
	return c, nil
}

// spreadStart is the index of the first dispatcher for key among n: FNV-1a of key, modulo n
// (names that differ in their last character, "w-0", "w-1", …, alternate over two URLs).
func spreadStart(key string, n int) uint32 {
	if key == "" || n < 2 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return h.Sum32() % uint32(n)
}

// Register opens a session (POST /v1/sessions). Not retried: a repeated register would leave an
// orphan session (it expires unused, so a caller may still loop).
func (c *Client) Register(ctx context.Context, req workerproto.RegisterRequest) (workerproto.RegisterResponse, error) {
	var resp workerproto.RegisterResponse
	if req.Protocol == 0 {
		req.Protocol = workerproto.Version
	}
	if err := req.Validate(); err != nil {
		return resp, fmt.Errorf("register: %w", err)
	}
	err := c.once(ctx, http.MethodPost, workerproto.PathSessions, req, &resp, http.StatusCreated, c.timeout)
	return resp, wrap("register", err)
}

// Poll waits up to req.WaitMs for offers. Tried once; its HTTP timeout is WaitMs + 6 s (it must
// exceed the wait by more than PollTimeoutSlackMs).
func (c *Client) Poll(ctx context.Context, sessionID string, req workerproto.PollRequest) (workerproto.PollResponse, error) {
	var resp workerproto.PollResponse
	if err := req.Validate(); err != nil {
		return resp, fmt.Errorf("poll: %w", err)
	}
	timeout := time.Duration(req.WaitMs+workerproto.PollTimeoutSlackMs)*time.Millisecond + time.Second
	c.homeward()
	err := c.once(ctx, http.MethodPost, workerproto.PollPath(sessionID), req, &resp, http.StatusOK, timeout)
	return resp, wrap("poll", err)
}

// Ack accepts an offer; a replay (the first answer was lost) answers with the same lease.
func (c *Client) Ack(ctx context.Context, offerID string, req workerproto.AckRequest) (workerproto.AckResponse, error) {
	var resp workerproto.AckResponse
	err := c.retry(ctx, http.MethodPost, workerproto.AckPath(offerID), req, &resp, http.StatusOK)
	return resp, wrap("ack", err)
}

// Reject declines an offer.
func (c *Client) Reject(ctx context.Context, offerID string, req workerproto.RejectRequest) error {
	req.Reason = workerproto.TruncateUTF8(req.Reason, workerproto.MaxReasonBytes)
	var resp workerproto.RejectResponse
	return wrap("reject", c.retry(ctx, http.MethodPost, workerproto.RejectPath(offerID), req, &resp, http.StatusOK))
}

// Heartbeat renews the session and the listed leases.
func (c *Client) Heartbeat(ctx context.Context, sessionID string, req workerproto.HeartbeatRequest) (workerproto.HeartbeatResponse, error) {
	var resp workerproto.HeartbeatResponse
	if req.Leases == nil {
		req.Leases = []workerproto.LeaseRef{}
	}
	err := c.retry(ctx, http.MethodPost, workerproto.HeartbeatPath(sessionID), req, &resp, http.StatusOK)
	return resp, wrap("heartbeat", err)
}

// Complete reports an Attempt's outcome; a replay of the same report answers replay: true.
func (c *Client) Complete(ctx context.Context, attemptID string, req workerproto.CompleteRequest) (workerproto.CompleteResponse, error) {
	var resp workerproto.CompleteResponse
	if err := req.Validate(); err != nil {
		return resp, fmt.Errorf("complete: %w", err)
	}
	err := c.retry(ctx, http.MethodPost, workerproto.CompletePath(attemptID), req, &resp, http.StatusOK)
	return resp, wrap("complete", err)
}

// Drain withdraws the session's offers and stops new ones; heartbeats and completions continue.
func (c *Client) Drain(ctx context.Context, sessionID string) (workerproto.DrainResponse, error) {
	var resp workerproto.DrainResponse
	err := c.retry(ctx, http.MethodPost, workerproto.DrainPath(sessionID), workerproto.DrainRequest{}, &resp, http.StatusOK)
	return resp, wrap("drain", err)
}

// Close ends a session that holds no active lease.
func (c *Client) Close(ctx context.Context, sessionID string) error {
	return wrap("close", c.retry(ctx, http.MethodDelete, workerproto.SessionPath(sessionID), nil, nil, http.StatusNoContent))
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", op, err)
}

// retry sends until an answer other than 503 arrives or ctx ends, with exponential backoff and
// jitter, each try on the next dispatcher after a failed one.
func (c *Client) retry(ctx context.Context, method, path string, body, out any, want int) error {
	wait := c.minWait
	for {
		err := c.once(ctx, method, path, body, out, want, c.timeout)
		if !retryable(err) || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, c.maxWait)
	}
}

// homeward sends the next request to the home dispatcher once the polls have been elsewhere for
// homeRetry: if home is still down, that request fails over again (one failed poll per homeRetry).
func (c *Client) homeward() {
	i := c.cur.Load()
	if i%uint32(len(c.urls)) == c.home {
		c.awaySince.Store(0)
		return
	}
	now := time.Now().UnixNano()
	since := c.awaySince.Load()
	switch {
	case since == 0:
		c.awaySince.CompareAndSwap(0, now)
	case time.Duration(now-since) >= c.homeRetry && c.cur.CompareAndSwap(i, c.home):
		c.awaySince.Store(0)
	}
}

// failover moves the next request to the next dispatcher (one answered dispatcher_stopping).
func (c *Client) failover() { c.cur.Add(1) }

// once sends one request to the current dispatcher; on a network error or 503 the next request
// goes to the next one.
func (c *Client) once(ctx context.Context, method, path string, body, out any, want int, timeout time.Duration) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		if len(payload) > workerproto.MaxBodyBytes {
			return fmt.Errorf("request body is %d bytes, at most %d", len(payload), workerproto.MaxBodyBytes)
		}
	}
	i := c.cur.Load()
	base := c.urls[int(i)%len(c.urls)]
	err := c.send(ctx, method, base+path, payload, out, want, timeout)
	if retryable(err) {
		c.cur.CompareAndSwap(i, i+1)
	}
	return err
}

func (c *Client) send(ctx context.Context, method, target string, payload []byte, out any, want int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return err // our caller gave up: not the dispatcher's fault
		}
		// *url.Error quotes the URL (no secret: credentials in URLs are refused) and the cause.
		return &netError{err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4*workerproto.MaxBodyBytes))
	if err != nil {
		return &netError{fmt.Errorf("read answer of %s: %w", req.URL.Host, err)}
	}
	if resp.StatusCode != want {
		api := &APIError{Status: resp.StatusCode}
		var eb workerproto.ErrorBody
		if json.Unmarshal(data, &eb) == nil && eb.Error.Code != "" {
			api.Code = eb.Error.Code
			api.Message = workerproto.TruncateUTF8(eb.Error.Message, workerproto.MaxMessageBytes)
		} else {
			api.Code = fmt.Sprintf("http_%d", resp.StatusCode)
		}
		return api
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode answer of %s: %w", req.URL.Host, err)
	}
	return nil
}
