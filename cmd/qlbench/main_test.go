package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/dbconntest"
	"github.com/qlcontrol/controlcore/internal/testkit/jsondoc"
	"github.com/qlcontrol/controlcore/internal/testkit/testbin"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// runBin runs the qlbench at bin with args; env, when given, replaces the environment.
func runBin(t *testing.T, bin string, env []string, args ...string) testbin.Result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	return testbin.Run(t, cmd)
}

func run(t *testing.T, args ...string) testbin.Result {
	t.Helper()
	return runBin(t, testbin.Command(t, "qlbench"), nil, args...)
}

// Bad input is exit 2 before anything starts: no connection to the given server (the listener
// counts them), no throwaway server, no replica. That includes a qlsched binary the scenario
// needs and cannot find: the test binary's qlbench has none beside it, and PATH holds none.
func TestBadInputExits2BeforeConnecting(t *testing.T) {
	t.Parallel()
	noPath := []string{"PATH=" + t.TempDir(), "HOME=" + os.Getenv("HOME")}
	cases := []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--budget", "300"}, nil, "--budget 300: want 1 … 256"},
		{[]string{"--cadence", "1ms"}, nil, "--cadence 1ms"},
		{[]string{"--scenario", "nope"}, nil, `--scenario "nope": want backlog, steady, burst, scale or loop`},
		{[]string{"--scenario", "burst", "--bursts", "11"}, nil, "--bursts 11"},
		{[]string{"--log-format", "xml"}, nil, "--log-format"},
		{[]string{"--processes", "--qlsched", "/bin/true"}, nil, "--processes with --database-url needs --runtime-url"},
		{[]string{"--scenario", "scale", "--qlsched", "/nonexistent/qlsched"}, nil, "--qlsched /nonexistent/qlsched"},
		{[]string{"--processes", "--qlsched", "/nonexistent/qlsched"}, nil, "--qlsched /nonexistent/qlsched"},
		{[]string{"--scenario", "scale"}, noPath, "build it: go build -o bin/ ./cmd/... and run bin/qlbench"},
		{[]string{"--processes"}, noPath, "nor on PATH"},
		{[]string{"--scenario", "loop", "--qlworker", "/nonexistent/qlworker"}, nil, "--qlworker /nonexistent/qlworker"},
		{[]string{"--scenario", "loop"}, noPath, "--scenario loop runs qlworker: none beside qlbench nor on PATH"},
		{[]string{"--scenario", "loop", "--qlworker", "/bin/true", "--qlsched", "/bin/true", "--workers", "0"}, nil, "--workers 0: want 1 … 64"},
		{[]string{"--scenario", "loop", "--qlworker", "/bin/true", "--qlsched", "/bin/true", "--dispatchers", "17"}, nil, "--dispatchers 17: want 1 … 16"},
		{[]string{"--scenario", "loop", "--qlworker", "/bin/true", "--qlsched", "/bin/true", "--duration", "2s"}, nil, "--duration 2s: want 5s … 1h"},
		{[]string{"--segments-file", "/tmp/x.tsv"}, nil, "--segments-file with --scenario backlog: the loop scenario only"},
		{[]string{"--scenario", "loop", "--qlworker", "/bin/true", "--qlsched", "/bin/true", "--runtime-url", "postgres://r@127.0.0.1/x",
			"--segments-file", "/nonexistent-dir/x.tsv"}, nil, "--segments-file /nonexistent-dir/x.tsv: its directory does not exist"},
		{[]string{"--scenario", "loop", "--qlworker", "/bin/true", "--qlsched", "/bin/true"}, nil, "--scenario loop with --database-url needs --runtime-url"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " ")+map[bool]string{true: " (no qlsched on PATH)"}[c.env != nil], func(t *testing.T) {
			t.Parallel()
			ln := dbconntest.Listen(t)
			args := append(c.args, "--database-url", "postgres://u:pw-never-shown@"+ln.Addr()+"/x?connect_timeout=2")
			r := runBin(t, testbin.Command(t, "qlbench"), c.env, args...)
			if r.Code != 2 || !strings.Contains(r.Stderr, c.want) || r.Stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 mentioning %q and nothing on stdout", r.Code, r.Stdout, r.Stderr, c.want)
			}
			if n := ln.Accepted(); n != 0 {
				t.Errorf("%d connection(s) opened; want none", n)
			}
			if strings.Contains(r.Stdout+r.Stderr, "pw-never-shown") {
				t.Error("the password leaked")
			}
		})
	}
}

// --help shows each flag with at most its type as the value placeholder: --processes is a switch,
// --dispatchers and --workers take an int. (pflag takes back-quoted words in a flag's usage as its
// placeholder, which once printed "--processes qlsched run".)
func TestHelpShowsFlagsWithTheirTypes(t *testing.T) {
	t.Parallel()
	r := run(t, "--help")
	if r.Code != 0 {
		t.Fatalf("--help: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	flag := regexp.MustCompile(`^\s+(?:-\w, )?--([a-z-]+)(?: (bool|duration|format|int|int64|string))?\s{2,}\S`)
	types := map[string]string{}
	_, flags, ok := strings.Cut(r.Stdout, "\nFlags:\n")
	if !ok {
		t.Fatalf("--help has no Flags section\n%s", r.Stdout)
	}
	for _, line := range strings.Split(flags, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "-") {
			continue
		}
		m := flag.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("flag line with a placeholder that is not a type: %q", line)
			continue
		}
		types[m[1]] = m[2]
	}
	for name, want := range map[string]string{"processes": "", "dispatchers": "int", "workers": "int", "duration": "duration"} {
		if got, ok := types[name]; !ok || got != want {
			t.Errorf("--%s shown with placeholder %q (listed: %v); want %q\n%s", name, got, ok, want, r.Stdout)
		}
	}
}

// Without --qlsched, qlbench runs the qlsched beside its own executable (bin/ after go build -o
// bin/ ./cmd/...), even when PATH has none: the scale scenario then gets past the binary to the
// next check of its configuration.
func TestFindsTheQlschedBesideIt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"qlbench", "qlsched"} {
		b, err := os.ReadFile(testbin.Command(t, name))
		if err != nil {
			t.Fatal(err)
		}
		// a copy, not a symlink: os.Executable resolves links to the build folder
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ln := dbconntest.Listen(t)
	r := runBin(t, filepath.Join(dir, "qlbench"), []string{"PATH=" + t.TempDir()},
		"--scenario", "scale", "--database-url", "postgres://u@"+ln.Addr()+"/x?connect_timeout=2")
	if r.Code != 2 || !strings.Contains(r.Stderr, "--scenario scale with --database-url needs --runtime-url") {
		t.Errorf("exit %d, stderr %q; want exit 2 about --runtime-url (the qlsched beside it found)", r.Code, r.Stderr)
	}
	if n := ln.Accepted(); n != 0 {
		t.Errorf("%d connection(s) opened; want none", n)
	}
}

// qlbench --format json prints exactly one qlsched.bench/v1 document (the schema keeps the name it
// had as qlsched bench), listed in docs/json.md, with snake_case keys only.
func TestJSONDocumentCarriesItsSchema(t *testing.T) {
	t.Parallel()
	docs, err := os.ReadFile("../../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	const schema = "qlsched.bench/v1"
	if !strings.Contains(string(docs), "`"+schema+"`") {
		t.Errorf("docs/json.md does not list %s", schema)
	}
	// the bench publishes and claims as a superuser, as its --help says, in a database of its own:
	// its ceiling claims whatever is due
	cases := map[string][]string{
		"backlog": {"--database-url", testpg.New(t).URL(""), "--triggers", "20", "--replicas", "1", "--duration", "1s", "--budget", "16"},
		// the burst scenario's document nests one object per burst (waits for a minute boundary)
		"burst": {"--scenario", "burst", "--database-url", testpg.New(t).URL(""), "--triggers", "20", "--replicas", "1",
			"--bursts", "1", "--duration", "10s", "--budget", "16", "--cadence", "100ms"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := run(t, append(args, "--format", "json")...)
			if r.Code != 0 {
				t.Fatalf("exit %d; want 0\n%s%s", r.Code, r.Stdout, r.Stderr)
			}
			var doc any
			dec := json.NewDecoder(strings.NewReader(r.Stdout))
			if err := dec.Decode(&doc); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, r.Stdout)
			}
			if dec.More() {
				t.Errorf("more than one document\n%s", r.Stdout)
			}
			obj, ok := doc.(map[string]any)
			if !ok {
				t.Fatalf("not a JSON object\n%s", r.Stdout)
			}
			if obj["schema"] != schema {
				t.Errorf("schema %v, want %q", obj["schema"], schema)
			}
			if bad := jsondoc.NotSnakeCase("", obj); len(bad) > 0 {
				sort.Strings(bad)
				t.Errorf("keys not snake_case: %v", bad)
			}
		})
	}
}
