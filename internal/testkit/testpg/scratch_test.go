package testpg

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A binary that died leaves its folder unlocked: the next one removes it. A folder whose binary
// still runs (locked), a fresh one, and folders of other names stay.
func TestSweepRemovesOnlyAbandonedScratchFolders(t *testing.T) {
	outer := t.TempDir()
	old := time.Now().Add(-2 * time.Minute)
	mk := func(name string, age time.Time) string {
		t.Helper()
		dir := filepath.Join(outer, name)
		if err := os.MkdirAll(filepath.Join(dir, "qlsched-bin-1"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(dir, age, age); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	abandoned := mk(scratchPrefix+"1", old)
	running := mk(scratchPrefix+"2", old)
	fresh := mk(scratchPrefix+"3", time.Now())
	other := mk("qlsched-bin-4", old)
	lock, err := os.Open(running)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}

	sweepScratch(outer)

	if _, err := os.Stat(abandoned); !os.IsNotExist(err) {
		t.Errorf("abandoned folder %s: stat %v, want it removed", abandoned, err)
	}
	for _, dir := range []string{running, fresh, other} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s was removed (%v); only an unlocked %s folder older than a minute may be", dir, err, scratchPrefix)
		}
	}
}

// scratch makes a folder of the binary's own TMPDIR, which processes it starts inherit, and its
// done removes it with everything in it and restores TMPDIR.
func TestScratchIsTMPDIRUntilDone(t *testing.T) {
	outer := t.TempDir()
	t.Setenv("TMPDIR", outer)
	t.Cleanup(func() { outerTempDir = "" })
	done, err := scratch()
	if err != nil {
		t.Fatal(err)
	}
	dir := os.TempDir()
	if filepath.Dir(dir) != outer || OuterTempDir() != outer {
		t.Fatalf("TMPDIR %s, OuterTempDir %s: want a folder in %s, and %[3]s", dir, OuterTempDir(), outer)
	}
	info, err := os.Stat(dir)
	if err != nil || info.Mode().Perm() != 0o711 {
		t.Fatalf("stat %s: %v, mode %v; want 0711 (servers running as another user pass through it)", dir, err, info.Mode())
	}
	built, err := os.MkdirTemp("", "qlsched-bin-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(built, "qlsched"), []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	sweepScratch(outer) // another binary starting now must not take it
	if _, err := os.Stat(built); err != nil {
		t.Fatalf("a running binary's folder was swept: %v", err)
	}
	done()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("after done, %s: stat %v; want it removed", dir, err)
	}
	if os.TempDir() != outer {
		t.Errorf("after done TMPDIR is %s, want %s", os.TempDir(), outer)
	}
}
