package verify

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/db"
)

// CheckSettings is the check of the effective settings (Settings).
const CheckSettings = "settings"

// Setting is one server setting that changes what control-core's statements do, with the values
// under which they do what the ADR says.
type Setting struct {
	Name string
	// Safe reports whether a value keeps the statements' semantics.
	Safe func(value string) bool
	// Want is the value the fix restores.
	Want string
	// Why is what an unsafe value does.
	Why string
	// ServerNote: an unsafe value set for the whole server (its configuration file, its command
	// line) is the operator's choice, reported as a note; from anywhere else it is drift.
	ServerNote bool
}

// Settings are read in the session at every verification but the probe (`qlmigrate verify`,
// `qlmigrate up`, `qlsched run`'s readiness) and refused when unsafe, whatever set them: the
// server's configuration (postgresql.conf, ALTER SYSTEM), the database, the role, the role in
// the database, the connection, or a pooler's server session. dbconn pins the
// default_transaction_* ones at connection start on a direct connection (the value read is then
// the pinned one); behind a pooler the startup parameters do not reach the server, and a
// transaction's characteristics are fixed at its BEGIN, before any transaction-local setting, so
// the server session's value is what counts and is read here. session_replication_role cannot be
// pinned: only a superuser (or, on PostgreSQL 15 and later, a role granted SET on it) may set it,
// to any value. docs/operations.md ("Effective settings") lists the settings left alone and why.
var Settings = []Setting{
	{Name: "session_replication_role", Want: "origin", Safe: func(v string) bool { return v == "origin" },
		Why: "no ordinary trigger fires, the foreign keys' and the runs' identity guard included (replica), or only replica triggers do"},
	{Name: "default_transaction_read_only", Want: "off", Safe: func(v string) bool { return v == "off" },
		Why: "every transaction begins read-only: admission, claims and migrations fail"},
	{Name: "default_transaction_isolation", Want: "read committed", Safe: func(v string) bool { return v == "read committed" },
		Why: "the transactions that do not choose their isolation (the claim's FOR UPDATE SKIP LOCKED, the fenced advance, the store's reads) are written for read committed: under repeatable read or serializable they fail with serialization errors where they would move on"},
	{Name: "default_transaction_deferrable", Want: "off", Safe: func(v string) bool { return v == "off" },
		Why: "a serializable read-only transaction waits for a safe snapshot"},
	{Name: "synchronous_commit", Want: "on", Safe: func(v string) bool { return v != "off" },
		Why: "a commit returns before its WAL is flushed: a server crash loses admitted Runs that replicas already reported, and the occurrence is admitted again",
		// a server's durability is the operator's, as fsync is (the test servers run without both)
		ServerNote: true},
}

func settingNames() []string {
	out := make([]string, len(Settings))
	for i, s := range Settings {
		out[i] = s.Name
	}
	return out
}

// settingsFindings reads Settings in q's session and returns one drift finding per unsafe value,
// naming where it came from and what removes it.
func settingsFindings(ctx context.Context, q *db.Queries) ([]Finding, error) {
	rows, err := q.EffectiveSettings(ctx, settingNames())
	if err != nil {
		return nil, fmt.Errorf("read effective settings: %w", err)
	}
	by := map[string]Setting{}
	for _, s := range Settings {
		by[s.Name] = s
	}
	var out []Finding
	for _, r := range rows {
		s := by[r.Name]
		if s.Safe(r.Setting) {
			continue
		}
		from, fix, sql := settingSource(s, r)
		severity := SeverityDrift
		if s.ServerNote && (r.Source == "configuration file" || r.Source == "command line") {
			severity = SeverityNote
		}
		out = append(out, Finding{Severity: severity, Kind: "effective_setting", Object: r.Name,
			Message: fmt.Sprintf("%s = %s %s in this session (%s): %s; control-core needs %s",
				r.Name, r.Setting, from, r.SessionRole, s.Why, s.Want),
			Fix: fix, SQL: sql})
	}
	return out, nil
}

// settingSource says where r's value came from (pg_settings.source, sourcefile, sourceline)
// and what removes it there: the text, the fix and its statements (none when no SQL reaches it).
func settingSource(s Setting, r db.EffectiveSettingsRow) (from, fix string, sql []string) {
	name := pgx.Identifier{r.Name}.Sanitize()
	role, database := pgx.Identifier{r.SessionRole}.Sanitize(), pgx.Identifier{r.Database}.Sanitize()
	reload := "SELECT pg_catalog.pg_reload_conf();"
	switch r.Source {
	case "configuration file":
		switch {
		case filepath.Base(r.SourceFile) == "postgresql.auto.conf":
			from = "from postgresql.auto.conf (ALTER SYSTEM)"
			sql = []string{fmt.Sprintf("ALTER SYSTEM RESET %s;", name), reload}
		case r.SourceFile != "":
			from = fmt.Sprintf("from the configuration file %s, line %d", r.SourceFile, r.SourceLine)
			sql = []string{fmt.Sprintf("ALTER SYSTEM SET %s = '%s';", name, s.Want), reload}
		default:
			// sourcefile is shown to superusers and pg_read_all_settings only
			from = "from the server's configuration (postgresql.conf, an included file, or ALTER SYSTEM's postgresql.auto.conf; a superuser sees which)"
			sql = []string{fmt.Sprintf("ALTER SYSTEM SET %s = '%s';", name, s.Want), reload}
		}
		fix = strings.Join(sql, " ") + " (outside a transaction block; ALTER SYSTEM SET overrides postgresql.conf, or edit the file and reload)"
	case "database":
		from = "from the database (ALTER DATABASE … SET)"
		sql = []string{fmt.Sprintf("ALTER DATABASE %s RESET %s;", database, name)}
	case "user":
		from = fmt.Sprintf("from the role %s (ALTER ROLE … SET)", r.SessionRole)
		sql = []string{fmt.Sprintf("ALTER ROLE %s RESET %s;", role, name)}
	case "database user":
		from = fmt.Sprintf("from the role %s in this database (ALTER ROLE … IN DATABASE … SET)", r.SessionRole)
		sql = []string{fmt.Sprintf("ALTER ROLE %s IN DATABASE %s RESET %s;", role, database, name)}
	case "global":
		from = "from every role (ALTER ROLE ALL SET)"
		sql = []string{fmt.Sprintf("ALTER ROLE ALL RESET %s;", name)}
	case "client":
		from = "from the connection's start (the connection string's options, PGOPTIONS, or a pooler's)"
		fix = "remove it from the connection string, PGOPTIONS, or the pooler's configuration"
	case "session":
		from = "set in the session (SET: behind a pooler, by another client or the pooler's connect_query on this server connection)"
		fix = "remove the SET from whatever shares the pool, or the pooler's connect_query"
	case "command line", "environment variable":
		from = "from the server's " + r.Source
		fix = "restart the server without it"
	default:
		from = "from " + r.Source
		fix = fmt.Sprintf("set %s to %s where it is set", r.Name, s.Want)
	}
	if fix == "" {
		fix = strings.Join(sql, " ")
	}
	return from, fix, sql
}
