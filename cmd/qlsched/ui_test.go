package main

import (
	"bufio"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// startUI starts `qlsched ui` with args and follows its log, as startReplica does for run.
func startUI(t *testing.T, args ...string) *replicaProcess {
	t.Helper()
	cmd := exec.Command(qlsched(t), append([]string{"ui"}, args...)...)
	r := &replicaProcess{cmd: cmd, lines: make(chan string, 1024), all: &syncBuffer{}}
	cmd.Stdout = r.all
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		defer close(r.lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			r.all.Write([]byte(sc.Text() + "\n"))
			r.lines <- sc.Text()
		}
	}()
	return r
}

var urlRe = regexp.MustCompile(`url=(http://\S+/)`)

// qlsched ui says it serves on loopback only, serves the overview with its CSP, refuses a write,
// and stops on SIGTERM with exit 0; on any other address it warns that it has no authentication.
func TestUIServesOnLoopbackAndStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	ui := startUI(t, "--http-addr", "127.0.0.1:0", "--database-url", d.URL("ql_admin"))
	line := ui.waitFor(t, 30*time.Second, "the serving line", func(l string) bool { return strings.Contains(l, "console serving") })
	if !strings.Contains(line, "console serving on loopback only") {
		t.Errorf("start-up line %q does not say loopback only", line)
	}
	m := urlRe.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("start-up line %q names no url", line)
	}
	res, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("GET /: %d, CSP %q; want 200 and the console's CSP", res.StatusCode, res.Header.Get("Content-Security-Policy"))
	}
	// the schema health page reads through verify on the read-only sessions
	res, err = http.Get(m[1] + "health")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("GET /health: %d, want 200\n%s", res.StatusCode, ui.all.String())
	}
	res, err = http.Post(m[1], "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", res.StatusCode)
	}
	if code := ui.stop(t); code != 0 || !strings.Contains(ui.all.String(), "console stopped") {
		t.Errorf("after SIGTERM: exit %d; want 0 and \"console stopped\"\n%s", code, ui.all.String())
	}

	wide := startUI(t, "--http-addr", "0.0.0.0:0", "--database-url", d.URL("ql_admin"))
	line = wide.waitFor(t, 30*time.Second, "the serving line", func(l string) bool { return strings.Contains(l, "console serving") })
	if !strings.Contains(line, "WARN") || !strings.Contains(line, "no authentication") {
		t.Errorf("start-up line on 0.0.0.0 %q: want a warning that the console has no authentication", line)
	}
	if code := wide.stop(t); code != 0 {
		t.Errorf("after SIGTERM: exit %d, want 0", code)
	}
}

// A malformed or busy --http-addr and --format json exit 2 before any connection is opened.
func TestUIUsageProblemsExit2BeforeConnecting(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"port out of range", []string{"--http-addr", "127.0.0.1:99999"}, "not a number in 0 … 65535"},
		{"no port", []string{"--http-addr", "localhost"}, "want host:port"},
		{"port already bound", []string{"--http-addr", busy.Addr().String()}, "address already in use"},
		{"json", []string{"--format", "json"}, "--format json"},
		{"role prefix", []string{"--role-prefix", "Bad Prefix"}, "role-prefix"},
		{"allowed host with a scheme", []string{"--allow-host", "https://console.example.com"}, "--allow-host"},
		{"allowed host with a port", []string{"--allow-host", "console.example.com:443"}, "without scheme or port"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url, accepted := unusedDatabase(t)
			r := run(t, append([]string{"ui", "--database-url", url}, c.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 mentioning %q", r.code, r.stderr, c.want)
			}
			if n := accepted(); n != 0 {
				t.Errorf("qlsched ui opened %d database connection(s) before refusing %v", n, c.args)
			}
		})
	}
}
