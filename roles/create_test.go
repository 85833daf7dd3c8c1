package roles_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/roles"
)

// Since PostgreSQL 16 a non-superuser CREATEROLE role that creates a role is granted membership
// in it (grantor: the bootstrap superuser). Those memberships are the creator's: the four roles
// stay exactly as modelled, and the audit lists the memberships as notes, not drift. On older
// servers there is no such membership and the audit is simply clean.
func TestRolesCreatedByANonSuperuserCreateRoleRoleAreNotDrift(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.NewEmpty(t)
	names := privateNames(t, d)
	dba := names.Prefix + "dba"
	other := dba + "_other"
	d.Exec(t, fmt.Sprintf("CREATE ROLE %s LOGIN CREATEROLE PASSWORD '%s'; ALTER DATABASE %s OWNER TO %s",
		dba, testpg.Password, pgx.Identifier{d.Name}.Sanitize(), dba))
	conn, err := pgx.Connect(ctx, d.Server.URL(dba, d.Name))
	if err != nil {
		t.Fatal(err)
	}
	report, err := roles.Create(ctx, conn, names)
	conn.Close(ctx)
	if err != nil || !report.OK() {
		t.Fatalf("roles create as %s: %+v, %v", dba, report, err)
	}
	d.Exec(t, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", names.Owner, testpg.Password))
	if err := up(t, d, names, 0); err != nil {
		t.Fatalf("up: %v", err)
	}
	a := testpg.ReadAudit(t, d.URL(""), names, roles.AuditOptions{})
	if !a.OK() {
		t.Fatalf("drift on a database whose roles a CREATEROLE role created: %+v", a.Drift)
	}
	var version int
	if err := d.Pool(t, "").QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version >= 160000 {
		notes := notesExcept(a, "other_database")
		if len(notes) != 4 {
			t.Fatalf("PostgreSQL %d: want 4 notes (%s's membership in each role), got %+v", version, dba, notes)
		}
		for _, n := range notes {
			if n.Grantee != dba || n.Kind != "member_of_model_role" {
				t.Errorf("note %+v: want %s's membership", n, dba)
			}
		}
	}
	// A membership that makes one of the four roles a member of another role is drift.
	d.Exec(t, fmt.Sprintf("CREATE ROLE %s NOLOGIN; GRANT %s TO %s", other, other, names.Admin))
	a = testpg.ReadAudit(t, d.URL(""), names, roles.AuditOptions{})
	if len(a.Drift) != 1 || a.Drift[0].Kind != "membership" || a.Drift[0].Grantee != names.Admin {
		t.Fatalf("want one membership drift for %s, got %+v", names.Admin, a.Drift)
	}
	d.Exec(t, strings.Join(a.SQL(), "\n"))
	if a = testpg.ReadAudit(t, d.URL(""), names, roles.AuditOptions{}); !a.OK() {
		t.Errorf("after the fix %v: %+v", a.SQL(), a.Drift)
	}
}
