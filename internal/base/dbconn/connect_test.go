package dbconn

import (
	"context"
	"net"
	"strings"
	"testing"
)

// An unreachable server is reported once per address, on one line, even though pgx tries each
// address twice under sslmode=prefer (with TLS, then without) and joins the attempts' errors.
func TestConnectErrorNamesEachFailedAddressOnce(t *testing.T) {
	var addrs []string
	for range 2 { // two loopback ports nothing listens on
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, l.Addr().String())
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, hosts := range [][]string{addrs[:1], addrs} {
		c, err := Resolve("postgres://u:pw-never-shown@" + strings.Join(hosts, ",") + "/x?sslmode=prefer")
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Open(context.Background())
		if err == nil {
			t.Fatalf("%v: connected to a closed port", hosts)
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || strings.Contains(msg, "pw-never-shown") {
			t.Errorf("%v: %q: want one line, no password", hosts, msg)
		}
		for _, a := range hosts {
			if n := strings.Count(msg, a+" ("); n != 1 {
				t.Errorf("%v: %q names %s %d times; want once", hosts, msg, a, n)
			}
		}
	}
}
