// Package migrate applies the control-core migration stream with goose, under goose's session
// advisory lock, as the owner role, recording each migration's checksum in the ledger inside the
// migration's own transaction (for a NO TRANSACTION migration: in one transaction with its
// version row, after its statements; see checksums.LedgerStore).
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/dbconn"
	"github.com/qlcontrol/controlcore/roles"
	"github.com/qlcontrol/controlcore/sql/migrations"
)

// VersionTable is goose's version table; it lives in control_core so the owner role owns it.
const VersionTable = "control_core.goose_db_version"

// Options configure a Runner.
type Options struct {
	Names roles.Names
	// FS holds the migrations; nil means the stream embedded in the binary.
	FS fs.FS
	// AsOwner makes every session SET ROLE to the owner role (required to apply migrations when
	// connecting as a superuser or another member of the owner role).
	AsOwner bool
}

// Runner applies and reports migrations on one database.
type Runner struct {
	Pool       *pgxpool.Pool
	sqlDB      *sql.DB
	provider   *goose.Provider
	Migrations []checksums.Migration
	byVersion  map[int64]checksums.Migration
	// noTx holds the versions annotated "-- +goose NO TRANSACTION": a failure in one of them
	// may leave part of it applied, and the error must say so.
	noTx map[int64]bool
}

// Open connects and prepares goose. Close releases the connections.
func Open(ctx context.Context, cfg *dbconn.Config, opts Options) (*Runner, error) {
	fsys := opts.FS
	if fsys == nil {
		fsys = migrations.FS
	}
	list, err := checksums.Load(fsys)
	if err != nil {
		return nil, err
	}
	rewritten := fstest.MapFS{}
	noTx := map[int64]bool{}
	for _, m := range list {
		body, err := fs.ReadFile(fsys, m.File)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", m.File, err)
		}
		rewritten[m.File] = &fstest.MapFile{Data: opts.Names.Rewrite(body)}
		if nonTransactional(body) {
			noTx[m.Version] = true
		}
	}

	poolCfg := cfg.Pool.Copy()
	if opts.AsOwner {
		owner := opts.Names.Owner
		poolCfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			return setRole(ctx, conn, owner)
		}
	}
	pool, err := (&dbconn.Config{Pool: poolCfg}).Open(ctx)
	if err != nil {
		return nil, cfg.RedactError(err)
	}
	store, err := checksums.NewLedgerStore(VersionTable, list)
	if err != nil {
		pool.Close()
		return nil, err
	}
	// Poll the session lock every second for up to 10 minutes: a concurrent `up` holds it only
	// while it applies migrations.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 600))
	if err != nil {
		pool.Close()
		return nil, err
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	provider, err := goose.NewProvider(goose.DialectCustom, sqlDB, rewritten,
		goose.WithStore(store), goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		sqlDB.Close()
		pool.Close()
		return nil, fmt.Errorf("prepare goose: %w", err)
	}
	by := make(map[int64]checksums.Migration, len(list))
	for _, m := range list {
		by[m.Version] = m
	}
	return &Runner{Pool: pool, sqlDB: sqlDB, provider: provider, Migrations: list, byVersion: by, noTx: noTx}, nil
}

// nonTransactional reports whether a migration carries goose's "-- +goose NO TRANSACTION"
// annotation, recognised as goose's parser does: a line starting with "--" that names +goose,
// whose rest is the annotation in any case.
func nonTransactional(body []byte) bool {
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "--") || !strings.Contains(line, "+goose") {
			continue
		}
		cmd := strings.Replace(strings.ReplaceAll(line, "--", ""), "+goose", "", 1)
		if strings.EqualFold(strings.TrimSpace(cmd), "NO TRANSACTION") {
			return true
		}
	}
	return false
}

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

func setRole(ctx context.Context, conn *pgx.Conn, owner string) error {
	var current string
	if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&current); err != nil {
		return err
	}
	if current == owner {
		return nil
	}
	if _, err := conn.Exec(ctx, "SET ROLE "+pgx.Identifier{owner}.Sanitize()); err != nil {
		return &RoleError{User: current, Owner: owner, Err: err}
	}
	return nil
}

// Close releases the connections.
func (r *Runner) Close() {
	_ = r.sqlDB.Close()
	r.Pool.Close()
}

// Applied is one migration that Up applied.
type Applied struct {
	Migration checksums.Migration
	Duration  time.Duration
}

// Up applies every pending migration up to and including version to (0: all). Each migration
// runs in its own transaction with its version and ledger rows; a failing one leaves nothing
// behind, and the ones before it stay applied. A NO TRANSACTION migration is the exception: its
// statements autocommit one by one, so a failure may leave some of them applied (it stays
// pending, with neither a version nor a ledger row, and the next Up runs it again).
func (r *Runner) Up(ctx context.Context, to int64) ([]Applied, error) {
	if to != 0 {
		if _, ok := r.byVersion[to]; !ok {
			return nil, fmt.Errorf("--to %d: no such migration (have 1 … %d)", to, r.Migrations[len(r.Migrations)-1].Version)
		}
	}
	if err := r.ensureSchema(ctx); err != nil {
		return nil, err
	}
	var (
		results []*goose.MigrationResult
		err     error
	)
	if to == 0 {
		results, err = r.provider.Up(ctx)
	} else {
		results, err = r.provider.UpTo(ctx, to)
	}
	var partial *goose.PartialError
	if errors.As(err, &partial) {
		results = partial.Applied
		failed := partial.Failed.Source.Version
		if r.noTx[failed] {
			err = fmt.Errorf("%s failed; it runs without a transaction (NO TRANSACTION), so the statements before the failure may have been applied; "+
				"it is not recorded as applied and the next up runs it again: %w", r.byVersion[failed].Name, partial.Err)
		} else {
			err = fmt.Errorf("%s failed, nothing of it was applied: %w", r.byVersion[failed].Name, partial.Err)
		}
	}
	applied := make([]Applied, 0, len(results))
	for _, res := range results {
		applied = append(applied, Applied{Migration: r.byVersion[res.Source.Version], Duration: res.Duration})
	}
	return applied, err
}

// ensureSchema creates control_core before goose creates its version table in it, under the
// same advisory lock key goose's session locker uses, so concurrent `up` runs do not race.
func (r *Runner) ensureSchema(ctx context.Context) error {
	return pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lock.DefaultLockID); err != nil {
			return fmt.Errorf("take the migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS control_core"); err != nil {
			return fmt.Errorf("create schema control_core: %w", err)
		}
		return nil
	})
}

// ChecksumState compares an applied migration's ledger row with the file in the binary.
type ChecksumState string

const (
	ChecksumOK      ChecksumState = "ok"
	ChecksumChanged ChecksumState = "changed" // the ledger holds another sha256: the file was edited after it ran
	ChecksumMissing ChecksumState = "missing" // applied, but no ledger row
	ChecksumPending ChecksumState = "-"
)

// Status is one line of `qlmigrate status`.
type Status struct {
	Migration checksums.Migration
	Applied   bool
	AppliedAt time.Time
	Checksum  ChecksumState
}

// Status lists every migration the binary knows with its applied time and checksum state.
func (r *Runner) Status(ctx context.Context) ([]Status, error) {
	exists, err := db.New(r.Pool).SchemaExists(ctx)
	if err != nil {
		return nil, fmt.Errorf("look for schema control_core: %w", err)
	}
	ledger := map[int64]string{}
	var applied map[int64]time.Time
	if exists {
		rows, err := db.New(r.Pool).ListLedger(ctx)
		if err != nil {
			return nil, fmt.Errorf("read checksum ledger: %w", err)
		}
		for _, row := range rows {
			ledger[row.Version] = row.Sha256
		}
		st, err := r.provider.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("read goose versions: %w", err)
		}
		applied = map[int64]time.Time{}
		for _, s := range st {
			if s.State == goose.StateApplied {
				applied[s.Source.Version] = s.AppliedAt
			}
		}
	}
	out := make([]Status, 0, len(r.Migrations))
	for _, m := range r.Migrations {
		s := Status{Migration: m, Checksum: ChecksumPending}
		if at, ok := applied[m.Version]; ok {
			s.Applied, s.AppliedAt = true, at
			switch sum, ok := ledger[m.Version]; {
			case !ok:
				s.Checksum = ChecksumMissing
			case sum != m.SHA256:
				s.Checksum = ChecksumChanged
			default:
				s.Checksum = ChecksumOK
			}
		}
		out = append(out, s)
	}
	return out, nil
}
