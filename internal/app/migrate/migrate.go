// Package migrate applies the control-core migration stream: it validates the database's record
// of what ran before it touches anything, then applies each pending migration in a transaction of
// its own that takes the migration lock, re-reads what is applied, runs the statements and writes
// the version row and the checksum-ledger row. It also prints that same plan as SQL (the dry run),
// reports status and records an audited acceptance of a cosmetic edit.
//
// The lock is PostgreSQL's transaction-scoped advisory lock on goose's key, taken first in every
// migration transaction: it lives exactly as long as the transaction that needs it, so it is as
// real behind a transaction-pooling PgBouncer as on a direct connection, where a session lock is
// none. Concurrent runs queue on it, and each applies only what is still pending once it holds it.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3/lock"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/base/sqlfile"
	"github.com/qlcontrol/controlcore/roles"
	"github.com/qlcontrol/controlcore/sql/migrations"
)

// VersionTable is goose's version table; it lives in control_core so the owner role owns it.
const VersionTable = checksums.VersionTable

// LockKey is the advisory lock key of the migration lock: goose's, so a goose run and a
// qlmigrate run exclude each other.
const LockKey = lock.DefaultLockID

// DefaultLockTimeout is how long up waits for the migration lock unless told otherwise.
const DefaultLockTimeout = 5 * time.Minute

// Options configure a Runner.
type Options struct {
	Names roles.Names
	// FS holds the migrations; nil means the stream embedded in the binary.
	FS fs.FS
	// AsOwner makes every transaction SET LOCAL ROLE to the owner role (never a session SET
	// ROLE, which a pooler would hand on to its other clients), required to apply migrations when connecting as
	// a superuser or another member of the owner role.
	AsOwner bool
	// LockTimeout bounds the wait for the migration lock: 0 means DefaultLockTimeout, else
	// MinLockTimeout … MaxLockTimeout.
	LockTimeout time.Duration
	// Waiting, when set, is called while up waits for the migration lock: soon after the wait
	// starts and every WaitReportInterval, with the sessions holding it.
	Waiting func(waited time.Duration, holders []LockHolder)
}

// WaitReportInterval is how often Options.Waiting is called during a wait.
const WaitReportInterval = 5 * time.Second

// Runner applies and reports migrations on one database.
type Runner struct {
	Migrations []checksums.Migration
	db         *dbconn.DB
	conn       *dbconn.Config
	opts       Options
	fsys       fs.FS
	byVersion  map[int64]checksums.Migration
	files      map[int64]*sqlfile.File // as run: role names rewritten for the prefix
}

// Open connects and reads the migrations. Close releases the connections.
func Open(ctx context.Context, cfg *dbconn.Config, opts Options) (*Runner, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	fsys := opts.FS
	if fsys == nil {
		fsys = migrations.FS
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	list, err := checksums.Load(fsys)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, errors.New("the migration stream is empty")
	}
	r := &Runner{Migrations: list, opts: opts, fsys: fsys, byVersion: map[int64]checksums.Migration{}, files: map[int64]*sqlfile.File{}}
	for _, m := range list {
		body, err := fs.ReadFile(fsys, m.File)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", m.File, err)
		}
		f, err := sqlfile.Parse(string(opts.Names.Rewrite(body)))
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", m.File, err)
		}
		r.byVersion[m.Version], r.files[m.Version] = m, f
	}

	// A copy: Open may switch it to pooled mode when it meets a pooler. No session state is ever
	// set on it (no SET ROLE, no SET): through a pooler that was not detected, a server session
	// goes on to other clients. The owner role is SET LOCAL ROLE in every transaction instead.
	r.conn = cfg.For(cfg.Pool.ConnConfig.Database, "")
	// The migration transaction waits for the lock on one connection while another names the
	// holder: pool_max_conns=1 would leave the second waiting forever.
	if r.conn.Pool.MaxConns < minConns {
		r.conn.Pool.MaxConns = minConns
	}
	// The client's response bound must outlast a lock wait, in which the server says nothing.
	if t := r.conn.Timeouts(); t.Response > 0 && t.Response < opts.LockTimeout+dbconn.ResponseMargin {
		t.Response = opts.LockTimeout + dbconn.ResponseMargin
		r.conn.SetTimeouts(t)
	}
	if r.db, err = r.conn.Open(ctx); err != nil {
		return nil, err
	}
	if opts.AsOwner {
		if err := r.checkRole(ctx); err != nil {
			r.db.Close()
			return nil, err
		}
	}
	return r, nil
}

// minConns is the least number of connections a Runner's pool has, whatever pool_max_conns says.
const minConns = 2

// holdersTimeout bounds one look-up of the lock's holders.
const holdersTimeout = 10 * time.Second

// checkRole tells early, in a transaction that changes nothing, whether the connected role may
// SET LOCAL ROLE to the owner role.
func (r *Runner) checkRole(ctx context.Context) error {
	return r.readTx(ctx, func(tx pgx.Tx) error { return nil })
}

// begin starts a transaction of the runner: read committed, whatever default_transaction_isolation
// says (every statement after the lock must see what the transactions before it committed), or
// the given options, begun by the handle (its prologue first: the settings a pooled session does
// not carry); then the owner role when AsOwner.
func (r *Runner) begin(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	tx, err := r.db.Begin(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	if r.opts.AsOwner {
		if _, err := tx.Exec(ctx, setLocalRole(r.opts.Names.Owner)); err != nil {
			_ = tx.Rollback(ctx)
			return nil, r.roleError(ctx, err)
		}
	}
	return tx, nil
}

// roleError explains a failed SET LOCAL ROLE to the owner role.
func (r *Runner) roleError(ctx context.Context, err error) error {
	var user string
	if qerr := r.db.Run(ctx, func(q dbconn.Querier) error { return q.QueryRow(ctx, "SELECT session_user").Scan(&user) }); qerr != nil {
		user = r.conn.Pool.ConnConfig.User
	}
	return &RoleError{User: user, Owner: r.opts.Names.Owner, Err: err}
}

// readTx runs fn in a read-only repeatable-read transaction begun by begin.
func (r *Runner) readTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := r.begin(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	return fn(tx)
}

// beginner hands verify.Run transactions begun by the runner (role and settings included).
type beginner struct{ r *Runner }

func (b beginner) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	return b.r.begin(ctx, opts)
}

// Capability is control-core's capability row: the version, name and migration that set it.
type Capability struct {
	Version   int32
	Name      string
	Migration string
}

// Capability reads control-core's capability row, as the owner role when AsOwner.
func (r *Runner) Capability(ctx context.Context) (Capability, error) {
	var c Capability
	err := r.readTx(ctx, func(tx pgx.Tx) error {
		row, err := db.New(tx).Capability(ctx, "control-core")
		c = Capability{Version: row.Version, Name: row.Name, Migration: row.Migration}
		return err
	})
	return c, err
}

// Pooled reports whether the runner talks through a transaction-pooling pooler (dbconn.Pooled).
func (r *Runner) Pooled() bool { return r.db.Pooled() }

// RoleError means the session could not become the owner role.
type RoleError struct {
	User, Owner string
	Err         error
}

func (e *RoleError) Error() string {
	return fmt.Sprintf("connected as %s, cannot SET ROLE %s (%v); connect as %s, or as a member of it, after \"qlmigrate roles create\"",
		e.User, e.Owner, e.Err, e.Owner)
}
func (e *RoleError) Unwrap() error { return e.Err }

func setLocalRole(owner string) string {
	return "SET LOCAL ROLE " + pgx.Identifier{owner}.Sanitize() + ";"
}

// Close releases the connections.
func (r *Runner) Close() { r.db.Close() }

// DriftError means up found the database's record of what ran differs from this binary's
// migrations (verify's integrity, ledger or unknown_versions findings) and applied nothing.
type DriftError struct{ Report *verify.Report }

func (e *DriftError) Error() string {
	return fmt.Sprintf("%d drift finding(s) in the integrity file, the ledger or the applied versions: nothing was applied", e.Report.Summary.Drift)
}

// Validate runs the checks up runs before it takes the lock (verify.ScopeUp), read-only.
func (r *Runner) Validate(ctx context.Context) (*verify.Report, error) {
	return r.validate(ctx, beginner{r})
}

// validate is the one validation of up and status, in a transaction conn begins.
func (r *Runner) validate(ctx context.Context, conn verify.Beginner) (*verify.Report, error) {
	report, err := verify.Run(ctx, conn, verify.Options{Names: r.opts.Names, Scope: verify.ScopeUp, FS: r.fsys})
	var denied *verify.PermissionError
	if errors.As(err, &denied) {
		return nil, err // says itself what was read and whom to connect as
	}
	if err != nil {
		return nil, fmt.Errorf("validate before applying: %w", err)
	}
	report.Target = r.conn.Describe()
	return report, nil
}

// Applied is one migration that Up applied.
type Applied struct {
	Migration checksums.Migration
	Duration  time.Duration
}

// checkTo refuses a target that names no migration (a *FieldError of field To).
func (r *Runner) checkTo(to int64) error {
	if to == 0 {
		return nil
	}
	if to < 0 {
		return &FieldError{Field: "To", Value: to, Want: "want a migration version, 1 or more"}
	}
	return versionIn(r.Migrations, "To", to)
}

// Up validates the database, then applies every pending migration up to and including version
// to (0: all), each in its own transaction that takes the migration lock, re-reads the applied
// versions and writes the migration's statements, version row and ledger row: a failing one
// leaves nothing behind, and the ones before it stay applied. Any validation drift is a
// *DriftError and nothing is applied; a lock wait longer than Options.LockTimeout is a
// *LockTimeoutError; a target the stream does not have a *FieldError (field To).
//
// A NO TRANSACTION migration (the stream has none) runs its statements one by one in autocommit
// under the session form of the same lock, then records itself in a transaction: a failure may
// leave some of its statements applied (it stays pending and the next Up runs it again). Behind
// a transaction-pooling pooler no session lock holds, so Up refuses it (*PoolerError).
func (r *Runner) Up(ctx context.Context, to int64) ([]Applied, error) {
	if err := r.checkTo(to); err != nil {
		return nil, err
	}
	report, err := r.Validate(ctx)
	if err != nil {
		return nil, err
	}
	if !report.OK {
		return nil, &DriftError{Report: report}
	}
	var applied []Applied
	for {
		m, done, err := r.applyNext(ctx, to)
		if err != nil || done {
			return applied, err
		}
		if m != nil {
			applied = append(applied, *m)
		}
	}
}

// txPrologue is what every transaction of up runs first after the handle's prologue (the bounds a
// pooled session does not carry, run by dbconn.DB.Begin): the role and the migration lock. lock_timeout bounds only that wait, and
// statement_timeout is off for it (a shorter one in the URL would otherwise end the wait before
// the lock timeout, without naming the holder); both are restored after it.
func (r *Runner) txPrologue() (before []string, lockSQL string, after []string) {
	if r.opts.AsOwner {
		before = append(before, setLocalRole(r.opts.Names.Owner))
	}
	before = append(before, fmt.Sprintf("SET LOCAL lock_timeout = %d;", r.opts.LockTimeout.Milliseconds()), "SET LOCAL statement_timeout = 0;")
	after = []string{"SET LOCAL lock_timeout TO DEFAULT;", fmt.Sprintf("SET LOCAL statement_timeout = %d;", r.db.Timeouts().Statement.Milliseconds())}
	return before, fmt.Sprintf("SELECT pg_advisory_xact_lock(%d);", LockKey), after
}

// txOptions are the options of every transaction of up: read committed whatever
// default_transaction_isolation says, so that what it reads after taking the lock is what the
// runs before it committed (a repeatable-read snapshot is taken before the lock is granted).
var txOptions = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// BeginSQL is how the dry run writes the start of a transaction: as txOptions begins it.
const BeginSQL = "BEGIN ISOLATION LEVEL READ COMMITTED;"

// applyNext takes the lock in a new transaction and applies the first pending migration up to to;
// done when none is left.
func (r *Runner) applyNext(ctx context.Context, to int64) (*Applied, bool, error) {
	tx, err := r.db.Begin(ctx, txOptions)
	if err != nil {
		return nil, false, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit a no-op; on error the rollback is the point
	before, lockSQL, after := r.txPrologue()
	if err := r.execAll(ctx, tx, before); err != nil {
		return nil, false, err
	}
	if err := r.takeLock(ctx, func() error { _, err := tx.Exec(ctx, lockSQL); return err }); err != nil {
		return nil, false, err
	}
	if err := r.execAll(ctx, tx, after); err != nil {
		return nil, false, err
	}
	st, err := checksums.ReadApplied(ctx, tx)
	if err != nil {
		return nil, false, err
	}
	if !st.TableExists {
		if err := r.execAll(ctx, tx, checksums.VersionTableSQL()); err != nil {
			return nil, false, fmt.Errorf("create goose's version table: %w", err)
		}
		return nil, false, commit(ctx, tx)
	}
	next := r.nextPending(st, to)
	if next == nil {
		return nil, true, commit(ctx, tx)
	}
	if r.files[next.Version].NoTransaction {
		_ = tx.Rollback(ctx) // release the transaction lock: the session lock takes over
		a, err := r.applyNoTx(ctx, *next)
		return a, false, err
	}
	start := time.Now()
	stmts := append([]string{checksums.StartSQL}, r.statements(next.Version)...)
	if err := r.execAll(ctx, tx, append(stmts, checksums.RecordSQL(*next)...)); err != nil {
		return nil, false, fmt.Errorf("%s failed, nothing of it was applied: %w", next.Name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, false, fmt.Errorf("%s: commit failed, nothing of it was applied: %w", next.Name, err)
	}
	return &Applied{Migration: *next, Duration: time.Since(start)}, false, nil
}

func commit(ctx context.Context, tx pgx.Tx) error {
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func (r *Runner) execAll(ctx context.Context, tx pgx.Tx, stmts []string) error {
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			var pgErr *pgconn.PgError
			if strings.HasPrefix(s, "SET LOCAL ROLE") && errors.As(err, &pgErr) {
				return &RoleError{User: r.conn.Pool.ConnConfig.User, Owner: r.opts.Names.Owner, Err: err}
			}
			return err
		}
	}
	return nil
}

// statements are the Up statements of a migration as they run.
func (r *Runner) statements(version int64) []string {
	f := r.files[version]
	out := make([]string, 0, len(f.Up))
	for _, s := range f.Up {
		out = append(out, s.SQL)
	}
	return out
}

func (r *Runner) nextPending(applied checksums.GooseVersions, to int64) *checksums.Migration {
	for _, m := range r.Migrations {
		if to != 0 && m.Version > to {
			return nil
		}
		if !applied.IsApplied(m.Version) {
			return &m
		}
	}
	return nil
}

// PoolerError means what was asked cannot be done safely through a transaction-pooling pooler.
type PoolerError struct{ Migration string }

func (e *PoolerError) Error() string {
	return fmt.Sprintf("%s is a NO TRANSACTION migration: it needs a session-level migration lock, which a transaction-pooling pooler does not keep; "+
		"run up on a direct connection to the server (or through a session-pooling port)", e.Migration)
}

// applyNoTx applies a NO TRANSACTION migration under the session advisory lock on one connection.
func (r *Runner) applyNoTx(ctx context.Context, m checksums.Migration) (*Applied, error) {
	if r.db.Pooled() {
		return nil, &PoolerError{Migration: m.Name}
	}
	c, err := r.db.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire a connection: %w", err)
	}
	defer c.Release()
	if _, err := c.Exec(ctx, fmt.Sprintf("SET lock_timeout = %d", r.opts.LockTimeout.Milliseconds())); err != nil {
		return nil, err
	}
	if err := r.takeLock(ctx, func() error { _, err := c.Exec(ctx, "SELECT pg_advisory_lock($1)", LockKey); return err }); err != nil {
		return nil, err
	}
	defer func() {
		// a fresh context: the lock must go even when ctx was cancelled; closing the connection
		// would release it too
		unlockCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.Exec(unlockCtx, "SELECT pg_advisory_unlock($1)", LockKey); err != nil {
			_ = c.Conn().Close(unlockCtx)
		}
	}()
	if _, err := c.Exec(ctx, "RESET lock_timeout"); err != nil {
		return nil, err
	}
	st, err := checksums.ReadApplied(ctx, c)
	if err != nil {
		return nil, err
	}
	if st.IsApplied(m.Version) {
		return nil, nil // another run applied it while we waited
	}
	start := time.Now()
	fail := func(err error) error {
		return fmt.Errorf("%s failed; it runs without a transaction (NO TRANSACTION), so the statements before the failure may have been applied; "+
			"it is not recorded as applied and the next up runs it again: %w", m.Name, err)
	}
	// the start mark is a session setting here: outside a transaction block a local one would
	// last for its own statement only
	if _, err := c.Exec(ctx, "SELECT set_config('qlmigrate.started_at', clock_timestamp()::text, false)"); err != nil {
		return nil, fail(err)
	}
	for _, s := range r.statements(m.Version) {
		if _, err := c.Exec(ctx, s); err != nil {
			return nil, fail(err)
		}
	}
	err = pgx.BeginTxFunc(ctx, c, txOptions, func(tx pgx.Tx) error { return r.execAll(ctx, tx, checksums.RecordSQL(m)) })
	if err != nil {
		return nil, fail(err)
	}
	return &Applied{Migration: m, Duration: time.Since(start)}, nil
}
