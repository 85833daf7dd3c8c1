package pgmajors_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/app/pgcluster"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/roles"
)

func TestMain(m *testing.M) { testpg.Main(m) }

func driftKinds(a *roles.Audit) []string {
	var out []string
	for _, d := range a.Drift {
		out = append(out, d.Kind+" "+d.Grantee+" "+d.Object)
	}
	return out
}

// The server the tests got is the one the environment asked for, whichever way it came:
// QL_TEST_DATABASE_URL's server when that is set; else a server of the binaries QL_PG_BIN names
// (make test-matrix sets it per major) or, without QL_PG_BIN, of those pgcluster.FindBinDir
// resolves; else Docker's image (QL_PG_IMAGE, default postgres:15). QL_TEST_SOURCE=docker
// asks for Docker only: a server from anywhere else fails (make test-containers). No way passes
// without a check.
func TestServerIsTheOneTheEnvironmentAskedFor(t *testing.T) {
	s := testpg.Get(t)
	if s.Major() < 15 {
		t.Fatalf("server %q (%d): control-core supports PostgreSQL 15 and later", s.Version, s.VersionNum)
	}
	if !strings.HasPrefix(s.Version, fmt.Sprintf("PostgreSQL %d.", s.Major())) {
		t.Errorf("SELECT version() = %q does not match server_version_num %d", s.Version, s.VersionNum)
	}
	switch {
	case os.Getenv("QL_TEST_SOURCE") == testpg.SourceDocker:
		if s.Source != "testcontainers" || s.BinDir != "" || s.Image != testpg.Image() {
			t.Fatalf("QL_TEST_SOURCE=docker asks for Docker's %s, but the tests ran on %s (image %q, binaries %q)",
				testpg.Image(), s.Source, s.Image, s.BinDir)
		}
		if s.Major() != 15 {
			t.Errorf("image %s: want PostgreSQL 15, the tests ran on %q", s.Image, s.Version)
		}
	case os.Getenv("QL_TEST_DATABASE_URL") != "":
		if bin := os.Getenv("QL_PG_BIN"); bin != "" {
			// testpg prefers the URL: a matrix run with both set would test one major N times
			t.Errorf("QL_PG_BIN=%s asks for its major, but QL_TEST_DATABASE_URL takes precedence: the tests ran on %q", bin, s.Version)
		}
		if s.BinDir != "" || s.Source != "QL_TEST_DATABASE_URL" {
			t.Fatalf("QL_TEST_DATABASE_URL is set, but the tests ran on %s", s.Source)
		}
		// the server behind the URL as given and the one testpg's connections reach are one
		// cluster: the same system identifier, the same version
		want, wantVersion := systemIdentifier(t, os.Getenv("QL_TEST_DATABASE_URL"))
		got, gotVersion := systemIdentifier(t, s.URL("", "postgres"))
		if got != want || gotVersion != wantVersion || gotVersion != s.Version {
			t.Errorf("QL_TEST_DATABASE_URL reaches cluster %d (%q), the tests' connections %d (%q), testpg recorded %q",
				want, wantVersion, got, gotVersion, s.Version)
		}
	case s.BinDir != "":
		want, err := pgcluster.FindBinDir() // QL_PG_BIN when it is set
		if err != nil {
			t.Fatalf("the tests ran on local binaries in %s, but FindBinDir finds none now: %v", s.BinDir, err)
		}
		if s.BinDir != want {
			t.Errorf("the tests ran on the binaries in %s, FindBinDir (QL_PG_BIN=%q) resolves %s", s.BinDir, os.Getenv("QL_PG_BIN"), want)
		}
		out, err := exec.Command(filepath.Join(want, "postgres"), "--version").Output()
		if err != nil {
			t.Fatalf("%s/postgres --version: %v", want, err)
		}
		// "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)" vs "PostgreSQL 15.18 (Debian …) on …"
		_, after, ok := strings.Cut(string(out), "(PostgreSQL) ")
		if !ok || len(strings.Fields(after)) == 0 {
			t.Fatalf("%s/postgres --version: unexpected %q", want, out)
		}
		if prefix := "PostgreSQL " + strings.Fields(after)[0] + " "; !strings.HasPrefix(s.Version, prefix) {
			t.Errorf("%s/postgres is %q, but the tests ran on %q (%s)", want, strings.TrimSpace(string(out)), s.Version, s.Source)
		}
	default:
		if s.Source != "testcontainers" {
			t.Fatalf("the server came from %q: neither QL_TEST_DATABASE_URL, local binaries nor Docker", s.Source)
		}
		if s.Image != testpg.Image() {
			t.Errorf("the tests ran on Docker's %q, QL_PG_IMAGE asks for %q", s.Image, testpg.Image())
		}
		if s.Major() != 15 && os.Getenv("QL_PG_IMAGE") == "" { // testpg runs postgres:15 by default
			t.Errorf("Docker's %s, but the tests ran on %q", testpg.DefaultImage, s.Version)
		}
	}
}

// systemIdentifier is the cluster's system identifier (unique per initdb) and version, read
// through url.
func systemIdentifier(t *testing.T, url string) (int64, string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var id int64
	var version string
	if err := conn.QueryRow(ctx, "SELECT system_identifier, version() FROM pg_catalog.pg_control_system()").Scan(&id, &version); err != nil {
		t.Fatalf("read the system identifier: %v", err)
	}
	return id, version
}

// PostgreSQL 17 added the MAINTAIN table privilege. The owner role holds it on its tables on 17 and
// later (and the model expects it there), MAINTAIN granted to another of the four roles is drift
// with a working fix, and so is membership in pg_maintain. On 15 and 16 the privilege does not
// exist and the model does not expect it.
func TestMaintainPrivilegeFollowsTheServerMajor(t *testing.T) {
	ctx := context.Background()
	d := testpg.New(t)
	names := d.Names
	if a := testpg.ReadAudit(t, d.URL(""), names, roles.AuditOptions{}); !a.OK() {
		t.Fatalf("a fresh database drifts: %v", driftKinds(a))
	}
	super := d.Pool(t, "")
	var ownerMaintain bool
	if err := super.QueryRow(ctx, `SELECT 'MAINTAIN' = ANY (SELECT privilege_type
		FROM aclexplode(acldefault('r', 10)) WHERE grantee = 10)`).Scan(&ownerMaintain); err != nil {
		t.Fatal(err)
	}
	var tablePrivs []string
	rows, err := db.New(super).OwnerDefaultPrivileges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Kind == "table" {
			tablePrivs = append(tablePrivs, r.Privilege)
		}
	}
	major := d.Server.Major()
	if got := slices.Contains(tablePrivs, "MAINTAIN"); got != (major >= 17) || got != ownerMaintain {
		t.Fatalf("PostgreSQL %d: the model's owner privileges on a table are %v; MAINTAIN expected: %v", major, tablePrivs, major >= 17)
	}
	table := "control_core.trigger_schedules"
	var ownerHas bool
	if major >= 17 {
		if err := super.QueryRow(ctx, "SELECT has_table_privilege($1, $2, 'MAINTAIN')", names.Owner, table).Scan(&ownerHas); err != nil || !ownerHas {
			t.Fatalf("PostgreSQL %d: the owner role lacks MAINTAIN on %s (%v)", major, table, err)
		}
	}

	grant := fmt.Sprintf("GRANT MAINTAIN ON %s TO %s", table, names.Runtime)
	_, err = super.Exec(ctx, grant)
	if major < 17 {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42601" { // syntax_error: "unrecognized privilege type"
			t.Fatalf("PostgreSQL %d: %s: want the server to reject an unknown privilege, got %v", major, grant, err)
		}
		var n int
		if err := super.QueryRow(ctx, "SELECT count(*) FROM pg_roles WHERE rolname = 'pg_maintain'").Scan(&n); err != nil || n != 0 {
			t.Fatalf("PostgreSQL %d has a pg_maintain role (%d, %v)", major, n, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", grant, err)
	}
	a := testpg.ReadAudit(t, d.URL(""), names, roles.AuditOptions{})
	if len(a.Drift) != 1 || a.Drift[0].Kind != "extra_privilege" || a.Drift[0].Grantee != names.Runtime ||
		a.Drift[0].Object != table || !strings.Contains(strings.Join(a.SQL(), "\n"), "REVOKE MAINTAIN ON TABLE "+table) {
		t.Fatalf("after %s: drift %+v, fix %v; want one extra MAINTAIN for %s", grant, a.Drift, a.SQL(), names.Runtime)
	}
	d.Exec(t, strings.Join(a.SQL(), "\n"))
	if a := testpg.ReadAudit(t, d.URL(""), names, roles.AuditOptions{}); !a.OK() {
		t.Fatalf("after the fix %v: %v", a.SQL(), driftKinds(a))
	}

	// The owner's own MAINTAIN is part of the model on 17+: losing it is drift too.
	d.Exec(t, fmt.Sprintf("SET ROLE %s; REVOKE MAINTAIN ON %s FROM %s; RESET ROLE", names.Owner, table, names.Owner))
	a = testpg.ReadAudit(t, d.URL(""), names, roles.AuditOptions{})
	if len(a.Drift) != 1 || a.Drift[0].Kind != "missing_privilege" || a.Drift[0].Grantee != names.Owner {
		t.Fatalf("after the owner's MAINTAIN was revoked: drift %+v; want one missing MAINTAIN for %s", a.Drift, names.Owner)
	}
	d.Exec(t, strings.Join(a.SQL(), "\n"))
	if a := testpg.ReadAudit(t, d.URL(""), names, roles.AuditOptions{}); !a.OK() {
		t.Fatalf("after the fix %v: %v", a.SQL(), driftKinds(a))
	}
}

// pg_maintain (PostgreSQL 17) is a predefined role like pg_read_all_data: one of the four roles
// made a member of it is membership drift, and the fix removes it. Role memberships are
// cluster-wide, so this test uses roles of its own.
func TestPgMaintainMembershipIsDrift(t *testing.T) {
	d := testpg.NewEmpty(t)
	names := privateNames(t, d, true)
	major := d.Server.Major()
	predefined := "pg_maintain"
	if major < 17 {
		predefined = "pg_read_all_data" // the same rule, on a major without pg_maintain
	}
	d.Exec(t, fmt.Sprintf("GRANT %s TO %s", predefined, names.Runtime))
	a := testpg.ReadAudit(t, d.URL(""), names, roles.AuditOptions{})
	var got []roles.Drift
	for _, dr := range a.Drift {
		if dr.Kind == "membership" {
			got = append(got, dr)
		}
	}
	if len(got) != 1 || got[0].Grantee != names.Runtime || got[0].Object != predefined {
		t.Fatalf("PostgreSQL %d: after GRANT %s TO %s: membership drift %+v", major, predefined, names.Runtime, got)
	}
	fix := strings.Join(got[0].SQL, "\n")
	if major >= 16 && !strings.Contains(fix, "GRANTED BY") {
		t.Errorf("PostgreSQL %d keeps one membership per grantor: the fix %q should name it", major, fix)
	}
	d.Exec(t, fix)
	for _, dr := range testpg.ReadAudit(t, d.URL(""), names, roles.AuditOptions{}).Drift {
		if dr.Kind == "membership" {
			t.Errorf("after %q: %+v", fix, dr)
		}
	}
}

// Since PostgreSQL 16 a non-superuser CREATEROLE role that creates a role is granted membership in
// it WITH ADMIN OPTION, by the bootstrap superuser; before 16 it is not. `roles create` works as
// such a role on every major, and the audit never counts those memberships as drift: on 16 and
// later it lists them as notes.
func TestRolesCreateByACreateRoleRoleAcrossMajors(t *testing.T) {
	ctx := context.Background()
	d := testpg.NewEmpty(t)
	names := privateNames(t, d, false)
	dba := names.Prefix + "dba"
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
	major := d.Server.Major()
	type membership struct {
		role, grantor string
		admin         bool
	}
	var got []membership
	rows, err := d.Pool(t, "").Query(ctx, `SELECT r.rolname, g.rolname, m.admin_option
		FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid JOIN pg_roles g ON g.oid = m.grantor
		JOIN pg_roles u ON u.oid = m.member WHERE u.rolname = $1 ORDER BY 1`, dba)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var m membership
		if err := rows.Scan(&m.role, &m.grantor, &m.admin); err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var want []membership
	if major >= 16 {
		for _, r := range slices.Sorted(slices.Values(names.All())) {
			want = append(want, membership{r, "postgres", true})
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("PostgreSQL %d: %s's memberships after roles create: %+v, want %+v", major, dba, got, want)
	}
	a := testpg.ReadAudit(t, d.URL(""), names, roles.AuditOptions{})
	for _, dr := range a.Drift {
		if dr.Kind == "membership" {
			t.Errorf("PostgreSQL %d: the creator's membership counted as drift: %+v", major, dr)
		}
	}
	notes := 0
	for _, n := range a.Notes {
		if n.Kind == "member_of_model_role" && n.Grantee == dba {
			notes++
		}
	}
	if notes != len(want) {
		t.Errorf("PostgreSQL %d: %d notes of %s's memberships, want %d: %+v", major, notes, dba, len(want), a.Notes)
	}
}

// privateNames returns role names under a prefix of the test's own (roles are cluster-wide):
// when the test ends the database and every role whose name starts with the prefix are dropped
// (testpg.DB.PrivatePrefix), so a role a test creates is named with the prefix. bootstrap runs
// roles create for them as the superuser.
func privateNames(t *testing.T, d *testpg.DB, bootstrap bool) roles.Names {
	t.Helper()
	names, err := roles.NewNames(d.PrivatePrefix(t, "m"))
	if err != nil {
		t.Fatal(err)
	}
	if !bootstrap {
		return names
	}
	if err := d.Server.BootstrapNames(context.Background(), d.Name, names); err != nil {
		t.Fatalf("roles create %s on %s: %v", names.Prefix, d.Name, err)
	}
	return names
}
