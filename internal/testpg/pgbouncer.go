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
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/pgcluster"
)

// PgBouncer starts a PgBouncer in transaction pooling mode in front of the test server, for the
// test's lifetime, and returns a superuser URL through it to database. It runs as the server's
// OS user (PgBouncer refuses root), trusts loopback clients as the server does, and keeps
// PgBouncer's defaults otherwise (so it refuses startup parameters it does not know, as a
// production PgBouncer does). Each of extra is a line added to its [pgbouncer] section
// ("ignore_startup_parameters = …", say). Without a pgbouncer binary the test fails: CI installs it.
func (d *DB) PgBouncer(t testing.TB, extra ...string) string {
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
pool_mode = transaction
max_client_conn = 100
default_pool_size = 4
logfile = %s
`, server.Hostname(), server.Port(), port, filepath.Join(dir, "users.txt"), filepath.Join(dir, "pgbouncer.log"))
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
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			for _, line := range extra {
				ini += line + "\n"
			}
			t.Fatalf("pgbouncer exited: %s%s", out.String(), strings.TrimSpace(string(log)))
		case <-ctx.Done():
			t.Fatalf("pgbouncer does not listen on port %d after 20 s: %s", port, out.String())
		case <-time.After(20 * time.Millisecond): // polling the port
		}
	}
	u := *server
	u.Host = fmt.Sprintf("127.0.0.1:%d", port)
	u.Path = "/" + d.Name
	u.RawQuery = "sslmode=disable"
	return u.String()
}
