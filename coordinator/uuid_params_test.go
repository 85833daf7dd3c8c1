package coordinator

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// Every value shape a uuid.UUID can take, bound to every parameter type it can meet, in every
// query exec mode, reads back the same through a connection with dbconn.RegisterTypes as through
// one without (pgx's driver.Valuer path).
func TestUUIDWrapperEncodesAsPgxDid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	u := uuid.MustParse("0192f3a4-5b6c-7d8e-9fa0-b1c2d3e4f506")
	nilU := uuid.Nil
	values := map[string]any{
		"uuid.UUID": u, "uuid.Nil": uuid.Nil, "*uuid.UUID": &u, "*uuid.UUID(Nil)": &nilU, "(*uuid.UUID)(nil)": (*uuid.UUID)(nil),
		"NullUUID valid": uuid.NullUUID{UUID: u, Valid: true}, "NullUUID null": uuid.NullUUID{},
		"[]uuid.UUID": []uuid.UUID{u, uuid.Nil}, "[]uuid.UUID{}": []uuid.UUID{}, "[]uuid.UUID(nil)": []uuid.UUID(nil),
		"[]*uuid.UUID": []*uuid.UUID{&u, nil}, "[]NullUUID": []uuid.NullUUID{{UUID: u, Valid: true}, {}},
		"[][]uuid.UUID": [][]uuid.UUID{{u}, {uuid.Nil}}, "[16]byte": [16]byte(u), "any(uuid.UUID)": any(u),
	}
	casts := []string{"uuid", "text", "varchar", "uuid[]", "text[]", "jsonb", "bytea"}
	cfg := f.d.Config(t, "").Pool.ConnConfig.Copy()
	plainCfg := cfg.Copy()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		cfg.DefaultQueryExecMode, plainCfg.DefaultQueryExecMode = mode, mode
		ours, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := dbconn.RegisterTypes(ctx, ours); err != nil {
			t.Fatal(err)
		}
		plain, err := pgx.ConnectConfig(ctx, plainCfg)
		if err != nil {
			t.Fatal(err)
		}
		for name, v := range values {
			for _, c := range casts {
				q := fmt.Sprintf("SELECT ($1::%s)::text", c)
				var got, want *string
				errGot := ours.QueryRow(ctx, q, v).Scan(&got)
				errWant := plain.QueryRow(ctx, q, v).Scan(&want)
				g, w := fmt.Sprint(deref(got), errGot != nil), fmt.Sprint(deref(want), errWant != nil)
				if g != w {
					t.Errorf("%s, %s as %s: ours %s (%v), pgx's %s (%v)", mode, name, c, g, errGot, w, errWant)
				}
			}
		}
		_ = ours.Close(ctx)
		_ = plain.Close(ctx)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<NULL>"
	}
	return *s
}
