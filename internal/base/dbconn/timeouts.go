package dbconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Timeouts bound how long a connection waits on the server or on the network. Each one closes a
// different way a replica could otherwise hang; docs/operations.md ("Failure behaviour and
// timeouts") explains them and the bound they give together.
type Timeouts struct {
	// Connect bounds dialing, TLS and authentication (pgx connect_timeout).
	Connect time.Duration
	// Statement is the server's statement_timeout: a statement, lock waits included, is
	// cancelled by the server after this long. 0 turns it off (and Response with it).
	Statement time.Duration
	// IdleInTransaction is the server's idle_in_transaction_session_timeout: a session that sits
	// in an open transaction without sending anything (its client stopped, crashed or was cut
	// off) is terminated, so its row locks do not block a takeover forever. 0 turns it off.
	IdleInTransaction time.Duration
	// Response is the client's bound on silence while it waits for the server's reply. The
	// server always answers within Statement (or cancels), so a longer silence means the path or
	// the server is gone; the connection is then closed and the pool replaces it. This is what
	// notices a partition that TCP cannot see (a middlebox or proxy that still acknowledges).
	// 0 turns it off.
	Response time.Duration
	// KeepAliveIdle, KeepAliveInterval and KeepAliveCount are TCP keepalive, set on the client's
	// socket and asked of the server (tcp_keepalives_*): an idle peer that vanished is noticed
	// after Idle + Interval × Count.
	KeepAliveIdle     time.Duration
	KeepAliveInterval time.Duration
	KeepAliveCount    int
	// UserTimeout is TCP_USER_TIMEOUT on both ends (tcp_user_timeout on the server): data left
	// unacknowledged this long closes the connection, which covers a peer that vanished while
	// data was in flight (keepalive only probes idle connections). Linux only; 0 leaves the
	// system default.
	UserTimeout time.Duration
}

// Defaults of Timeouts (docs/operations.md).
const (
	DefaultStatementTimeout         = 15 * time.Second
	DefaultIdleInTransactionTimeout = 15 * time.Second
	// ResponseMargin is how much longer than Statement the client waits for a reply.
	ResponseMargin           = 5 * time.Second
	DefaultKeepAliveIdle     = 10 * time.Second
	DefaultKeepAliveInterval = 5 * time.Second
	DefaultKeepAliveCount    = 3
	DefaultUserTimeout       = 20 * time.Second
)

// DefaultTimeouts are what Resolve applies unless the URL says otherwise.
func DefaultTimeouts() Timeouts {
	return Timeouts{
		Connect:           ConnectTimeout,
		Statement:         DefaultStatementTimeout,
		IdleInTransaction: DefaultIdleInTransactionTimeout,
		Response:          DefaultStatementTimeout + ResponseMargin,
		KeepAliveIdle:     DefaultKeepAliveIdle,
		KeepAliveInterval: DefaultKeepAliveInterval,
		KeepAliveCount:    DefaultKeepAliveCount,
		UserTimeout:       DefaultUserTimeout,
	}
}

// The server settings that Timeouts own.
const (
	paramStatement   = "statement_timeout"
	paramIdleInTx    = "idle_in_transaction_session_timeout"
	paramKAIdle      = "tcp_keepalives_idle"
	paramKAInterval  = "tcp_keepalives_interval"
	paramKACount     = "tcp_keepalives_count"
	paramUserTimeout = "tcp_user_timeout"
	paramSearchPath  = "search_path"
	paramSCS         = "standard_conforming_strings"
)

// TransactionDefaults are the transaction characteristics every session this package opens
// starts with on a direct connection, whatever the server's configuration, the database's or the
// role's settings say (a startup parameter outranks them all): read committed, read-write, not
// deferrable, which is what the claim (FOR UPDATE SKIP LOCKED), the admit (ON CONFLICT) and the
// migrations are written for. Behind a pooler startup parameters do not reach the server and a
// transaction's characteristics are fixed at its BEGIN, before any transaction-local setting
// could run, so there readiness reads the server session's values and refuses
// (internal/app/verify, check "settings").
var TransactionDefaults = map[string]string{
	"default_transaction_isolation":  "read committed",
	"default_transaction_read_only":  "off",
	"default_transaction_deferrable": "off",
}

// StandardConformingStrings is the standard_conforming_strings of every session this package
// opens, whatever PGOPTIONS, the connection string, the role's or the database's settings say:
// on. The SQL lexer of qlmigrate (internal/base/sqlfile) and pgx's own quoting read a backslash in
// '…' as an ordinary character; with it off the server would take '\.' for '.' and apply a
// different statement than the one that was checked and hashed.
const StandardConformingStrings = "on"

// SearchPath is the search_path of every session this package opens, whatever the connection
// string or the role's settings say: pg_catalog only. control-core names each of its objects
// with its schema, so nothing needs the path; and with the default ("$user", public) a function,
// operator or cast that someone created in public, or in a schema named after the role, would
// take the place of a built-in one that a query calls unqualified (||, encode, sha256 …) and run
// inside every admit as the runtime role. pg_temp stays first for relations only, and every
// relation is qualified.
const SearchPath = "pg_catalog"

// timeoutsFrom returns the defaults, overridden by what the URL set: connect_timeout (at most
// ConnectTimeout), statement_timeout and idle_in_transaction_session_timeout (any PostgreSQL
// duration; 0 turns it off). Response follows the statement timeout.
func timeoutsFrom(cfg *pgxpool.Config) (Timeouts, error) {
	t := DefaultTimeouts()
	connect, params := cfg.ConnConfig.ConnectTimeout, cfg.ConnConfig.RuntimeParams
	if connect > 0 && connect < t.Connect {
		t.Connect = connect
	}
	for name, dst := range map[string]*time.Duration{paramStatement: &t.Statement, paramIdleInTx: &t.IdleInTransaction} {
		raw, ok := params[name]
		if !ok {
			continue
		}
		d, err := parsePGDuration(raw)
		if err != nil {
			// the value is not quoted: a connection string that cannot be used is never shown
			return t, fmt.Errorf("%s: %v (%s)", name, err, notShown)
		}
		*dst = d
	}
	t.Response = 0
	if t.Statement > 0 {
		t.Response = t.Statement + ResponseMargin
	}
	return t, nil
}

// Timeouts returns the bounds in force.
func (c *Config) Timeouts() Timeouts { return c.timeouts }

// SetTimeouts replaces the bounds of c: the connect timeout, the server settings sent at
// start-up, and the client's dialer (keepalive, TCP_USER_TIMEOUT, response bound). It affects
// connections opened afterwards.
func (c *Config) SetTimeouts(t Timeouts) {
	c.timeouts = t
	cc := c.Pool.ConnConfig
	cc.ConnectTimeout = t.Connect
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	secs := func(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }
	cc.RuntimeParams[paramStatement] = ms(t.Statement)
	cc.RuntimeParams[paramIdleInTx] = ms(t.IdleInTransaction)
	delete(cc.RuntimeParams, paramKAIdle)
	delete(cc.RuntimeParams, paramKAInterval)
	delete(cc.RuntimeParams, paramKACount)
	delete(cc.RuntimeParams, paramUserTimeout)
	if t.KeepAliveIdle >= time.Second {
		cc.RuntimeParams[paramKAIdle] = secs(t.KeepAliveIdle)
	}
	if t.KeepAliveInterval >= time.Second {
		cc.RuntimeParams[paramKAInterval] = secs(t.KeepAliveInterval)
	}
	if t.KeepAliveCount > 0 {
		cc.RuntimeParams[paramKACount] = strconv.Itoa(t.KeepAliveCount)
	}
	if t.UserTimeout > 0 {
		cc.RuntimeParams[paramUserTimeout] = ms(t.UserTimeout)
	}
	cc.RuntimeParams[paramSearchPath] = SearchPath
	cc.RuntimeParams[paramSCS] = StandardConformingStrings
	for name, value := range TransactionDefaults {
		cc.RuntimeParams[name] = value
	}
	applyPooled(cc, c.pooled, c.session)
	dialer := &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: t.KeepAliveIdle, Interval: t.KeepAliveInterval, Count: t.KeepAliveCount},
		Control: func(network, _ string, rc syscall.RawConn) error {
			if t.UserTimeout <= 0 || !strings.HasPrefix(network, "tcp") {
				return nil
			}
			return setUserTimeout(rc, t.UserTimeout)
		},
	}
	cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, addr)
		if err != nil || t.Response <= 0 {
			return conn, err
		}
		return &responseConn{Conn: conn, timeout: t.Response}, nil
	}
}

// ResponseTimeoutError is the read error of a connection whose server stayed silent longer than
// Timeouts.Response while a reply was awaited. It is a net.Error whose Timeout is true.
type ResponseTimeoutError struct {
	After time.Duration
	Err   error
}

func (e *ResponseTimeoutError) Error() string {
	return fmt.Sprintf("no reply from the server for %s (response timeout): %v", e.After, e.Err)
}
func (e *ResponseTimeoutError) Unwrap() error { return e.Err }

// Timeout reports true: the error is a timeout.
func (e *ResponseTimeoutError) Timeout() bool { return true }

// Temporary reports false: the connection is unusable.
func (e *ResponseTimeoutError) Temporary() bool { return false }

// responseConn bounds every read by the response timeout, composed with whatever deadline pgx
// itself sets (it sets one to interrupt a read when a context is cancelled). pgx reads only
// while it awaits a reply, so an idle pooled connection is never timed out.
type responseConn struct {
	net.Conn
	timeout time.Duration

	mu       sync.Mutex
	deadline time.Time // the caller's read deadline; zero: none
	reading  bool
}

func (c *responseConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	own := time.Now().Add(c.timeout)
	d, ownBound := own, true
	if !c.deadline.IsZero() && c.deadline.Before(own) {
		d, ownBound = c.deadline, false
	}
	err := c.Conn.SetReadDeadline(d)
	c.reading = true
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	c.reading = false
	callerPassed := !c.deadline.IsZero() && !time.Now().Before(c.deadline)
	c.mu.Unlock()
	var ne net.Error
	if err != nil && ownBound && !callerPassed && errors.As(err, &ne) && ne.Timeout() {
		err = &ResponseTimeoutError{After: c.timeout, Err: err}
	}
	return n, err
}

func (c *responseConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

func (c *responseConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = t
	if t.IsZero() && c.reading {
		// a read in progress keeps its response bound
		return c.Conn.SetReadDeadline(time.Now().Add(c.timeout))
	}
	return c.Conn.SetReadDeadline(t)
}

// parsePGDuration reads a PostgreSQL time setting as a session would: a bare number is
// milliseconds; units us, ms, s, min, h, d.
func parsePGDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(strings.Trim(strings.TrimSpace(s), "'"))
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, unit := s[:i], strings.TrimSpace(s[i:])
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, errors.New("want a non-negative number with an optional unit (us, ms, s, min, h, d)")
	}
	scale := map[string]time.Duration{"": time.Millisecond, "us": time.Microsecond, "ms": time.Millisecond,
		"s": time.Second, "min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[unit]
	if scale == 0 {
		return 0, errors.New("unknown unit (want us, ms, s, min, h or d)")
	}
	return time.Duration(v * float64(scale)), nil
}
