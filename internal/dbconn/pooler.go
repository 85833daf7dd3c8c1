package dbconn

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PoolerParam is the connection-string parameter that says a transaction-pooling connection
// pooler (PgBouncer pool_mode=transaction, and the like) stands between the client and the
// server: ql_pooler=transaction. It is read and removed by Resolve, never sent to the server.
// ql_pooler=none (the default) means a direct connection; Open also switches to pooled mode by
// itself when the server refuses a startup parameter the way PgBouncer does.
const PoolerParam = "ql_pooler"

// Pooled reports whether the connection goes through a transaction-pooling pooler. Then every
// transaction may run on another server session, so nothing may rely on session state:
//   - the bounds of Timeouts that are server settings are not sent at startup (PgBouncer
//     refuses statement_timeout, tcp_user_timeout …) but by LocalSettings at the start of each
//     transaction; the client-side bounds (connect, keepalive, TCP_USER_TIMEOUT, response) stay;
//   - statements use the simple protocol (no named prepared statements, which a server session
//     other than the one that prepared them does not know);
//   - a SET ROLE, a session advisory lock or any other SET must be made transaction-local by
//     the caller.
func (c *Config) Pooled() bool { return c.pooled }

// SetPooled switches pooled mode on for connections opened afterwards (Resolve reads it from
// PoolerParam; Open turns it on when it meets a pooler).
func (c *Config) SetPooled() {
	c.pooled = true
	c.SetTimeouts(c.timeouts)
}

// LocalSettings returns the statements that apply the server-side bounds of Timeouts, the
// SearchPath and StandardConformingStrings to one transaction (SET LOCAL), to run first in every transaction when Pooled; nil
// on a direct connection, whose sessions got them at startup.
func (c *Config) LocalSettings() []string {
	if !c.pooled {
		return nil
	}
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	return []string{
		"SET LOCAL " + paramStatement + " = " + ms(c.timeouts.Statement) + ";",
		"SET LOCAL " + paramIdleInTx + " = " + ms(c.timeouts.IdleInTransaction) + ";",
		"SET LOCAL " + paramSearchPath + " = " + SearchPath + ";",
		"SET LOCAL " + paramSCS + " = " + StandardConformingStrings + ";",
	}
}

// SetApplicationName names the sessions (pg_stat_activity.application_name) unless the
// connection string already names them; PgBouncer passes it on.
func (c *Config) SetApplicationName(name string) {
	params := c.Pool.ConnConfig.RuntimeParams
	if _, ok := params["application_name"]; ok {
		return
	}
	if len(name) > 63 { // NAMEDATALEN - 1: the server would truncate it
		name = name[:63]
	}
	params["application_name"] = name
}

// poolerFrom reads and removes PoolerParam from the parsed runtime parameters.
func poolerFrom(params map[string]string) (bool, error) {
	raw, ok := params[PoolerParam]
	if !ok {
		return false, nil
	}
	delete(params, PoolerParam)
	switch strings.ToLower(raw) {
	case "transaction":
		return true, nil
	case "none", "":
		return false, nil
	}
	return false, fmt.Errorf("%s: want transaction or none", PoolerParam)
}

// refusedByPooler reports PgBouncer's refusal of a startup parameter it does not forward
// ("unsupported startup parameter: tcp_user_timeout", SQLSTATE 08P01): the sign that a pooler,
// not PostgreSQL, answered. PgBouncer gives it no code of its own, so the message is the only
// way to tell it from other protocol violations.
func refusedByPooler(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ProtocolViolation && strings.HasPrefix(pgErr.Message, "unsupported startup parameter")
}

// applyPooled sets what pooled mode changes on the driver's configuration.
func applyPooled(cc *pgx.ConnConfig, pooled bool) {
	if !pooled {
		return
	}
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	for _, p := range []string{paramStatement, paramIdleInTx, paramKAIdle, paramKAInterval, paramKACount, paramUserTimeout, paramSearchPath} {
		delete(cc.RuntimeParams, p)
	}
}

// PoolerHint returns err explained when it is the sign of a transaction-pooling pooler that
// Open did not detect (one that passes or ignores every startup parameter, PgBouncer with
// ignore_startup_parameters say): a named prepared statement of the driver's cache that the
// server session does not know, or already knows from another client ("prepared statement
// \"stmtcache_…\" already exists"). Any other error is returned as it is.
func PoolerHint(err error) error {
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) || (pgErr.Code != pgerrcode.DuplicatePreparedStatement && pgErr.Code != pgerrcode.InvalidSQLStatementName) ||
		!strings.Contains(pgErr.Message, "stmtcache_") {
		return err
	}
	return &PoolerHintError{Err: err}
}

// PoolerHintError is an error that says a transaction-pooling pooler stands between the client
// and the server and ql_pooler=transaction is missing (see PoolerHint).
type PoolerHintError struct{ Err error }

func (e *PoolerHintError) Error() string {
	return e.Err.Error() + " (a transaction-pooling pooler such as PgBouncer stands between this client and the server, " +
		"and it could not be detected: add " + PoolerParam + "=transaction to the connection URL)"
}
func (e *PoolerHintError) Unwrap() error { return e.Err }
