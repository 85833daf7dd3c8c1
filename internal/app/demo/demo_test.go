package demo_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/app/demo"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// The demo's replicas start as `qlsched run` starts one (readiness, startup recovery, rounds), its
// progress comes in lines (a log gets no carriage returns), and every occurrence is admitted once.
func TestDemoOnAServerStartsReplicasAsRunDoes(t *testing.T) {
	t.Parallel()
	d := testpg.NewEmpty(t)
	server, err := dbconn.Resolve(d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := demo.Run(context.Background(), demo.Options{Replicas: 1, Duration: 2 * time.Second, Server: server, Out: &out}); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{"demo-replica-1: ready; startup recovery: 0 candidates", "pg-0001-bootstrap … pg-0023-loop-integrity",
		"control-core is at v22 / loop_integrity", "every occurrence admitted exactly once"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "\r") {
		t.Errorf("output holds a carriage return:\n%q", out.String())
	}
}

func TestOptionsAreCheckedBeforeAnythingStarts(t *testing.T) {
	t.Parallel()
	for _, o := range []demo.Options{
		{Replicas: 0, Duration: time.Second},
		{Replicas: demo.MaxReplicas + 1, Duration: time.Second},
		{Replicas: 1, Duration: demo.MinDuration - 1},
		{Replicas: 1, Duration: demo.MaxDuration + 1},
	} {
		var out strings.Builder
		o.Out = &out
		if err := demo.Run(context.Background(), o); err == nil || out.Len() != 0 {
			t.Errorf("%+v: err %v, output %q; want an error and nothing started", o, err, out.String())
		}
	}
}
