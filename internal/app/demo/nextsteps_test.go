package demo_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/app/demo"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// A demo that succeeded ends, after its cleanup, with the next steps: the README's commands, from
// installing the binaries to a replica of one's own and the commands that inspect its Runs.
func TestDemoEndsWithTheREADMEsNextSteps(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	d := testpg.NewEmpty(t)
	server, err := dbconn.Resolve(d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := demo.Run(context.Background(), demo.Options{Replicas: 1, Duration: 2 * time.Second, Server: server, Out: &out}); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	next := strings.LastIndex(text, "==> next steps")
	if next < 0 || next < strings.LastIndex(text, "==> dropping database") || next < strings.Index(text, "every occurrence admitted exactly once") {
		t.Fatalf("the output does not end with the next steps, after the audit and the cleanup:\n%s", text)
	}
	tail := text[next:]
	for _, want := range []string{"go install ./cmd/...", "CREATE DATABASE", "qlmigrate roles create", "qlmigrate up",
		"qlsched apply -f examples/schedules.yaml", "qlsched run   # on every replica", "qlsched status", "qlsched trigger list",
		"qlsched runs list --state queued", "dispatcher"} {
		if !strings.Contains(tail, want) {
			t.Errorf("the next steps lack %q:\n%s", want, tail)
		}
		if !strings.Contains(string(readme), want) {
			t.Errorf("the next steps suggest %q, which README.md does not show", want)
		}
	}
	if strings.Contains(tail, "\r") {
		t.Errorf("the next steps hold a carriage return: %q", tail)
	}
}
