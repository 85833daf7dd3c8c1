package main

import (
	"bufio"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/qlcontrol/controlcore/internal/drifttest"
	"github.com/qlcontrol/controlcore/internal/testpg"
)

// Readiness is verify for the runtime's needs: every catalog change of drifttest that touches
// what the runtime reads or writes keeps `qlsched run` from starting (exit 1, the object named,
// nothing claimed); a change that does not (another role's own setting or table) lets it start.
func TestRunRefusesEveryDriftThatTouchesTheRuntime(t *testing.T) {
	t.Parallel()
	for _, c := range drifttest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			d := testpg.New(t)
			if c.PrivateRoles {
				d = testpg.NewPrivate(t)
			}
			publish(t, []string{"--database-url", d.URL(d.Names.Admin)},
				[]string{"project", "create", "--project", "p"},
				[]string{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", `{"image":"x"}`},
				[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "* * * * * *"})
			d.Exec(t, c.Render(d.Name, d.Names))
			args := []string{"run", "--role-prefix", d.Names.Prefix, "--database-url", d.URL(d.Names.Runtime),
				"--http-addr", "127.0.0.1:0", "--owner", "drift"}
			if c.Runtime {
				r := run(t, args...)
				if r.code != 1 || !strings.Contains(r.stderr, c.Object) || !strings.Contains(r.stderr, "not ready") {
					t.Errorf("run: exit %d, want 1 naming %q\n%s", r.code, c.Object, r.stderr)
				}
				assertNothingClaimed(t, d)
				return
			}
			cmd := exec.Command(qlsched(t), args...)
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			var logged strings.Builder
			for lines := bufio.NewScanner(stderr); lines.Scan(); {
				logged.WriteString(lines.Text() + "\n")
				if strings.Contains(lines.Text(), "replica running") {
					_ = cmd.Process.Signal(syscall.SIGTERM)
				}
			}
			if err := cmd.Wait(); err != nil || !strings.Contains(logged.String(), "replica running") {
				t.Errorf("a change that does not touch the runtime: want the replica to start and stop cleanly, got %v\n%s", err, logged.String())
			}
		})
	}
}
