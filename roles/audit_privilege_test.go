package roles_test

import (
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/roles"
)

// Object-privilege drift, found by the audit itself (not only through a binary): "a missing or an
// extra privilege is drift, reported with the statement that would fix it" (DESIGN.md, Roles), and
// so is a grant option the model does not give or one it gives and the catalog lacks. Each case
// changes one privilege on a table of the runtime's in a database of its own (object ACLs belong
// to the database, so the shared role names are safe); the fix the audit prints, run as a
// superuser, leaves the audit clean.
func TestObjectPrivilegeDriftIsFoundAndFixed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, sql, kind, grantee, message, fix string
	}{
		{"a privilege held but not expected", "GRANT DELETE ON control_core.trigger_schedules TO ql_runtime",
			"extra_privilege", "ql_runtime", "ql_runtime holds DELETE on table control_core.trigger_schedules",
			`REVOKE DELETE ON TABLE control_core.trigger_schedules FROM "ql_runtime";`},
		{"a privilege of PUBLIC", "GRANT SELECT ON control_core.runs TO PUBLIC",
			"extra_privilege", "PUBLIC", "PUBLIC holds SELECT on table control_core.runs", `REVOKE SELECT ON TABLE control_core.runs FROM`},
		{"the worker-ingress role given anything", "GRANT SELECT ON control_core.trigger_schedules TO ql_worker_ingress",
			"extra_privilege", "ql_worker_ingress", "ql_worker_ingress holds SELECT", `REVOKE SELECT ON TABLE control_core.trigger_schedules FROM`},
		{"an expected privilege missing", "REVOKE UPDATE ON control_core.trigger_schedules FROM ql_runtime",
			"missing_privilege", "ql_runtime", "ql_runtime lacks UPDATE on table control_core.trigger_schedules",
			`GRANT UPDATE ON TABLE control_core.trigger_schedules TO "ql_runtime";`},
		{"a grant option the model does not give", "GRANT SELECT ON control_core.trigger_schedules TO ql_runtime WITH GRANT OPTION",
			"grant_option", "ql_runtime", "ql_runtime holds SELECT on table control_core.trigger_schedules with grant option",
			`REVOKE GRANT OPTION FOR SELECT ON TABLE control_core.trigger_schedules FROM "ql_runtime";`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := testpg.New(t)
			d.Exec(t, c.sql)
			a := testpg.ReadAudit(t, d.URL(""), d.Names, roles.AuditOptions{})
			if len(a.Drift) != 1 {
				t.Fatalf("want one %s drift, got %d: %+v", c.kind, len(a.Drift), a.Drift)
			}
			got := a.Drift[0]
			if got.Kind != c.kind || got.Grantee != c.grantee || got.Role != c.grantee ||
				!strings.Contains(got.Message, c.message) || len(got.SQL) != 1 || !strings.HasPrefix(got.SQL[0], c.fix) {
				t.Fatalf("drift %+v\nwant kind %s for %s, a message with %q, SQL starting %q", got, c.kind, c.grantee, c.message, c.fix)
			}
			drifted := false
			for _, r := range a.Rows {
				drifted = drifted || r.Section == "object" && r.Grantee == c.grantee && r.Drift && len(r.Diff) > 0
			}
			if !drifted {
				t.Errorf("no drifted matrix row for %s", c.grantee)
			}
			d.Exec(t, strings.Join(a.SQL(), "\n"))
			if after := testpg.ReadAudit(t, d.URL(""), d.Names, roles.AuditOptions{}); !after.OK() {
				t.Fatalf("after the fix %q: %+v", a.SQL(), after.Drift)
			}
		})
	}
}
