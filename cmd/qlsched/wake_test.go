package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// Which connection the wake-up on admission LISTENs on: the dispatcher's own unless it goes
// through a pooler, a --listen-url, or none.
func TestDispatchWakeConnection(t *testing.T) {
	resolve := func(url string) *dbconn.Config {
		t.Helper()
		c, err := dbconn.Resolve(url)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	direct := "postgres://rt:pw-never-shown@db.example/control"
	cases := []struct {
		name, own, listenURL string
		on                   bool
		log                  string
	}{
		{"own connection", direct, "", true, "listen_database=rt@db.example:5432/control"},
		{"none", direct, "none", false, "--listen-url none"},
		{"own through a pooler", direct + "?ql_pooler=transaction", "", false, "give --listen-url a connection straight to PostgreSQL"},
		{"own through a pooler, a direct --listen-url", direct + "?ql_pooler=transaction", "postgres://rt:pw-never-shown@primary.example/control", true,
			"listen_database=rt@primary.example:5432/control"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := dispatchOptions{listenURL: c.listenURL}
			if c.listenURL != "" && c.listenURL != "none" {
				o.listenCfg = resolve(c.listenURL)
			}
			var buf bytes.Buffer
			got := o.wakeConnect(resolve(c.own), slog.New(slog.NewTextHandler(&buf, nil)))
			if (got != nil) != c.on || !strings.Contains(buf.String(), c.log) {
				t.Errorf("on %v, log %q; want on %v, a log with %q", got != nil, buf.String(), c.on, c.log)
			}
			if strings.Contains(buf.String(), "pw-never-shown") {
				t.Error("the password leaked")
			}
		})
	}
}
