package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// The hostile review's reproducer (s6-hostile): PostgreSQL 15 lets a superuser grant SET on a
// superuser-only parameter to any role, and session_replication_role = replica turns off every
// trigger, the deferred run_attempt_agree, the guards and the audit triggers included. Such a
// grant to the runtime or the admin role is drift that verify names, parameter, privilege and
// grantee, with the REVOKE that removes it; run, the REVOKE takes the power away.
func TestVerifyReportsAParameterPrivilegeThatSwitchesOffTriggers(t *testing.T) {
	t.Parallel()
	d := testpg.NewPrivate(t)
	if d.Server.Major() < 15 {
		t.Skip("parameter privileges are PostgreSQL 15 and later")
	}
	ctx := context.Background()
	for _, role := range []string{d.Names.Runtime, d.Names.Admin} {
		t.Run(role, func(t *testing.T) {
			d.Exec(t, "GRANT SET ON PARAMETER session_replication_role TO "+role)
			// Before DropWithRoles (clean-ups run last first): a role holding a parameter
			// privilege cannot be dropped.
			defer d.Exec(t, "REVOKE SET ON PARAMETER session_replication_role FROM "+role)
			setReplica := func() error {
				conn, err := pgx.Connect(ctx, d.URL(role))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(ctx)
				_, err = conn.Exec(ctx, "BEGIN; SET LOCAL session_replication_role = replica; ROLLBACK", pgx.QueryExecModeSimpleProtocol)
				return err
			}
			if err := setReplica(); err != nil {
				t.Fatalf("as %s with SET on the parameter: %v", role, err)
			}
			r := run(t, nil, "verify", "--role-prefix", d.Names.Prefix, "--database-url", d.URL(""))
			fix := `REVOKE SET ON PARAMETER "session_replication_role" FROM "` + role + `";`
			if r.code != 1 || !strings.Contains(r.stdout, role+" holds SET on parameter session_replication_role") || !strings.Contains(r.stdout, fix) {
				t.Fatalf("GRANT SET ON PARAMETER session_replication_role TO %s: verify exit %d, want 1 naming it and %s\n%s%s",
					role, r.code, fix, r.stdout, r.stderr)
			}
			d.Exec(t, fix)
			var pgErr *pgconn.PgError
			if err := setReplica(); !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.InsufficientPrivilege {
				t.Errorf("as %s after the fix: SET LOCAL session_replication_role = replica: %v, want insufficient_privilege", role, err)
			}
			if r := run(t, nil, "verify", "--role-prefix", d.Names.Prefix, "--database-url", d.URL("")); r.code != 0 {
				t.Errorf("verify after the fix: exit %d, want 0\n%s%s", r.code, r.stdout, r.stderr)
			}
		})
	}
}
