// Package dbconn turns a --database-url flag, QL_DATABASE_URL or the standard PG* variables into a
// pgx pool configuration, and keeps the secrets of that configuration out of every message.
//
// Every configuration it returns is bounded in time (see Timeouts and docs/operations.md): a
// connection attempt, a statement, a transaction left idle, a reply that never comes and a peer
// that vanished from the network are each noticed within a fixed time, by the client and by the
// server, so a partitioned replica cannot wait forever and a dead one cannot hold locks forever.
//
// Open returns the one database handle the packages above take (DB; Connect's Conn for one
// session): it carries the pool and the prologue each transaction runs first behind a pooler, and
// is the one way to begin a transaction (Begin, InTx, Run, Pipeline).
package dbconn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Source names where a connection came from, for messages.
type Source string

// Config is a parsed connection configuration and the secrets to redact from messages about it.
type Config struct {
	Pool     *pgxpool.Config
	Source   Source
	secrets  []string
	timeouts Timeouts
	pooled   bool // see Pooled
	session  bool // ql_pooler=session: prepared statements stay (see PoolerParam)
}

// ConfigError means the connection settings themselves are unusable (exit code 2: no connection
// was attempted).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return "connection settings: " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// ConnectTimeout bounds every connection attempt, so an unreachable server fails fast (the
// default of Timeouts.Connect, and the largest connect_timeout a URL may ask for).
const ConnectTimeout = 10 * time.Second

// Resolve picks the connection: the flag, else QL_DATABASE_URL, else the PG* variables, and
// parses it without connecting.
//
// Secrets are known by parsing, never by searching the text: they are the password pgx resolved
// (from the URL's userinfo or its password parameter, a keyword/value string, PGPASSWORD, a
// passfile or a service file) and PGPASSWORD. No error of Resolve holds any part of the
// connection string, nor the parser's own error (which quotes it): it names the source and the
// rule only.
func Resolve(flagURL string) (*Config, error) {
	raw, src := flagURL, Source("--database-url")
	if raw == "" {
		raw, src = os.Getenv("QL_DATABASE_URL"), "QL_DATABASE_URL"
	}
	if raw == "" {
		src = "PG* environment"
		if !pgEnvGiven() {
			return nil, &ConfigError{Err: ErrNoDatabase}
		}
	}
	if err := checkUnambiguous(raw); err != nil {
		return nil, &ConfigError{Err: fmt.Errorf("%s: %w", src, err)}
	}
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return nil, &ConfigError{Err: fmt.Errorf("%s: %s", src, parseFailure(raw, err))}
	}
	cfg.AfterConnect = RegisterTypes
	c := &Config{Pool: cfg, Source: src, secrets: secretsOf(cfg)}
	if c.pooled, c.session, err = poolerFrom(cfg.ConnConfig.RuntimeParams); err != nil {
		return nil, &ConfigError{Err: fmt.Errorf("%s: %w", src, err)}
	}
	t, err := timeoutsFrom(cfg)
	if err != nil {
		return nil, &ConfigError{Err: fmt.Errorf("%s: %w", src, err)}
	}
	c.SetTimeouts(t)
	return c, nil
}

// ErrNoDatabase means no connection was given at all: no flag, no QL_DATABASE_URL and none of
// PGTargetVars. libpq's defaults (the local socket, the OS user's name) are never a guess worth
// connecting to.
var ErrNoDatabase = errors.New("no database given: pass --database-url, or set QL_DATABASE_URL, " +
	"or set the PG* variables (PGHOST, PGPORT, PGUSER, PGDATABASE or PGSERVICE)")

// PGTargetVars are the PG* variables that name a target: one of them set (non-empty) means the
// PG* environment was given. PGPASSWORD and the TLS variables alone do not say where to connect.
var PGTargetVars = []string{"PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGDATABASE", "PGSERVICE"}

func pgEnvGiven() bool {
	for _, v := range PGTargetVars {
		if os.Getenv(v) != "" {
			return true
		}
	}
	return false
}

// secretsOf returns what must never be printed: the password pgx will send, and PGPASSWORD even
// when a URL's password overrides it.
func secretsOf(cfg *pgxpool.Config) []string {
	var secrets []string
	for _, s := range []string{cfg.ConnConfig.Password, os.Getenv("PGPASSWORD")} {
		if s != "" {
			secrets = append(secrets, s)
		}
	}
	return secrets
}

// Redact removes the configuration's secrets from text that did not come from this package
// (the server's and the driver's messages). It is a last net: nothing this package builds holds a
// secret, and neither pgx nor PostgreSQL put the password into their messages.
func (c *Config) Redact(s string) string { return scrub(s, c.secrets) }

// RedactError returns err with its message redacted, keeping errors.Is/As working on the cause.
func (c *Config) RedactError(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if red := c.Redact(msg); red != msg {
		return &redactedError{msg: red, err: err}
	}
	return err
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// minScrub is the shortest secret scrub removes: a shorter one cannot be told from ordinary
// text, and removing every occurrence of it would destroy the message it is meant to protect.
const minScrub = 4

func scrub(s string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) >= minScrub {
			s = strings.ReplaceAll(s, sec, "xxxxx")
		}
	}
	return s
}

// Describe names the target from its parsed fields: user@host:port/database. A field that
// contains a secret (a password equal to the user name, say) is shown as "(hidden)".
func (c *Config) Describe() string {
	cc := c.Pool.ConnConfig
	show := func(v string) string {
		for _, sec := range c.secrets {
			if v == sec || len(sec) >= minScrub && strings.Contains(v, sec) {
				return "(hidden)"
			}
		}
		return v
	}
	return fmt.Sprintf("%s@%s:%d/%s", show(cc.User), show(cc.Host), cc.Port, show(cc.Database))
}

// For is the same server, credentials and bounds for another database, acting as role when role
// is not empty (the role setting at connection start, as SET ROLE would): how a superuser does
// each of the four roles' work without knowing their passwords.
func (c *Config) For(database, role string) *Config {
	pool := c.Pool.Copy()
	pool.ConnConfig.Database = database
	if role != "" {
		pool.ConnConfig.RuntimeParams["role"] = role
	}
	return &Config{Pool: pool, Source: c.Source, secrets: c.secrets, timeouts: c.timeouts, pooled: c.pooled, session: c.session}
}

// Open connects a pool, checks one connection, so "cannot connect" is reported here, and returns
// the handle every transaction on it begins through (see DB).
//
// A server that refuses a startup parameter the way PgBouncer does is a pooler: Open switches c
// to pooled mode (see Pooled) and connects again, once. The handle carries the mode Open ended in.
func (c *Config) Open(ctx context.Context) (*DB, error) {
	pool, err := c.open(ctx)
	if err != nil && !c.pooled && refusedByPooler(err) {
		c.SetPooled()
		pool, err = c.open(ctx)
	}
	if err != nil {
		return nil, c.connectError(err)
	}
	return newDB(c, pool), nil
}

// Connect opens one connection (for work that must stay on one session: a catalog read in one
// snapshot, a lock), with the same bounds, pooler detection and error shape as Open. Its
// transactions begin with the prologue, as a DB's do (see Conn).
func (c *Config) Connect(ctx context.Context) (*Conn, error) {
	conn, err := c.connect(ctx)
	if err != nil && !c.pooled && refusedByPooler(err) {
		c.SetPooled()
		conn, err = c.connect(ctx)
	}
	if err != nil {
		return nil, c.connectError(err)
	}
	return &Conn{Conn: conn, prologue: c.localSettings()}, nil
}

func (c *Config) connect(ctx context.Context) (*pgx.Conn, error) {
	connectCtx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(connectCtx, c.Pool.ConnConfig)
	if err != nil {
		return nil, err
	}
	return conn, RegisterTypes(ctx, conn)
}

func (c *Config) open(ctx context.Context) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, c.Pool)
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// connectError names the target from its parsed fields and keeps the cause: pgx's own prefix
// (which repeats user and database) is dropped, the rest redacted.
func (c *Config) connectError(err error) error {
	cause := err
	var pgxConnect *pgconn.ConnectError
	if errors.As(err, &pgxConnect) && pgxConnect.Unwrap() != nil {
		cause = pgxConnect.Unwrap()
	}
	return &ConnectError{Target: c.Describe(), Err: &redactedError{msg: c.Redact(attempts(cause)), err: err}}
}

// attempts is the message of pgx's error for all the connection attempts it made: one per address
// and TLS mode (sslmode=prefer tries with TLS, then without), joined by newlines, so an
// unreachable server was reported twice. Each distinct message appears once, "; " between them.
//
// When the server at an address itself answered an attempt (a missing database, a refused
// password), that answer is the most specific one for the address and its other attempts are
// dropped: the TLS refusal of sslmode=prefer's first attempt would otherwise come first and hide
// "database does not exist". The attempts at other addresses stay (a host that is down, or that
// failed sslmode=verify-full's certificate check, is still named in a multi-host URL).
func attempts(err error) string {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return err.Error()
	}
	all := joined.Unwrap()
	answered := map[string]bool{}
	for _, e := range all {
		var pgErr *pgconn.PgError
		if errors.As(e, &pgErr) {
			if a := attemptAddress(e); a != "" {
				answered[a] = true
			}
		}
	}
	var msgs []string
	for _, e := range all {
		var pgErr *pgconn.PgError
		if answered[attemptAddress(e)] && !errors.As(e, &pgErr) {
			continue
		}
		if m := e.Error(); !slices.Contains(msgs, m) {
			msgs = append(msgs, m)
		}
	}
	return strings.Join(msgs, "; ")
}

// attemptAddress is the address pgx names at the start of one attempt's message ("host:port
// (hostname): …"); "" when it names none.
func attemptAddress(e error) string {
	addr, _, ok := strings.Cut(e.Error(), " (")
	if !ok || strings.Contains(addr, " ") {
		return ""
	}
	return addr
}

// ConnectError means the server could not be reached or refused the session (exit code 3).
type ConnectError struct {
	Target string // user@host:port/database, when known
	Err    error
}

func (e *ConnectError) Error() string {
	if e.Target != "" {
		return "cannot connect to " + e.Target + ": " + e.Err.Error()
	}
	return "cannot connect: " + e.Err.Error()
}
func (e *ConnectError) Unwrap() error { return e.Err }
