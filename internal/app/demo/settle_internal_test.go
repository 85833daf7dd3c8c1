package demo

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// Admitted Runs the workers never ran (here: their token is revoked as soon as it exists, so no
// worker is offered anything) fail the demo's execution audit: it does not end as a success
// whose loop ran nothing.
func TestRunsLeftLiveFailTheDemo(t *testing.T) {
	t.Parallel()
	d := testpg.NewEmpty(t)
	server, err := dbconn.Resolve(d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	out := &syncOut{}
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Options{Replicas: 1, Duration: 2 * time.Second, Server: server, Out: out, settle: time.Second})
	}()
	var name string
	eventually.NoError(t, 60*time.Second, "the demo's database to exist", func() error {
		m := strings.Fields(out.String())
		for i, w := range m {
			if w == "database" && i+1 < len(m) && strings.HasPrefix(m[i+1], "qlsched_demo_") {
				name = m[i+1]
				return nil
			}
		}
		return errors.New("not named yet")
	})
	eventually.NoError(t, 60*time.Second, "the workers' token to be revoked", func() error {
		conn, err := pgx.Connect(context.Background(), d.Server.URL("", name))
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		tag, err := conn.Exec(context.Background(), "UPDATE control_core.worker_tokens SET revoked_at_ms = control_core.db_now_ms() WHERE revoked_at_ms IS NULL")
		if err == nil && tag.RowsAffected() == 0 {
			err = errors.New("no token yet")
		}
		return err
	})
	err = <-done
	if !errors.Is(err, ErrLoopAudit) || !strings.Contains(out.String(), "still live after 1s") {
		t.Errorf("demo: %v; want the execution audit failed by Runs still live\n%s", err, out.String())
	}
}

type syncOut struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncOut) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncOut) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
