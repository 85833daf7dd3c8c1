package roles_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/readiness"
	"github.com/qlcontrol/controlcore/roles"
)

// The model names every table of the readiness contract (plus goose's), and nothing else.
func TestModelNamesEveryTableOfTheContract(t *testing.T) {
	t.Parallel()
	contract, err := readiness.Contract()
	if err != nil {
		t.Fatal(err)
	}
	inContract := map[string]bool{"goose_db_version": true}
	for _, f := range contract {
		if f.Kind == "table" {
			inContract[strings.TrimPrefix(f.Def, "control_core.")] = true
		}
	}
	inModel := map[string]bool{}
	for _, tg := range roles.Tables {
		if inModel[tg.Table] {
			t.Errorf("roles.Tables lists %s twice", tg.Table)
		}
		inModel[tg.Table] = true
		if !inContract[tg.Table] {
			t.Errorf("roles.Tables lists %s, which the readiness contract does not have", tg.Table)
		}
	}
	for table := range inContract {
		if !inModel[table] {
			t.Errorf("table %s of the readiness contract is not in roles.Tables", table)
		}
	}
	for _, f := range roles.Functions {
		found := false
		for _, c := range contract {
			found = found || (c.Kind == "function" && c.Def == f.Function)
		}
		if !found {
			t.Errorf("roles.Functions names %s, which the readiness contract does not have", f.Function)
		}
	}
}

// pg-0017 re-verifies the four roles inside the migration and aborts, naming the role, when one
// is missing or privileged; nothing of pg-0017 is applied then.
func TestMigration0017AbortsOnAMissingOrPrivilegedRole(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		alter func(n roles.Names) string
		want  func(n roles.Names) string
	}{
		{"missing", func(n roles.Names) string { return "DROP ROLE " + n.WorkerIngress },
			func(n roles.Names) string {
				return fmt.Sprintf("pg-0017-exact-grants: role %s is missing; run \"qlmigrate roles create\" first", n.WorkerIngress)
			}},
		{"superuser", func(n roles.Names) string { return "ALTER ROLE " + n.Runtime + " SUPERUSER" },
			func(n roles.Names) string {
				return fmt.Sprintf("pg-0017-exact-grants: role %s must be NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS", n.Runtime)
			}},
		{"createrole", func(n roles.Names) string { return "ALTER ROLE " + n.Admin + " CREATEROLE" },
			func(n roles.Names) string { return fmt.Sprintf("role %s must be NOSUPERUSER", n.Admin) }},
		{"bypassrls", func(n roles.Names) string { return "ALTER ROLE " + n.Owner + " BYPASSRLS" },
			func(n roles.Names) string { return fmt.Sprintf("role %s must be NOSUPERUSER", n.Owner) }},
		{"nologin", func(n roles.Names) string { return "ALTER ROLE " + n.Admin + " NOLOGIN" },
			func(n roles.Names) string {
				return fmt.Sprintf("pg-0017-exact-grants: role %s must be a LOGIN role", n.Admin)
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := testpg.NewEmpty(t)
			names := privateNames(t, d)
			if err := d.Server.BootstrapNames(context.Background(), d.Name, names); err != nil {
				t.Fatal(err)
			}
			if err := up(t, d, names, 16); err != nil {
				t.Fatalf("up to 16: %v", err)
			}
			d.Exec(t, c.alter(names))
			err := up(t, d, names, 0)
			if err == nil || !strings.Contains(err.Error(), c.want(names)) {
				t.Fatalf("up: %v; want an abort saying %q", err, c.want(names))
			}
			var version int
			pool := d.Pool(t, "")
			if err := pool.QueryRow(context.Background(), "SELECT version FROM control_core.capabilities").Scan(&version); err != nil || version != 15 {
				t.Errorf("capability after the abort: v%d (%v); want v15, nothing of pg-0017 applied", version, err)
			}
		})
	}
}
