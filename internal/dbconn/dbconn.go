// Package dbconn turns a --database-url flag, QL_DATABASE_URL or the standard PG* variables into a
// pgx pool configuration, and keeps the secrets of that configuration out of every message.
//
// Every configuration it returns is bounded in time (see Timeouts and docs/operations.md): a
// connection attempt, a statement, a transaction left idle, a reply that never comes and a peer
// that vanished from the network are each noticed within a fixed time, by the client and by the
// server, so a partitioned replica cannot wait forever and a dead one cannot hold locks forever.
package dbconn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

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
}

// ConfigError means the connection settings themselves are unusable (exit code 2: no connection
// was attempted).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return "connection settings: " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// ConnectTimeout bounds every connection attempt, so an unreachable server fails fast (the
// default of Timeouts.Connect, and the largest connect_timeout a URL may ask for).
const ConnectTimeout = 10 * time.Second

var urlPassword = regexp.MustCompile(`://[^:/@\s]*:([^@\s]*)@`)

// Resolve picks the connection: the flag, else QL_DATABASE_URL, else the PG* variables.
func Resolve(flagURL string) (*Config, error) {
	raw, src := flagURL, Source("--database-url")
	if raw == "" {
		raw, src = os.Getenv("QL_DATABASE_URL"), "QL_DATABASE_URL"
	}
	if raw == "" {
		src = "PG* environment"
	}
	var secrets []string
	if m := urlPassword.FindStringSubmatch(raw); m != nil && m[1] != "" {
		secrets = append(secrets, m[1])
	}
	if pw := os.Getenv("PGPASSWORD"); pw != "" {
		secrets = append(secrets, pw)
	}
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return nil, &ConfigError{Err: errors.New(redact(fmt.Sprintf("%s: %v", src, err), secrets))}
	}
	if pw := cfg.ConnConfig.Password; pw != "" {
		secrets = append(secrets, pw)
	}
	t, err := timeoutsFrom(cfg)
	if err != nil {
		return nil, &ConfigError{Err: errors.New(redact(fmt.Sprintf("%s: %v", src, err), secrets))}
	}
	c := &Config{Pool: cfg, Source: src, secrets: secrets}
	c.SetTimeouts(t)
	return c, nil
}

// Redact replaces every secret of the configuration in s.
func (c *Config) Redact(s string) string { return redact(s, c.secrets) }

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

func redact(s string, secrets []string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "xxxxx")
		}
	}
	return s
}

// Describe names the target without secrets: user@host:port/database.
func (c *Config) Describe() string {
	cc := c.Pool.ConnConfig
	return fmt.Sprintf("%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database)
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
	return &Config{Pool: pool, Source: c.Source, secrets: c.secrets, timeouts: c.timeouts}
}

// Open connects a pool and checks one connection, so "cannot connect" is reported here.
func (c *Config) Open(ctx context.Context) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, c.Pool)
	if err != nil {
		return nil, &ConnectError{Err: c.RedactError(err)}
	}
	pingCtx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, &ConnectError{Err: c.RedactError(err)}
	}
	return pool, nil
}

// ConnectError means the server could not be reached or refused the session (exit code 3).
type ConnectError struct{ Err error }

func (e *ConnectError) Error() string { return "cannot connect: " + e.Err.Error() }
func (e *ConnectError) Unwrap() error { return e.Err }
