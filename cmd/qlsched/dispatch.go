package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/app/dispatcher"
	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/base/limits"
	"github.com/qlcontrol/controlcore/roles"
	"github.com/qlcontrol/controlcore/workerproto"
)

// dispatchConfigFlags is the flag of each dispatch.Config field: Validate names fields
// (dispatch.ConfigError), the user typed flags.
var dispatchConfigFlags = map[string]string{
	"OfferTTL": "--offer-ttl", "LeaseTTL": "--lease", "PollMaxWait": "--poll-max-wait",
	"PlacementInterval": "--placement-interval", "SweepInterval": "--sweep-interval",
	"SweepBatch": "--sweep-batch", "MaxProjects": "--max-projects", "ScanCap": "--scan-cap",
	"DrainTimeout": "--drain-timeout",
}

// dispatchConfigError is a usage error (exit 2) naming the flag of the field Validate refused.
func dispatchConfigError(err error) error {
	var ce *dispatch.ConfigError
	if errors.As(err, &ce) {
		if flag, ok := dispatchConfigFlags[ce.Field]; ok {
			return cli.Usagef("%s %s: want %s", flag, ce.Value, ce.Want)
		}
	}
	return &cli.UsageError{Err: err}
}

// ownerRule is the owner's shape: the same as run's --owner, so one name scheme fits both.
var ownerRule = regexp.MustCompile(fmt.Sprintf(`^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,%d}$`, limits.MaxOwner-1))

type dispatchOptions struct {
	owner          string
	listen         string
	tlsCert        string
	tlsKey         string
	allowPlaintext bool
	httpAddr       string
	withdrawGrace  time.Duration
	gaugeInterval  time.Duration
	rolePrefix     string
	listenURL      string // the wake-up's LISTEN connection: "" the dispatcher's own, "none" off
	listenCfg      *dbconn.Config
}

func (a *app) dispatchCmd() *cobra.Command {
	cfg := dispatch.Config{}.WithDefaults()
	opts := dispatchOptions{owner: defaultOwner()}
	cmd := &cobra.Command{
		Use:   "dispatch",
		Short: "Run one dispatcher replica: serve the worker protocol until SIGTERM or SIGINT",
		Long: `dispatch starts one dispatcher replica, connected as the runtime role (ql_runtime). Workers
(qlworker, or anything that speaks protocol v1 of docs/dispatch.md) connect to --listen with a
worker token (qlsched worker token create), register a session, long-poll for offers of admitted
Runs, acknowledge them (a lease with a version), heartbeat, and report completion.

  1. configuration: every bound is checked before anything is opened (exit 2); a plaintext
     --listen on an address other than loopback is refused unless --allow-plaintext (worker
     tokens and callback tokens travel in every request: use --tls-cert and --tls-key);
  2. readiness, as qlsched run does (the connected role must be <--role-prefix>runtime and the
     schema must match this binary's readiness contract, at the capability of its last migration);
     any finding refuses to start (exit 1) and places nothing;
  3. the sweeper: every --sweep-interval, offers and leases whose database-time expiry passed are
     expired (an expired lease is a failed Attempt, retried under the task's policy) and expired
     sessions closed, --sweep-batch rows per statement; any number of replicas sweep, no leader;
  4. the placer: at once when a Run is admitted (the scheduler notifies once the admit committed, the
     dispatcher LISTENs on one dedicated connection, --listen-url), and, as the safety net for a
     lost notification, every --placement-interval while polls wait, it reads at most --max-projects
     projects × --scan-cap ready Runs the waiting session may take (its labels, Runs it did not
     reject; round robin across projects, oldest scheduled first within one) and offers them to the waiting sessions, each Run to one session (SKIP LOCKED);
  5. the worker protocol on --listen, and /healthz, /readyz and /metrics on --http-addr.

No startup recovery: every state a dispatcher writes carries a database-time expiry, so the
offers and leases of a crashed dispatcher are expired by any other's sweep (docs/dispatch.md,
who owns which state). Any number of replicas may run against one database; a worker may list
several and fails over between them.

SIGTERM or SIGINT withdraws (/readyz fails, waiting polls are answered with no offers and
"dispatcher_stopping": true), waits --withdraw-grace (a second signal ends the wait), stops the
placer and the sweeper, lets the requests in flight finish for at most --drain-timeout, closes
the pool and exits 0. Leases held by workers are untouched: they keep heartbeating to another
replica.`,
		Example: `  QL_DATABASE_URL=postgres://ql_runtime@db/control qlsched dispatch \
      --listen :8443 --tls-cert cert.pem --tls-key key.pem`,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.format != "text" {
				return cli.Usagef("--format %s: dispatch prints no document, only logs on stderr (--log-format json for collectors)", a.format)
			}
			if err := opts.validate(cfg); err != nil {
				return err
			}
			_, err := a.connConfig()
			return err
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			names, err := roles.NewNames(opts.rolePrefix)
			if err != nil {
				return cli.RolePrefixError(err)
			}
			return a.dispatch(cmd.Context(), cfg, opts, names)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.owner, "owner", opts.owner, "this replica's name in logs and metrics (the default is this host's name and the process id)")
	f.StringVar(&opts.listen, "listen", "127.0.0.1:8470", "listen address of the worker protocol (port 0: any free port, logged)")
	f.StringVar(&opts.tlsCert, "tls-cert", "", "PEM certificate (chain) for the worker protocol; with --tls-key")
	f.StringVar(&opts.tlsKey, "tls-key", "", "PEM private key for --tls-cert")
	f.BoolVar(&opts.allowPlaintext, "allow-plaintext", false, "serve plaintext HTTP on a non-loopback --listen (tokens cross the network unencrypted: behind a TLS-terminating proxy only)")
	f.StringVar(&opts.httpAddr, "http-addr", "127.0.0.1:9465", "listen address of /healthz, /readyz and /metrics (port 0: any free port, logged)")
	f.DurationVar(&cfg.OfferTTL, "offer-ttl", cfg.OfferTTL, "an offer not acknowledged within this expires and its Run is placed again, 1s … 5m")
	f.DurationVar(&cfg.LeaseTTL, "lease", cfg.LeaseTTL, "lease and session TTL (heartbeats every third of it), 5s … 1h and at least 3 × --sweep-interval")
	f.DurationVar(&cfg.PollMaxWait, "poll-max-wait", cfg.PollMaxWait, "longest long poll a worker may ask for, 1s … 1m")
	f.DurationVar(&cfg.PlacementInterval, "placement-interval", cfg.PlacementInterval, "how often ready work is probed while polls wait, 5ms … 1s")
	f.DurationVar(&cfg.SweepInterval, "sweep-interval", cfg.SweepInterval, "time between expiry sweeps, 100ms … 1m")
	f.IntVar(&cfg.SweepBatch, "sweep-batch", cfg.SweepBatch, "rows one sweep statement expires, 1 … 1024")
	f.IntVar(&cfg.MaxProjects, "max-projects", cfg.MaxProjects, "projects one placement read visits, 1 … 1024")
	f.IntVar(&cfg.ScanCap, "scan-cap", cfg.ScanCap, "ready Runs (that the session may take) one placement read takes per project, 1 … 1024")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "on stop, how long requests in flight may finish, 1s … 10m")
	f.DurationVar(&opts.withdrawGrace, "withdraw-grace", 0, "on stop, how long /readyz fails before the placer stops, 0s … 1m")
	f.DurationVar(&opts.gaugeInterval, "gauge-interval", dispatcher.DefaultGaugeInterval, "how often the loop's database gauges (queue per project, worker sessions) are read, in the background, 1s … 30s (the reading age stays within 60s, the stale-gauges alert's threshold)")
	f.StringVar(&opts.listenURL, "listen-url", "", "connection the wake-up on admission LISTENs on (one session, held): empty: the dispatcher's own "+
		"(off when that goes through a pooler: LISTEN needs a session, which PgBouncer's transaction pooling does not keep), a URL straight to PostgreSQL, or none: new Runs are found by the --placement-interval probe only")
	f.StringVar(&opts.rolePrefix, "role-prefix", roles.DefaultPrefix, "prefix of the four roles; readiness expects to be connected as <prefix>runtime")
	return cmd
}

// validate checks everything that needs no connection; every problem is a usage error (exit 2).
func (o *dispatchOptions) validate(cfg dispatch.Config) error {
	if !ownerRule.MatchString(o.owner) {
		return cli.Usagef("--owner %s: want 1 to %d characters of [A-Za-z0-9_.:@-], starting with a letter or digit", cli.Word(o.owner), limits.MaxOwner)
	}
	if err := cfg.Validate(); err != nil {
		return dispatchConfigError(err)
	}
	if err := validateListenAddr("--listen", o.listen); err != nil {
		return err
	}
	if err := validateHTTPAddr(o.httpAddr); err != nil {
		return err
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return cli.Usagef("--tls-cert and --tls-key: give both or neither")
	}
	if o.tlsCert == "" && !o.allowPlaintext && !loopback(o.listen) {
		return cli.Usagef("--listen %s: plaintext on an address other than loopback would send worker tokens unencrypted; give --tls-cert and --tls-key, or --allow-plaintext behind a TLS-terminating proxy", o.listen)
	}
	if o.withdrawGrace < 0 || o.withdrawGrace > time.Minute {
		return cli.Usagef("--withdraw-grace %s: want 0s … 1m", o.withdrawGrace)
	}
	if o.gaugeInterval < time.Second || o.gaugeInterval > 30*time.Second {
		return cli.Usagef("--gauge-interval %s: want 1s … 30s", o.gaugeInterval)
	}
	if o.listenURL != "" && o.listenURL != "none" {
		c, err := dbconn.Resolve(o.listenURL)
		if err != nil { // Resolve's message holds no part of the string; it names its flag
			return cli.Usagef("--listen-url: %s", strings.ReplaceAll(err.Error(), "--database-url", "--listen-url"))
		}
		if c.Pooled() { // declared (ql_pooler=…): refused now, as a detected one is at connect
			return cli.Usagef("--listen-url: goes through a connection pooler (ql_pooler), where LISTEN does not hold: give a connection straight to PostgreSQL, or none")
		}
		o.listenCfg = c
	}
	return nil
}

// wakeConnect is how the wake-up on admission connects (dispatcher.Options.Wake), or nil when it
// is off: --listen-url none, or no --listen-url and the dispatcher's own connection goes through
// a pooler (known once the pool is open: Open detects PgBouncer).
func (o *dispatchOptions) wakeConnect(own *dbconn.Config, log *slog.Logger) func(context.Context) (*pgx.Conn, error) {
	c := o.listenCfg
	switch {
	case o.listenURL == "none":
		log.Info("dispatch wake-up on admission off (--listen-url none): new Runs are found by the --placement-interval probe")
		return nil
	case c == nil && own.Pooled():
		log.Info("dispatch wake-up on admission off: the database connection goes through a pooler, where LISTEN does not hold; "+
			"give --listen-url a connection straight to PostgreSQL", "placement_interval_probe", true)
		return nil
	case c == nil:
		c = own
	}
	log.Info("dispatch wake-up on admission: LISTEN "+dispatch.WakeChannel, "listen_database", c.Describe())
	return func(ctx context.Context) (*pgx.Conn, error) {
		conn, err := c.Connect(ctx)
		if err != nil {
			return nil, err // dbconn's connection errors are redacted
		}
		if c.Pooled() { // PgBouncer found at connect: a transaction pooler would lose the LISTEN
			_ = conn.Close(context.WithoutCancel(ctx))
			return nil, errors.New("--listen-url goes through a connection pooler, where LISTEN does not hold: give a connection straight to PostgreSQL")
		}
		return conn.Conn, nil
	}
}

func validateListenAddr(flag, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return cli.Usagef("%s %q: want host:port (port 0 picks a free one)", flag, addr)
	}
	var n int
	if _, err := fmt.Sscanf(port, "%d", &n); err != nil || fmt.Sprint(n) != port || n < 0 || n > 65535 {
		return cli.Usagef("%s %q: port %q is not a number in 0 … 65535 (0 picks a free one)", flag, addr, port)
	}
	return nil
}

// loopback is whether addr's host is a loopback address or "localhost": an empty host or
// 0.0.0.0 listens on every interface and is not.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return workerproto.Loopback(host)
}

func (a *app) dispatch(ctx context.Context, cfg dispatch.Config, opts dispatchOptions, names roles.Names) error {
	log := a.logger().With("owner", opts.owner)
	// Bind and load the key pair first: a busy address or an unreadable key is configuration
	// (exit 2), found before any connection is opened.
	var tlsConfig *tls.Config
	if opts.tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(opts.tlsCert, opts.tlsKey)
		if err != nil {
			return cli.Usagef("--tls-cert/--tls-key: %v", err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	workerLn, err := listen("--listen", opts.listen)
	if err != nil {
		return err
	}
	defer workerLn.Close() // until Serve owns it
	healthLn, err := listen("--http-addr", opts.httpAddr)
	if err != nil {
		return err
	}
	defer healthLn.Close()
	pool, err := a.conn.Open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	d, err := dispatcher.Start(ctx, pool, dispatcher.Options{Config: cfg, Names: names, Owner: opts.owner, Log: log,
		GaugeInterval: opts.gaugeInterval, Wake: opts.wakeConnect(a.conn, log)})
	if err != nil {
		var notReady *verify.NotReadyError
		if errors.As(err, &notReady) {
			return &cli.ProblemError{Err: err}
		}
		return err
	}
	if tlsConfig != nil {
		workerLn = tls.NewListener(workerLn, tlsConfig)
	}
	// Long polls last up to --poll-max-wait: no WriteTimeout; headers and idle connections are
	// bounded, so a slow or silent client holds no goroutine for long.
	ws := serveHTTP(&http.Server{Handler: d.Handler(), ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}, workerLn)
	hs := serveHTTP(&http.Server{Handler: httpHandler(d.Ready, d.Metrics()), ReadHeaderTimeout: 5 * time.Second}, healthLn)
	scheme := "http"
	if tlsConfig != nil {
		scheme = "https"
	}
	log.Info("dispatcher running", "listen", scheme+"://"+workerLn.Addr().String(), "http_addr", healthLn.Addr().String(),
		"offer_ttl", cfg.OfferTTL.String(), "lease", cfg.LeaseTTL.String(), "database", a.conn.Describe())

	var serveErr error
	select {
	case <-ctx.Done():
	case <-ws.Failed():
		serveErr = ws.Err()
	case <-hs.Failed():
		serveErr = hs.Err()
	}
	if serveErr != nil {
		log.Error("stopping: an HTTP server failed", "err", serveErr)
	}
	d.Withdraw()
	log.Info("stopping: placement withdrawn", "withdraw_grace", opts.withdrawGrace.String())
	if serveErr == nil {
		withdrawGrace(ctx, log, opts.withdrawGrace)
	}
	log.Info("draining", "drain_timeout", cfg.DrainTimeout.String())
	stopCtx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
	stopErr := d.Stop(stopCtx)
	cancel()
	if err := ws.Shutdown(2 * time.Second); err != nil {
		log.Warn("worker protocol shutdown", "err", err)
	}
	if err := hs.Shutdown(2 * time.Second); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	log.Info("stopped", "drain_error", errString(stopErr))
	return serveErr
}
