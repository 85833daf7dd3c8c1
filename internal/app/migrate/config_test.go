package migrate_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// The library names the field it refuses, never a command's flag: the command maps it.
func TestFieldErrorsNameTheFieldNotAFlag(t *testing.T) {
	cases := []struct {
		name  string
		err   error
		field string
	}{
		{"target beyond the stream", migrate.CheckTarget(nil, 30), "To"},
		{"negative target", migrate.CheckTarget(nil, -3), "To"},
		{"version 0", migrate.CheckVersion(nil, 0), "Version"},
		{"version beyond the stream", migrate.CheckVersion(nil, 99), "Version"},
		{"lock timeout too short", migrate.Options{LockTimeout: 10 * time.Millisecond}.Validate(), "LockTimeout"},
		{"lock timeout too long", migrate.Options{LockTimeout: 25 * time.Hour}.Validate(), "LockTimeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var fe *migrate.FieldError
			if !errors.As(c.err, &fe) || fe.Field != c.field {
				t.Fatalf("error %v, want a *FieldError of field %s", c.err, c.field)
			}
			if strings.Contains(c.err.Error(), "--") {
				t.Errorf("%q names a flag", c.err)
			}
		})
	}
	for _, ok := range []error{migrate.CheckTarget(nil, 0), migrate.CheckTarget(nil, 29), migrate.CheckVersion(nil, 1),
		migrate.Options{}.Validate(), migrate.Options{LockTimeout: time.Minute}.Validate()} {
		if ok != nil {
			t.Errorf("refused a valid value: %v", ok)
		}
	}
}

// The timeout policy docs/operations.md describes: no statement bound (nor the response bound
// that follows it) unless the URL sets one.
func TestApplyTimeoutsLeavesMigrationsUnboundedUnlessTheURLSaysOtherwise(t *testing.T) {
	for _, c := range []struct {
		url                 string
		statement, response time.Duration
	}{
		{"postgres://u@127.0.0.1:1/x", 0, 0},
		{"postgres://u@127.0.0.1:1/x?statement_timeout=1h", time.Hour, time.Hour + dbconn.ResponseMargin},
	} {
		cfg, err := dbconn.Resolve(c.url)
		if err != nil {
			t.Fatal(err)
		}
		migrate.ApplyTimeouts(cfg)
		if got := cfg.Timeouts(); got.Statement != c.statement || got.Response != c.response || got.Connect == 0 {
			t.Errorf("%s: statement %s, response %s, connect %s; want %s, %s and a connect bound", c.url, got.Statement, got.Response, got.Connect, c.statement, c.response)
		}
	}
}
