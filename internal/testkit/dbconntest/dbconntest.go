// Package dbconntest starts what redaction tests connect to: a throwaway PostgreSQL that checks
// passwords (scram-sha-256 for every role but the superuser), so that a wrong password is refused
// by a real server, and a listener that counts the connections it is offered.
package dbconntest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/app/pgcluster"
)

// PasswordServer is a running PostgreSQL on 127.0.0.1 that refuses a wrong password.
type PasswordServer struct {
	Host string
	Port int
	c    *pgcluster.Cluster
}

// StartPasswordServer starts the server for the test; it is removed when the test ends. It needs
// local server binaries (pgcluster.FindBinDir); QL_TEST_SKIP_DB=1 turns their absence into a skip.
func StartPasswordServer(t testing.TB) *PasswordServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "ql-hba-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// the server may run as another user (as root: postgres): it must read this file
	hba := filepath.Join(dir, "pg_hba.conf")
	const rules = "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(hba, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{"hba_file": hba, "password_encryption": "scram-sha-256"}})
	if err != nil {
		if os.Getenv("QL_TEST_SKIP_DB") == "1" {
			t.Skipf("no PostgreSQL for the password server: %v", err)
		}
		t.Fatalf("start a password-checking PostgreSQL: %v (QL_TEST_SKIP_DB=1 skips)", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return &PasswordServer{Host: "127.0.0.1", Port: c.Port, c: c}
}

// CreateRole creates a LOGIN role with password (any text but NUL), as the superuser.
func (s *PasswordServer) CreateRole(t testing.TB, name, password string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.c.URL("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var stmt string
	if err := conn.QueryRow(ctx, "SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', $1::text, $2::text)", name, password).Scan(&stmt); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, stmt); err != nil {
		t.Fatalf("create role %s: %v", name, err)
	}
}

// CountingListener stands in for PostgreSQL where nothing may connect: Accepted drains its queue
// and returns how many connections were offered (a connection a finished command made is already
// queued, so the short deadline only ends the wait on an empty queue).
type CountingListener struct{ ln *net.TCPListener }

// Listen starts a CountingListener on 127.0.0.1; it is closed when the test ends.
func Listen(t testing.TB) *CountingListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &CountingListener{ln: ln.(*net.TCPListener)}
}

// Addr is the listener's host:port.
func (l *CountingListener) Addr() string { return l.ln.Addr().String() }

// Accepted returns the number of connections offered since the last call.
func (l *CountingListener) Accepted() int {
	n := 0
	_ = l.ln.SetDeadline(time.Now().Add(200 * time.Millisecond))
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return n
		}
		c.Close()
		n++
	}
}
