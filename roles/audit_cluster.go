package roles

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/db"
)

// What the model says about the roles beyond privileges (sql/queries/roles_audit.sql reads it):
//   - Settings: none. A stored setting of one of the four roles (ALTER ROLE r SET, ALTER ROLE r
//     IN DATABASE <this one> SET), of this database (ALTER DATABASE SET) or of every role (ALTER
//     ROLE ALL SET) changes what each of their statements does (session_replication_role =
//     replica disables every trigger, the foreign keys' included; default_transaction_read_only
//     stops admission): drift. A role may change its own user-settable settings (ALTER ROLE
//     CURRENT_USER SET work_mem = …) without any privilege, so this is drift the runtime can
//     cause. Settings of the roles in other databases are those databases' business.
//   - LOGIN members: no LOGIN role may act as one of the four roles, directly or through other
//     roles, unless the operator allows it by name (AuditOptions.AllowedMembers). Superusers need no
//     membership; the PostgreSQL 16 CREATEROLE creator's ADMIN-only membership confers nothing.
//   - Large objects: none owned by, none granted to the four roles or to PUBLIC.
//   - The database: no CONNECTION LIMIT 0 and not ALLOW_CONNECTIONS false (the roles could not
//     connect); another limit is the operator's capacity choice (a note).
//   - SECURITY DEFINER routines outside control_core: none that one of the four roles (or PUBLIC)
//     may execute and whose owner may write control_core's tables (a superuser, a holder of
//     INSERT, UPDATE, DELETE or TRUNCATE on one, an owner of one, or one of the four roles): a
//     call runs the body with its owner's powers. An extension's function is no exception; the
//     finding names the routine and its owner for the DBA to decide.
//   - Other databases: CONNECT and TEMPORARY there are notes (they do not touch this database,
//     but they are what a stolen runtime password opens).

// settingIdent quotes a setting name: a custom one (ext.name) is a qualified name.
func settingIdent(name string) string { return pgx.Identifier(strings.Split(name, ".")).Sanitize() }

// settingText is "name = value" where the value is surely not a secret: the server's own
// settings. A custom setting (ext.name) may hold anything, an API key included: name only.
func settingText(name, value string) string {
	if strings.Contains(name, ".") {
		return name + " (custom setting; value not shown)"
	}
	return name + " = " + strconv.Quote(value)
}

// readOnlySettings make the fixing session itself read-only when they apply to it (set for the
// database or for every role): their fix must make the transaction read-write first.
var readOnlySettings = map[string]bool{"default_transaction_read_only": true, "transaction_read_only": true}

func (a *Audit) compareSettings(rows []db.RoleSettingsRow) {
	database := pgx.Identifier{a.Database}.Sanitize()
	for _, s := range rows {
		var d Drift
		row := Row{Section: "setting", Grantee: s.RoleName, Expected: []string{}, Actual: []string{settingText(s.Name, s.Value)}, Drift: true, Diff: []string{"+" + s.Name}}
		phase := phaseRoleSetting
		switch {
		case s.RoleName != "" && !s.InDatabase:
			row.Kind, row.Object = "role", "role "+s.RoleName
			d = Drift{Kind: "role_setting", Message: fmt.Sprintf("role %s has %s (ALTER ROLE … SET): every session of the role starts with it; the model sets nothing on the roles", s.RoleName, settingText(s.Name, s.Value)),
				SQL: []string{fmt.Sprintf("ALTER ROLE %s RESET %s;", ident(s.RoleName), settingIdent(s.Name))}}
		case s.RoleName != "":
			row.Kind, row.Object = "role in database", fmt.Sprintf("role %s in database %s", s.RoleName, a.Database)
			d = Drift{Kind: "role_setting", Message: fmt.Sprintf("role %s has %s in database %s (ALTER ROLE … IN DATABASE … SET): its sessions here start with it; the model sets nothing on the roles", s.RoleName, settingText(s.Name, s.Value), a.Database),
				SQL: []string{fmt.Sprintf("ALTER ROLE %s IN DATABASE %s RESET %s;", ident(s.RoleName), database, settingIdent(s.Name))}}
		case s.InDatabase:
			row.Kind, row.Object, row.Grantee, phase = "database", "database "+a.Database, "(every role)", phaseDatabaseSetting
			d = Drift{Kind: "database_setting", Message: fmt.Sprintf("database %s has %s (ALTER DATABASE … SET): every session in it, the four roles' included, starts with it; the model sets nothing on the database", a.Database, settingText(s.Name, s.Value)),
				SQL: []string{fmt.Sprintf("ALTER DATABASE %s RESET %s;", database, settingIdent(s.Name))}}
		default:
			row.Kind, row.Object, row.Grantee, phase = "all roles", "every role in every database", "(every role)", phaseDatabaseSetting
			d = Drift{Kind: "database_setting", Message: fmt.Sprintf("every role has %s (ALTER ROLE ALL SET): every session of the cluster, the four roles' included, starts with it; the model sets nothing", settingText(s.Name, s.Value)),
				SQL: []string{fmt.Sprintf("ALTER ROLE ALL RESET %s;", settingIdent(s.Name))}}
		}
		if phase == phaseDatabaseSetting && readOnlySettings[s.Name] {
			// The first statement for an autocommit session (psql), the second for the fix's own
			// transaction; SET takes no snapshot, so SET TRANSACTION is still allowed after it.
			d.SQL = append([]string{"SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE;", "SET TRANSACTION READ WRITE;"}, d.SQL...)
		}
		d.Object, d.Role = row.Object+": "+s.Name, s.RoleName
		a.Rows = append(a.Rows, row)
		a.add(d, phase)
	}
}

// compareLoginMembers reports each LOGIN role that may act as one of the four roles. The fix
// revokes the member's own grants on the paths (REVOKE parent FROM member): that cuts every path
// of this member and no other role's, so an allowed member of the same group keeps its way in.
func (a *Audit) compareLoginMembers(logins []db.LoginMembersRow) {
	type found struct {
		role, member string
		allowed      bool
		paths        []string
		revokes      []string
	}
	var order []string
	by := map[string]*found{}
	for _, l := range logins {
		k := l.RoleName + "\x00" + l.Member
		f, ok := by[k]
		if !ok {
			f = &found{role: l.RoleName, member: l.Member, allowed: l.Allowed}
			by[k] = f
			order = append(order, k)
		}
		if p := describePath(l.Path); !contains(f.paths, p) {
			f.paths = append(f.paths, p)
			if len(l.Path) > 2 { // a direct membership has its row from compareMemberships
				row := Row{Section: "membership", Kind: "role", Object: l.RoleName, Grantee: l.Member,
					Expected: []string{}, Actual: []string{"MEMBER " + p}, Drift: !l.Allowed}
				if l.Allowed {
					row.Expected = []string{"(allowed by " + AllowMemberFlag + ")"}
				} else {
					row.Diff = []string{"-MEMBER"}
				}
				a.Rows = append(a.Rows, row)
			}
		}
		stmt := fmt.Sprintf("REVOKE %s FROM %s", ident(l.Parent), ident(l.Member))
		if a.ServerVersionNum >= 160000 {
			stmt += " GRANTED BY " + ident(l.Grantor) // one membership per grantor since 16
		}
		if stmt += ";"; !contains(f.revokes, stmt) {
			f.revokes = append(f.revokes, stmt)
		}
	}
	for _, k := range order {
		f := by[k]
		desc := fmt.Sprintf("%s (LOGIN) is a member of %s %s", f.member, f.role, strings.Join(f.paths, "; "))
		if f.allowed {
			a.Notes = append(a.Notes, Drift{Kind: "allowed_member", Object: f.role, Grantee: f.member, Role: f.role,
				Message: fmt.Sprintf("%s; allowed by %s %s", desc, AllowMemberFlag, f.member), SQL: f.revokes})
			continue
		}
		a.add(Drift{Kind: "login_member", Object: f.role, Grantee: f.member, Role: f.role,
			Message: fmt.Sprintf("%s: whoever logs in as %s acts as %s; revoke the membership, or allow it with %s %s",
				desc, f.member, f.role, AllowMemberFlag, f.member),
			SQL: f.revokes}, phaseMembership)
	}
}

// describePath renders a path of LoginMembers (model role first, member last) as the member sees
// it: "(directly)" or "(through a → b)".
func describePath(path []string) string {
	if len(path) <= 2 {
		return "(directly)"
	}
	var via []string
	for i := len(path) - 2; i >= 1; i-- {
		via = append(via, path[i])
	}
	return "(through " + strings.Join(via, " → ") + ")"
}

// compareLargeObjects reports large objects owned by or granted to the four roles or PUBLIC. The fix gives
// an owned object to the database's owner (the DBA's role; the bootstrap superuser when the
// database belongs to one of the four) rather than unlinking it: its data may be someone's, and
// ownership moves the four roles' rights away without losing a byte. The DBA decides what to
// lo_unlink afterwards.
func (a *Audit) compareLargeObjects(names Names, rows []db.LargeObjectsOfRolesRow) {
	type entry struct{ grantor, grantee string }
	type lo struct {
		oid                 int64
		owner, newOwner     string
		privileges          map[entry][]string
		entries             []entry
		databaseOwner, boot string
	}
	var order []int64
	objs := map[int64]*lo{}
	for _, r := range rows {
		o, ok := objs[r.LargeObject]
		if !ok {
			o = &lo{oid: r.LargeObject, owner: r.Owner, privileges: map[entry][]string{}, databaseOwner: r.DatabaseOwner, boot: r.BootstrapSuperuser}
			objs[r.LargeObject] = o
			order = append(order, r.LargeObject)
		}
		if r.Grantee == "" {
			continue // no ACL: only the owner's implicit rights
		}
		e := entry{r.Grantor, r.Grantee}
		if _, ok := o.privileges[e]; !ok {
			o.entries = append(o.entries, e)
		}
		o.privileges[e] = append(o.privileges[e], r.Privilege)
	}
	for _, n := range order {
		o := objs[n]
		object := fmt.Sprintf("large object %d", o.oid)
		owner := o.owner
		if contains(names.All(), o.owner) {
			owner = o.databaseOwner
			if contains(names.All(), owner) {
				owner = o.boot
			}
			a.Rows = append(a.Rows, Row{Section: "large_object", Kind: "large object", Object: object, Owner: o.owner, Grantee: o.owner,
				Expected: []string{}, Actual: []string{"OWNER"}, Drift: true, Diff: []string{"owner " + o.owner + " → " + owner}})
			a.add(Drift{Kind: "large_object_owner", Object: object, Grantee: o.owner, Role: o.owner,
				Message: fmt.Sprintf("%s is owned by %s, which may read, change or unlink it; the four roles own no large object", object, o.owner),
				SQL:     []string{fmt.Sprintf("ALTER LARGE OBJECT %d OWNER TO %s;", o.oid, ident(owner))}}, phaseOwner)
		}
		// ALTER … OWNER TO hands the old owner's entries (as grantee and as grantor) to the new
		// owner: revoke what the ACL still gives the four roles once the owner is right. Entries
		// granted by another grantor go first: they may depend on a grant option revoked later.
		entries := append([]entry{}, o.entries...)
		sort.SliceStable(entries, func(i, j int) bool { return entries[i].grantor != o.owner && entries[j].grantor == o.owner })
		for _, e := range entries {
			privs := o.privileges[e]
			grantor, grantee := e.grantor, e.grantee
			if grantor == o.owner {
				grantor = owner
			}
			if grantee == o.owner {
				grantee = owner
			}
			if !contains(names.All(), grantee) && grantee != string(Public) {
				continue
			}
			a.Rows = append(a.Rows, Row{Section: "large_object", Kind: "large object", Object: object, Owner: o.owner, Grantee: grantee,
				Expected: []string{}, Actual: privs, Drift: true, Diff: []string{"+" + strings.Join(privs, ",")}})
			if grantee == string(Public) {
				// Every role holds what PUBLIC holds, the four included (lo_compat_privileges off).
				a.add(Drift{Kind: "large_object_privilege", Object: object, Grantee: grantee, Role: grantee,
					Message: fmt.Sprintf("PUBLIC holds %s on %s (granted by %s): every role, the four included, may use it so; PUBLIC holds nothing on large objects", strings.Join(privs, ", "), object, e.grantor),
					SQL:     asRole(grantor, owner, fmt.Sprintf("REVOKE ALL ON LARGE OBJECT %d FROM PUBLIC;", o.oid))}, phaseRevoke)
				continue
			}
			a.add(Drift{Kind: "large_object_privilege", Object: object, Grantee: grantee, Role: grantee,
				Message: fmt.Sprintf("%s holds %s on %s (granted by %s); the four roles hold nothing on large objects", grantee, strings.Join(privs, ", "), object, e.grantor),
				SQL:     asRole(grantor, owner, fmt.Sprintf("REVOKE %s ON LARGE OBJECT %d FROM %s;", strings.Join(privs, ", "), o.oid, ident(grantee)))}, phaseRevoke)
		}
	}
}

// noteOtherDatabases lists what the four roles may do in the cluster's other databases, one note
// per database and source (PUBLIC, a grant to the role, a membership), so that each note has one
// fix: the REVOKE of that source. Notes, not drift: the other databases are not this one's
// model, and a privilege PUBLIC holds there is every role's, the DBA's to decide.
func (a *Audit) noteOtherDatabases(rows []db.OtherDatabasePrivilegesRow) {
	type source struct{ database, owner, via, grantor string }
	type roleSource struct {
		role string
		source
	}
	var pairs []roleSource
	privileges := map[roleSource][]string{}
	for _, r := range rows {
		k := roleSource{r.RoleName, source{r.Database, r.DatabaseOwner, r.Via, r.Grantor}}
		if _, ok := privileges[k]; !ok {
			pairs = append(pairs, k)
		}
		if !contains(privileges[k], r.Privilege) {
			privileges[k] = append(privileges[k], r.Privilege)
		}
	}
	type note struct {
		source
		privileges []string
		roles      []string
	}
	var order []string
	notes := map[string]*note{}
	for _, p := range pairs {
		privs := privileges[p]
		k := fmt.Sprint(p.source, privs)
		n, ok := notes[k]
		if !ok {
			n = &note{source: p.source, privileges: privs}
			notes[k] = n
			order = append(order, k)
		}
		n.roles = append(n.roles, p.role)
	}
	sort.SliceStable(order, func(i, j int) bool { return notes[order[i]].database < notes[order[j]].database })
	for _, k := range order {
		n := notes[k]
		may := "may CONNECT to"
		switch {
		case !contains(n.privileges, "CONNECT"):
			may = "may create TEMPORARY tables (but not CONNECT) in"
		case contains(n.privileges, "TEMPORARY"):
			may = "may CONNECT to and create TEMPORARY tables in"
		}
		d := Drift{Kind: "other_database", Object: "database " + n.database, Grantee: n.via,
			Message: fmt.Sprintf("%s %s database %s", strings.Join(n.roles, ", "), may, n.database)}
		if len(n.roles) == 1 {
			d.Role = n.roles[0]
		}
		switch n.via {
		case "":
			d.Message += " as superusers (every database is theirs)"
		case string(Public):
			d.Role = string(Public)
			d.Message += " through PUBLIC, as every role may"
		case n.roles[0]:
			d.Message += fmt.Sprintf(" (granted by %s)", n.grantor)
		default:
			d.Message += " through membership in " + n.via
		}
		if n.via != "" {
			d.SQL = asRole(n.grantor, n.owner, fmt.Sprintf("REVOKE %s ON DATABASE %s FROM %s;",
				strings.Join(n.privileges, ", "), pgx.Identifier{n.database}.Sanitize(), ident(n.via)))
		}
		a.Notes = append(a.Notes, d)
	}
}

// compareDatabaseConnections reports a database that no role but a superuser may connect to:
// CONNECTION LIMIT 0 or ALLOW_CONNECTIONS false (drift, the database as a whole). Any other limit
// is the operator's capacity choice: a note with the same fix.
func (a *Audit) compareDatabaseConnections(c db.DatabaseConnectionsRow) {
	database := pgx.Identifier{c.Database}.Sanitize()
	object := "database " + c.Database
	row := Row{Section: "setting", Kind: "database", Object: object, Grantee: "(every role)",
		Expected: []string{connLimitWord(-1), "ALLOW_CONNECTIONS true"}, Actual: []string{connLimitWord(c.ConnectionLimit), fmt.Sprintf("ALLOW_CONNECTIONS %v", c.AllowConnections)}}
	if !c.AllowConnections {
		row.Drift, row.Diff = true, append(row.Diff, "ALLOW_CONNECTIONS false")
		a.add(Drift{Kind: "database_connections", Object: object + ": ALLOW_CONNECTIONS",
			Message: fmt.Sprintf("database %s does not allow connections (ALLOW_CONNECTIONS false): no role, the four included, may open a session in it; the model says true", c.Database),
			SQL:     []string{fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS true;", database)}}, phaseDatabaseSetting)
	}
	switch {
	case c.ConnectionLimit == 0:
		row.Drift, row.Diff = true, append(row.Diff, connLimitWord(0))
		a.add(Drift{Kind: "database_connections", Object: object + ": CONNECTION LIMIT",
			Message: fmt.Sprintf("database %s has CONNECTION LIMIT 0: no role but a superuser may connect, the runtime's replicas and the admin role included; the model says no limit (-1)", c.Database),
			SQL:     []string{fmt.Sprintf("ALTER DATABASE %s CONNECTION LIMIT -1;", database)}}, phaseDatabaseSetting)
	case c.ConnectionLimit > 0:
		a.Notes = append(a.Notes, Drift{Kind: "database_connections", Object: object + ": CONNECTION LIMIT",
			Message: fmt.Sprintf("database %s has CONNECTION LIMIT %d: at most %d sessions of roles other than superusers at once, the replicas' pools included; an operator's capacity choice, not drift", c.Database, c.ConnectionLimit, c.ConnectionLimit),
			SQL:     []string{fmt.Sprintf("ALTER DATABASE %s CONNECTION LIMIT -1;", database)}})
	}
	if c.ConnectionLimit != -1 || !c.AllowConnections {
		a.Rows = append(a.Rows, row)
	}
}

// compareDefinerFunctions reports each SECURITY DEFINER routine outside control_core that one of
// the four roles may execute and whose owner may write control_core's tables: one finding with
// role PUBLIC when PUBLIC may execute it, else one per model role that may. The fix revokes
// EXECUTE from PUBLIC and from the four roles that hold it directly (a grant made by another
// grantor than the owner as that grantor, first: a grant option may depend on it); a privilege
// held through membership in another role goes with that membership, drift of its own.
func (a *Audit) compareDefinerFunctions(names Names, rows []db.DefinerFunctionsRow) {
	type fn struct {
		signature, kind, owner string
		superuser, public      bool
		roles                  []string
		via                    map[string][]string
		grantors               []string            // in the order of the ACL
		grantees               map[string][]string // grantor → grantees among PUBLIC and the four
	}
	var order []string
	fns := map[string]*fn{}
	for _, r := range rows {
		f, ok := fns[r.Signature]
		if !ok {
			f = &fn{signature: r.Signature, kind: r.Kind, owner: r.Owner, superuser: r.OwnerSuperuser, public: r.PublicMay,
				via: map[string][]string{}, grantees: map[string][]string{}}
			for i, g := range r.Direct {
				by := r.DirectGrantors[i]
				if _, ok := f.grantees[by]; !ok {
					f.grantors = append(f.grantors, by)
				}
				f.grantees[by] = append(f.grantees[by], g)
			}
			fns[r.Signature] = f
			order = append(order, r.Signature)
		}
		f.roles = append(f.roles, r.RoleName)
		f.via[r.RoleName] = r.Via
	}
	for _, k := range order {
		f := fns[k]
		keyword := strings.ToUpper(f.kind)
		// Another grantor's grants first, then the owner's, which also takes PUBLIC's.
		grantors := append([]string{}, f.grantors...)
		sort.SliceStable(grantors, func(i, j int) bool { return grantors[i] != f.owner && grantors[j] == f.owner })
		var fix []string
		ownerDone := false
		for _, by := range grantors {
			list := f.grantees[by]
			if by == f.owner {
				ownerDone = true
				if !contains(list, string(Public)) {
					list = append([]string{string(Public)}, list...)
				}
			}
			var quoted []string
			for _, g := range list {
				quoted = append(quoted, ident(g))
			}
			fix = append(fix, asRole(by, f.owner, fmt.Sprintf("REVOKE EXECUTE ON %s %s FROM %s;", keyword, f.signature, strings.Join(quoted, ", ")))...)
		}
		if !ownerDone {
			fix = append(fix, fmt.Sprintf("REVOKE EXECUTE ON %s %s FROM PUBLIC;", keyword, f.signature))
		}
		owner := f.owner
		switch {
		case f.superuser:
			owner += " (a superuser)"
		case contains(names.All(), f.owner):
			owner += " (one of the four roles)"
		default:
			owner += " (who may write control_core's tables)"
		}
		what := fmt.Sprintf("%s %s is SECURITY DEFINER and owned by %s", f.kind, f.signature, owner)
		consequence := fmt.Sprintf("a call runs its body with %s's powers, whatever the caller may do itself; revoke EXECUTE (an extension's %s too: the DBA decides whether the roles need it, as drift)", f.owner, f.kind)
		row := Row{Section: "object", Kind: f.kind, Object: f.signature, Owner: f.owner, Expected: []string{}, Actual: []string{"EXECUTE (SECURITY DEFINER)"}, Drift: true, Diff: []string{"+EXECUTE"}}
		if f.public {
			row.Grantee = string(Public)
			a.Rows = append(a.Rows, row)
			a.add(Drift{Kind: "definer_function", Object: f.signature, Grantee: string(Public), Role: string(Public),
				Message: fmt.Sprintf("%s; PUBLIC may execute it, so %s may: %s", what, strings.Join(f.roles, ", "), consequence),
				SQL:     fix}, phaseRevoke)
			continue
		}
		held := func(grantee string) bool {
			for _, list := range f.grantees {
				if contains(list, grantee) {
					return true
				}
			}
			return false
		}
		for _, role := range f.roles {
			var how string
			switch {
			case held(role):
				how = "granted to it"
			case len(f.via[role]) > 0:
				how = "through membership in " + strings.Join(f.via[role], ", ") + ", drift of its own whose fix removes it"
			case held(string(Public)):
				how = "through PUBLIC's EXECUTE and its own USAGE on the schema"
			default:
				how = "as a superuser, drift of its own"
			}
			row.Grantee = role
			a.Rows = append(a.Rows, row)
			a.add(Drift{Kind: "definer_function", Object: f.signature, Grantee: role, Role: role,
				Message: fmt.Sprintf("%s; %s may execute it (%s): %s", what, role, how, consequence),
				SQL:     fix}, phaseRevoke)
		}
	}
}
