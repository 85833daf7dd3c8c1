package main

import (
	"bytes"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// runEnv is run with the connection variables (QL_DATABASE_URL, PG*) of this process removed and
// env added.
func runEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(qlsched(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "QL_DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run qlsched %v: %v", args, err)
	}
	return result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

// With no connection given at all, a command says so and how to give one, before connecting
// (libpq's default, the local socket as the OS user, is never tried); one PG* variable that names
// a target is a connection given, as before.
func TestNoDatabaseGivenSaysHowToGiveOne(t *testing.T) {
	t.Parallel()
	r := runEnv(t, []string{"PGPASSWORD=pw-never-shown", "PGSSLMODE=disable"}, "status")
	if r.code != 2 || !strings.Contains(r.stderr, "no database given: pass --database-url, or set QL_DATABASE_URL") ||
		strings.Contains(r.stderr, "cannot connect") {
		t.Errorf("no connection given: exit %d, stderr %q; want exit 2 naming --database-url and QL_DATABASE_URL", r.code, r.stderr)
	}
	r = runEnv(t, []string{"PGHOST=127.0.0.1", "PGPORT=1", "PGPASSWORD=pw-never-shown"}, "status")
	if r.code != 3 || !strings.Contains(r.stderr, "cannot connect to") || !strings.Contains(r.stderr, "@127.0.0.1:1/") {
		t.Errorf("PGHOST and PGPORT given: exit %d, stderr %q; want exit 3 trying 127.0.0.1:1", r.code, r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, "pw-never-shown") {
		t.Error("the password leaked")
	}
}

// A database that does not exist on a server that is up is named as such (SQLSTATE 3D000), not
// hidden behind the refused TLS attempt sslmode=prefer makes first.
func TestMissingDatabaseSaysItDoesNotExist(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testpg.Get(t).URL("", "no_such_database_3d000"))
	if err != nil {
		t.Fatal(err)
	}
	u.RawQuery = "" // the default sslmode, prefer: TLS first, refused by this server, then plain
	r := run(t, "status", "--database-url", u.String())
	if r.code != 3 || !strings.Contains(r.stderr, `database "no_such_database_3d000" does not exist`) ||
		strings.Contains(r.stderr, "TLS") {
		t.Errorf("exit %d, stderr %q; want exit 3 saying the database does not exist, and nothing about TLS", r.code, r.stderr)
	}
}

// Resuming (or pausing) an archived project says it is archived, and not "not found": the
// project exists, and the reader must not go looking for a typo. Still exit 1.
func TestResumeAnArchivedProjectSaysArchived(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	adm := []string{"--database-url", d.URL("ql_admin")}
	publish(t, adm, []string{"project", "create", "--project", "old"})
	d.Exec(t, `UPDATE control_core.projects SET state = 'archived' WHERE project_id = 'old'`)
	for _, action := range []string{"resume", "pause"} {
		r := run(t, append([]string{"project", action, "--project", "old"}, adm...)...)
		if r.code != 1 || !strings.Contains(r.stderr, "project old is archived: it cannot be "+action+"d") ||
			strings.Contains(r.stderr, "not found") {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 saying the project is archived, without \"not found\"", action, r.code, r.stderr)
		}
	}
}

// An admin command run as the runtime role is refused by the server (SQLSTATE 42501); the error
// adds that admin commands run as the admin role, and the role it ran as.
func TestAdminCommandAsRuntimeNamesTheAdminRole(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	r := run(t, "project", "create", "--project", "p", "--database-url", d.URL("ql_runtime"))
	if r.code != 3 || !strings.Contains(r.stderr, "permission denied") ||
		!strings.Contains(r.stderr, "hint: admin commands run as the admin role ql_admin; connected as ql_runtime") {
		t.Errorf("exit %d, stderr %q; want exit 3 with the hint naming ql_admin", r.code, r.stderr)
	}
	if strings.Contains(r.stderr, testpg.Password) {
		t.Error("the password leaked")
	}
}

// status as a role that may not read control_core (here not even connect: the worker ingress
// role) says which roles may run it.
func TestStatusAsARoleThatCannotReadNamesTheRolesThatCan(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	r := run(t, "status", "--database-url", d.URL("ql_worker_ingress"))
	if r.code != 3 || !strings.Contains(r.stderr, "permission denied") ||
		!strings.Contains(r.stderr, "hint: qlsched status runs as a role that may read control_core: ql_admin or ql_runtime; connected as ql_worker_ingress") {
		t.Errorf("exit %d, stderr %q; want exit 3 with the hint naming ql_admin and ql_runtime", r.code, r.stderr)
	}
}

// A check with --prune that finds triggers to disable suggests the command that applies exactly
// that plan: with --prune (without it, nothing would be disabled). A check without --prune says
// what --prune would do to the unlisted triggers.
func TestApplyCheckSuggestsTheCommandThatAppliesThePlan(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	adminURL := d.URL("ql_admin")
	file := filepath.Join(t.TempDir(), "schedules.yaml")
	two := `schema: qlsched.schedules/v1
projects:
  - id: ops
    tasks:
      - id: sweep
        executor_spec: {image: "ops/sweep:1"}
    triggers:
      - id: hourly
        task: sweep
        cron: "0 * * * *"
      - id: daily
        task: sweep
        cron: "0 3 * * *"
`
	writeFile(t, file, two)
	if r := run(t, "apply", "-f", file, "--database-url", adminURL); r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	writeFile(t, file, strings.Replace(two, "      - id: daily\n        task: sweep\n        cron: \"0 3 * * *\"\n", "", 1))

	r := run(t, "apply", "-f", file, "--check", "--prune", "--database-url", adminURL)
	if r.code != 1 || !strings.Contains(r.stderr, "(qlsched apply -f "+file+" --prune applies the plan)") {
		t.Errorf("check --prune: exit %d, stderr %q; want exit 1 suggesting apply with --prune", r.code, r.stderr)
	}
	r = run(t, "apply", "-f", file, "--check", "--database-url", adminURL)
	if r.code != 0 || !strings.Contains(r.stdout, "1 trigger not in the file: left as they are; apply with --prune disables the enabled ones") {
		t.Errorf("check: exit %d, stdout %q; want exit 0 saying what --prune would do", r.code, r.stdout)
	}
}

// The hint never names the role the command already ran as as the role it needs: a role whose
// name merely ends in "admin" (h34sysadmin), or the admin role itself refused (its grants
// missing), is told that it has the admin role's name but lacks its grants, not "run as
// h34sysadmin; connected as h34sysadmin".
func TestPermissionHintNeverNamesTheConnectedRoleAsTheCure(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	d.Exec(t, `CREATE ROLE h34sysadmin LOGIN PASSWORD '`+testpg.Password+`'`)
	t.Cleanup(func() { d.Exec(t, `DROP ROLE IF EXISTS h34sysadmin`) })
	r := run(t, "project", "create", "--project", "p", "--database-url", d.URL("h34sysadmin"))
	if r.code != 3 || !strings.Contains(r.stderr, "permission denied") {
		t.Fatalf("exit %d, stderr %q; want exit 3, permission denied", r.code, r.stderr)
	}
	t.Logf("stderr: %s", r.stderr)
	if strings.Contains(r.stderr, "run as the admin role h34sysadmin; connected as h34sysadmin") ||
		!strings.Contains(r.stderr, "lacks the admin role's grants") {
		t.Errorf("stderr %q: the hint names the connected role as the one to use; want it to say the role lacks the grants", r.stderr)
	}
}

// The suggested apply command can be pasted: a file path with a space or shell metacharacters
// is one quoted shell word, not split or expanded by the shell.
func TestApplyCheckSuggestionQuotesTheFile(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	file := filepath.Join(t.TempDir(), "my schedules $(id).yaml")
	writeFile(t, file, `schema: qlsched.schedules/v1
projects:
  - id: ops
    tasks:
      - id: sweep
        executor_spec: {image: "ops/sweep:1"}
`)
	r := run(t, "apply", "-f", file, "--check", "--database-url", d.URL("ql_admin"))
	want := "(qlsched apply -f '" + file + "' applies the plan)"
	if r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("check: exit %d, stderr %q; want exit 1 with %q", r.code, r.stderr, want)
	}
}
