package readiness

import (
	"context"
	"fmt"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// CastDrift reports every cast created in the database from or to a built-in type (see the
// UserCasts query): casts are looked up by type, not by search_path, so such a cast changes what
// control-core's statements compute even though every session runs with search_path pg_catalog.
// q must run with search_path pg_catalog (see ReadFacts).
func CastDrift(ctx context.Context, conn dbconn.Querier) ([]Drift, error) {
	q := db.New(conn)
	casts, err := q.UserCasts(ctx)
	if err != nil {
		return nil, fmt.Errorf("read casts: %w", err)
	}
	out := make([]Drift, 0, len(casts))
	for _, c := range casts {
		via := "binary coercion or I/O conversion"
		if c.Function != "" {
			via = "function " + c.Function
		}
		// format_type renders names the way a statement needs them (quoted where needed).
		stmt := fmt.Sprintf("DROP CAST (%s AS %s);", c.Source, c.Target)
		out = append(out, Drift{Kind: "extra_cast", Object: fmt.Sprintf("cast (%s AS %s)", c.Source, c.Target),
			Message: fmt.Sprintf("a cast from %s to %s (%s, %s) was created in this database: it replaces the conversion any statement asks for, whatever its search_path",
				c.Source, c.Target, via, c.Context),
			Fix: stmt, SQL: []string{stmt}})
	}
	return out, nil
}
