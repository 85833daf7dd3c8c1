package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// Every dispatch.Config field has its flag, and qlsched dispatch defines it: a ConfigError is
// always reported with the flag the user typed.
func TestEveryDispatchConfigFieldHasItsFlag(t *testing.T) {
	t.Parallel()
	cmd := (&app{}).dispatchCmd()
	typ := reflect.TypeFor[dispatch.Config]()
	for _, f := range reflect.VisibleFields(typ) {
		flag, ok := dispatchConfigFlags[f.Name]
		if !ok {
			t.Errorf("dispatch.Config.%s has no flag in dispatchConfigFlags", f.Name)
			continue
		}
		if cmd.Flags().Lookup(flag[2:]) == nil {
			t.Errorf("dispatchConfigFlags maps %s to %s, which qlsched dispatch does not define", f.Name, flag)
		}
	}
	if len(dispatchConfigFlags) != typ.NumField() {
		t.Errorf("dispatchConfigFlags has %d entries for %d Config fields", len(dispatchConfigFlags), typ.NumField())
	}
}

// Every problem a flag can have is found before a connection is opened (exit 2), and names the
// flag; plaintext on an address other than loopback is one of them.
func TestDispatchBadInputExits2BeforeConnecting(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--offer-ttl", "500ms"}, "--offer-ttl 500ms: want"},
		{[]string{"--offer-ttl", "6m"}, "--offer-ttl 6m0s: want"},
		{[]string{"--lease", "4s"}, "--lease 4s: want"},
		{[]string{"--lease", "5s", "--sweep-interval", "2s"}, "--lease 5s: want ≥ 3 × SweepInterval"},
		{[]string{"--poll-max-wait", "61s"}, "--poll-max-wait 1m1s: want"},
		{[]string{"--placement-interval", "1ms"}, "--placement-interval 1ms: want"},
		{[]string{"--sweep-interval", "50ms"}, "--sweep-interval 50ms: want"},
		{[]string{"--sweep-batch", "0"}, "--sweep-batch 0: want 1…1024"},
		{[]string{"--gauge-interval", "500ms"}, "--gauge-interval 500ms: want 1s … 30s"},
		// docs/operations.md's QlschedDispatchGaugesStale fires past 60 s of reading age: a healthy
		// replica's age reaches the interval plus one read (bounded at 30 s), so past 30 s it misfired
		{[]string{"--gauge-interval", "31s"}, "--gauge-interval 31s: want 1s … 30s"},
		{[]string{"--max-projects", "1025"}, "--max-projects 1025: want 1…1024"},
		{[]string{"--scan-cap", "0"}, "--scan-cap 0: want 1…1024"},
		{[]string{"--drain-timeout", "11m"}, "--drain-timeout 11m0s: want"},
		{[]string{"--withdraw-grace", "2m"}, "--withdraw-grace 2m0s: want 0s … 1m"},
		{[]string{"--owner", "has space"}, "--owner"},
		// a bad --listen-url: named, and its password never echoed
		{[]string{"--listen-url", "postgres://u:pw-never-shown@h/db?ql_pooler=maybe"}, "--listen-url: "},
		// one declared a pooler's: LISTEN would never hold there, knowable before anything opens
		{[]string{"--listen-url", "postgres://u:pw-never-shown@h/db?ql_pooler=transaction"}, "--listen-url: goes through a connection pooler"},
		{[]string{"--listen-url", "postgres://u:pw-never-shown@h/db?ql_pooler=session"}, "--listen-url: goes through a connection pooler"},
		{[]string{"--listen", "nonsense"}, `--listen "nonsense": want host:port`},
		{[]string{"--listen", "127.0.0.1:70000"}, "not a number in 0 … 65535"},
		{[]string{"--http-addr", "127.0.0.1:x"}, "--http-addr"},
		{[]string{"--listen", "0.0.0.0:0"}, "--listen 0.0.0.0:0: plaintext"},
		{[]string{"--listen", ":8470"}, "--listen :8470: plaintext"},
		{[]string{"--listen", "192.0.2.1:0"}, "--listen 192.0.2.1:0: plaintext"},
		{[]string{"--tls-cert", "c.pem"}, "--tls-cert and --tls-key: give both or neither"},
		{[]string{"--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"}, "--tls-cert/--tls-key"},
		{[]string{"--listen", busy.Addr().String()}, "the address is taken (another qlsched on this host?): give each process its own --listen: another port, or port 0 for any free port, logged at start (--listen 127.0.0.1:0)"},
		{[]string{"--http-addr", busy.Addr().String()}, "give each process its own --http-addr"},
		{[]string{"--allow-plaintext", "--listen", "192.0.2.1:0"}, "--listen 192.0.2.1:0"}, // TEST-NET-1: allowed, but not bindable
		{[]string{"--role-prefix", "Robert'); DROP"}, "--role-prefix"},
		{[]string{"--format", "json"}, "--format json: dispatch prints no document"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			url, accepted := unusedDatabase(t)
			r := run(t, append(append([]string{"dispatch"}, c.args...), "--database-url", url)...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 mentioning %q", r.code, r.stderr, c.want)
			}
			if n := accepted(); n != 0 {
				t.Errorf("%d connection(s) opened; want none", n)
			}
			if strings.Contains(r.stdout+r.stderr, "pw-never-shown") {
				t.Error("the password leaked")
			}
		})
	}
}

// --help explains the stop order, the plaintext rule and where the protocol is documented.
func TestDispatchHelpExplains(t *testing.T) {
	t.Parallel()
	r := run(t, "dispatch", "--help")
	for _, want := range []string{"docs/dispatch.md", "--allow-plaintext", "dispatcher_stopping", "readiness", "--sweep-interval", "no leader"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("qlsched dispatch --help (exit %d) does not mention %q", r.code, want)
		}
	}
}

// Readiness as run checks it: an un-migrated database, or a connection that is not the runtime
// role, refuses to start (exit 1) and places nothing.
func TestDispatchRefusesAnUnreadyDatabase(t *testing.T) {
	t.Parallel()
	empty := testpg.NewEmpty(t)
	r := run(t, "dispatch", "--database-url", empty.URL(""), "--listen", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	if r.code != 1 || !strings.Contains(r.stderr, "qlmigrate up") || strings.Contains(r.stderr, "dispatcher running") {
		t.Errorf("un-migrated database: exit %d, stderr %q; want exit 1 pointing at qlmigrate up", r.code, r.stderr)
	}
	d := testpg.New(t)
	r = run(t, "dispatch", "--database-url", d.URL(""), "--listen", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	if r.code != 1 || !strings.Contains(r.stderr, "runtime role ql_runtime") {
		t.Errorf("as superuser: exit %d, stderr %q; want exit 1 about the connected role", r.code, r.stderr)
	}
}

// SIGTERM with a long poll waiting: the poll is answered at once with no offers and
// dispatcher_stopping (the worker polls another replica), the log says withdrawn, draining,
// stopped, in that order, and the process exits 0.
func TestDispatchSIGTERMAnswersWaitingPollsAndExits0(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	admin := []string{"--database-url", d.URL("ql_admin")}
	tok := run(t, append([]string{"worker", "token", "create", "--name", "stop-test", "--format", "json"}, admin...)...)
	var created struct {
		Token string `json:"token"`
	}
	if tok.code != 0 || json.Unmarshal([]byte(tok.stdout), &created) != nil {
		t.Fatalf("worker token create: exit %d %s", tok.code, tok.stderr)
	}
	p := startProcess(t, qlsched(t), "dispatch", "--database-url", d.URL("ql_runtime"), "--listen", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	line := p.waitFor(t, 60*time.Second, "dispatcher running", func(l string) bool { return listenLog.MatchString(l) })
	base, health := listenLog.FindStringSubmatch(line)[1], "http://"+httpAddrLog.FindStringSubmatch(line)[1]
	post := func(path, body string) (int, string) {
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+created.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post("/v1/sessions", `{"name":"w","capacity":1,"protocol":1}`)
	var s struct {
		SessionID string `json:"session_id"`
	}
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &s) != nil {
		t.Fatalf("register: %d %s", code, body)
	}
	type answer struct {
		code int
		body string
	}
	polled := make(chan answer, 1)
	go func() {
		c, b := post("/v1/sessions/"+s.SessionID+"/poll", `{"wait_ms":25000,"max_offers":1}`)
		polled <- answer{c, b}
	}()
	eventually.True(t, 20*time.Second, "the poll waiting", func() bool { return scrape(t, health+"/metrics")["qlsched_dispatch_polls_waiting"] == 1 })
	began := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-polled:
		if a.code != http.StatusOK || !strings.Contains(a.body, `"dispatcher_stopping":true`) || !strings.Contains(a.body, `"offers":[]`) {
			t.Errorf("the waiting poll got %d %s; want 200, no offers, dispatcher_stopping", a.code, a.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting poll was not answered 10 s after SIGTERM")
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the poll was answered %s after SIGTERM; want at once", took)
	}
	for range p.lines {
	}
	_ = p.cmd.Wait()
	out := p.all.String()
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit %d after SIGTERM:\n%s", code, out)
	}
	withdrawn, draining, stopped := strings.Index(out, "placement withdrawn"), strings.Index(out, "msg=draining"), strings.Index(out, "msg=stopped")
	if withdrawn < 0 || draining < withdrawn || stopped < draining {
		t.Errorf("log lacks 'placement withdrawn', then 'draining', then 'stopped':\n%s", out)
	}
	if strings.Contains(out, created.Token) || strings.Contains(out, testpg.Password) {
		t.Error("a secret reached the log")
	}
}
