package roles

import (
	"fmt"
	"strings"

	"github.com/qlcontrol/controlcore/db"
)

// reach says how a finding bears on a replica's readiness (Drift.ReachesRuntime).
type reach int

const (
	// reachByRole: decided by the role it concerns and the object it names (the default, and
	// what a kind nobody classified gets: it fails closed for the runtime's and PUBLIC's).
	reachByRole reach = iota
	// reachRuntime: it lets some role change or read what the runtime uses beyond the model.
	reachRuntime
	// reachNone: it changes neither what the runtime's statements do nor who may touch what
	// they read or write.
	reachNone
)

// RuntimeUses reports whether object (a table "control_core.runs", a column "control_core.runs
// (col)", or a function signature as ObjectPrivileges renders it) is one the runtime role reads,
// writes or executes.
func RuntimeUses(object string) bool {
	table, _, _ := strings.Cut(object, " (")
	for _, t := range Tables {
		if len(t.Runtime) > 0 && "control_core."+t.Table == table {
			return true
		}
	}
	for _, f := range Functions {
		if f.Function == object && contains(partsOf(f.Execute), string(Runtime)) {
			return true
		}
	}
	return false
}

func partsOf(ps []Part) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, string(p))
	}
	return out
}

// runtimeTables are the control_core tables the runtime role reads or writes, by name.
func runtimeTables() []string {
	var out []string
	for _, t := range Tables {
		if len(t.Runtime) > 0 {
			out = append(out, t.Table)
		}
	}
	return out
}

// ReachesRuntime reports whether d refuses a replica's start (docs/operations.md, "What refuses
// a replica, what only verify reports"). It does when it changes what the runtime role's
// statements do (its attributes, settings, memberships, members; the database's settings), or
// lets any role (the runtime, PUBLIC, another) read or change an object the runtime uses beyond
// the model: a privilege on it (of a column too), an owner of it or of the schema, a
// predefined role that reads or writes every table, SUPERUSER on one of the four roles, a
// SECURITY DEFINER routine that writes control_core. It does not when it is about an object the
// runtime never uses that any role may create or hand out without a privilege of control-core:
// a large object (lo_create needs none; neither does a GRANT on one's own large object, to PUBLIC
// or to the runtime), and a privilege on an object outside control_core, which its owner, whoever
// that is, grants as it likes. Those verify reports as drift; the fleet keeps running.
func (d Drift) ReachesRuntime(names Names) bool {
	switch {
	case d.reach == reachRuntime:
		return true
	case d.reach == reachNone:
		return false
	case d.Kind == "large_object_owner" || d.Kind == "large_object_privilege":
		return false
	case d.Kind == "owner":
		return true // the owner of the schema or of an object in it may change or drop it
	}
	return d.Role == "" || d.Role == names.Runtime || d.Role == string(Public) || RuntimeUses(d.Object)
}

// comparePredefinedMembers reports the roles that may read or change the runtime's tables through
// a predefined role (pg_write_all_data, pg_read_all_data, pg_maintain, …), which no grant on the
// tables shows. One of the four roles' membership is already membership drift: marked instead.
func (a *Audit) comparePredefinedMembers(names Names, rows []db.PredefinedRoleMembersRow) {
	for _, m := range rows {
		if contains(names.All(), m.Member) {
			for i := range a.Drift {
				if d := &a.Drift[i]; d.Kind == "membership" && d.Object == m.RoleName && d.Grantee == m.Member {
					d.reach = reachRuntime
				}
			}
			continue
		}
		privs := strings.Join(m.Privileges, ", ")
		stmt := fmt.Sprintf("REVOKE %s FROM %s", ident(m.RoleName), ident(m.Member))
		if a.ServerVersionNum >= 160000 {
			stmt += " GRANTED BY " + ident(m.Grantor)
		}
		a.Rows = append(a.Rows, Row{Section: "membership", Kind: "role", Object: m.RoleName, Grantee: m.Member,
			Expected: []string{}, Actual: []string{"MEMBER (" + privs + " on the runtime's tables)"}, Drift: true, Diff: []string{"-MEMBER"}})
		a.add(Drift{Kind: "predefined_member", Object: m.RoleName, Grantee: m.Member, Role: m.Member, reach: reachRuntime,
			Message: fmt.Sprintf("%s is a member of %s (granted by %s), so it may %s on every control_core table the runtime uses, which no grant on them shows",
				m.Member, m.RoleName, m.Grantor, privs),
			SQL: []string{stmt + ";"}}, phaseMembership)
	}
}

// reachOf is reachRuntime when it does, else the default.
func reachOf(reaches bool) reach {
	if reaches {
		return reachRuntime
	}
	return reachByRole
}
