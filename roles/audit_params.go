package roles

import (
	"fmt"
	"strings"

	"github.com/qlcontrol/controlcore/db"
)

// What the model says about parameter privileges (PostgreSQL 15 and later: GRANT SET | ALTER
// SYSTEM ON PARAMETER, the catalog pg_parameter_acl): none of the four roles holds one, by a
// grant to it, to PUBLIC or to a role it is a member of. SET on a superuser-only parameter lets
// the holder set it in its own session: session_replication_role = replica turns off every
// ordinary and constraint trigger, the foreign keys' included, so the deferred run_attempt_agree
// and every guard and audit trigger stop holding for that role's writes. ALTER SYSTEM lets the
// holder change a parameter for every session of the server (at the next reload), the runtime's
// included. Any entry is drift, whatever the parameter: the model grants none.

// parameterWhy is what the privileges allow, for the finding's message.
func parameterWhy(parameter string, privileges []string) string {
	var why []string
	if contains(privileges, "SET") {
		if parameter == "session_replication_role" {
			why = append(why, "SET LOCAL session_replication_role = replica turns off every trigger for its writes, the foreign keys', the deferred run_attempt_agree and every guard and audit trigger included")
		} else {
			why = append(why, "SET lets it set "+parameter+" in its own sessions even where only a superuser may")
		}
	}
	if contains(privileges, "ALTER SYSTEM") {
		why = append(why, "ALTER SYSTEM lets it change "+parameter+" for every session of the server, the runtime's included, at the next reload")
	}
	return strings.Join(why, "; ")
}

// compareParameterPrivileges reports each entry of pg_parameter_acl that one of the four roles
// holds: one finding for an entry granted to one of them or to PUBLIC, one per model role holding
// it through membership otherwise (the membership itself is drift of its own). The fix revokes the
// entry as its grantor, with CASCADE when it carries the grant option (whatever the grantee
// granted on depends on it). ALTER SYSTEM refuses a replica whoever holds it: it changes the
// runtime's sessions too.
func (a *Audit) compareParameterPrivileges(names Names, rows []db.ParameterPrivilegesRow) {
	type entry struct{ parameter, grantee, grantor string }
	type found struct {
		privileges []string
		grantable  bool
		holders    []string
		boot       string
	}
	var order []entry
	by := map[entry]*found{}
	for _, r := range rows {
		k := entry{r.Parameter, r.Grantee, r.Grantor}
		f, ok := by[k]
		if !ok {
			f = &found{boot: r.BootstrapSuperuser}
			by[k] = f
			order = append(order, k)
		}
		if !contains(f.privileges, r.Privilege) {
			f.privileges = append(f.privileges, r.Privilege)
		}
		f.grantable = f.grantable || r.Grantable
		if !contains(f.holders, r.RoleName) {
			f.holders = append(f.holders, r.RoleName)
		}
	}
	for _, k := range order {
		f := by[k]
		privs := strings.Join(f.privileges, ", ")
		stmt := fmt.Sprintf("REVOKE %s ON PARAMETER %s FROM %s", privs, settingIdent(k.parameter), ident(k.grantee))
		if f.grantable {
			stmt += " CASCADE"
		}
		// A superuser's grant is recorded as the bootstrap superuser's, who owns every parameter.
		fix := asRole(k.grantor, f.boot, stmt+";")
		object := "parameter " + k.parameter
		granted := fmt.Sprintf("GRANT %s ON PARAMETER %s TO %s (granted by %s", privs, k.parameter, k.grantee, k.grantor)
		if f.grantable {
			granted += ", WITH GRANT OPTION"
		}
		granted += ")"
		reaches := reachOf(contains(f.privileges, "ALTER SYSTEM"))
		row := Row{Section: "setting", Kind: "parameter", Object: object, Grantee: k.grantee,
			Expected: []string{}, Actual: f.privileges, Drift: true, Diff: []string{"+" + strings.Join(f.privileges, ",")}}
		why := parameterWhy(k.parameter, f.privileges)
		if k.grantee == string(Public) || contains(names.All(), k.grantee) {
			who := k.grantee
			if k.grantee == string(Public) {
				who = "PUBLIC (every role, " + strings.Join(f.holders, ", ") + " included)"
			}
			a.Rows = append(a.Rows, row)
			a.add(Drift{Kind: "parameter_privilege", Object: object + ": " + privs, Grantee: k.grantee, Role: k.grantee, reach: reaches,
				Message: fmt.Sprintf("%s holds %s on parameter %s (%s): %s; the model grants no parameter privilege", who, privs, k.parameter, granted, why),
				SQL:     fix}, phaseRevoke)
			continue
		}
		for _, role := range f.holders {
			row.Grantee = role
			a.Rows = append(a.Rows, row)
			a.add(Drift{Kind: "parameter_privilege", Object: object + ": " + privs, Grantee: k.grantee, Role: role, reach: reaches,
				Message: fmt.Sprintf("%s holds %s on parameter %s through membership in %s (%s): %s; the model grants no parameter privilege",
					role, privs, k.parameter, k.grantee, granted, why),
				SQL: fix}, phaseRevoke)
		}
	}
}
