// Package testbin builds the project's commands for tests, once per test binary and set of build
// flags, so tests run exactly what users run: processes, exit codes, stdout and stderr.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

type build struct {
	once sync.Once
	path string
	err  error
}

var (
	mu     sync.Mutex
	builds = map[string]*build{}
)

// Command returns the path of cmd/<name> (qlsched, qlmigrate) built with flags (e.g. "-race"),
// building it at the first call of this test binary and failing t if it does not build. The
// binary goes into a folder under TMPDIR, which testpg.Main points at the test binary's own
// scratch folder and removes at exit.
func Command(t testing.TB, name string, flags ...string) string {
	t.Helper()
	key := name + " " + strings.Join(flags, " ")
	mu.Lock()
	b := builds[key]
	if b == nil {
		b = &build{}
		builds[key] = b
	}
	mu.Unlock()
	b.once.Do(func() { b.path, b.err = compile(name, flags) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func compile(name string, flags []string) (string, error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	dir, err := os.MkdirTemp("", name+"-bin-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", path, "./cmd/"+name)...)
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s ./cmd/%s: %v\n%s", strings.Join(flags, " "), name, err, out)
	}
	return path, nil
}
