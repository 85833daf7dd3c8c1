package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyMigrations copies sql/migrations (the *.sql files and migrations.sum) into a temporary folder.
func copyMigrations(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob("../../sql/migrations/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !strings.HasSuffix(f, ".sql") && filepath.Base(f) != "migrations.sum" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestHashCheckOnTheCommittedTree(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "hash", "--check", "--dir", "../../sql/migrations")
	if r.code != 0 || !strings.Contains(r.stdout, "matches the migrations") {
		t.Fatalf("hash --check on sql/migrations: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestHashCheckNamesEveryChangedFile(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(t *testing.T, dir string)
		want   []string
	}{
		{"edited", func(t *testing.T, dir string) {
			appendTo(t, filepath.Join(dir, "0005_triggers.sql"), "-- a late edit\n")
		}, []string{"edited", "0005_triggers.sql was edited"}},
		{"added", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "0030_more.sql"), "-- +goose Up\nSELECT 1;\n")
		}, []string{"added", "0030_more.sql was added"}},
		{"removed", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "0007_attempts.sql")); err != nil {
				t.Fatal(err)
			}
		}, []string{"removed", "0007_attempts.sql was removed"}},
		{"renamed", func(t *testing.T, dir string) {
			rename(t, dir, "0007_attempts.sql", "0007_attempt_rows.sql")
		}, []string{"renamed", "0007_attempts.sql was renamed to 0007_attempt_rows.sql"}},
		{"reordered", func(t *testing.T, dir string) {
			rename(t, dir, "0029_pooled_plan_settings.sql", "0030_pooled_plan_settings.sql")
		}, []string{"0029_pooled_plan_settings.sql was renamed to 0030_pooled_plan_settings.sql"}},
		{"sum edited by hand", func(t *testing.T, dir string) {
			b, err := os.ReadFile(filepath.Join(dir, "migrations.sum"))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(string(b), "\n")
			lines[3], lines[4] = lines[4], lines[3]
			write(t, filepath.Join(dir, "migrations.sum"), strings.Join(lines, "\n"))
		}, []string{"sum_edited", "migrations.sum was edited by hand"}},
		{"sum missing", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "migrations.sum")); err != nil {
				t.Fatal(err)
			}
		}, []string{"migrations.sum is missing"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := copyMigrations(t)
			if r := run(t, nil, "hash", "--check", "--dir", dir); r.code != 0 {
				t.Fatalf("the copy does not check clean: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			c.change(t, dir)
			r := run(t, nil, "hash", "--check", "--dir", dir)
			if r.code != 1 {
				t.Fatalf("hash --check: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("hash --check does not say %q:\n%s", w, r.stdout)
				}
			}
			if !strings.Contains(r.stderr, "qlmigrate hash --dir") {
				t.Errorf("stderr does not say how to fix it: %q", r.stderr)
			}
		})
	}
}

func TestHashRewritesAndThenChecksClean(t *testing.T) {
	t.Parallel()
	dir := copyMigrations(t)
	write(t, filepath.Join(dir, "0030_more.sql"), "-- +goose Up\nSELECT 1;\n")
	if r := run(t, nil, "hash", "--dir", dir); r.code != 0 || !strings.Contains(r.stdout, "30 migrations") {
		t.Fatalf("hash: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := run(t, nil, "hash", "--check", "--dir", dir, "--format", "json")
	var res struct {
		OK       bool  `json:"ok"`
		Problems []any `json:"problems"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != 0 || !res.OK || len(res.Problems) != 0 {
		t.Fatalf("hash --check after hash: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	// A stream the binary could not run is never blessed.
	write(t, filepath.Join(dir, "0021_Bad Name.sql"), "SELECT 1;\n")
	if r := run(t, nil, "hash", "--dir", dir); r.code != 1 || !strings.Contains(r.stderr, "0021_Bad Name.sql") {
		t.Errorf("hash over a bad file name: exit %d, stderr %q; want 1 naming it", r.code, r.stderr)
	}
	if r := run(t, nil, "hash", "--dir", filepath.Join(dir, "nope")); r.code != 2 {
		t.Errorf("hash --dir of a missing folder: exit %d, want 2", r.code)
	}
}

func TestHelpOfTheVerifierCommands(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"verify", "--help"}, "--allow-pending"},
		{[]string{"grants", "--help"}, "--sql"},
		{[]string{"hash", "--help"}, "--check"},
	} {
		r := run(t, nil, c.args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage:") || !strings.Contains(r.stdout, c.want) {
			t.Errorf("%v: exit %d\n%s", c.args, r.code, r.stdout)
		}
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func rename(t *testing.T, dir, from, to string) {
	t.Helper()
	if err := os.Rename(filepath.Join(dir, from), filepath.Join(dir, to)); err != nil {
		t.Fatal(err)
	}
}
