// Package testbin builds the project's commands for tests, once per test binary and set of build
// flags, so tests run exactly what users run: processes, exit codes, stdout and stderr.
package testbin

import (
	"bytes"
	"errors"
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

// Result is what a command run by Run printed and how it exited.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// Run runs cmd (built by Command, its Env or Dir set by the caller), failing t only when it could
// not run at all: a nonzero exit is the Result's Code.
func Run(t testing.TB, cmd *exec.Cmd) Result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run %s %v: %v", filepath.Base(cmd.Path), cmd.Args[1:], err)
	}
	return Result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}
