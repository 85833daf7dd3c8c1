package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/jsondoc"
	"github.com/qlcontrol/controlcore/internal/testkit/testbin"
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

// --version on every binary prints the build information and exits 0, reading no connection
// setting (a broken QL_DATABASE_URL does not matter) and opening nothing.
// everyBinary is each command of cmd/: the production binaries and the bench and the demo.
func everyBinary(t *testing.T) []struct{ name, bin string } {
	return []struct{ name, bin string }{{"qlsched", qlsched(t)}, {"qlmigrate", buildQlmigrate(t)},
		{"qlbench", testbin.Command(t, "qlbench")}, {"qldemo", testbin.Command(t, "qldemo")}}
}

func TestVersionOnEveryBinary(t *testing.T) {
	t.Parallel()
	for _, b := range everyBinary(t) {
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

// --version --format json prints one <binary>.version/v1 document with the fields of the text
// line; --format takes text or json only, and --version does not escape that check.
func TestVersionAsJSONAndItsFormatCheck(t *testing.T) {
	t.Parallel()
	for _, b := range everyBinary(t) {
		out, err := exec.Command(b.bin, "--version", "--format", "json").Output()
		if err != nil {
			t.Fatalf("%s --version --format json: %v", b.name, err)
		}
		var doc struct {
			Schema, Binary, Version, Revision string
			GoVersion                         string `json:"go_version"`
			RevisionTime                      string `json:"revision_time"`
			Modified                          bool
		}
		if err := json.Unmarshal(out, &doc); err != nil {
			t.Fatalf("%s --version --format json printed %q: %v", b.name, out, err)
		}
		var tree any
		if err := json.Unmarshal(out, &tree); err != nil {
			t.Fatal(err)
		}
		if bad := jsondoc.NotSnakeCase("", tree); len(bad) > 0 {
			t.Errorf("%s --version --format json: keys not snake_case: %v", b.name, bad)
		}
		line := doc.Binary + " " + doc.Version + " (revision " + doc.Revision + ", " + doc.RevisionTime
		if doc.Modified {
			line += ", modified"
		}
		if line += ") " + doc.GoVersion; doc.Schema != b.name+".version/v1" || line != stampedLine(t, b.name, b.bin) {
			t.Errorf("%s: schema %q, fields say %q; want %s.version/v1 and %q", b.name, doc.Schema, line, b.name, stampedLine(t, b.name, b.bin))
		}
		cmd := exec.Command(b.bin, "--version", "--format", "yaml")
		stderr, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(stderr), `invalid argument "yaml" for "--format" flag: want text or json`) {
			t.Errorf("%s --version --format yaml: exit %d (%v), %q; want exit 2 naming the flag", b.name, code, err, stderr)
		}
	}
}
