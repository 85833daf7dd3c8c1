package dbconn

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// pieces returns secret and every 6-character piece of it: none may appear in a message.
func pieces(secret string) []string {
	r := []rune(secret)
	if len(r) <= 6 {
		return []string{secret}
	}
	out := []string{secret}
	for i := 0; i+6 <= len(r); i++ {
		out = append(out, string(r[i:i+6]))
	}
	return out
}

// assertNoPiece fails when text holds any secret or a 6-character piece of one; a piece that is
// the target's own host or user name (a password built from them) may appear as that.
func assertNoPiece(t *testing.T, what, text string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		for _, p := range pieces(s) {
			if p != s && (strings.Contains("127.0.0.1", p) || strings.Contains("alice", p)) {
				continue
			}
			if strings.Contains(text, p) {
				t.Errorf("%s holds %q (of secret %q): %s", what, p, s, text)
				return
			}
		}
	}
}

// encodeAll percent-encodes every byte that is not unreserved: the form a URL password takes.
func encodeAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// kvQuote quotes a keyword/value value: single quotes, backslash escapes.
func kvQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// redactionShapes are password and connection-string shapes, each with the secrets that must
// never be printed and, when it parses, the password pgx must have found.
var redactionShapes = []struct {
	name    string
	raw     string
	env     map[string]string
	secrets []string
	parses  bool
	want    string // the parsed password
	user    string // a user name the messages must still show intact
}{
	{"URL, plain", "postgres://alice:S3cr3tPassw0rd@127.0.0.1:1/db", nil, []string{"S3cr3tPassw0rd"}, true, "S3cr3tPassw0rd", "alice"},
	{"URL, @ : / % # ? encoded", "postgres://alice:" + encodeAll("p@ss:w/rd%#?x") + "@127.0.0.1:1/db", nil, []string{"p@ss:w/rd%#?x", "w/rd%#"}, true, "p@ss:w/rd%#?x", "alice"},
	{"URL, raw : # ? & = (pgx reads them as password)", "postgres://alice:ab:cd#ef?gh&i=j@127.0.0.1:1/db", nil, []string{"ab:cd#ef?gh&i=j"}, true, "ab:cd#ef?gh&i=j", "alice"},
	{"URL, raw @ and a bad port (issue 16)", "postgres://u:abc@defgh@127.0.0.1:notaport/rt", nil, []string{"abc@defgh", "defgh"}, false, "", ""},
	{"URL, raw @ and a good port", "postgres://u:abcxyz@defgh@127.0.0.1:1/rt", nil, []string{"abcxyz@defgh", "defgh"}, false, "", ""},
	{"URL, raw / in the password", "postgres://u:pa/sxw0rd9@127.0.0.1:1/db", nil, []string{"pa/sxw0rd9", "sxw0rd9"}, false, "", ""},
	{"URL, raw % (issue 16)", "postgres://u:50%offyes@127.0.0.1:1/db", nil, []string{"50%offyes", "offyes"}, false, "", ""},
	{"URL, raw %41 decodes", "postgres://u:ab%41cdefg@127.0.0.1:1/db", nil, []string{"abAcdefg", "ab%41cdefg"}, true, "abAcdefg", ""},
	{"URL, password parameter", "postgres://alice@127.0.0.1:1/db?password=qu3ryS3cret", nil, []string{"qu3ryS3cret"}, true, "qu3ryS3cret", "alice"},
	{"URL, encoded & = @ in the password parameter", "postgres://alice@127.0.0.1:1/db?password=" + encodeAll("a&b=c@d!efg"), nil, []string{"a&b=c@d!efg"}, true, "a&b=c@d!efg", "alice"},
	{"URL, both userinfo and parameter passwords", "postgres://alice:firstSecret@127.0.0.1:1/db?password=secondSecret", nil, []string{"firstSecret", "secondSecret"}, true, "secondSecret", "alice"},
	{"URL, user holds ? (password read from the wrong place)", "postgres://127.0.0.1?user=a&password=hiddenpw@db", nil, []string{"hiddenpw"}, false, "", ""},
	{"URL, no path: pgx reads up to the @ as userinfo", "postgres://127.0.0.1:1?password=hiddenpw@db", nil, []string{"1?password=hiddenpw", "hiddenpw"}, true, "1?password=hiddenpw", ""},
	{"keyword/value, plain", "host=127.0.0.1 port=1 user=alice password=kvSecret1 dbname=db", nil, []string{"kvSecret1"}, true, "kvSecret1", "alice"},
	{"keyword/value, quoted, escaped quote and backslash", `host=127.0.0.1 port=1 user=alice password='se cr\'et\\x y' dbname=db`, nil, []string{`se cr'et\x y`, "se cr", "et\\x y"}, true, `se cr'et\x y`, "alice"},
	{"keyword/value, backslash-escaped space (issue 16)", `host=127.0.0.1 port=1 user=alice password=se\ cret99`, nil, []string{"se cret99", "cret99"}, true, "se cret99", "alice"},
	{"keyword/value, unterminated quote", "host=127.0.0.1 password='abcdefgh", nil, []string{"abcdefgh"}, false, "", ""},
	{"keyword/value, unquoted space", "host=127.0.0.1 password=se cretword", nil, []string{"cretword"}, false, "", ""},
	{"PGPASSWORD with a URL", "postgres://alice@127.0.0.1:1/db", map[string]string{"PGPASSWORD": "envSecret!@#"}, []string{"envSecret!@#"}, true, "envSecret!@#", "alice"},
	{"PG* variables only", "", map[string]string{"PGHOST": "127.0.0.1", "PGPORT": "1", "PGUSER": "alice", "PGPASSWORD": "pgvarsSecret"}, []string{"pgvarsSecret"}, true, "pgvarsSecret", "alice"},
	{"PG* variables, bad port", "", map[string]string{"PGHOST": "127.0.0.1", "PGPORT": "nope", "PGPASSWORD": "pgportSecret"}, []string{"pgportSecret"}, false, "", ""},
	{"URL, port out of range", "postgres://u:rangeSecret@127.0.0.1:99999/db", nil, []string{"rangeSecret"}, false, "", ""},
	{"keyword/value, bad port", "host=127.0.0.1 port=abc password=kvPortSecret", nil, []string{"kvPortSecret"}, false, "", ""},
	{"URL, bad host", "postgres://alice:hostSecret9@no-such-host.invalid:1/db?connect_timeout=2", nil, []string{"hostSecret9"}, true, "hostSecret9", "alice"},
	{"not a connection string", "just some words hunter22x", nil, []string{"hunter22x"}, false, "", ""},
	{"password holds the user name", "postgres://alice:xxalicexx7@127.0.0.1:1/db", nil, []string{"xxalicexx7"}, true, "xxalicexx7", "alice"},
	{"password holds the host name", "postgres://alice:127.0.0.1secret@127.0.0.1:1/db", nil, []string{"127.0.0.1secret", ".1secret"}, true, "127.0.0.1secret", "alice"},
	{"password equals the user name", "postgres://bobbyuser:bobbyuser@127.0.0.1:1/db", nil, []string{"bobbyuser"}, true, "bobbyuser", ""},
	{"unicode password", "postgres://alice:" + url.PathEscape("pässwörd✓日本語") + "@127.0.0.1:1/db", nil, []string{"pässwörd✓日本語"}, true, "pässwörd✓日本語", "alice"},
	{"bad statement_timeout", "postgres://alice:stSecret1@127.0.0.1:1/db?statement_timeout=soon-secret", nil, []string{"stSecret1", "soon-secret"}, false, "", ""},
	{"bad sslmode", "postgres://alice:sslSecret1@127.0.0.1:1/db?sslmode=bogus-secret", nil, []string{"sslSecret1", "bogus-secret"}, false, "", ""},
}

// clearPGEnv unsets the variables pgx and initdb read, restoring them after the test.
func clearPGEnv(t *testing.T) {
	for _, pg := range []string{"PGHOST", "PGPORT", "PGUSER", "PGPASSWORD", "PGDATABASE", "PGSERVICE", "PGPASSFILE", "QL_DATABASE_URL"} {
		t.Setenv(pg, "")
		os.Unsetenv(pg)
	}
}

// TestRedactionShapes resolves each shape, and connects with those that parse (nothing listens
// on port 1): no message, no description, no connect error holds a secret or a piece of one.
func TestRedactionShapes(t *testing.T) {
	clearPGEnv(t)
	if len(redactionShapes) < 20 {
		t.Fatalf("%d shapes; want at least 20", len(redactionShapes))
	}
	for _, sh := range redactionShapes {
		t.Run(sh.name, func(t *testing.T) {
			for k, v := range sh.env {
				t.Setenv(k, v)
			}
			cfg, err := Resolve(sh.raw)
			if !sh.parses {
				var ce *ConfigError
				if !errors.As(err, &ce) {
					t.Fatalf("Resolve = %v; want a ConfigError", err)
				}
				assertNoPiece(t, "the configuration error", err.Error(), sh.secrets...)
				if !strings.Contains(err.Error(), "not shown") {
					t.Errorf("error %q does not say the text is withheld", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve: %v; want it to parse", err)
			}
			if got := cfg.Pool.ConnConfig.Password; got != sh.want {
				t.Errorf("parsed password %q; want %q", got, sh.want)
			}
			assertNoPiece(t, "Describe", cfg.Describe(), sh.secrets...)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			pool, err := cfg.Open(ctx)
			if err == nil {
				pool.Close()
				t.Fatal("connected; want a connect failure")
			}
			var ce *ConnectError
			if !errors.As(err, &ce) {
				t.Errorf("Open = %v; want a ConnectError", err)
			}
			assertNoPiece(t, "the connect error", err.Error(), sh.secrets...)
			if sh.user != "" && !strings.Contains(err.Error(), sh.user+"@") {
				t.Errorf("connect error %q does not name user %s intact", err, sh.user)
			}
		})
	}
}

// The redaction functions themselves, on messages that really hold the secret: these fail when
// scrub or Describe's hiding is turned off.
func TestRedactRemovesTheSecretFromForeignText(t *testing.T) {
	t.Setenv("PGPASSWORD", "")
	cfg, err := Resolve("postgres://alice:T0pS3cret!@db.example:5432/app")
	if err != nil {
		t.Fatal(err)
	}
	msg := "server said T0pS3cret! and again T0pS3cret!"
	if got := cfg.Redact(msg); strings.Contains(got, "T0pS3cret!") || !strings.Contains(got, "server said") {
		t.Errorf("Redact(%q) = %q; want the secret gone and the rest kept", msg, got)
	}
	cause := errors.New("driver: T0pS3cret! rejected")
	red := cfg.RedactError(cause)
	if strings.Contains(red.Error(), "T0pS3cret!") || !errors.Is(red, cause) {
		t.Errorf("RedactError = %q (Is cause: %v); want the secret gone and the cause kept", red, errors.Is(red, cause))
	}
	// a connect failure whose text holds the secret (as a hostile or odd server might send)
	pgErr := &pgconn.PgError{Severity: "FATAL", Code: "28P01", Message: "password T0pS3cret! is wrong"}
	ce := cfg.connectError(pgErr)
	if strings.Contains(ce.Error(), "T0pS3cret!") || !strings.Contains(ce.Error(), "alice@db.example:5432/app") {
		t.Errorf("connect error %q; want the target named and the secret gone", ce)
	}
	var got *pgconn.PgError
	if !errors.As(ce, &got) || got.Code != "28P01" {
		t.Errorf("connect error lost its cause: %v", ce)
	}

	same, err := Resolve("postgres://bobbyuser:bobbyuser@db.example:5432/bobbyuser")
	if err != nil {
		t.Fatal(err)
	}
	if d := same.Describe(); strings.Contains(d, "bobbyuser") {
		t.Errorf("Describe = %q; a field equal to the password must be hidden", d)
	}
}

// A connection string whose TLS settings pgx refuses says so, not that the port may be wrong.
func TestUnusableTLSSettingsAreNamed(t *testing.T) {
	clearPGEnv(t)
	for _, raw := range []string{
		"postgres://alice:tlsSecret1@127.0.0.1:5432/db?sslmode=bogus",
		"host=127.0.0.1 password=tlsSecret1 sslmode=verify-full sslrootcert=/nonexistent/ca.pem",
	} {
		_, err := Resolve(raw)
		if err == nil || !strings.Contains(err.Error(), "its TLS settings are not usable") || strings.Contains(err.Error(), "port") {
			t.Errorf("Resolve(%q) = %v; want the TLS settings named, not the port", raw, err)
		}
		if err != nil {
			assertNoPiece(t, "the configuration error", err.Error(), "tlsSecret1")
		}
	}
}
