// Package loopaudit checks the closed loop's invariants over a whole database (issue 32, design
// §6): what must hold after any interleaving of placements, ACKs, heartbeats, completions,
// sweeps and cancels. Store tests run it at their end; the process gates run it after the
// faults. It reads through any querier (a superuser or runtime connection) and writes nothing.
//
// The invariants are one query, LoopAuditChecks of sql/queries/loop_audit.sql, the one the
// demo's execution audit prints (admin.Reader.LoopAudit). The test kit imports no generated
// code (rule 1 of docs/architecture.md), so it runs that query's text, read from the file.
package loopaudit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Querier is what the audit reads through (a *pgxpool.Pool, *pgx.Conn, pgx.Tx or dbconn.Querier).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

const queryName = "-- name: LoopAuditChecks :many"

// queriesFile is the path of sql/queries/loop_audit.sql: beside this source file (here), else,
// when here is no path on this machine (a -trimpath build names it by its import path), in the
// nearest folder above the working directory (a test's: its package's) that holds it.
func queriesFile(here string) (string, error) {
	rel := filepath.Join("sql", "queries", "loop_audit.sql")
	if filepath.IsAbs(here) {
		return filepath.Join(filepath.Dir(here), "..", "..", "..", rel), nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("loop audit: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, rel)); err == nil {
			return filepath.Join(dir, rel), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("loop audit: no %s above the working directory", rel)
		}
		dir = parent
	}
}

// checksSQL reads the text of LoopAuditChecks from sql/queries/loop_audit.sql, once.
var checksSQL = sync.OnceValues(func() (string, error) {
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("loop audit: cannot locate this package's source")
	}
	path, err := queriesFile(here)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("loop audit: %w", err)
	}
	_, text, ok := strings.Cut(string(b), queryName)
	if !ok {
		return "", fmt.Errorf("loop audit: %s has no %q", path, queryName)
	}
	text, _, _ = strings.Cut(text, "-- name:")
	return strings.TrimSuffix(strings.TrimSpace(text), ";"), nil
})

// Violations returns one line per broken invariant ("name: n rows"); none when all hold.
func Violations(ctx context.Context, q Querier) ([]string, error) {
	sql, err := checksSQL()
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, sql)
	if err != nil {
		return nil, fmt.Errorf("loop audit: %w", err)
	}
	type check struct {
		Name       string
		Violations int64
	}
	checks, err := pgx.CollectRows(rows, pgx.RowToStructByPos[check])
	if err != nil {
		return nil, fmt.Errorf("loop audit: %w", err)
	}
	if len(checks) == 0 {
		return nil, fmt.Errorf("loop audit: no invariant checked")
	}
	var out []string
	for _, c := range checks {
		if c.Violations != 0 {
			out = append(out, fmt.Sprintf("%s: %d rows break it", c.Name, c.Violations))
		}
	}
	return out, nil
}

// Assert fails t with every broken invariant.
func Assert(t testing.TB, q Querier) {
	t.Helper()
	v, err := Violations(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range v {
		t.Errorf("loop audit: %s", line)
	}
}
