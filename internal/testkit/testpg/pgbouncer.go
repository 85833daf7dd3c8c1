package testpg

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/app/pgcluster"
)

// PgBouncer starts a PgBouncer in transaction pooling mode in front of the test server, for the
// test's lifetime, and returns a superuser URL through it to database (see StartPgBouncer).
func (d *DB) PgBouncer(t testing.TB, extra ...string) string {
	t.Helper()
	return d.StartPgBouncer(t, "transaction", extra...).URL("")
}

// Bouncer is a PgBouncer a test started in front of its server (StartPgBouncer).
type Bouncer struct {
	Mode string // pool_mode: transaction or session
	d    *DB
	bin  string
	dir  string
	port int
	cred *syscall.Credential
	out  bytes.Buffer
	cmd  *exec.Cmd
	done chan struct{}
}

// StartPgBouncer starts a PgBouncer with pool_mode mode (transaction or session) in front of
// the test server, for the test's lifetime. It runs as the server's OS user (PgBouncer refuses
// root), trusts loopback clients as the server does, and keeps PgBouncer's defaults otherwise
// (so it refuses startup parameters it does not know, as a production PgBouncer does); the
// superuser is its admin user (Console). Each of extra is a line added to its [pgbouncer]
// section ("ignore_startup_parameters = …", say). Without a pgbouncer binary the test fails:
// CI installs it.
func (d *DB) StartPgBouncer(t testing.TB, mode string, extra ...string) *Bouncer {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
			}
		}
	}
	if err != nil {
		t.Fatalf("this test needs PgBouncer: apt-get install pgbouncer (.ci/run does): %v", err)
	}
	server, err := url.Parse(d.Server.superURL)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := pgcluster.ServerCredential()
	if err != nil {
		t.Fatal(err)
	}
	// not t.TempDir(): its parent is root's, mode 0700, and PgBouncer runs as another user
	dir, err := os.MkdirTemp("", "qlpgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	users := "\"postgres\" \"\"\n"
	for _, r := range []string{d.Names.Owner, d.Names.Admin, d.Names.Runtime} {
		users += fmt.Sprintf("%q \"\"\n", r)
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = postgres
pool_mode = %s
max_client_conn = 100
default_pool_size = 4
logfile = %s
`, server.Hostname(), server.Port(), port, filepath.Join(dir, "users.txt"), mode, filepath.Join(dir, "pgbouncer.log"))
	for _, line := range extra {
		ini += line + "\n"
	}
	for name, body := range map[string]string{"users.txt": users, "pgbouncer.ini": ini} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if cred != nil {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatalf("hand %s to uid %d: %v", name, cred.Uid, err) // PgBouncer could not read it
			}
		}
	}
	b := &Bouncer{Mode: mode, d: d, bin: bin, dir: dir, port: port, cred: cred}
	b.start(t)
	t.Cleanup(b.stop)
	return b
}

// start runs PgBouncer and waits until it listens.
func (b *Bouncer) start(t testing.TB) {
	t.Helper()
	b.out.Reset()
	cmd := exec.Command(b.bin, filepath.Join(b.dir, "pgbouncer.ini"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.cred}
	cmd.Stdout, cmd.Stderr = &b.out, &b.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.cmd, b.done = cmd, exited
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", b.port))
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer exited: %s%s", b.out.String(), strings.TrimSpace(string(log)))
		case <-ctx.Done():
			t.Fatalf("pgbouncer does not listen on port %d after 20 s: %s", b.port, b.out.String())
		case <-time.After(20 * time.Millisecond): // polling the port
		}
	}
}

// stop ends PgBouncer at once (SIGTERM: immediate shutdown in 1.18, every connection closed).
func (b *Bouncer) stop() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
	b.cmd = nil
}

// Restart stops PgBouncer the way a service restart does (SIGTERM: every client and server
// connection closed, transactions in flight included) and starts it again on the same port.
func (b *Bouncer) Restart(t testing.TB) {
	t.Helper()
	b.stop()
	b.start(t)
}

// URL is a URL through PgBouncer for role (empty: the superuser) to the test's database.
func (b *Bouncer) URL(role string) string {
	u, err := url.Parse(b.d.Server.URL(role, b.d.Name))
	if err != nil {
		panic(fmt.Sprintf("testpg: bad server URL: %v", err))
	}
	u.Host = fmt.Sprintf("127.0.0.1:%d", b.port)
	u.RawQuery = "sslmode=disable"
	return u.String()
}

// Port is the port PgBouncer listens on (127.0.0.1), the same across restarts.
func (b *Bouncer) Port() string { return strconv.Itoa(b.port) }

// Console runs command ("RECONNECT db", "KILL db", "RESUME db", "SHOW POOLS" …) on PgBouncer's
// admin console as its admin user. The console speaks only the simple protocol.
func (b *Bouncer) Console(t testing.TB, command string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pgbouncer?sslmode=disable", b.port))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgbouncer console: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, command); err != nil {
		t.Fatalf("pgbouncer console %s: %v", command, err)
	}
}
