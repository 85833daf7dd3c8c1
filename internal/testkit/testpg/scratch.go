package testpg

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// scratchPrefix names the temporary folder of one test binary (see scratch).
const scratchPrefix = "qltest-"

// outerTempDir is the temporary folder the binary was started with, before scratch replaced it.
var outerTempDir string

// OuterTempDir is the temporary folder the test binary was started with: for what a test keeps on
// purpose after the binary ends (the chaos soak's logs of a failed run). Everything else belongs
// in os.TempDir() or t.TempDir(), which Main removes.
func OuterTempDir() string {
	if outerTempDir == "" {
		return os.TempDir()
	}
	return outerTempDir
}

// scratch gives the test binary a temporary folder of its own and makes it TMPDIR, so that
// everything the binary and the processes it starts put there (binaries a test builds once,
// `go build`'s work folders, throwaway clusters, PgBouncer folders) goes when the binary ends,
// whether its tests passed or not: done removes it. A binary that dies before done runs (a panic,
// -timeout, SIGKILL) cannot remove it; the next binary does, knowing an abandoned folder by the
// lock on it that nobody holds any more (the kernel drops a flock with its process).
func scratch() (done func(), err error) {
	outer := os.TempDir()
	sweepScratch(outer)
	dir, err := os.MkdirTemp(outer, scratchPrefix)
	if err != nil {
		return nil, err
	}
	lock, err := os.Open(dir)
	if err == nil {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	// servers a test starts run as another user when the tests run as root (pgcluster): they
	// must pass through this folder to reach their own.
	if err == nil {
		err = os.Chmod(dir, 0o711)
	}
	if err == nil {
		err = os.Setenv("TMPDIR", dir)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("test binary's temporary folder: %w", err)
	}
	outerTempDir = outer
	return func() {
		_ = os.Setenv("TMPDIR", outer)
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(os.Stderr, "testpg: remove the test binary's temporary folder: %v\n", err)
		}
		_ = lock.Close()
	}, nil
}

// sweepScratch removes the folders of test binaries that died without removing theirs: no
// process holds their lock. A folder younger than a minute is left alone, so that a binary
// between creating its folder and locking it never loses it.
func sweepScratch(outer string) {
	entries, err := os.ReadDir(outer)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), scratchPrefix) {
			continue
		}
		dir := filepath.Join(outer, e.Name())
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < time.Minute {
			continue
		}
		f, err := os.Open(dir)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			if err := os.RemoveAll(dir); err == nil {
				fmt.Fprintf(os.Stderr, "testpg: removed %s, left behind by a test binary that did not finish\n", dir)
			}
		}
		_ = f.Close()
	}
}
