package archrules

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/qlcontrol/controlcore"

// pkg is what `go list -json` says about one package.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func list(t *testing.T, patterns ...string) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json=ImportPath,Imports,Deps"}, patterns...)...)
	cmd.Dir = "../../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", patterns, err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	if len(pkgs) == 0 {
		t.Fatalf("go list %v listed no package", patterns)
	}
	return pkgs
}

// testOnly are the packages that exist for tests; a binary that links one ships test code.
func testOnly(path string) bool {
	switch {
	case path == "testing", strings.HasPrefix(path, "testing/"),
		strings.HasPrefix(path, "github.com/testcontainers/"):
		return true
	}
	for _, p := range []string{"internal/testkit/testpg", "internal/testkit/eventually", "internal/testkit/drifttest",
		"internal/testkit/dbconntest", "internal/testkit/faultproxy", "internal/testkit/mutate", "internal/testkit/jsondoc", "internal/testkit/testbin"} {
		if path == module+"/"+p {
			return true
		}
	}
	return false
}

func TestCommandsAreWiringOnly(t *testing.T) {
	for path, p := range list(t, "./cmd/...") {
		if slices.Contains(p.Imports, module+"/db") {
			t.Errorf("%s imports %s/db: generated rows stay behind the store and admin packages", path, module)
		}
	}
}

// dbImporters are the packages rule 1 of docs/architecture.md lets import db.
var dbImporters = []string{"coordinator", "admin", "checksums", "roles", "internal/app/migrate", "internal/app/verify",
	"internal/app/metrics", "internal/app/bench"}

func TestGeneratedRowsStayBehindTheStores(t *testing.T) {
	for path, p := range list(t, "./...") {
		if slices.Contains(p.Imports, module+"/db") && !slices.ContainsFunc(dbImporters, func(allowed string) bool {
			return path == module+"/"+allowed
		}) {
			t.Errorf("%s imports %s/db: only %v may (rule 1 of docs/architecture.md)", path, module, dbImporters)
		}
	}
}

func TestTheDecisionKnowsNoDatabase(t *testing.T) {
	p := list(t, "./schedule")[module+"/schedule"]
	for _, dep := range p.Deps {
		if dep == module+"/db" || strings.HasPrefix(dep, "github.com/jackc/") {
			t.Errorf("schedule depends on %s: the cron decision must be testable without a database", dep)
		}
	}
}

func TestBinariesShipNoTestCode(t *testing.T) {
	for path, p := range list(t, "./cmd/...") {
		for _, dep := range p.Deps {
			if testOnly(dep) {
				t.Errorf("%s links %s, a test-only package", path, dep)
			}
		}
	}
}
