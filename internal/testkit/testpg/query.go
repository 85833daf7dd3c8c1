package testpg

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Query is the sqlc query name of the module's sql/queries, as PREPARE takes it: its arguments
// (@name, sqlc.arg(name), sqlc.narg(name)) numbered $1, $2 … in order of first appearance. Plan
// tests EXPLAIN EXECUTE it, so they check the statement the code runs, not a copy of it.
func Query(t testing.TB, name string) string {
	t.Helper()
	dir, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "sql", "queries", "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the query files %s/sql/queries/*.sql: %d found (%v)", dir, len(files), err)
	}
	for _, file := range files {
		body, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		q := string(body)
		at := strings.Index(q, "-- name: "+name+" ")
		if at < 0 {
			continue
		}
		q = q[at:]
		if end := strings.Index(q[1:], "-- name:"); end >= 0 {
			q = q[:end+1]
		}
		q = strings.TrimSuffix(strings.TrimSpace(q), ";")
		seen := map[string]string{}
		return regexp.MustCompile(`@[a-z_]+|sqlc\.n?arg\([a-z_]+\)`).ReplaceAllStringFunc(q, func(arg string) string {
			name := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(arg, "@"), "sqlc.narg("), "sqlc.arg("), ")")
			if _, ok := seen[name]; !ok {
				seen[name] = fmt.Sprintf("$%d", len(seen)+1)
			}
			return seen[name]
		})
	}
	t.Fatalf("no query %s in sql/queries", name)
	return ""
}

// moduleRoot is the nearest folder at or above the working directory (a test's package) that
// holds sql/queries.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if st, err := os.Stat(filepath.Join(dir, "sql", "queries")); err == nil && st.IsDir() {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no sql/queries at or above the working directory")
		}
		dir = parent
	}
}
