package main

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// stampedLine is the --version line `go version -m` implies for a binary: the same build
// information, read by the toolchain instead of by the binary itself.
func stampedLine(t *testing.T, name, bin string) string {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", bin, err)
	}
	version, revision, at, modified, goVersion := "unknown", "unknown", "unknown", false, "unknown"
	sc := bufio.NewScanner(bytes.NewReader(out))
	for first := true; sc.Scan(); first = false {
		f := strings.Fields(sc.Text())
		switch {
		case first && len(f) == 2:
			goVersion = f[1]
		case len(f) >= 3 && f[0] == "mod":
			version = f[2]
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision="):
			revision = strings.TrimPrefix(f[1], "vcs.revision=")
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.time="):
			at = strings.TrimPrefix(f[1], "vcs.time=")
		case len(f) == 2 && f[0] == "build" && f[1] == "vcs.modified=true":
			modified = true
		}
	}
	line := name + " " + version + " (revision " + revision + ", " + at
	if modified {
		line += ", modified"
	}
	return line + ") " + goVersion
}

// --version on both binaries prints the build information and exits 0, reading no connection
// setting (a broken QL_DATABASE_URL does not matter) and opening nothing.
func TestVersionOnBothBinaries(t *testing.T) {
	t.Parallel()
	for _, b := range []struct{ name, bin string }{{"qlsched", qlsched(t)}, {"qlmigrate", buildQlmigrate(t)}} {
		cmd := exec.Command(b.bin, "--version")
		cmd.Env = append(cmd.Environ(), "QL_DATABASE_URL=postgres://u:pw-never-shown@127.0.0.1:1/x?sslmode=nonsense")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("%s --version: %v, stderr %q", b.name, err, stderr.String())
			continue
		}
		if got, want := strings.TrimSuffix(stdout.String(), "\n"), stampedLine(t, b.name, b.bin); got != want {
			t.Errorf("%s --version printed %q, want %q", b.name, got, want)
		}
	}
}
