package loopaudit

import (
	"os"
	"strings"
	"testing"
)

// A -trimpath build names this source by its import path, no file on this machine: the query is
// then found above the working directory.
func TestQueriesFileUnderTrimpath(t *testing.T) {
	path, err := queriesFile("github.com/qlcontrol/controlcore/internal/testkit/loopaudit/loopaudit.go")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), queryName) {
		t.Errorf("%s: %v; want the file holding %q", path, err, queryName)
	}
}
