package dbconn

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// ql_pooler picks the mode: transaction pooling gives up named prepared statements and sends the
// server-side bounds per transaction; session pooling sends them per transaction too but keeps
// the statement cache; none (or nothing) is a direct connection, whose hot path gets no extra
// statement (no prologue) and whose bounds go at startup.
func TestPoolerParamSelectsTheMode(t *testing.T) {
	for _, tc := range []struct {
		param    string
		pooled   bool
		execMode pgx.QueryExecMode
	}{
		{"", false, pgx.QueryExecModeCacheStatement},
		{"&ql_pooler=none", false, pgx.QueryExecModeCacheStatement},
		{"&ql_pooler=transaction", true, pgx.QueryExecModeCacheDescribe},
		{"&ql_pooler=Session", true, pgx.QueryExecModeCacheStatement},
	} {
		c, err := Resolve("postgres://u@h:6432/db?sslmode=disable&statement_timeout=7s" + tc.param)
		if err != nil {
			t.Fatalf("%q: %v", tc.param, err)
		}
		cc := c.Pool.ConnConfig
		if c.Pooled() != tc.pooled || cc.DefaultQueryExecMode != tc.execMode {
			t.Errorf("%q: pooled %v, exec mode %v; want %v, %v", tc.param, c.Pooled(), cc.DefaultQueryExecMode, tc.pooled, tc.execMode)
		}
		if _, sent := cc.RuntimeParams[PoolerParam]; sent {
			t.Errorf("%q: %s would be sent to the server", tc.param, PoolerParam)
		}
		_, startup := cc.RuntimeParams[paramStatement]
		local := c.localSettings()
		switch {
		case !tc.pooled && (local != nil || !startup):
			t.Errorf("%q: direct, yet local settings %q, statement_timeout at startup %v", tc.param, local, startup)
		case tc.pooled && (len(local) != 1 || startup || !strings.Contains(local[0], "set_config('statement_timeout', '7000', true)") ||
			!strings.Contains(local[0], "set_config('search_path', 'pg_catalog', true)")):
			t.Errorf("%q: pooled, yet local settings %q, statement_timeout at startup %v", tc.param, local, startup)
		}
	}
	if _, err := Resolve("postgres://u@h/db?ql_pooler=statement"); err == nil || !strings.Contains(err.Error(), "want transaction, session or none") {
		t.Errorf("ql_pooler=statement: %v; want refused, naming the values", err)
	}
}
