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

// PoolerParam is the connection-string parameter that says a connection pooler (PgBouncer
// pool_mode=transaction or session, and the like) stands between the client and the server:
// ql_pooler=transaction or ql_pooler=session. Both are pooled mode (see Pooled): PgBouncer
// refuses the same startup parameters in both pool modes. ql_pooler=session keeps the driver's
// named prepared statements, since session pooling gives each client connection one server
// connection for its whole life (and DISCARD ALL after it): each claim and admit is then planned
// once per connection, as on a direct one, instead of at every execution. A pooler Open detects
// by itself is taken for transaction pooling, which is safe in both. It is read and removed by
// Resolve, never sent to the server.
// ql_pooler=none (the default) means a direct connection; Open also switches to pooled mode by
// itself when the server refuses a startup parameter the way PgBouncer does.
const PoolerParam = "ql_pooler"

// Pooled reports whether the connection goes through a transaction-pooling pooler. Then every
// transaction may run on another server session, so nothing may rely on session state:
//   - the bounds of Timeouts that are server settings are not sent at startup (PgBouncer
//     refuses statement_timeout, tcp_user_timeout …) but at the start of each transaction (the
//     prologue of DB.Begin and DB.Pipeline); the client-side bounds (connect, keepalive, TCP_USER_TIMEOUT, response) stay;
//   - statements (except with ql_pooler=session) use pgx's QueryExecModeCacheDescribe: the extended protocol with the unnamed
//     statement only (Parse, Bind, Execute in one round trip), never a named prepared statement,
//     which a server session other than the one that prepared them does not know (PgBouncer
//     before 1.21 has no max_prepared_statements). The client caches each statement's parameter
//     and result types per connection, so parameters keep their types ([]byte into json stays
//     JSON, where the simple protocol would send bytea) and results their binary format;
//   - a SET ROLE, a session advisory lock or any other SET must be made transaction-local by
//     the caller.
func (c *Config) Pooled() bool { return c.pooled }

// SetPooled switches pooled mode on for connections opened afterwards (Resolve reads it from
// PoolerParam; Open turns it on when it meets a pooler).
func (c *Config) SetPooled() {
	c.pooled = true
	c.SetTimeouts(c.timeouts)
}

// localSettings returns the statement that applies the server-side bounds of Timeouts, the
// SearchPath and StandardConformingStrings to one transaction, to run first in every
// transaction when Pooled (the prologue of a DB or a Conn, read by Open and Connect once they
// know the mode); nil on a direct connection, whose sessions got them at startup. It is one SELECT of set_config(…, true) rather
// than SET LOCAL: set_config acts in whatever transaction it runs in, the implicit one of the
// claim's pipeline (no BEGIN) included, where SET LOCAL would draw "SET LOCAL can only be used in
// transaction blocks". Each setting applies from the next statement on (statement_timeout
// included: the server arms it per statement) and ends with the transaction.
func (c *Config) localSettings() []string {
	if !c.pooled {
		return nil
	}
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	set := func(name, value string) string { return fmt.Sprintf("set_config('%s', '%s', true)", name, value) }
	return []string{"SELECT " + strings.Join([]string{
		set(paramStatement, ms(c.timeouts.Statement)),
		set(paramIdleInTx, ms(c.timeouts.IdleInTransaction)),
		set(paramSearchPath, SearchPath),
		set(paramSCS, StandardConformingStrings),
	}, ", ") + ";"}
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

// poolerFrom reads and removes PoolerParam from the parsed runtime parameters: pooled, and
// whether the pooler pools sessions.
func poolerFrom(params map[string]string) (pooled, session bool, err error) {
	raw, ok := params[PoolerParam]
	if !ok {
		return false, false, nil
	}
	delete(params, PoolerParam)
	switch strings.ToLower(raw) {
	case "transaction":
		return true, false, nil
	case "session":
		return true, true, nil
	case "none", "":
		return false, false, nil
	}
	return false, false, fmt.Errorf("%s: want transaction, session or none", PoolerParam)
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
func applyPooled(cc *pgx.ConnConfig, pooled, session bool) {
	if !pooled {
		return
	}
	if !session {
		cc.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	for _, p := range []string{paramStatement, paramIdleInTx, paramKAIdle, paramKAInterval, paramKACount, paramUserTimeout, paramSearchPath} {
		delete(cc.RuntimeParams, p)
	}
	for p := range TransactionDefaults {
		delete(cc.RuntimeParams, p)
	}
}

// PoolerHint returns err explained when it is the sign of a transaction-pooling pooler that
// Open did not detect (one that passes or ignores every startup parameter, PgBouncer with
// ignore_startup_parameters say) or that ql_pooler=session wrongly names: a named prepared statement of the driver's cache that the
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
		"and the connection does not say so: set " + PoolerParam + "=transaction in the connection URL; " +
		PoolerParam + "=session is for session pooling only)"
}
func (e *PoolerHintError) Unwrap() error { return e.Err }
