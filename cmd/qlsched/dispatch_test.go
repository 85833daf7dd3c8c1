package main

import (
	"net"
	"reflect"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/dispatch"
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
		{[]string{"--max-projects", "1025"}, "--max-projects 1025: want 1…1024"},
		{[]string{"--scan-cap", "0"}, "--scan-cap 0: want 1…1024"},
		{[]string{"--drain-timeout", "11m"}, "--drain-timeout 11m0s: want"},
		{[]string{"--withdraw-grace", "2m"}, "--withdraw-grace 2m0s: want 0s … 1m"},
		{[]string{"--owner", "has space"}, "--owner"},
		{[]string{"--listen", "nonsense"}, `--listen "nonsense": want host:port`},
		{[]string{"--listen", "127.0.0.1:70000"}, "not a number in 0 … 65535"},
		{[]string{"--http-addr", "127.0.0.1:x"}, "--http-addr"},
		{[]string{"--listen", "0.0.0.0:0"}, "--listen 0.0.0.0:0: plaintext"},
		{[]string{"--listen", ":8470"}, "--listen :8470: plaintext"},
		{[]string{"--listen", "192.0.2.1:0"}, "--listen 192.0.2.1:0: plaintext"},
		{[]string{"--tls-cert", "c.pem"}, "--tls-cert and --tls-key: give both or neither"},
		{[]string{"--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"}, "--tls-cert/--tls-key"},
		{[]string{"--listen", busy.Addr().String()}, "address already in use"},
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
