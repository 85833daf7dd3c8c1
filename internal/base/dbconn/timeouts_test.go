package dbconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestResolveAppliesDefaultTimeouts(t *testing.T) {
	cfg, err := Resolve("postgres://u:secret@db.invalid:5432/app")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Timeouts(), DefaultTimeouts(); got != want {
		t.Errorf("timeouts %+v, want %+v", got, want)
	}
	cc := cfg.Pool.ConnConfig
	if cc.ConnectTimeout != ConnectTimeout || cc.DialFunc == nil {
		t.Errorf("connect timeout %s, dial func set %v", cc.ConnectTimeout, cc.DialFunc != nil)
	}
	want := map[string]string{
		"statement_timeout": "15000", "idle_in_transaction_session_timeout": "15000",
		"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3",
		"tcp_user_timeout": "20000",
	}
	for k, v := range want {
		if cc.RuntimeParams[k] != v {
			t.Errorf("server setting %s = %q, want %q", k, cc.RuntimeParams[k], v)
		}
	}
	if r := cfg.Timeouts().Response; r != DefaultStatementTimeout+ResponseMargin {
		t.Errorf("response timeout %s", r)
	}
}

func TestURLOverridesTimeouts(t *testing.T) {
	cases := []struct {
		query                         string
		connect, statement, idle, rsp time.Duration
	}{
		{"connect_timeout=3", 3 * time.Second, 15 * time.Second, 15 * time.Second, 20 * time.Second},
		{"connect_timeout=60", 10 * time.Second, 15 * time.Second, 15 * time.Second, 20 * time.Second},
		{"statement_timeout=0", 10 * time.Second, 0, 15 * time.Second, 0},
		{"statement_timeout=1min&idle_in_transaction_session_timeout=0", 10 * time.Second, time.Minute, 0, 65 * time.Second},
		{"statement_timeout=2500", 10 * time.Second, 2500 * time.Millisecond, 15 * time.Second, 7500 * time.Millisecond},
	}
	for _, tc := range cases {
		cfg, err := Resolve("postgres://u@db.invalid/app?" + tc.query)
		if err != nil {
			t.Fatalf("%s: %v", tc.query, err)
		}
		got := cfg.Timeouts()
		if got.Connect != tc.connect || got.Statement != tc.statement || got.IdleInTransaction != tc.idle || got.Response != tc.rsp {
			t.Errorf("%s: %+v; want connect %s statement %s idle %s response %s", tc.query, got, tc.connect, tc.statement, tc.idle, tc.rsp)
		}
		if v := cfg.Pool.ConnConfig.RuntimeParams["statement_timeout"]; v != ms(tc.statement) {
			t.Errorf("%s: server statement_timeout %q", tc.query, v)
		}
	}
	_, err := Resolve("postgres://u:hunter2@db.invalid/app?statement_timeout=soon")
	var ce *ConfigError
	if !errors.As(err, &ce) || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "statement_timeout") {
		t.Errorf("bad statement_timeout: %v; want a redacted ConfigError naming the setting", err)
	}
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func TestParsePGDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0": 0, "1500": 1500 * time.Millisecond, "250ms": 250 * time.Millisecond, "5s": 5 * time.Second,
		" 2 min ": 2 * time.Minute, "1h": time.Hour, "1d": 24 * time.Hour, "100us": 100 * time.Microsecond, "'3s'": 3 * time.Second,
	} {
		got, err := parsePGDuration(in)
		if err != nil || got != want {
			t.Errorf("%q: %s, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "soon", "5 fortnights", "-1"} {
		if _, err := parsePGDuration(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// silentServer accepts TCP connections and never answers.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return ln.Addr().String()
}

func dialWith(t *testing.T, to Timeouts, addr string) net.Conn {
	t.Helper()
	cfg, err := Resolve("postgres://u@127.0.0.1/app")
	if err != nil {
		t.Fatal(err)
	}
	cfg.SetTimeouts(to)
	c, err := cfg.Pool.ConnConfig.DialFunc(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A read that gets no reply ends after the response timeout with a ResponseTimeoutError; a
// sooner deadline of the caller (pgx interrupting a cancelled query) wins and stays a plain
// timeout; a connection nobody reads from is left alone.
func TestResponseTimeout(t *testing.T) {
	to := DefaultTimeouts()
	to.Response = 300 * time.Millisecond
	addr := silentServer(t)

	c := dialWith(t, to, addr)
	start := time.Now()
	_, err := c.Read(make([]byte, 1))
	var rte *ResponseTimeoutError
	var ne net.Error
	if !errors.As(err, &rte) || !errors.As(err, &ne) || !ne.Timeout() || !os.IsTimeout(err) {
		t.Fatalf("read: %v; want a ResponseTimeoutError that is a net timeout", err)
	}
	if el := time.Since(start); el < 300*time.Millisecond || el > 3*time.Second {
		t.Errorf("timed out after %s, want about 300ms", el)
	}

	c2 := dialWith(t, to, addr)
	_ = c2.SetDeadline(time.Now().Add(50 * time.Millisecond))
	start = time.Now()
	_, err = c2.Read(make([]byte, 1))
	if errors.As(err, &rte) || !os.IsTimeout(err) || time.Since(start) > 250*time.Millisecond {
		t.Errorf("caller deadline: %v after %s; want the caller's plain timeout at about 50ms", err, time.Since(start))
	}
	_ = c2.SetDeadline(time.Time{})

	c3 := dialWith(t, to, addr)
	time.Sleep(2 * to.Response) // idle: no read in progress, nothing may time out
	if _, err := c3.Write([]byte("x")); err != nil {
		t.Errorf("an idle connection was closed: %v", err)
	}

	to.Response = 0 // off: the raw connection
	if _, ok := dialWith(t, to, addr).(*responseConn); ok {
		t.Error("response timeout 0 still wraps the connection")
	}
}

// The driver's prepared-statement errors that only a transaction pooler causes name the
// setting that fixes them; any other error is left as it is.
func TestPoolerHintNamesQlPooler(t *testing.T) {
	dup := &pgconn.PgError{Code: "42P05", Message: `prepared statement "stmtcache_0123abcd" already exists`}
	err := PoolerHint(fmt.Errorf("read goose versions: %w", dup))
	var pgErr *pgconn.PgError
	if !strings.Contains(err.Error(), "ql_pooler=transaction") || !strings.Contains(err.Error(), "stmtcache_0123abcd") || !errors.As(err, &pgErr) {
		t.Errorf("PoolerHint(duplicate stmtcache statement) = %v, want it to name ql_pooler=transaction and keep the cause", err)
	}
	gone := &pgconn.PgError{Code: "26000", Message: `prepared statement "stmtcache_0123abcd" does not exist`}
	if err := PoolerHint(gone); !strings.Contains(err.Error(), "ql_pooler=transaction") {
		t.Errorf("PoolerHint(missing stmtcache statement) = %v, want ql_pooler=transaction named", err)
	}
	other := &pgconn.PgError{Code: "42P05", Message: `prepared statement "mine" already exists`}
	if err := PoolerHint(other); err != error(other) {
		t.Errorf("PoolerHint(another error) = %v, want it unchanged", err)
	}
	if PoolerHint(nil) != nil {
		t.Error("PoolerHint(nil) is not nil")
	}
}
