// Package verify runs every check of `qlmigrate verify` on one database and reports each finding
// with the object it names and its fix. The checks themselves live with what they check:
// checksums (integrity file, ledger, migration stream), readiness (the readiness contract) and
// roles (the exact privilege model); this package only orders them, reads the catalogs once, in one read-only
// transaction, and renders the report (text, or the JSON of docs/verify-json.md).
package verify

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/readiness"
	"github.com/qlcontrol/controlcore/roles"
	"github.com/qlcontrol/controlcore/sql/migrations"
)

// SchemaVersion identifies the JSON report's schema (docs/verify-json.md). It changes only when
// a field is removed or changes meaning; fields may be added.
const SchemaVersion = "qlmigrate.verify/v1"

// Component is the capability component the stream moves.
const Component = "control-core"

// Check names, in report order.
const (
	CheckIntegrity  = "integrity"
	CheckLedger     = "ledger"
	CheckUnknown    = "unknown_versions"
	CheckPending    = "pending"
	CheckCapability = "capability"
	CheckReadiness  = "readiness"
	CheckPrivileges = "privileges"
	// CheckSettings (settings.go) comes last.
)

// Scope says whose needs one verification serves.
type Scope int

const (
	// ScopeAll is `qlmigrate verify`: everything, read as the owner role or a superuser.
	ScopeAll Scope = iota
	// ScopeRuntime is `qlsched run`'s readiness, read as the runtime role: the capability, the
	// whole readiness contract (every table the runtime reads or writes, and the ones their keys
	// reach), and the privilege findings that concern the runtime role, PUBLIC or the database
	// as a whole; the connected role must be the runtime role. The ledger and goose's versions
	// are the owner's to read (and `qlmigrate verify`'s to check).
	ScopeRuntime
	// ScopeUp is what `qlmigrate up` checks before it takes the migration lock: the integrity
	// file, the ledger and unknown versions (pending migrations are what up is for: notes). Any
	// drift there means the database did not run what this binary would build on.
	ScopeUp
	// ScopeProbe is `qlmigrate probe`: the integrity file and the capability only, one read of a
	// table every role of the model may read, for an init container or a startup probe.
	ScopeProbe
)

// Options configure one verification.
type Options struct {
	Names roles.Names
	Scope Scope
	// AllowPending turns pending migrations into notes (a rollout where the binary is ahead of
	// the database); the capability is then expected to match the last applied migration, and
	// readiness and privileges, defined for the complete stream, are skipped.
	AllowPending bool
	// AllowMembers are LOGIN roles that may be members of the four roles (--allow-member):
	// notes instead of login_member drift (roles.AuditOptions.AllowedMembers).
	AllowMembers []string
	// FS holds the migrations and their integrity file; nil means the stream embedded in the binary.
	FS fs.FS
}

// Status of one check.
type Status string

const (
	StatusOK      Status = "ok"
	StatusDrift   Status = "drift"
	StatusSkipped Status = "skipped"
)

// Severity of one finding.
type Severity string

const (
	SeverityDrift Severity = "drift" // fails verify
	SeverityNote  Severity = "note"  // reported only
)

// Finding is one thing a check found, naming the object and the fix.
type Finding struct {
	Severity Severity `json:"severity"`
	Kind     string   `json:"kind"`
	Object   string   `json:"object"`
	// Role is the role the finding concerns ("" when it concerns the database or the schema as
	// a whole, "PUBLIC" for PUBLIC): readiness refuses on the runtime role's, PUBLIC's and the
	// database's.
	Role    string   `json:"role,omitempty"`
	Message string   `json:"message"`
	Fix     string   `json:"fix,omitempty"`
	SQL     []string `json:"sql,omitempty"`
	// runtime: a privilege finding that refuses a replica (roles.Drift.ReachesRuntime).
	runtime bool
}

// Check is the outcome of one check.
type Check struct {
	Name     string    `json:"name"`
	Status   Status    `json:"status"`
	Reason   string    `json:"reason,omitempty"` // why it was skipped, or which part of it ran
	Findings []Finding `json:"findings"`
}

// Expected is what the binary expects of the database.
type Expected struct {
	Component  string `json:"component"`
	Capability int32  `json:"capability"`
	Name       string `json:"name"`
	Migration  string `json:"migration"`
	Migrations int    `json:"migrations"`
}

// Summary counts the findings.
type Summary struct {
	Drift int `json:"drift"`
	Notes int `json:"notes"`
}

// Report is the whole verification.
type Report struct {
	Schema        string   `json:"schema"`
	OK            bool     `json:"ok"`
	Target        string   `json:"target,omitempty"` // user@host:port/database, never a password
	Database      string   `json:"database"`
	ServerVersion string   `json:"server_version"`
	AllowPending  bool     `json:"allow_pending"`
	Expected      Expected `json:"expected"`
	Checks        []Check  `json:"checks"`
	Summary       Summary  `json:"summary"`
	ElapsedMs     float64  `json:"elapsed_ms"`
}

// Beginner starts the read-only transaction verify reads in: a *dbconn.DB or a *dbconn.Conn,
// whose transactions begin with the connection's prologue.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// PermissionError means the connected role may not read what verify must read.
type PermissionError struct {
	Owner string
	Err   error
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("%v; goose's version table and the checksum ledger may be read only by %s: connect as %s (or a member of it, or a superuser); "+
		"any role may read the capability with `qlmigrate probe`", e.Err, e.Owner, e.Owner)
}
func (e *PermissionError) Unwrap() error { return e.Err }

// Run verifies the database behind conn against the binary's migrations and the models.
func Run(ctx context.Context, conn Beginner, opts Options) (*Report, error) {
	start := time.Now()
	fsys := opts.FS
	if fsys == nil {
		fsys = migrations.FS
	}
	list, err := checksums.Load(fsys)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, errors.New("the migration stream is empty")
	}
	last := list[len(list)-1]
	r := &Report{Schema: SchemaVersion, AllowPending: opts.AllowPending, Expected: expectedOf(last, len(list))}
	defer func() { r.ElapsedMs = float64(time.Since(start).Microseconds()) / 1000 }() // on every way out

	problems, err := checksums.CheckSum(fsys)
	if err != nil {
		return nil, err
	}
	r.add(CheckIntegrity, "", fromChecksums(checksums.IntegrityDrift(problems)))

	// One read-only transaction: every check sees the same snapshot. search_path is pg_catalog
	// only, so the server renders every name schema-qualified whatever the role's settings.
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only; nothing to keep
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog"); err != nil {
		return nil, err
	}
	q := db.New(tx)
	info, err := q.ControlCoreObjects(ctx)
	if err != nil {
		return nil, fmt.Errorf("read catalogs: %w", err)
	}
	r.Database, r.ServerVersion = info.Database, info.ServerVersion
	// The built-ins first: every later check's catalog queries compare, sort and join with
	// pg_catalog's operators, operator families and casts, so a redefined one makes them report
	// what is not there (and their fixes fail). When the built-ins differ, only they are reported
	// and fixed; the fix applied, the next verify checks the rest.
	var builtins []readiness.Drift
	if opts.Scope == ScopeAll || opts.Scope == ScopeRuntime {
		if builtins, err = readiness.BuiltinDrift(ctx, tx); err != nil {
			return nil, fmt.Errorf("readiness: %w", err)
		}
		if slices.ContainsFunc(builtins, func(d readiness.Drift) bool { return !d.Note }) {
			why := "not run: pg_catalog's built-ins differ from a fresh server's (the readiness check names them), and this check's catalog queries " +
				"compare and sort with them; apply their fix, then verify again"
			for _, c := range []string{CheckLedger, CheckUnknown, CheckPending, CheckCapability} {
				r.skip(c, why)
			}
			r.add(CheckReadiness, "the built-ins only: the rest of readiness is checked once they match a fresh server", fromReadiness(builtins))
			r.skip(CheckPrivileges, why)
			r.skip(CheckSettings, why)
			return r, nil
		}
	}
	// The session's effective settings: read first, reported last (CheckSettings), in every
	// scope but the probe's.
	var settings []Finding
	if opts.Scope != ScopeProbe {
		if settings, err = settingsFindings(ctx, q); err != nil {
			return nil, err
		}
	}
	finish := func() {
		if opts.Scope == ScopeProbe {
			r.skip(CheckSettings, "not part of the probe (`qlmigrate verify` checks it)")
			return
		}
		r.add(CheckSettings, "", settings)
	}
	locked, err := schemaLocked(ctx, q, info, opts.Names)
	if err != nil {
		return nil, err
	}

	var stream checksums.Stream
	var pending []checksums.Drift
	switch {
	case locked != nil && opts.Scope != ScopeRuntime && opts.Scope != ScopeProbe:
		why := "cannot be read: the connected role may not use schema control_core (see the capability and privileges checks)"
		r.skip(CheckLedger, why)
		r.skip(CheckUnknown, why)
		r.skip(CheckPending, why)
	case opts.Scope == ScopeRuntime || opts.Scope == ScopeProbe:
		why := "read by `qlmigrate verify` as the owner role: the runtime role may not read goose's table or the ledger"
		if opts.Scope == ScopeProbe {
			why = "not part of the probe (`qlmigrate verify` checks it)"
		}
		r.skip(CheckLedger, why)
		r.skip(CheckUnknown, why)
		r.skip(CheckPending, why)
	default:
		if stream, pending, err = r.checkStream(ctx, tx, q, info, list, opts); err != nil {
			return nil, err
		}
	}

	// Capability: v28 for the complete stream; with --allow-pending, the one the last applied
	// migration set.
	want := r.Expected
	if opts.AllowPending && len(pending) > 0 {
		applied := map[int64]bool{}
		for _, v := range stream.Applied {
			applied[v] = true
		}
		want = Expected{}
		for i, m := range list {
			if applied[m.Version] {
				want = expectedOf(m, i+1)
			}
		}
	}
	if opts.Scope == ScopeUp {
		why := "checked by `qlmigrate verify` after up"
		if locked != nil {
			r.add(CheckCapability, "", []Finding{*locked})
		} else {
			r.skip(CheckCapability, why)
		}
		for _, c := range []string{CheckReadiness, CheckPrivileges} {
			r.skip(c, why)
		}
		finish()
		return r, nil
	}
	if locked != nil {
		r.add(CheckCapability, "", []Finding{*locked})
	} else {
		r.add(CheckCapability, "", capability(ctx, q, info.CapabilitiesExists, want))
	}
	if opts.Scope == ScopeProbe {
		why := "not part of the probe (`qlmigrate verify` checks it)"
		r.skip(CheckReadiness, why)
		r.skip(CheckPrivileges, why)
		finish()
		return r, nil
	}

	switch {
	case !info.SchemaExists && opts.Scope == ScopeRuntime:
		r.add(CheckReadiness, "", []Finding{{Severity: SeverityDrift, Kind: "missing_schema", Object: "control_core",
			Message: "schema control_core does not exist (or this role may not see it)", Fix: "run `qlmigrate up`"}})
		r.skip(CheckPrivileges, "schema control_core does not exist (run `qlmigrate up`)")
	case !info.SchemaExists:
		r.skip(CheckReadiness, "schema control_core does not exist (run `qlmigrate up`)")
		r.skip(CheckPrivileges, "schema control_core does not exist (run `qlmigrate up`)")
	default:
		audit, err := roles.ReadAuditIn(ctx, tx, opts.Names, roles.AuditOptions{AllowedMembers: opts.AllowMembers})
		if err != nil {
			return nil, fmt.Errorf("privileges: %w", err)
		}
		privileges := ""
		if len(pending) > 0 {
			why := fmt.Sprintf("%d migration(s) pending: readiness and privileges are defined for %s v%d", len(pending), Component, r.Expected.Capability)
			r.skip(CheckReadiness, why)
			// The four roles are the same at every version (roles create runs before the first
			// migration): their attributes and memberships are checked while migrations are pending.
			audit, privileges = audit.RolesOnly(), why+"; checked: the roles' attributes and memberships only"
		} else {
			drift, err := readiness.ContractDrift(ctx, tx, readiness.NewLocator(fsys, list).WithOwner(opts.Names.Owner))
			if err != nil {
				return nil, fmt.Errorf("readiness: %w", err)
			}
			casts, err := readiness.CastDrift(ctx, tx)
			if err != nil {
				return nil, fmt.Errorf("readiness: %w", err)
			}
			drift = append(drift, casts...)
			subs, err := readiness.SubscriptionDrift(ctx, tx)
			if err != nil {
				return nil, fmt.Errorf("readiness: %w", err)
			}
			drift = append(append(drift, subs...), builtins...) // the built-ins' notes: read first, above
			r.add(CheckReadiness, "", fromReadiness(drift))
		}
		findings := fromRoles(audit, opts.Names)
		if opts.Scope == ScopeRuntime {
			if findings, err = runtimeFindings(ctx, q, opts.Names, findings, info.ServerVersionNum); err != nil {
				return nil, err
			}
			privileges = "the runtime role's exact privileges, PUBLIC's and the database's"
		}
		r.add(CheckPrivileges, privileges, findings)
	}
	finish()
	return r, nil
}

func expectedOf(m checksums.Migration, n int) Expected {
	slug := strings.TrimSuffix(m.File[5:], ".sql") // 0020_bounded_reads.sql → bounded_reads
	return Expected{Component: Component, Capability: int32(m.Version - 1), Name: slug, Migration: m.Name, Migrations: n}
}

func capability(ctx context.Context, q *db.Queries, exists bool, want Expected) []Finding {
	wantText := fmt.Sprintf("v%d / %s (%s)", want.Capability, want.Name, want.Migration)
	if want.Migration == "" {
		return nil // nothing applied and pending allowed: nothing to expect yet
	}
	if !exists {
		return []Finding{{Severity: SeverityDrift, Kind: "missing_capability", Object: "control_core.capabilities",
			Message: fmt.Sprintf("%s has no capability table; expected %s", Component, wantText),
			Fix:     "run `qlmigrate up`"}}
	}
	got, err := q.Capability(ctx, Component)
	if errors.Is(err, pgx.ErrNoRows) {
		return []Finding{{Severity: SeverityDrift, Kind: "missing_capability", Object: Component,
			Message: fmt.Sprintf("capability %s has no row; expected %s", Component, wantText),
			Fix:     "run `qlmigrate up`; if every migration is applied, restore the row from a backup"}}
	}
	if err != nil {
		return []Finding{{Severity: SeverityDrift, Kind: "unreadable_capability", Object: Component,
			Message: fmt.Sprintf("cannot read capability %s: %v", Component, err), Fix: "grant the connected role SELECT on control_core.capabilities, or connect as the owner role"}}
	}
	if got.Version == want.Capability && got.Name == want.Name && got.Migration == want.Migration {
		return nil
	}
	return []Finding{{Severity: SeverityDrift, Kind: "capability_changed", Object: Component,
		Message: fmt.Sprintf("capability %s is v%d / %s (%s); this binary expects %s", Component, got.Version, got.Name, got.Migration, wantText),
		Fix: fmt.Sprintf("the capability moves only with its migration: if the database is behind, run `qlmigrate up`; if it was changed by hand, "+
			"UPDATE control_core.capabilities SET version = %d, name = '%s', migration = '%s' WHERE component = '%s' after checking the schema",
			want.Capability, want.Name, want.Migration, Component)}}
}

// schemaLocked returns a finding when the connected role may not use schema control_core
// although the model lets it (the owner role, the admin or the runtime role, or a member of
// one): its owner was changed (the old owner's own privileges go to the new one) or USAGE was
// revoked. Nothing inside the schema can be read then, and a query that tried would abort the
// transaction, so verify reads only the catalogs, and the privileges check names the change and
// its fix. Any other role gets a PermissionError, as before.
func schemaLocked(ctx context.Context, q *db.Queries, info db.ControlCoreObjectsRow, names roles.Names) (*Finding, error) {
	if !info.SchemaExists {
		return nil, nil
	}
	access, err := q.SchemaAccess(ctx, []string{names.Owner, names.Admin, names.Runtime})
	if err != nil {
		return nil, fmt.Errorf("read schema access: %w", err)
	}
	switch {
	case access.Usable:
		return nil, nil
	case !access.ModelRole:
		return nil, &PermissionError{Owner: names.Owner, Err: errors.New("the connected role may not use schema control_core")}
	}
	return &Finding{Severity: SeverityDrift, Kind: "unusable_schema", Object: "control_core",
		Message: fmt.Sprintf("the connected role may not use schema control_core (owned by %s; the model says %s), so nothing in it can be read: not the capability, the ledger or goose's versions",
			access.Owner, names.Owner),
		Fix: fmt.Sprintf("restore the schema's owner and privileges as the privileges check names them (ALTER SCHEMA control_core OWNER TO %s; `qlmigrate verify --fix-sql` as a superuser prints every statement)",
			ident(names.Owner))}, nil
}

func ident(s string) string { return pgx.Identifier{s}.Sanitize() }

func permission(names roles.Names, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InsufficientPrivilege {
		return &PermissionError{Owner: names.Owner, Err: err}
	}
	return err
}

func fromChecksums(ds []checksums.Drift) []Finding {
	out := make([]Finding, 0, len(ds))
	for _, d := range ds {
		sev := SeverityDrift
		if d.Note {
			sev = SeverityNote
		}
		out = append(out, Finding{Severity: sev, Kind: d.Kind, Object: d.Object, Message: d.Message, Fix: d.Fix, SQL: d.SQL})
	}
	return out
}

func fromReadiness(ds []readiness.Drift) []Finding {
	out := make([]Finding, 0, len(ds))
	for _, d := range ds {
		sev := SeverityDrift
		if d.Note {
			sev = SeverityNote
		}
		out = append(out, Finding{Severity: sev, Kind: d.Kind, Object: d.Object, Message: d.Message, Fix: d.Fix, SQL: d.SQL})
	}
	return out
}

func fromRoles(a *roles.Audit, names roles.Names) []Finding {
	out := make([]Finding, 0, len(a.Drift)+len(a.Notes))
	for _, d := range a.Drift {
		out = append(out, Finding{Severity: SeverityDrift, Kind: d.Kind, Object: d.Object, Role: d.Role, Message: d.Message,
			Fix: strings.Join(d.SQL, " "), SQL: d.SQL, runtime: d.ReachesRuntime(names)})
	}
	for _, d := range a.Notes {
		out = append(out, Finding{Severity: SeverityNote, Kind: d.Kind, Object: d.Object, Role: d.Role, Message: d.Message,
			Fix: strings.Join(d.SQL, " "), SQL: d.SQL})
	}
	return out
}

func (r *Report) add(name, reason string, findings []Finding) {
	c := Check{Name: name, Status: StatusOK, Reason: reason, Findings: findings}
	if c.Findings == nil {
		c.Findings = []Finding{}
	}
	for _, f := range findings {
		if f.Severity == SeverityDrift {
			c.Status = StatusDrift
			r.Summary.Drift++
		} else {
			r.Summary.Notes++
		}
	}
	r.Checks = append(r.Checks, c)
	r.OK = r.Summary.Drift == 0
}

func (r *Report) skip(name, reason string) {
	r.Checks = append(r.Checks, Check{Name: name, Status: StatusSkipped, Reason: reason, Findings: []Finding{}})
	r.OK = r.Summary.Drift == 0
}

// checkStream reads goose's versions and the checksum ledger and adds the ledger, unknown and
// pending checks; it returns what it read and the pending migrations.
func (r *Report) checkStream(ctx context.Context, tx pgx.Tx, q *db.Queries, info db.ControlCoreObjectsRow, list []checksums.Migration, opts Options) (checksums.Stream, []checksums.Drift, error) {
	var stream checksums.Stream
	if info.GooseTableExists {
		goose, err := checksums.ReadApplied(ctx, tx)
		if err != nil {
			return stream, nil, permission(opts.Names, err)
		}
		stream.Applied = goose.Applied
	}
	var ledgerFindings []Finding
	switch {
	case info.LedgerExists:
		rows, err := q.ListLedger(ctx)
		if err != nil {
			return stream, nil, permission(opts.Names, fmt.Errorf("read checksum ledger: %w", err))
		}
		for _, row := range rows {
			stream.Ledger = append(stream.Ledger, checksums.LedgerRow{Version: row.Version, Name: row.Name, SHA256: row.Sha256, Normal: row.NormalizedSha256})
		}
	case info.SchemaExists && len(stream.Applied) > 0:
		ledgerFindings = append(ledgerFindings, Finding{Severity: SeverityDrift, Kind: "missing_ledger", Object: "control_core.migration_ledger",
			Message: "the checksum ledger table is missing although migrations are applied: nothing proves what ran",
			Fix:     "restore control_core.migration_ledger from a backup (pg-0001-bootstrap defines it)"})
	}
	ledger, unknown, pending := checksums.StreamDrift(list, stream)
	r.add(CheckLedger, "", append(ledgerFindings, fromChecksums(ledger)...))
	r.add(CheckUnknown, "", fromChecksums(unknown))
	pendingFindings := fromChecksums(pending)
	if opts.AllowPending || opts.Scope == ScopeUp {
		for i := range pendingFindings {
			pendingFindings[i].Severity = SeverityNote
		}
	}
	r.add(CheckPending, "", pendingFindings)
	return stream, pending, nil
}

// runtimeFindings keeps the privilege findings that refuse a replica (roles.Drift.ReachesRuntime:
// what changes the runtime's statements, or lets any role read or change what they use beyond
// the model), and the notes that concern the runtime role, PUBLIC or the database. It adds one if
// the connected role is not the runtime role, whose exact privileges are the ones checked, and
// one if the runtime role may SET session_replication_role by any route (runtimeMaySetReplica).
func runtimeFindings(ctx context.Context, q *db.Queries, names roles.Names, all []Finding, serverVersionNum int32) ([]Finding, error) {
	var out []Finding
	for _, f := range all {
		if f.runtime || (f.Severity == SeverityNote && (f.Role == "" || f.Role == names.Runtime || f.Role == string(roles.Public))) {
			out = append(out, f)
		}
	}
	who, err := q.CurrentRole(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the connected role: %w", err)
	}
	if who.CurrentUser != names.Runtime {
		out = append(out, Finding{Severity: SeverityDrift, Kind: "connected_role", Object: who.CurrentUser, Role: who.CurrentUser,
			Message: fmt.Sprintf("connected as %s; a replica runs as the runtime role %s, whose exact privileges readiness checks", who.CurrentUser, names.Runtime),
			Fix:     fmt.Sprintf("connect as %s (--database-url or QL_DATABASE_URL naming that user)", names.Runtime)})
		return out, nil
	}
	f, err := runtimeMaySetReplica(ctx, q, names, serverVersionNum)
	if err != nil {
		return nil, err
	}
	if f != nil {
		out = append(out, *f)
	}
	return out, nil
}

// runtimeMaySetReplica asks the server itself whether the connected runtime role may SET
// session_replication_role (PostgreSQL 15 and later: a parameter privilege granted to it, to
// PUBLIC or to a role whose privileges it inherits; or SUPERUSER): `SET LOCAL
// session_replication_role = replica` would turn off every trigger for its writes, the deferred
// run_attempt_agree and the guards included. The audit names each grant (parameter_privilege);
// this check does not depend on reading the grants right (or on the runtime being no superuser).
func runtimeMaySetReplica(ctx context.Context, q *db.Queries, names roles.Names, serverVersionNum int32) (*Finding, error) {
	const parameter = "session_replication_role"
	if serverVersionNum < 150000 {
		return nil, nil // no parameter privileges before 15: only a superuser may set it (role_attribute drift)
	}
	may, err := q.CurrentUserMaySetParameter(ctx, parameter)
	if err != nil {
		return nil, fmt.Errorf("read whether %s may set %s: %w", names.Runtime, parameter, err)
	}
	if !may {
		return nil, nil
	}
	return &Finding{Severity: SeverityDrift, Kind: "runtime_parameter_privilege", Object: "parameter " + parameter, Role: names.Runtime,
		Message: fmt.Sprintf("the runtime role %s may SET %s (has_parameter_privilege): SET LOCAL %s = replica turns off every trigger for its writes, the foreign keys', "+
			"the deferred run_attempt_agree and every guard and audit trigger included; the model grants no parameter privilege and the runtime is no superuser", names.Runtime, parameter, parameter),
		Fix: fmt.Sprintf("REVOKE SET ON PARAMETER %s FROM %s (or from PUBLIC, or from the role %s is a member of, whichever holds it; `qlmigrate verify` names it)",
			parameter, pgx.Identifier{names.Runtime}.Sanitize(), names.Runtime)}, nil
}
