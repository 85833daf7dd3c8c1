package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func qlsched(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "qlsched-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "qlsched")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

type result struct {
	stdout, stderr string
	code           int
}

func run(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(qlsched(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run qlsched %v: %v", args, err)
	}
	return result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

func TestBadInputExits2BeforeConnecting(t *testing.T) {
	t.Parallel()
	const unreachable = "postgres://u:pw-never-shown@127.0.0.1:1/x"
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--budget", "257"}, "--budget 257"},
		{[]string{"run", "--budget", "0"}, "--budget 0"},
		{[]string{"run", "--lease", "0s"}, "--lease 0s"},
		{[]string{"run", "--cadence", "1ms"}, "--cadence 1ms"},
		{[]string{"run", "--cadence", "10s", "--lease", "15s"}, "2 × cadence"},
		{[]string{"run", "--drain-timeout", "11m"}, "--drain-timeout 11m"},
		{[]string{"run", "--http-addr", "nonsense"}, "--http-addr"},
		{[]string{"run", "--owner", "has space"}, "--owner"},
		{[]string{"run", "--log-format", "xml"}, "--log-format"},
		{[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "@every 5s"}, "@every"},
		{[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "61 * * * *"}, "61"},
		{[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "* * * * *", "--timezone", "Mars/Olympus"}, "Mars/Olympus"},
		{[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "* * * * *", "--misfire", "sometimes"}, "sometimes"},
		{[]string{"trigger", "publish", "--project", "P!", "--trigger", "t", "--task", "k", "--cron", "* * * * *"}, `project id "P!"`},
		{[]string{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", "[1,2]"}, "JSON object"},
		{[]string{"project", "create", "--project", ""}, "project id"},
		{[]string{"runs", "list", "--limit", "0"}, "--limit 0"},
		{[]string{"demo", "--replicas", "9"}, "--replicas 9"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			r := run(t, append(c.args, "--database-url", unreachable)...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 mentioning %q", r.code, r.stderr, c.want)
			}
			if strings.Contains(r.stdout+r.stderr, "pw-never-shown") {
				t.Error("the password leaked")
			}
		})
	}
}

func TestRunRefusesAnUnreadyDatabaseAndClaimsNothing(t *testing.T) {
	t.Parallel()
	empty := testpg.NewEmpty(t)
	r := run(t, "run", "--database-url", empty.URL(""), "--http-addr", "127.0.0.1:0")
	if r.code != 1 || !strings.Contains(r.stderr, "qlmigrate up") {
		t.Errorf("un-migrated database: exit %d, stderr %q; want exit 1 pointing at qlmigrate up", r.code, r.stderr)
	}

	// A migrated database, but connected as the superuser, who can INSERT schedules: not the
	// runtime's exact privileges, so it refuses, and the due trigger stays unclaimed.
	d := testpg.New(t)
	admin := []string{"--database-url", d.URL("ql_admin")}
	for _, args := range [][]string{
		{"project", "create", "--project", "p"},
		{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", `{"image":"x"}`},
		{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "* * * * * *"},
	} {
		if r := run(t, append(args, admin...)...); r.code != 0 {
			t.Fatalf("%v: exit %d %s", args, r.code, r.stderr)
		}
	}
	r = run(t, "run", "--database-url", d.URL(""), "--http-addr", "127.0.0.1:0")
	if r.code != 1 || !strings.Contains(r.stderr, "no INSERT on control_core.trigger_schedules") {
		t.Errorf("as superuser: exit %d, stderr %q; want exit 1 about INSERT on trigger_schedules", r.code, r.stderr)
	}
	conn, err := pgx.Connect(context.Background(), d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var claims int
	if err := conn.QueryRow(context.Background(), "SELECT claim_version FROM control_core.trigger_schedules").Scan(&claims); err != nil || claims != 0 {
		t.Errorf("claim_version %d (%v); want 0: nothing claimed", claims, err)
	}
}

var httpAddrLog = regexp.MustCompile(`http_addr=(\S+)`)

// The whole replica as an SRE runs it: publish as ql_admin, run as ql_runtime, see runs, SIGTERM.
func TestRunAdmitsAndStopsCleanlyOnSIGTERM(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	admin := []string{"--database-url", d.URL("ql_admin")}
	for _, args := range [][]string{
		{"project", "create", "--project", "p"},
		{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", `{"image":"x"}`},
		{"trigger", "publish", "--project", "p", "--trigger", "every-second", "--task", "k", "--cron", "* * * * * *"},
	} {
		if r := run(t, append(args, admin...)...); r.code != 0 {
			t.Fatalf("%v: exit %d %s", args, r.code, r.stderr)
		}
	}
	cmd := exec.Command(qlsched(t), "run", "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0",
		"--cadence", "100ms", "--owner", "replica-a")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stderr)
	var addr string
	var logged strings.Builder
	for addr == "" && lines.Scan() {
		logged.WriteString(lines.Text() + "\n")
		if m := httpAddrLog.FindStringSubmatch(lines.Text()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("no http_addr logged:\n%s", logged.String())
	}
	rest := make(chan string)
	go func() { b, _ := io.ReadAll(stderr); rest <- string(b) }()
	if code := get(t, "http://"+addr+"/readyz"); code != 200 {
		t.Errorf("/readyz %d while running, want 200", code)
	}
	if code := get(t, "http://"+addr+"/healthz"); code != 200 {
		t.Errorf("/healthz %d, want 200", code)
	}
	// wait until two occurrences are admitted
	for deadline := time.Now().Add(20 * time.Second); ; {
		r := run(t, "runs", "list", "--format", "json", admin[0], admin[1])
		if strings.Count(r.stdout, `"run_id"`) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 2 runs after 20 s:\n%s", r.stdout)
		}
		time.Sleep(100 * time.Millisecond) // polling the database
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	tail := <-rest
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, tail)
	}
	if !strings.Contains(tail, "admission withdrawn") || !strings.Contains(tail, "stopped") {
		t.Errorf("shutdown log lacks 'admission withdrawn' then 'stopped':\n%s", tail)
	}
	if strings.Contains(logged.String()+tail, testpg.Password) {
		t.Error("the password reached the log")
	}
	list := run(t, "trigger", "list", admin[0], admin[1])
	if list.code != 0 || !strings.Contains(list.stdout, "every-second") {
		t.Errorf("trigger list: exit %d\n%s", list.code, list.stdout)
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
