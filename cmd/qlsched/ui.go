package main

import (
	"context"
	"net"
	"net/http"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/app/console"
	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/roles"
)

func (a *app) uiCmd() *cobra.Command {
	var (
		httpAddr, rolePrefix string
		allowHosts           []string
		names                roles.Names // from --role-prefix, checked before connecting
	)
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Read-only web console: overview, projects, triggers, Runs, schema health",
		Long: `ui serves a read-only web console for the on-call engineer (docs/console.md):

  /                                   per project: triggers, enabled, backlog, oldest overdue
                                      occurrence, live claims by owner, admissions per minute
                                      and admission lag p50/p99 over the last hour (SVG chart)
  /projects/P                         triggers with spec, zone, misfire policy, enabled, next
                                      fire (zone and UTC), last Run, claim state (paged)
  /projects/P/triggers/T              revision history with what changed, next occurrences,
                                      recent Runs with lag
  /projects/P/runs                    Runs filtered by trigger, state and time (paged)
  /health                             capability and integrity (the scope of qlmigrate probe)

Connect as the admin role (ql_admin) or any role with SELECT on control_core. Every read is one
READ ONLY transaction on sessions opened with default_transaction_read_only=on; the console has
no write path (GET and HEAD only). Executor specs are never shown. It binds loopback by default;
another --http-addr is allowed, with a warning: the console has no authentication of its own, so
put it behind one. A request must name the console by an IP address, localhost or a name of
--allow-host in its Host header (a page of another site that points its own name at this address,
DNS rebinding, is refused). SIGTERM or SIGINT stops it.`,
		Example: `  QL_DATABASE_URL=postgres://ql_admin@db/control qlsched ui
  ssh -L 9465:127.0.0.1:9465 ops-host   # then open http://127.0.0.1:9465/`,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.format != "text" {
				return cli.Usagef("--format %s: ui prints no document, it serves pages (open --http-addr in a browser)", a.format)
			}
			if err := validateHTTPAddr(httpAddr); err != nil {
				return err
			}
			for _, h := range allowHosts {
				if !hostName.MatchString(h) {
					return cli.Usagef("--allow-host %.64q: want a host name as a proxy forwards it, without scheme or port (e.g. console.example.com)", h)
				}
			}
			var err error
			if names, err = roles.NewNames(rolePrefix); err != nil {
				return cli.RolePrefixError(err)
			}
			_, err = a.connConfig()
			return err
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return a.ui(cmd.Context(), httpAddr, allowHosts, names) },
	}
	f := cmd.Flags()
	f.StringVar(&httpAddr, "http-addr", "127.0.0.1:9465", "listen address of the console (loopback by default; port 0: any free port, logged)")
	f.StringSliceVar(&allowHosts, "allow-host", nil, "a further host name requests may carry in Host, e.g. the name a reverse proxy forwards (repeatable)")
	f.StringVar(&rolePrefix, "role-prefix", roles.DefaultPrefix, "prefix of the four roles, for the schema health page")
	return cmd
}

// hostName is a DNS name (letters, digits, hyphens, dots), the form --allow-host takes.
var hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$`)

func (a *app) ui(ctx context.Context, httpAddr string, allowHosts []string, names roles.Names) error {
	log := a.logger()
	// Bind first: a busy or forbidden address is bad configuration (exit 2), before any
	// connection is opened.
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return cli.Usagef("--http-addr %s: %v", httpAddr, err)
	}
	defer ln.Close()
	// Every session is read-only, whatever a statement asks: a second guard under the readers'
	// READ ONLY transactions. Set once a session is open, not as a startup parameter: PgBouncer
	// refuses startup parameters it does not know, and Open learns that it talks to a pooler
	// only from that refusal. Through a transaction pooler a session SET would outlive this
	// client's transaction on a server session others share, so there the readers' READ ONLY
	// transactions are the guard.
	a.conn.Pool.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if err := dbconn.RegisterTypes(ctx, conn); err != nil || a.conn.Pooled() {
			return err
		}
		_, err := conn.Exec(ctx, "SET default_transaction_read_only = on")
		return err
	}
	a.conn.SetApplicationName("qlsched ui")
	pool, err := a.conn.Open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	h, err := console.Handler(console.Options{Reader: admin.NewReader(pool), Log: log,
		Health: healthReader(pool, names),
		Addr:   ln.Addr().(*net.TCPAddr), AllowHosts: allowHosts})
	if err != nil {
		return err
	}
	hs := serveHTTP(&http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}, ln)
	addr := ln.Addr().(*net.TCPAddr)
	if addr.IP.IsLoopback() {
		log.Info("console serving on loopback only", "url", "http://"+addr.String()+"/", "database", a.conn.Describe())
	} else {
		log.Warn("console serving beyond loopback: it has no authentication of its own, put it behind one",
			"url", "http://"+addr.String()+"/", "database", a.conn.Describe())
	}
	select {
	case <-ctx.Done():
	case <-hs.Failed():
		return hs.Err()
	}
	if err := hs.Shutdown(5 * time.Second); err != nil {
		log.Warn("console shutdown", "err", err)
	}
	log.Info("console stopped")
	return nil
}

// healthReader is the schema health page: the checks any role of the model may read (the
// integrity file and the capability, qlmigrate probe's scope).
func healthReader(h *dbconn.DB, names roles.Names) func(context.Context) (*verify.Report, error) {
	return func(ctx context.Context) (*verify.Report, error) {
		return verify.Run(ctx, h, verify.Options{Names: names, Scope: verify.ScopeProbe})
	}
}
