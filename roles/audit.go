package roles

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// Audit is the comparison of the model with the catalogs of one database: the matrix a DBA reads
// (`qlmigrate grants`), the drift (`qlmigrate verify`) and the statements that remove it
// (`qlmigrate grants --sql`).
type Audit struct {
	Database         string  `json:"database"`
	DatabaseOwner    string  `json:"database_owner"`
	ServerVersion    string  `json:"server_version"`
	ServerVersionNum int     `json:"server_version_num"`
	Rows             []Row   `json:"rows"`
	Drift            []Drift `json:"drift"`
	Notes            []Drift `json:"notes"`
	// AllowedMembers are the LOGIN roles the operator allowed as members (AuditOptions).
	AllowedMembers []string `json:"allowed_members"`
	bootstrap      string   // the bootstrap superuser: the database's owner when DatabaseOwnerAllowed fails
}

// DatabaseOwnerAllowed is the rule for the control-core database's owner: the role that created
// it (the README's setup: a superuser's CREATE DATABASE; a managed service's administrator, which
// is often no superuser) or the owner role, but never the admin, runtime or worker ingress role.
// The owner of a database may drop it with everything in it, grant CREATE and TEMPORARY on it,
// and change its settings, which is more than any of those three may do.
func DatabaseOwnerAllowed(names Names, owner string) bool {
	return owner != names.Admin && owner != names.Runtime && owner != names.WorkerIngress
}

// AuditOptions are what the operator adds to the model for one audit.
type AuditOptions struct {
	// AllowedMembers names LOGIN roles that may be members, directly or through other roles, of
	// the four roles (a DBA, a pooler): each such membership is a note naming AllowMemberFlag
	// instead of login_member drift. Only the member itself is matched, never a group it is in,
	// so a new member of an allowed group is still seen.
	AllowedMembers []string
}

// AllowMemberFlag is the qlmigrate flag that fills AuditOptions.AllowedMembers; notes name it.
const AllowMemberFlag = "--allow-member"

// Row is one line of the matrix: what one grantee holds on one object, expected and actual.
// Privileges with grant option end in "*"; one granted by another role than the object's owner
// carries " (by ROLE)".
type Row struct {
	Section  string   `json:"section"` // object, column, default, attribute, membership
	Kind     string   `json:"kind"`    // database, schema, table, sequence, function, … | role
	Object   string   `json:"object"`
	Owner    string   `json:"owner,omitempty"`
	Grantee  string   `json:"grantee"`
	Expected []string `json:"expected"`
	Actual   []string `json:"actual"`
	Drift    bool     `json:"drift"`
	Diff     []string `json:"diff,omitempty"` // +EXTRA, -MISSING, owner/attribute/membership changes
}

// Drift is one difference between the model and the catalogs, with the statements that remove it.
// Notes use the same shape; their SQL is what removes what they describe, should the DBA want to.
type Drift struct {
	Kind    string `json:"kind"` // see DriftKinds
	Object  string `json:"object"`
	Grantee string `json:"grantee,omitempty"`
	// Role is the role whose powers the finding changes: one of the four roles (its attributes,
	// settings, memberships, members, the privileges it holds, what it owns), PUBLIC (a
	// privilege every role holds, the four included), another role that holds a privilege on a
	// modelled object (the database owner, a stranger), or empty when the finding concerns the
	// database or schema as a whole (an object's owner, the database's settings, ALTER ROLE ALL).
	// Concerns answers "does this touch role r".
	Role    string   `json:"role"`
	Message string   `json:"message"`
	SQL     []string `json:"sql,omitempty"`
	phase   int
	reach   reach // see ReachesRuntime
}

// Concerns reports whether d changes what role may do: it names role, PUBLIC, or nothing in
// particular (the database or schema as a whole, which every session sees).
func (d Drift) Concerns(role string) bool {
	return d.Role == role || d.Role == string(Public) || d.Role == ""
}

// DriftKinds lists every Drift.Kind, in the order their fixes must run.
var DriftKinds = []string{
	"database_setting", "database_connections", "role_setting", "missing_role", "role_attribute", "membership", "login_member",
	"predefined_member", "owner", "large_object_owner", "extra_privilege", "grant_option", "column_privilege", "large_object_privilege",
	"parameter_privilege", "definer_function", "missing_privilege", "default_privilege",
}

// The fix phases. Settings come first: a database-level default_transaction_read_only makes the
// fixing session itself read-only until its fix (which begins with SET TRANSACTION READ WRITE)
// has run, and that must precede every other statement of the transaction.
const (
	phaseDatabaseSetting = iota
	phaseRoleSetting
	phaseCreateRole
	phaseAttribute
	phaseMembership
	phaseOwner
	phaseRevoke
	phaseGrant
	phaseDefault
)

// RolesOnly is the audit of the roles themselves (missing roles, attributes, memberships), which
// hold at every version of the stream, without the object privileges, which are v28's.
func (a *Audit) RolesOnly() *Audit {
	out := &Audit{}
	for _, d := range a.Drift {
		// Parameter privileges are the roles' own, cluster-wide, whatever the schema's version.
		if d.phase <= phaseMembership || d.Kind == "parameter_privilege" {
			out.Drift = append(out.Drift, d)
		}
	}
	for _, d := range a.Notes {
		switch d.Kind {
		case "member_of_model_role", "allowed_member", "other_database", "database_connections":
			out.Notes = append(out.Notes, d)
		}
	}
	return out
}

// SQL returns every statement that removes the drift, in an order that works: settings, roles,
// attributes, memberships, owners, then REVOKE, GRANT and default privileges; a statement two
// findings share appears once. Run it as a superuser, in one transaction or not.
func (a *Audit) SQL() []string {
	drift := append([]Drift(nil), a.Drift...)
	sort.SliceStable(drift, func(i, j int) bool { return drift[i].phase < drift[j].phase })
	var out []string
	seen := map[string]bool{}
	for _, d := range drift {
		for _, s := range d.SQL {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// Beginner starts the transaction ReadAudit reads in (*pgx.Conn, *pgxpool.Pool, pgx.Tx).
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// ReadAudit reads the catalogs and compares them with the model (ReadAuditIn) in one read-only
// repeatable-read transaction of its own, so every section comes from one snapshot, with
// search_path pg_catalog only, so the server names every object schema-qualified whatever the
// role's settings. It only reads.
func ReadAudit(ctx context.Context, conn Beginner, names Names, opts AuditOptions) (*Audit, error) {
	var audit *Audit
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog"); err != nil {
			return err
		}
		var err error
		audit, err = ReadAuditIn(ctx, tx, names, opts)
		return err
	})
	return audit, err
}

// ReadAuditIn compares the model with the catalogs inside the caller's transaction: conn must
// run with search_path pg_catalog only (see readiness.ReadFacts). Every catalog it reads is
// readable by any role: the runtime and the owner role get the same audit as a superuser.
func ReadAuditIn(ctx context.Context, conn dbconn.Querier, names Names, opts AuditOptions) (*Audit, error) {
	q := db.New(conn)
	info, err := q.ControlCoreObjects(ctx)
	if err != nil {
		return nil, fmt.Errorf("read server: %w", err)
	}
	defaults, err := q.OwnerDefaultPrivileges(ctx)
	if err != nil {
		return nil, fmt.Errorf("read owner privileges: %w", err)
	}
	objects, err := q.ModelObjects(ctx)
	if err != nil {
		return nil, fmt.Errorf("read objects: %w", err)
	}
	acl, err := q.ObjectPrivileges(ctx, names.All())
	if err != nil {
		return nil, fmt.Errorf("read object privileges: %w", err)
	}
	columns, err := q.ColumnPrivileges(ctx, names.All())
	if err != nil {
		return nil, fmt.Errorf("read column privileges: %w", err)
	}
	defACL, err := q.DefaultPrivileges(ctx, db.DefaultPrivilegesParams{RoleNames: names.All(), OwnerName: names.Owner})
	if err != nil {
		return nil, fmt.Errorf("read default privileges: %w", err)
	}
	attrs, err := q.RoleAttributes(ctx, names.All())
	if err != nil {
		return nil, fmt.Errorf("read role attributes: %w", err)
	}
	members, err := q.RoleMemberships(ctx, names.All())
	if err != nil {
		return nil, fmt.Errorf("read role memberships: %w", err)
	}
	allowed := append([]string{}, opts.AllowedMembers...)
	logins, err := q.LoginMembers(ctx, db.LoginMembersParams{RoleNames: names.All(), AllowedMembers: allowed})
	if err != nil {
		return nil, fmt.Errorf("read login members: %w", err)
	}
	settings, err := q.RoleSettings(ctx, names.All())
	if err != nil {
		return nil, fmt.Errorf("read role and database settings: %w", err)
	}
	largeObjects, err := q.LargeObjectsOfRoles(ctx, names.All())
	if err != nil {
		return nil, fmt.Errorf("read large objects: %w", err)
	}
	elsewhere, err := q.OtherDatabasePrivileges(ctx, names.All())
	if err != nil {
		return nil, fmt.Errorf("read privileges on other databases: %w", err)
	}
	connections, err := q.DatabaseConnections(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the database's connection limit: %w", err)
	}
	definers, err := q.DefinerFunctions(ctx, names.All())
	if err != nil {
		return nil, fmt.Errorf("read SECURITY DEFINER functions: %w", err)
	}
	ownership, err := q.DatabaseOwnership(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the database's owner: %w", err)
	}
	predefined, err := q.PredefinedRoleMembers(ctx, db.PredefinedRoleMembersParams{Tables: runtimeTables(), RoleNames: names.All()})
	if err != nil {
		return nil, fmt.Errorf("read members of predefined roles: %w", err)
	}
	var parameters []db.ParameterPrivilegesRow
	if info.ServerVersionNum >= 150000 { // pg_parameter_acl is PostgreSQL 15's; before, no such privilege exists
		if parameters, err = q.ParameterPrivileges(ctx, names.All()); err != nil {
			return nil, fmt.Errorf("read parameter privileges: %w", err)
		}
	}
	a := &Audit{Database: info.Database, ServerVersion: info.ServerVersion, ServerVersionNum: int(info.ServerVersionNum),
		Rows: []Row{}, Drift: []Drift{}, Notes: []Drift{}, AllowedMembers: allowed, bootstrap: ownership.BootstrapSuperuser}
	ownerPrivs := map[string][]string{}
	for _, d := range defaults {
		ownerPrivs[d.Kind] = append(ownerPrivs[d.Kind], d.Privilege)
	}
	a.compareSettings(settings)
	a.compareDatabaseConnections(connections)
	a.compareAttributes(names, attrs)
	a.compareMemberships(names, members, logins)
	a.comparePredefinedMembers(names, predefined)
	a.compareLoginMembers(logins)
	a.compareObjects(names, ownerPrivs, objects, acl)
	a.compareLargeObjects(names, largeObjects)
	a.compareDefinerFunctions(names, definers)
	a.compareParameterPrivileges(names, parameters)
	a.compareColumns(columns)
	a.compareDefaults(names, defACL)
	a.noteOtherDatabases(elsewhere)
	return a, nil
}

// OK reports whether the catalogs match the model exactly.
func (a *Audit) OK() bool { return len(a.Drift) == 0 }

func ident(s string) string {
	if s == string(Public) {
		return "PUBLIC"
	}
	return pgx.Identifier{s}.Sanitize()
}

func (a *Audit) add(d Drift, phase int) {
	d.phase = phase
	a.Drift = append(a.Drift, d)
}

// ---- role attributes ------------------------------------------------------------------------

func (a *Audit) compareAttributes(names Names, attrs []db.RoleAttributesRow) {
	by := map[string]db.RoleAttributesRow{}
	for _, r := range attrs {
		by[r.Name] = r
	}
	want := make([]string, 0, len(Attributes))
	for _, at := range Attributes {
		want = append(want, attrWord(at.Name, at.Want))
	}
	// CONNECTION LIMIT and VALID UNTIL are CREATE ROLE's defaults in the model: a limit can lock
	// the runtime's pool out, an expiry makes every password login fail from that moment on.
	expected := append(append([]string{}, want...), connLimitWord(-1), validUntilWord(""))
	for _, role := range names.All() {
		r, ok := by[role]
		row := Row{Section: "attribute", Kind: "role", Object: role, Grantee: role, Expected: expected, Actual: []string{}}
		if !ok {
			row.Drift, row.Diff, row.Actual = true, []string{"missing"}, []string{"(no such role)"}
			a.Rows = append(a.Rows, row)
			a.add(Drift{Kind: "missing_role", Object: role, Grantee: role, Role: role,
				Message: fmt.Sprintf("role %s does not exist", role),
				SQL:     []string{fmt.Sprintf("CREATE ROLE %s %s;", ident(role), strings.Join(want, " "))}}, phaseCreateRole)
			continue
		}
		have := attributesOf(r)
		for _, at := range Attributes {
			row.Actual = append(row.Actual, attrWord(at.Name, have[at.Name]))
			if have[at.Name] == at.Want {
				continue
			}
			row.Drift = true
			row.Diff = append(row.Diff, attrWord(at.Name, have[at.Name]))
			a.add(Drift{Kind: "role_attribute", Object: role, Grantee: role, Role: role, reach: reachOf(at.Name == "SUPERUSER" && have[at.Name]),
				Message: fmt.Sprintf("role %s is %s; the model says %s", role, attrWord(at.Name, have[at.Name]), attrWord(at.Name, at.Want)),
				SQL:     []string{fmt.Sprintf("ALTER ROLE %s %s;", ident(role), attrWord(at.Name, at.Want))}}, phaseAttribute)
		}
		row.Actual = append(row.Actual, connLimitWord(r.ConnectionLimit), validUntilWord(r.ValidUntil))
		if r.ConnectionLimit != -1 {
			row.Drift = true
			row.Diff = append(row.Diff, connLimitWord(r.ConnectionLimit))
			a.add(Drift{Kind: "role_attribute", Object: role, Grantee: role, Role: role,
				Message: fmt.Sprintf("role %s has CONNECTION LIMIT %d; the model says no limit (-1)", role, r.ConnectionLimit),
				SQL:     []string{fmt.Sprintf("ALTER ROLE %s CONNECTION LIMIT -1;", ident(role))}}, phaseAttribute)
		}
		if r.ValidUntil != "" {
			row.Drift = true
			row.Diff = append(row.Diff, validUntilWord(r.ValidUntil))
			a.add(Drift{Kind: "role_attribute", Object: role, Grantee: role, Role: role,
				Message: fmt.Sprintf("role %s is VALID UNTIL %s (its password stops working then); the model says 'infinity'", role, r.ValidUntil),
				SQL:     []string{fmt.Sprintf("ALTER ROLE %s VALID UNTIL 'infinity';", ident(role))}}, phaseAttribute)
		}
		a.Rows = append(a.Rows, row)
	}
}

func connLimitWord(n int32) string { return fmt.Sprintf("CONNECTION LIMIT %d", n) }

func validUntilWord(t string) string {
	if t == "" {
		return "VALID UNTIL 'infinity'"
	}
	return "VALID UNTIL '" + t + "'"
}

// ---- memberships ----------------------------------------------------------------------------

func (a *Audit) compareMemberships(names Names, members []db.RoleMembershipsRow, logins []db.LoginMembersRow) {
	ours := map[string]bool{}
	for _, r := range names.All() {
		ours[r] = true
	}
	// Direct memberships of LOGIN roles that confer the role: compareLoginMembers reports them.
	login := map[[3]string]bool{} // role, member, grantor → allowed
	for _, l := range logins {
		if len(l.Path) == 2 {
			login[[3]string{l.RoleName, l.Member, l.Grantor}] = l.Allowed
		}
	}
	for _, m := range members {
		desc := fmt.Sprintf("%s is a member of %s (granted by %s", m.Member, m.RoleName, m.Grantor)
		if m.AdminOption {
			desc += ", WITH ADMIN OPTION"
		}
		desc += ")"
		row := Row{Section: "membership", Kind: "role", Object: m.RoleName, Grantee: m.Member,
			Expected: []string{}, Actual: []string{"MEMBER"}}
		if m.AdminOption {
			row.Actual = []string{"MEMBER WITH ADMIN OPTION"}
		}
		if allowed, ok := login[[3]string{m.RoleName, m.Member, m.Grantor}]; ok && !ours[m.Member] {
			row.Expected = []string{}
			if allowed {
				row.Expected = []string{"(allowed by " + AllowMemberFlag + ")"}
			} else {
				row.Drift, row.Diff = true, []string{"-MEMBER"}
			}
			a.Rows = append(a.Rows, row)
			continue
		}
		if !ours[m.Member] {
			// Not the four roles' privilege: the member's (a DBA, a pooler, or since PostgreSQL 16
			// the non-superuser CREATEROLE role that created the role). Seen, not drift.
			row.Expected = []string{"(not modelled)"}
			a.Rows = append(a.Rows, row)
			a.Notes = append(a.Notes, Drift{Kind: "member_of_model_role", Object: m.RoleName, Grantee: m.Member, Role: m.RoleName,
				Message: desc + "; memberships in the four roles belong to their members and are not drift"})
			continue
		}
		row.Drift, row.Diff = true, []string{"-MEMBER"}
		a.Rows = append(a.Rows, row)
		stmt := fmt.Sprintf("REVOKE %s FROM %s", ident(m.RoleName), ident(m.Member))
		if a.ServerVersionNum >= 160000 {
			// PostgreSQL 16 keeps one membership per grantor; name the one to remove.
			stmt += " GRANTED BY " + ident(m.Grantor)
		}
		a.add(Drift{Kind: "membership", Object: m.RoleName, Grantee: m.Member, Role: m.Member,
			Message: desc + fmt.Sprintf("; %s must be a member of no role", m.Member),
			SQL:     []string{stmt + ";"}}, phaseMembership)
	}
}

// ---- object privileges ----------------------------------------------------------------------

type aclKey struct{ grantee, privilege, grantor string }

type object struct {
	kind, name, owner string
	modelled          bool
	actual            map[aclKey]bool // → grantable
}

// kindClass maps an object kind onto the acldefault kinds of OwnerDefaultPrivileges.
func kindClass(kind string) string {
	switch kind {
	case "view", "materialized view", "foreign table":
		return "table"
	case "procedure", "aggregate":
		return "function"
	}
	return kind
}

// grantOn is the object-type keyword of GRANT/REVOKE.
func grantOn(kind string) string {
	switch kindClass(kind) {
	case "table":
		return "TABLE"
	case "function":
		if kind == "function" {
			return "FUNCTION"
		}
		return "ROUTINE"
	}
	return strings.ToUpper(kind)
}

// alterKind is the object-type keyword of ALTER … OWNER TO.
func alterKind(kind string) string { return strings.ToUpper(kind) }

func (a *Audit) compareObjects(names Names, ownerPrivs map[string][]string, objects []db.ModelObjectsRow, acl []db.ObjectPrivilegesRow) {
	var order []string
	objs := map[string]*object{}
	get := func(kind, name string) *object {
		k := kind + "\x00" + name
		o, ok := objs[k]
		if !ok {
			o = &object{kind: kind, name: name, actual: map[aclKey]bool{}}
			objs[k] = o
			order = append(order, k)
		}
		return o
	}
	for _, o := range objects {
		obj := get(o.Kind, o.Object)
		obj.owner, obj.modelled = o.Owner, true
		if o.Kind == "database" {
			a.DatabaseOwner = o.Owner
		}
	}
	for _, r := range acl {
		obj := get(r.Kind, r.Object)
		if r.Modelled {
			obj.modelled = true
		}
		if obj.owner == "" {
			obj.owner = r.Owner
		}
		obj.actual[aclKey{r.Grantee, r.Privilege, r.Grantor}] = obj.actual[aclKey{r.Grantee, r.Privilege, r.Grantor}] || r.Grantable
	}
	tables := map[string]TableGrant{}
	for _, t := range Tables {
		tables["control_core."+t.Table] = t
	}
	functions := map[string]FunctionGrant{}
	for _, f := range Functions {
		functions[f.Function] = f
	}
	for _, k := range order {
		o := objs[k]
		if !o.modelled {
			a.compareForeign(names, o)
			continue
		}
		wantOwner := names.Owner
		message := fmt.Sprintf("%s %s is owned by %s; the model says %s", o.kind, o.name, o.owner, wantOwner)
		if o.kind == "database" {
			wantOwner = o.owner // whoever created it (DatabaseOwnerAllowed)
			if !DatabaseOwnerAllowed(names, o.owner) && a.bootstrap != "" {
				wantOwner = a.bootstrap
				message = fmt.Sprintf("database %s is owned by %s, which may therefore drop it with everything in it, grant CREATE and TEMPORARY on it and change its settings; "+
					"the model lets only the role that created it (a superuser, the DBA's role) or %s own it: it goes back to the bootstrap superuser %s",
					o.name, o.owner, names.Owner, wantOwner)
			}
		}
		actual := o.actual
		var diffOwner []string
		if o.owner != wantOwner {
			diffOwner = []string{"owner " + o.owner + " → " + wantOwner}
			a.add(Drift{Kind: "owner", Object: o.name, Role: modelRole(names, o.owner),
				Message: message,
				SQL:     []string{fmt.Sprintf("ALTER %s %s OWNER TO %s;", alterKind(o.kind), o.name, ident(wantOwner))}}, phaseOwner)
			// ALTER … OWNER TO rewrites the ACL the same way: the old owner's entries become the
			// new owner's. Compare what the ACL will be once the owner is right.
			actual = map[aclKey]bool{}
			for key, g := range o.actual {
				if key.grantee == o.owner {
					key.grantee = wantOwner
				}
				if key.grantor == o.owner {
					key.grantor = wantOwner
				}
				actual[key] = actual[key] || g
			}
		}
		expected := map[aclKey]bool{}
		for _, p := range ownerPrivs[kindClass(o.kind)] {
			expected[aclKey{wantOwner, p, wantOwner}] = false
		}
		grant := func(to, privilege, by string, option bool) {
			k := aclKey{to, privilege, by}
			expected[k] = expected[k] || option
		}
		switch kindClass(o.kind) {
		case "database":
			for _, g := range DatabaseGrants {
				by := names.Role(g.GrantedBy)
				if g.GrantedBy == DatabaseOwner {
					by = wantOwner
				}
				for _, p := range g.Privileges {
					grant(names.Role(g.To), p, by, g.WithGrantOption)
				}
			}
		case "schema":
			for _, p := range SchemaUsage {
				grant(names.Role(p), "USAGE", names.Owner, false)
			}
		case "table":
			if t, ok := tables[o.name]; ok && o.kind == "table" {
				for _, p := range t.Admin {
					grant(names.Admin, p, names.Owner, false)
				}
				for _, p := range t.Runtime {
					grant(names.Runtime, p, names.Owner, false)
				}
			}
		case "function":
			if f, ok := functions[o.name]; ok {
				for _, p := range f.Execute {
					grant(names.Role(p), "EXECUTE", names.Owner, false)
				}
			}
		}
		a.diffACL(names, o, wantOwner, ownerPrivs[kindClass(o.kind)], expected, actual, diffOwner)
	}
}

// diffACL records the matrix rows of one object and the drift between expected and actual.
func (a *Audit) diffACL(names Names, o *object, owner string, ownerAll []string, expected, actual map[aclKey]bool, diffOwner []string) {
	grantees := append([]string{}, names.All()...)
	grantees = append(grantees, string(Public))
	if o.kind == "database" && !contains(grantees, owner) {
		grantees = append([]string{owner}, grantees...)
	}
	for _, m := range []map[aclKey]bool{expected, actual} {
		var extra []string
		for k := range m {
			if !contains(grantees, k.grantee) && !contains(extra, k.grantee) {
				extra = append(extra, k.grantee)
			}
		}
		sort.Strings(extra)
		grantees = append(grantees, extra...)
	}
	for _, g := range grantees {
		row := Row{Section: "object", Kind: o.kind, Object: o.name, Owner: o.owner, Grantee: g,
			Expected: render(expected, g, owner, ownerAll), Actual: render(actual, g, owner, ownerAll)}
		if g == owner && len(diffOwner) > 0 {
			row.Drift, row.Diff = true, append(row.Diff, diffOwner...)
		}
		for _, k := range sortedKeys(expected, actual, g) {
			want, inWant := expected[k]
			have, inHave := actual[k]
			target := fmt.Sprintf("%s ON %s %s", k.privilege, grantOn(o.kind), o.name)
			switch {
			case inWant && !inHave:
				row.Diff = append(row.Diff, "-"+label(k, want, owner))
				stmt := fmt.Sprintf("GRANT %s TO %s", target, ident(g))
				if want {
					stmt += " WITH GRANT OPTION"
				}
				a.add(Drift{Kind: "missing_privilege", Object: o.name, Grantee: g, Role: g,
					Message: fmt.Sprintf("%s lacks %s on %s %s%s", g, k.privilege, o.kind, o.name, byNote(k, owner)),
					SQL:     asRole(k.grantor, owner, stmt+";")}, phaseGrant)
			case inHave && !inWant:
				row.Diff = append(row.Diff, "+"+label(k, have, owner))
				a.add(Drift{Kind: "extra_privilege", Object: o.name, Grantee: g, Role: g,
					Message: fmt.Sprintf("%s holds %s on %s %s%s, which the model does not grant", g, k.privilege, o.kind, o.name, byNote(k, owner)),
					SQL:     asRole(k.grantor, owner, fmt.Sprintf("REVOKE %s FROM %s;", target, ident(g)))}, phaseRevoke)
			case want != have:
				row.Diff = append(row.Diff, fmt.Sprintf("%s grant option %v → %v", k.privilege, have, want))
				stmt := fmt.Sprintf("REVOKE GRANT OPTION FOR %s FROM %s;", target, ident(g))
				phase := phaseRevoke
				if want {
					stmt, phase = fmt.Sprintf("GRANT %s TO %s WITH GRANT OPTION;", target, ident(g)), phaseGrant
				}
				a.add(Drift{Kind: "grant_option", Object: o.name, Grantee: g, Role: g,
					Message: fmt.Sprintf("%s holds %s on %s %s %s grant option; the model says %s", g, k.privilege, o.kind, o.name,
						map[bool]string{true: "with", false: "without"}[have], map[bool]string{true: "with", false: "without"}[want]),
					SQL: asRole(k.grantor, owner, stmt)}, phase)
			}
		}
		row.Drift = row.Drift || len(row.Diff) > 0
		a.Rows = append(a.Rows, row)
	}
}

// compareForeign reports the privileges one of the four roles holds outside control_core: all
// of them are drift.
func (a *Audit) compareForeign(names Names, o *object) {
	for _, k := range sortedKeys(nil, o.actual, "") {
		if !contains(names.All(), k.grantee) {
			continue
		}
		a.Rows = append(a.Rows, Row{Section: "object", Kind: o.kind, Object: o.name, Grantee: k.grantee,
			Expected: []string{}, Actual: []string{label(k, o.actual[k], "")}, Drift: true, Diff: []string{"+" + k.privilege}})
		a.add(Drift{Kind: "extra_privilege", Object: o.name, Grantee: k.grantee, Role: k.grantee, reach: reachNone,
			Message: fmt.Sprintf("%s holds %s on %s %s (granted by %s); the four roles hold nothing outside control_core",
				k.grantee, k.privilege, o.kind, o.name, k.grantor),
			SQL: asRole(k.grantor, o.owner, fmt.Sprintf("REVOKE %s ON %s %s FROM %s;", k.privilege, grantOn(o.kind), o.name, ident(k.grantee)))}, phaseRevoke)
	}
}

// asRole wraps stmt so that it is recorded with grantor as its grantor: a superuser's GRANT and
// REVOKE act as the object's owner, so only another grantor needs SET ROLE.
func asRole(grantor, owner, stmt string) []string {
	if grantor == owner || grantor == "" {
		return []string{stmt}
	}
	return []string{fmt.Sprintf("SET ROLE %s; %s RESET ROLE;", ident(grantor), stmt)}
}

func byNote(k aclKey, owner string) string {
	if k.grantor == owner {
		return ""
	}
	return " (granted by " + k.grantor + ")"
}

func label(k aclKey, grantable bool, owner string) string {
	s := k.privilege
	if grantable {
		s += "*"
	}
	if k.grantor != owner && owner != "" {
		s += " (by " + k.grantor + ")"
	}
	return s
}

// render lists grantee's privileges in m; the owner's complete implicit set reads "ALL".
func render(m map[aclKey]bool, grantee, owner string, ownerAll []string) []string {
	out := []string{}
	keys := sortedKeys(m, nil, grantee)
	if grantee == owner && len(ownerAll) > 0 {
		n := 0
		for _, p := range ownerAll {
			if g, ok := m[aclKey{owner, p, owner}]; ok && !g {
				n++
			}
		}
		if n == len(ownerAll) {
			out = append(out, "ALL")
			var rest []aclKey
			for _, k := range keys {
				if k.grantor == owner && contains(ownerAll, k.privilege) && !m[k] {
					continue
				}
				rest = append(rest, k)
			}
			keys = rest
		}
	}
	for _, k := range keys {
		out = append(out, label(k, m[k], owner))
	}
	return out
}

var privilegeOrder = map[string]int{"SELECT": 1, "INSERT": 2, "UPDATE": 3, "DELETE": 4, "TRUNCATE": 5, "REFERENCES": 6,
	"TRIGGER": 7, "MAINTAIN": 8, "EXECUTE": 9, "USAGE": 10, "CREATE": 11, "CONNECT": 12, "TEMPORARY": 13}

// sortedKeys returns the keys of a and b (grantee "" = all grantees) in a stable, readable order.
func sortedKeys(a, b map[aclKey]bool, grantee string) []aclKey {
	seen := map[aclKey]bool{}
	var out []aclKey
	for _, m := range []map[aclKey]bool{a, b} {
		for k := range m {
			if (grantee == "" || k.grantee == grantee) && !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		x, y := out[i], out[j]
		if x.grantee != y.grantee {
			return x.grantee < y.grantee
		}
		if privilegeOrder[x.privilege] != privilegeOrder[y.privilege] {
			return privilegeOrder[x.privilege] < privilegeOrder[y.privilege]
		}
		if x.privilege != y.privilege {
			return x.privilege < y.privilege
		}
		return x.grantor < y.grantor
	})
	return out
}

// modelRole is role when it is one of the four, else empty: an owner outside the model concerns
// the object as a whole.
func modelRole(names Names, role string) string {
	if contains(names.All(), role) {
		return role
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ---- column privileges ----------------------------------------------------------------------

func (a *Audit) compareColumns(columns []db.ColumnPrivilegesRow) {
	for _, c := range columns {
		object := c.TableName + " (" + c.ColumnName + ")"
		k := aclKey{c.Grantee, c.Privilege, c.Grantor}
		a.Rows = append(a.Rows, Row{Section: "column", Kind: "column", Object: object, Owner: c.TableOwner, Grantee: c.Grantee,
			Expected: []string{}, Actual: []string{label(k, c.Grantable, c.TableOwner)}, Drift: true, Diff: []string{"+" + c.Privilege}})
		a.add(Drift{Kind: "column_privilege", Object: object, Grantee: c.Grantee, Role: c.Grantee, reach: reachOf(RuntimeUses(c.TableName)),
			Message: fmt.Sprintf("%s holds %s on column %s of %s%s; the model has no column privileges",
				c.Grantee, c.Privilege, c.ColumnName, c.TableName, byNote(k, c.TableOwner)),
			SQL: asRole(c.Grantor, c.TableOwner, fmt.Sprintf("REVOKE %s (%s) ON TABLE %s FROM %s;", c.Privilege, c.ColumnName, c.TableName, ident(c.Grantee)))}, phaseRevoke)
	}
}

// ---- default privileges ---------------------------------------------------------------------

var defaultObjectWords = map[string]string{"r": "TABLES", "S": "SEQUENCES", "f": "FUNCTIONS", "T": "TYPES", "n": "SCHEMAS", "L": "LARGE OBJECTS"}

func (a *Audit) compareDefaults(names Names, rows []db.DefaultPrivilegesRow) {
	type entry struct {
		role, schema, objtype string
		actual, base          map[aclKey]bool
	}
	var order []string
	entries := map[string]*entry{}
	for _, r := range rows {
		k := r.ForRole + "\x00" + r.InSchema + "\x00" + r.ObjectType
		e, ok := entries[k]
		if !ok {
			e = &entry{role: r.ForRole, schema: r.InSchema, objtype: r.ObjectType, actual: map[aclKey]bool{}, base: map[aclKey]bool{}}
			entries[k] = e
			order = append(order, k)
		}
		key := aclKey{r.Grantee, r.Privilege, ""} // a default ACL's grantor is always its role
		if r.ServerDefault {
			e.base[key] = e.base[key] || r.Grantable
		} else {
			e.actual[key] = e.actual[key] || r.Grantable
		}
	}
	for _, k := range order {
		e := entries[k]
		expected := e.base // global: the server's defaults; per schema: nothing
		if e.role == names.Role(DefaultPrivilege.ForRole) && e.schema == "" && e.objtype == DefaultPrivilege.ObjectType {
			expected = map[aclKey]bool{}
			for _, p := range DefaultPrivilege.Grants {
				expected[aclKey{names.Role(p), "EXECUTE", ""}] = false
			}
		}
		object := "default privileges for role " + e.role
		clause := "ALTER DEFAULT PRIVILEGES FOR ROLE " + ident(e.role)
		if e.schema != "" {
			object += " in schema " + e.schema
			clause += " IN SCHEMA " + e.schema
		}
		words := defaultObjectWords[e.objtype]
		if words == "" {
			words = e.objtype
		}
		object += " on " + strings.ToLower(words)
		grantees := granteesOf(expected, e.actual)
		if !contains(grantees, string(Public)) {
			grantees = append(grantees, string(Public)) // PUBLIC holds nothing by default either: show it
		}
		for _, g := range grantees {
			row := Row{Section: "default", Kind: "default privileges", Object: object, Grantee: g,
				Expected: render(expected, g, "", nil), Actual: render(e.actual, g, "", nil)}
			for _, key := range sortedKeys(expected, e.actual, g) {
				want, inWant := expected[key]
				have, inHave := e.actual[key]
				var stmt, msg string
				switch {
				case inWant && !inHave:
					row.Diff = append(row.Diff, "-"+key.privilege)
					stmt = fmt.Sprintf("%s GRANT %s ON %s TO %s", clause, key.privilege, words, ident(g))
					if want {
						stmt += " WITH GRANT OPTION"
					}
					msg = fmt.Sprintf("%s would not get %s on the %s %s creates%s; the model grants it", g, key.privilege, strings.ToLower(words), e.role, inSchema(e.schema))
				case inHave && !inWant:
					row.Diff = append(row.Diff, "+"+key.privilege)
					stmt = fmt.Sprintf("%s REVOKE %s ON %s FROM %s", clause, key.privilege, words, ident(g))
					msg = fmt.Sprintf("%s would get %s on every one of the %s %s creates%s, which the model does not grant", g, key.privilege, strings.ToLower(words), e.role, inSchema(e.schema))
				case want != have:
					row.Diff = append(row.Diff, key.privilege+" grant option")
					stmt = fmt.Sprintf("%s REVOKE GRANT OPTION FOR %s ON %s FROM %s", clause, key.privilege, words, ident(g))
					if want {
						stmt = fmt.Sprintf("%s GRANT %s ON %s TO %s WITH GRANT OPTION", clause, key.privilege, words, ident(g))
					}
					msg = fmt.Sprintf("%s's grant option for %s on the %s %s creates%s differs from the model", g, key.privilege, strings.ToLower(words), e.role, inSchema(e.schema))
				default:
					continue
				}
				a.add(Drift{Kind: "default_privilege", Object: object, Grantee: g, Role: g, Message: msg, SQL: []string{stmt + ";"}}, phaseDefault)
			}
			row.Drift = len(row.Diff) > 0
			a.Rows = append(a.Rows, row)
		}
	}
}

func inSchema(schema string) string {
	if schema == "" {
		return ""
	}
	return " in schema " + schema
}

func granteesOf(ms ...map[aclKey]bool) []string {
	var out []string
	for _, m := range ms {
		for k := range m {
			if !contains(out, k.grantee) {
				out = append(out, k.grantee)
			}
		}
	}
	sort.Strings(out)
	return out
}
