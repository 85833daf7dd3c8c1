package migrate_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// A database the stop-43 release migrated only part of the way (qlmigrate up --to N), then
// today's up: its history mixes released texts (pg-0020, and pg-0021 from 21 on) with today's
// (pg-0021 below 21, pg-0023 below 23). Every such history must end in a fresh migration's schema,
// and verify must pass with one released_text note per released text that ran, no more.
func TestAPartlyStop43DatabaseConvergesToAFreshOne(t *testing.T) {
	t.Parallel()
	fresh := contractOf(t, testpg.New(t))
	for _, tc := range []struct {
		to    int64
		notes int
	}{{20, 1}, {21, 2}, {22, 2}, {23, 3}, {26, 3}} {
		t.Run(fmt.Sprintf("to %d", tc.to), func(t *testing.T) {
			ctx := context.Background()
			d := testpg.NewEmpty(t)
			if _, err := open(t, d, "", stop43Stream(t)).Up(ctx, tc.to); err != nil {
				t.Fatalf("stop-43 up --to %d: %v", tc.to, err)
			}
			if _, err := open(t, d, "", nil).Up(ctx, 0); err != nil {
				t.Fatalf("today's up after stop-43 up --to %d: %v", tc.to, err)
			}
			rep := verifyAll(t, d)
			notes := 0
			for _, c := range rep.Checks {
				if c.Status != verify.StatusOK {
					t.Errorf("check %s: %s %+v", c.Name, c.Status, c.Findings)
				}
				for _, f := range c.Findings {
					if f.Kind == "released_text" {
						notes++
					}
				}
			}
			if !rep.OK || notes != tc.notes {
				t.Errorf("verify: ok %v, %d released_text notes, want ok and %d", rep.OK, notes, tc.notes)
			}
			if got := contractOf(t, d); !bytes.Equal(got, fresh) {
				t.Errorf("the schema differs from a fresh migration's:\n%s", lineDiff(fresh, got))
			}
		})
	}
}
