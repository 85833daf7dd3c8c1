package dbconn

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// Redaction on messages that really hold the secret, for every place a password comes from (the
// README: "passwords never appear in output, errors or logs"): the URL's userinfo, its password
// parameter, a keyword/value string, PGPASSWORD alone, and PGPASSWORD next to a URL password that
// overrides it (still a secret of the user's). The messages are foreign text, as a server or the
// driver could send; pgx itself never puts the password there, so only this package's redaction
// stands between them and the output.
func TestRedactionOfEveryPasswordSource(t *testing.T) {
	cases := []struct {
		name, raw, pgpassword string
		secrets               []string
	}{
		{"URL userinfo", "postgres://alice:Ur1Secret@db.example:5432/app", "", []string{"Ur1Secret"}},
		{"URL password parameter", "postgres://alice@db.example:5432/app?password=Param5ecret", "", []string{"Param5ecret"}},
		{"keyword/value", "host=db.example port=5432 user=alice dbname=app password='Kv 5ecret'", "", []string{"Kv 5ecret"}},
		{"PGPASSWORD", "postgres://alice@db.example:5432/app", "EnvS3cret", []string{"EnvS3cret"}},
		{"PGPASSWORD overridden by the URL", "postgres://alice:Ur1Wins@db.example:5432/app", "EnvL0ses", []string{"Ur1Wins", "EnvL0ses"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clearPGEnv(t)
			if c.pgpassword != "" {
				t.Setenv("PGPASSWORD", c.pgpassword)
			}
			cfg, err := Resolve(c.raw)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			for _, secret := range c.secrets {
				msg := "server said: password " + secret + " (again: " + secret + ")"
				check := func(what, got string) {
					t.Helper()
					if strings.Contains(got, secret) || !strings.Contains(got, "server said: password") {
						t.Errorf("%s of %q = %q; want the secret gone and the rest kept", what, msg, got)
					}
				}
				check("Redact", cfg.Redact(msg))
				cause := errors.New(msg)
				red := cfg.RedactError(cause)
				check("RedactError", red.Error())
				if !errors.Is(red, cause) {
					t.Error("RedactError lost its cause")
				}
				ce := cfg.connectError(&pgconn.PgError{Severity: "FATAL", Code: "28P01", Message: msg})
				check("the connect error", ce.Error())
				if !strings.Contains(ce.Error(), "alice@db.example:5432/app") {
					t.Errorf("connect error %q does not name the target", ce)
				}
			}
		})
	}
}

// Describe names the target by its user, host and database, except a field that equals or holds
// the password, which it hides.
func TestDescribeHidesAFieldThatHoldsThePassword(t *testing.T) {
	clearPGEnv(t)
	for raw, want := range map[string]string{
		"postgres://alice:Pa55word@db.example:5432/app":              "alice@db.example:5432/app",
		"postgres://Pa55word:Pa55word@db.example:5432/app":           "(hidden)@db.example:5432/app",
		"postgres://alice:Pa55word@db.example:5432/xPa55wordx":       "alice@db.example:5432/(hidden)",
		"host=Pa55word.example port=5432 user=bob password=Pa55word": "bob@(hidden):5432/",
	} {
		cfg, err := Resolve(raw)
		if err != nil {
			t.Fatalf("Resolve: %v", err)
		}
		if got := cfg.Describe(); !strings.HasPrefix(got, want) {
			t.Errorf("Describe = %q; want %q", got, want)
		}
	}
}
