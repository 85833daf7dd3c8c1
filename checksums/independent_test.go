package checksums_test

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// migrations.sum is written by `qlmigrate hash` with this package's own code, so a bug in that
// code could bless itself. The check here derives what the file must hold from elsewhere, with
// none of this package's functions: crypto/sha256 over the files' bytes, and a known answer.

const migrationsDir = "../sql/migrations"

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// migrations.sum as its format documents it (checksums/sumfile.go, README: `qlmigrate hash`),
// recomputed with crypto/sha256 over the files' bytes: a first line h1:<base64 sha256 of every
// line below, each with its newline>, then one line per migration, in file-name order,
// "<file> h1:<base64 sha256 of the file>".
func TestMigrationsSumRecomputedFromTheFilesBytes(t *testing.T) {
	t.Parallel()
	h1 := func(b []byte) string {
		s := sha256.Sum256(b)
		return "h1:" + base64.StdEncoding.EncodeToString(s[:])
	}
	entries, err := os.ReadDir(migrationsDir)
	if err != nil {
		t.Fatal(err)
	}
	var lines strings.Builder
	n := 0
	for _, e := range entries { // os.ReadDir sorts by file name
		if e.IsDir() || filepath.Ext(e.Name()) != ".sql" {
			continue
		}
		fmt.Fprintf(&lines, "%s %s\n", e.Name(), h1(mustRead(t, filepath.Join(migrationsDir, e.Name()))))
		n++
	}
	want := h1([]byte(lines.String())) + "\n" + lines.String()
	got := string(mustRead(t, filepath.Join(migrationsDir, "migrations.sum")))
	if n != 29 || got != want {
		t.Errorf("migrations.sum (%d migrations) is not what its format gives for the files' bytes:\n%s\nwant:\n%s", n, got, want)
	}
	// a known answer, computed outside Go (printf a | sha256sum, as base64), so that the
	// recomputation above cannot share a mistake with the code it checks
	if got := h1([]byte("a")); got != "h1:ypeBEsobvcr6wjGzmiPcTaeG7/gUfE5yuYB3ha/uSLs=" {
		t.Errorf(`h1("a") = %s`, got)
	}
}
