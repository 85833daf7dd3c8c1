package dbconn

import (
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// notShown ends every message about a connection string that could not be used: none of its
// text is printed, since any part of it may be a password.
const notShown = "its text is not shown: it may hold a password"

// checkUnambiguous refuses the URLs whose parse would put part of a password into a field that
// is printed. pgx parses URLs as libpq does: the userinfo ends at the first '@' before the first
// '/', so in postgres://u:p@ss@host/db the host would be "ss@host", and in
// postgres://u:p/ss@host/db the database "ss@host/db". A raw '@' is therefore allowed once, as the
// end of user:password@, and the user name may not hold the characters that start a query.
func checkUnambiguous(raw string) error {
	p, ok := strings.CutPrefix(raw, "postgresql://")
	if !ok {
		if p, ok = strings.CutPrefix(raw, "postgres://"); !ok {
			return nil // keyword/value: its quoting rules leave nothing ambiguous
		}
	}
	rest := p
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		user, _, _ := strings.Cut(p[:i], ":")
		if strings.ContainsAny(user, "?#&=") {
			return errors.New("not a valid connection URL: its user name holds ? # & or =, so its password would be read from the wrong place " +
				"(percent-encode them in user names and passwords: %3F %23 %26 %3D; " + notShown + ")")
		}
		rest = p[i+1:]
	}
	if strings.Contains(rest, "@") {
		return errors.New("not a valid connection URL: a raw '@' may appear once, ending user:password@ " +
			"(percent-encode @ / ? # % in a password: %40 %2F %3F %23 %25; " + notShown + ")")
	}
	return nil
}

// parseFailure describes why pgx could not parse raw without quoting raw or pgx's error, which
// holds raw (pgx masks passwords only on a best-effort basis, by its own account).
func parseFailure(raw string, err error) string {
	msg := "cannot parse it as a connection string"
	var num *strconv.NumError
	switch {
	case badPercentEscape(raw):
		msg += ": a '%' is not followed by two hex digits (percent-encode a '%' in a password as %25)"
	case strings.IndexByte(raw, 0) >= 0:
		msg += ": it holds a NUL byte"
	case errors.As(err, &num):
		msg += ": a number in it (port, connect_timeout, pool_…) is not valid"
	case tlsSettingsUnusable(err):
		msg += ": its TLS settings are not usable (sslmode: disable, allow, prefer, require, verify-ca or verify-full; sslrootcert, sslcert and sslkey: readable files)"
	case strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://"):
		msg += ": not a valid URL (check the port: a number in 1 … 65535)"
	case raw != "":
		msg += ": want keyword=value pairs separated by spaces, values with spaces in single quotes"
	}
	return msg + " (" + notShown + ")"
}

// tlsSettingsUnusable reports pgconn's refusal of the TLS settings (an unknown sslmode, a
// certificate or key it cannot read), whose cause it words "failed to configure TLS". Only the
// branch is taken from the message, nothing of it is shown: it quotes the connection string.
func tlsSettingsUnusable(err error) bool {
	var pce *pgconn.ParseConfigError
	return errors.As(err, &pce) && pce.Unwrap() != nil && strings.Contains(pce.Error(), ": failed to configure TLS (")
}

// badPercentEscape reports a '%' of a URL that does not start a %XX escape.
func badPercentEscape(raw string) bool {
	if !strings.HasPrefix(raw, "postgres://") && !strings.HasPrefix(raw, "postgresql://") {
		return false
	}
	hex := func(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
	for i := 0; i < len(raw); i++ {
		if raw[i] == '%' && (i+2 >= len(raw) || !hex(raw[i+1]) || !hex(raw[i+2])) {
			return true
		}
	}
	return false
}
