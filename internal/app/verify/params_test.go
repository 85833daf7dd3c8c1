package verify_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

func hasKind(fs []verify.Finding, kind, role string) bool {
	return slices.ContainsFunc(fs, func(f verify.Finding) bool { return f.Kind == kind && f.Role == role })
}

// Readiness asks the server itself whether the runtime role may SET session_replication_role
// (has_parameter_privilege), whatever route the privilege takes: here through a NOLOGIN group.
func TestReadinessRefusesARuntimeThatMaySetSessionReplicationRole(t *testing.T) {
	t.Parallel()
	d := testpg.NewPrivate(t)
	if d.Server.Major() < 15 {
		t.Skip("parameter privileges are PostgreSQL 15 and later")
	}
	group := d.Names.Prefix + "replica"
	d.Exec(t, "CREATE ROLE "+group+" NOLOGIN; GRANT SET ON PARAMETER session_replication_role TO "+group+"; GRANT "+group+" TO "+d.Names.Runtime)
	defer d.Exec(t, "REVOKE SET ON PARAMETER session_replication_role FROM "+group) // before the roles are dropped
	var notReady *verify.NotReadyError
	err := verify.Readiness(context.Background(), connect(t, d.URL(d.Names.Runtime)), d.Names)
	if !errors.As(err, &notReady) || !hasKind(notReady.Findings, "runtime_parameter_privilege", d.Names.Runtime) ||
		!hasKind(notReady.Findings, "parameter_privilege", d.Names.Runtime) {
		t.Fatalf("runtime a member of a role with SET on session_replication_role: %v, want runtime_parameter_privilege and parameter_privilege", err)
	}
}

// PUBLIC's parameter privilege is every role's: verify reports it (role PUBLIC) and readiness
// refuses. Not parallel, so that no other test of this binary sees PUBLIC's grant (parallel
// tests start after the sequential ones); skipped on a long-lived shared server.
func TestParameterPrivilegeOfPublicIsDriftAndRefusesReadiness(t *testing.T) {
	if os.Getenv("QL_TEST_DATABASE_URL") != "" {
		t.Skip("grants to PUBLIC on the whole cluster: only on a server of this test binary's own")
	}
	d := testpg.NewPrivate(t)
	if d.Server.Major() < 15 {
		t.Skip("parameter privileges are PostgreSQL 15 and later")
	}
	ctx := context.Background()
	d.Exec(t, "GRANT SET ON PARAMETER session_replication_role TO PUBLIC")
	defer d.Exec(t, "REVOKE SET ON PARAMETER session_replication_role FROM PUBLIC")
	r, err := verify.Run(ctx, connect(t, d.URL("")), verify.Options{Names: d.Names})
	if err != nil {
		t.Fatal(err)
	}
	var all []verify.Finding
	for _, c := range r.Checks {
		all = append(all, c.Findings...)
	}
	if r.OK || !hasKind(all, "parameter_privilege", "PUBLIC") {
		t.Errorf("SET on session_replication_role for PUBLIC: verify OK=%v, want a parameter_privilege finding of PUBLIC\n%+v", r.OK, all)
	}
	var notReady *verify.NotReadyError
	err = verify.Readiness(ctx, connect(t, d.URL(d.Names.Runtime)), d.Names)
	if !errors.As(err, &notReady) || !hasKind(notReady.Findings, "parameter_privilege", "PUBLIC") {
		t.Errorf("readiness: %v, want PUBLIC's parameter_privilege", err)
	}
}
