package dbconn_test

// An external test: the password server (internal/testkit/dbconntest) is a throwaway cluster,
// which connects through this package.

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/dbconntest"
)

// TestRealAuthenticationFailures connects to a server that checks passwords: the right hostile
// password, given in each form, is accepted (the parse found it), and a wrong one is refused by
// the server without any piece of it in the error.
func TestRealAuthenticationFailures(t *testing.T) {
	dbconn.ClearPGEnv(t)
	srv := dbconntest.StartPasswordServer(t)
	const right = `r1ght@:/%?#&='"\ p✓ss`
	const wrong = `wr0ng@:/%?#&='"\ p✓ss`
	srv.CreateRole(t, "alice", right)
	hostport := fmt.Sprintf("127.0.0.1:%d", srv.Port)
	forms := map[string]func(pw string) (string, map[string]string){
		"URL userinfo": func(pw string) (string, map[string]string) {
			return "postgres://alice:" + dbconn.EncodeAll(pw) + "@" + hostport + "/postgres?sslmode=disable", nil
		},
		"URL parameter": func(pw string) (string, map[string]string) {
			return "postgres://alice@" + hostport + "/postgres?sslmode=disable&password=" + dbconn.EncodeAll(pw), nil
		},
		"keyword/value": func(pw string) (string, map[string]string) {
			return fmt.Sprintf("host=127.0.0.1 port=%d user=alice dbname=postgres sslmode=disable password=%s", srv.Port, dbconn.KVQuote(pw)), nil
		},
		"PGPASSWORD": func(pw string) (string, map[string]string) {
			return "postgres://alice@" + hostport + "/postgres?sslmode=disable", map[string]string{"PGPASSWORD": pw}
		},
	}
	for name, form := range forms {
		t.Run(name, func(t *testing.T) {
			for _, c := range []struct {
				pw string
				ok bool
			}{{right, true}, {wrong, false}} {
				raw, env := form(c.pw)
				t.Setenv("PGPASSWORD", env["PGPASSWORD"])
				cfg, err := dbconn.Resolve(raw)
				if err != nil {
					t.Fatalf("Resolve: %v", err)
				}
				pool, err := cfg.Open(context.Background())
				if c.ok {
					if err != nil {
						t.Fatalf("the right password was refused: %v", err)
					}
					pool.Close()
					continue
				}
				if err == nil {
					pool.Close()
					t.Fatal("a wrong password was accepted")
				}
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
					t.Errorf("error %v; want the server's invalid_password (28P01)", err)
				}
				dbconn.AssertNoPiece(t, "the authentication error", err.Error(), c.pw, right)
			}
		})
	}
}
