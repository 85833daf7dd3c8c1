package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/drifttest"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// Readiness is verify for the runtime's needs: every catalog change of drifttest that touches
// what the runtime reads or writes keeps `qlsched run` from starting (exit 1, the object named,
// nothing claimed); a change that does not (another role's own setting or table) lets it start.
func TestRunRefusesEveryDriftThatTouchesTheRuntime(t *testing.T) {
	t.Parallel()
	for _, c := range drifttest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			publishOn := func(d *testpg.DB) {
				publish(t, []string{"--database-url", d.URL(d.Names.Admin)},
					[]string{"project", "create", "--project", "p"},
					[]string{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", `{"image":"x"}`},
					[]string{"trigger", "publish", "--project", "p", "--trigger", "t", "--task", "k", "--cron", "* * * * * *"})
			}
			// The cases on the shared roles clone one database published once (three commands
			// fewer each); those with roles of their own publish on theirs.
			var d *testpg.DB
			if c.PrivateRoles {
				d = c.DB(t)
				publishOn(d)
			} else {
				d = testpg.NewSeeded(t, "drift: p/k/t every second", publishOn)
			}
			d.Exec(t, c.Render(d.Name, d.Names))
			args := []string{"run", "--role-prefix", d.Names.Prefix, "--database-url", d.URL(d.Names.Runtime),
				"--http-addr", "127.0.0.1:0", "--owner", "drift"}
			if c.Runtime {
				// bounded: a replica that starts on such drift is the failure, not a hang until the
				// test binary's timeout
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				r := runContext(ctx, t, args...)
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
					if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
						t.Fatalf("SIGTERM: %v", err)
					}
				}
			}
			if err := cmd.Wait(); err != nil || !strings.Contains(logged.String(), "replica running") {
				t.Errorf("a change that does not touch the runtime: want the replica to start and stop cleanly, got %v\n%s", err, logged.String())
			}
		})
	}
}

// A function or operator in public (or in a schema named after the role) that shadows a
// built-in one the queries call unqualified (||, convert_to) is not drift of control-core, and
// must not matter: every session runs with search_path pg_catalog, so a replica admits as if they
// were not there. With the default search_path each of them made every admit fail, or ran code
// of whoever created them as the runtime role. (A cast is not found by path: a user-defined cast
// is readiness drift instead.)
func TestRunIsImmuneToShadowingObjectsInPublic(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	publishEverySecond(t, d, "t")
	d.Exec(t, `CREATE FUNCTION public.cat(text, bigint) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT $1 || 'X' || $2::text $$;
		CREATE OPERATOR public.|| (LEFTARG = text, RIGHTARG = bigint, FUNCTION = public.cat);
		CREATE FUNCTION public.convert_to(text, text) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$ SELECT '\x00'::bytea $$;
		CREATE SCHEMA ql_runtime AUTHORIZATION ql_runtime;
		CREATE OPERATOR ql_runtime.|| (LEFTARG = text, RIGHTARG = bigint, FUNCTION = public.cat)`)
	cmd := exec.Command(qlsched(t), "run", "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0",
		"--cadence", "100ms", "--owner", "shadowed")
	logged := &syncBuffer{}
	cmd.Stderr = logged
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	su := d.Pool(t, "")
	ctx := context.Background()
	eventually.NoError(t, 20*time.Second, "2 runs admitted", func() error {
		var runs int
		if err := su.QueryRow(ctx, "SELECT count(*) FROM control_core.runs").Scan(&runs); err != nil {
			t.Fatal(err)
		}
		if runs < 2 {
			return fmt.Errorf("%d runs; the replica's log so far:\n%s", runs, logged.String())
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit: %v\n%s", err, logged.String())
	}
	if strings.Contains(logged.String(), "level=ERROR") || strings.Contains(logged.String(), "level=WARN") {
		t.Errorf("the replica logged errors:\n%s", logged.String())
	}
}
