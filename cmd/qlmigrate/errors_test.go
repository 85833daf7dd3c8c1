package main

import (
	"net/url"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// noConnection empties every variable that gives a connection (an empty one counts as not set).
var noConnection = []string{"QL_DATABASE_URL=", "PGHOST=", "PGHOSTADDR=", "PGPORT=", "PGUSER=", "PGDATABASE=", "PGSERVICE="}

// With no connection given at all, qlmigrate says so and how to give one, before connecting.
func TestNoDatabaseGivenSaysHowToGiveOne(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"status"}, {"up"}} {
		r := run(t, append(noConnection, "PGPASSWORD=pw-never-shown"), args...)
		if r.code != 2 || !strings.Contains(r.stderr, "no database given: pass --database-url, or set QL_DATABASE_URL") ||
			strings.Contains(r.stderr, "cannot connect") || strings.Contains(r.stderr, "pw-never-shown") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming --database-url and QL_DATABASE_URL", args, r.code, r.stderr)
		}
	}
}

// A missing database is named as such (3D000), not hidden behind sslmode=prefer's refused TLS.
func TestMissingDatabaseSaysItDoesNotExist(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testpg.Get(t).URL("", "no_such_database_3d000"))
	if err != nil {
		t.Fatal(err)
	}
	u.RawQuery = ""
	r := run(t, noConnection, "status", "--database-url", u.String())
	if r.code != 3 || !strings.Contains(r.stderr, `database "no_such_database_3d000" does not exist`) || strings.Contains(r.stderr, "TLS") {
		t.Errorf("exit %d, stderr %q; want exit 3 saying the database does not exist, and nothing about TLS", r.code, r.stderr)
	}
}
