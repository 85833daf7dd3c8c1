package dbconn_test

import (
	"context"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// The server's answer from one host does not hide what happened at the others: with a multi-host
// URL whose first host is down (or, under sslmode=verify-full, fails its certificate check), the
// second host's "database does not exist" is shown after the first host's failure, not instead
// of it. Only the refused TLS attempt of a host that then answered without TLS (sslmode=prefer's
// fallback) is dropped.
func TestServerAnswerKeepsTheOtherHostsFailures(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(testpg.Get(t).URL("", "no_such_database_multi"))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = down + "," + u.Host
	q := u.Query()
	q.Set("sslmode", "prefer")
	u.RawQuery = q.Encode()
	c, err := dbconn.Resolve(u.String())
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Open(context.Background())
	if err == nil {
		t.Fatal("connected to a missing database")
	}
	msg := err.Error()
	if !strings.Contains(msg, "does not exist") {
		t.Errorf("%q: want the server's answer (database does not exist)", msg)
	}
	if !strings.Contains(msg, down+" (") {
		t.Errorf("%q: the failure of the first host %s is hidden by the second host's answer", msg, down)
	}
	if strings.Contains(msg, "refused TLS") || strings.Contains(msg, "\n") {
		t.Errorf("%q: want the answering host's refused TLS attempt dropped, one line", msg)
	}
}
