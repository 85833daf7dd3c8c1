package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/jsondoc"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// Every qlsched command either prints, with --format json, exactly one JSON document whose
// schema field docs/json.md lists and whose keys are all snake_case, or refuses --format json
// with exit 2 before it starts anything. The command list comes from the cobra tree: a command
// added without a case here (and so without a checked document) fails the test.
func TestEveryQlschedJSONDocumentCarriesItsSchema(t *testing.T) {
	t.Parallel()
	docs, err := os.ReadFile("../../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	d := testpg.New(t)
	admin := []string{"--database-url", d.URL("ql_admin")}
	file := filepath.Join(t.TempDir(), "schedules.yaml")
	if err := os.WriteFile(file, []byte(`schema: qlsched.schedules/v1
projects:
  - id: filed
    tasks:
      - id: k
        executor_spec: {image: "x"}
    triggers:
      - id: t
        task: k
        cron: "0 3 * * *"
        timezone: Europe/Berlin
`), 0o600); err != nil {
		t.Fatal(err)
	}
	const runID = "0b9f5f4e-8c1a-4c3e-9d52-3a8f0c6e2b11"

	type jsonCase struct {
		command string   // the command's words, as in the cobra tree
		args    []string // its arguments, the connection included
		schema  string
	}
	trig := []string{"--project", "p", "--trigger", "t"}
	cases := []jsonCase{
		{"project create", []string{"project", "create", "--project", "p"}, "qlsched.project-create/v1"},
		{"task publish", []string{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", `{"image":"x"}`}, "qlsched.task-publish/v1"},
		{"trigger publish", append([]string{"trigger", "publish", "--task", "k", "--cron", "0 3 * * *", "--timezone", "Europe/Berlin"}, trig...), "qlsched.trigger-publish/v1"},
		{"task rollout", []string{"task", "rollout", "--project", "p", "--task", "k"}, "qlsched.task-rollout/v1"},
		{"trigger disable", append([]string{"trigger", "disable"}, trig...), "qlsched.trigger-disable/v1"},
		{"trigger enable", append([]string{"trigger", "enable"}, trig...), "qlsched.trigger-enable/v1"},
		{"apply", []string{"apply", "-f", file}, "qlsched.apply-plan/v1"},
		{"project pause", []string{"project", "pause", "--project", "p"}, "qlsched.project-state/v1"},
		{"project resume", []string{"project", "resume", "--project", "p"}, "qlsched.project-state/v1"},
		// from here on the database holds a Run (arranged below) for the read commands to show
		{"project list", []string{"project", "list"}, "qlsched.project-list/v1"},
		{"task list", []string{"task", "list"}, "qlsched.task-list/v1"},
		{"trigger list", []string{"trigger", "list"}, "qlsched.trigger-list/v1"},
		{"trigger show", append([]string{"trigger", "show"}, trig...), "qlsched.trigger-show/v1"},
		{"runs list", []string{"runs", "list"}, "qlsched.runs-list/v1"},
		{"runs show", []string{"runs", "show", runID}, "qlsched.runs-show/v1"},
		{"status", []string{"status"}, "qlsched.status/v1"},
		{"worker token create", []string{"worker", "token", "create", "--name", "fleet"}, "qlsched.worker-token-create/v1"},
		{"worker token list", []string{"worker", "token", "list"}, "qlsched.worker-token-list/v1"},
		{"worker token revoke", []string{"worker", "token", "revoke", "--name", "fleet"}, "qlsched.worker-token-revoke/v1"},
		{"workers list", []string{"workers", "list", "--all"}, "qlsched.workers-list/v1"},
		{"replicas", []string{"replicas"}, "qlsched.replicas/v1"},
		{"runs cancel", []string{"runs", "cancel", runID}, "qlsched.runs-cancel/v1"},
		{"trigger run-now", append([]string{"trigger", "run-now", "--reason", "check"}, trig...), "qlsched.trigger-run-now/v1"},
		{"runs prune", []string{"runs", "prune", "--project", "p", "--older-than", "1h", "--dry-run"}, "qlsched.runs-prune/v1"},
		{"trigger archive", append([]string{"trigger", "archive"}, trig...), "qlsched.trigger-archive/v1"},
	}
	for i := range cases {
		cases[i].args = append(cases[i].args, admin...)
	}
	// commands that print no document refuse --format json (exit 2) before they start anything
	refused := map[string][]string{
		"run": {"run", "--http-addr", "127.0.0.1:0", "--database-url", d.URL("ql_runtime")},
		"dispatch": {"dispatch", "--owner", "d1", "--listen", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
			"--database-url", d.URL("ql_runtime")},
		"ui": {"ui", "--http-addr", "127.0.0.1:0", "--database-url", d.URL("ql_admin")},
	}

	leaves := jsondoc.Commands(t, (&app{}).rootCmd())
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.command] = true
	}
	for name := range refused {
		covered[name] = true
	}
	var missing []string
	for name := range leaves {
		if !covered[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("commands without a JSON contract case (give each a schema in docs/json.md and a case here, or refuse --format json): %v", missing)
	}
	for name := range covered {
		if leaves[name] == nil {
			t.Errorf("case %q names no command of the tree", name)
		}
	}

	for name, args := range refused {
		r := run(t, append(args, "--format", "json")...)
		if r.code != 2 || r.stdout != "" {
			t.Errorf("%s --format json: exit %d, stdout %q; want 2 and nothing on stdout\n%s", name, r.code, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stderr, "--format json") {
			t.Errorf("%s --format json: stderr %q does not name the flag", name, r.stderr)
		}
	}

	for i, c := range cases {
		if c.command == "project list" && i > 0 {
			// an admitted Run of p/t, as a replica writes it, for runs list, runs show and status
			d.Exec(t, `
				INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
				        trigger_revision, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
				SELECT $1::uuid, 'p', 'k', 1, kr.execution_revision_id, 't', 1, 100000,
				       'ql3:cron:v1:t:1:100000', 'queued', 'runtime', 100050, 100050, 100050
				FROM control_core.task_revisions kr WHERE kr.project_id = 'p' AND kr.task_id = 'k' AND kr.revision = 1`, runID)
		}
		r := run(t, append(c.args, "--format", "json")...)
		if r.code != 0 {
			t.Errorf("%s --format json: exit %d; want 0\n%s%s", c.command, r.code, r.stdout, r.stderr)
			continue
		}
		var doc any
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		if err := dec.Decode(&doc); err != nil {
			t.Errorf("%s --format json: not JSON: %v\n%s", c.command, err, r.stdout)
			continue
		}
		if dec.More() {
			t.Errorf("%s --format json: more than one document\n%s", c.command, r.stdout)
		}
		obj, ok := doc.(map[string]any)
		if !ok {
			t.Errorf("%s --format json: not a JSON object\n%s", c.command, r.stdout)
			continue
		}
		if obj["schema"] != c.schema {
			t.Errorf("%s --format json: schema %v, want %q", c.command, obj["schema"], c.schema)
		}
		if !strings.Contains(string(docs), "`"+c.schema+"`") {
			t.Errorf("docs/json.md does not list %s", c.schema)
		}
		if bad := jsondoc.NotSnakeCase("", obj); len(bad) > 0 {
			sort.Strings(bad)
			t.Errorf("%s --format json: keys not snake_case: %v", c.command, bad)
		}
	}
}
