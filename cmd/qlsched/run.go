package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/app/metrics"
	"github.com/qlcontrol/controlcore/internal/app/replica"
	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/base/buildinfo"
	"github.com/qlcontrol/controlcore/roles"
)

func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "qlsched"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

func (a *app) runCmd() *cobra.Command {
	cfg := coordinator.DefaultConfig(defaultOwner())
	var (
		httpAddr        string
		withdrawGrace   time.Duration
		backlogInterval time.Duration
		rolePrefix      string
		registrationTTL time.Duration
		cpuProfile      string
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run one scheduler replica until SIGTERM or SIGINT",
		Long: `run starts one replica of the scheduler, connected as the runtime role (ql_runtime):

  1. configuration: every bound is checked before anything is opened (exit 2);
  2. readiness, the same code as qlmigrate verify, on this connection: the connected role must
     be the runtime role (<--role-prefix>runtime); control-core must be at the capability the
     last migration embedded in this binary sets (qlmigrate probe prints it); the schema must
     match the readiness contract in full (tables, columns with defaults, collations, identity
     and generation, keys and CHECKs with their deferrability and validation, indexes,
     functions with owner and body, triggers and whether they fire, row-level security and
     policies, rules, persistence), with nothing extra that changes what a statement does (a
     NOT NULL, defaulted or domain-typed column, a constraint, a unique or expression index, a
     trigger, a policy, a rule, a filtered publication) and no event trigger or user-defined
     cast on built-in types in the database; the runtime role must hold exactly its
     privileges (SELECT/UPDATE on trigger_schedules and no INSERT or DELETE; SELECT, INSERT,
     UPDATE on runs and attempts; SELECT, INSERT on run events; EXECUTE on db_now_ms() and the
     replica registration functions; nothing
     else, on any object or large object), with no stored settings (ALTER ROLE … SET, also IN
     DATABASE), no VALID UNTIL or CONNECTION LIMIT, no privileged attribute, no membership, and
     no LOGIN role a member of it; PUBLIC must hold nothing on control_core or on a large
     object; no SECURITY DEFINER function outside control_core that the runtime role or PUBLIC
     may execute may belong to a role that may write control_core's tables; the database must
     have no stored settings. Any of these refuses to start (exit 1), names the finding and
     claims nothing; qlmigrate verify --fix-sql prints the fix. Every session runs with
     search_path pg_catalog, so a function or operator created in public cannot stand in for
     a built-in one;
  3. registration: one row per --owner in control_core.replicas, in database time, heartbeated
     every third of --registration-ttl and deleted on a clean stop. A live replica already
     registered under the same --owner refuses the start (exit 2, naming its host, its start and
     when its registration expires). A row left by a replica that crashed is waited for, at most
     one --registration-ttl or, if it was registered with a longer one, until it expires
     (at most 5m; said on stderr), then taken. A replica whose heartbeat finds its
     row taken stops claiming and exits 1;
  4. startup recovery: runtime-owned queued/dispatching Runs that are not in the pristine admitted
     shape fail closed (see docs/scheduling.md);
  5. the lifecycle: a round every --cadence claims at most --budget due schedule rows, each under a
     --lease, and admits, skips or releases each one under its fence; rounds never overlap;
  6. HTTP admission on --http-addr: /healthz (alive), /readyz (ready, running, admitting) and
     /metrics (Prometheus; see the README for names and example alerts).

A round that fails (its claim statement fails: a read-only server, a revoked privilege, a lost
connection) is followed by a backoff instead of the cadence: --cadence, doubled with each failure
in a row, up to --backoff-cap. After --not-ready-after failures in a row /readyz answers 503 with
the count and the last error (qlsched_ready 0; qlsched_consecutive_failed_rounds counts them); the
first round that succeeds makes it ready again. /healthz stays 200: restarting would not repair the
database. The log has one line when rounds start failing, one when readiness is lost, one on
recovery (with how many rounds failed and for how long), and a reminder at most every 10 minutes.

SIGTERM or SIGINT withdraws admission first (/readyz fails), waits --withdraw-grace so load
balancers and probes notice (a second SIGTERM or SIGINT ends the wait at once), then stops the
lifecycle (the round in progress finishes its claim in hand; at most --drain-timeout), closes the
pool and exits 0.

Any number of replicas may run against one database; there is no leader.

Capacity: a round that claims its whole --budget waits out the --cadence, so one replica admits
at most budget ÷ cadence occurrences per second: 16/s at the defaults (budget 16, cadence 1s),
about 960 every-minute or 16 every-second triggers due at once. Beyond that, due rows wait with
no error (fire_once later admits a trigger that fell a period behind once for the periods it
missed); qlsched_saturated_rounds_total, qlsched_admission_capacity_per_second and a
"saturated" log line (once, after three full rounds in a row; "saturation ended" after three
that claim less) show it. To carry more, raise
--budget (up to 256) with --admit-batch (rows per claim and admit transaction, e.g. 64), lower
--cadence, or add replicas, up to what the database commits (docs/operations.md, Sizing).`,
		Example: `  QL_DATABASE_URL=postgres://ql_runtime@db/control qlsched run   # the default --owner, host name and pid, is unique`,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.format != "text" {
				return cli.Usagef("--format %s: run prints no document, only logs on stderr (--log-format json for collectors)", a.format)
			}
			if err := cfg.Validate(); err != nil {
				return cli.ConfigUsageError(err)
			}
			if err := validateHTTPAddr(httpAddr); err != nil {
				return err
			}
			if withdrawGrace < 0 || withdrawGrace > time.Minute {
				return cli.Usagef("--withdraw-grace %s: want 0s … 1m", withdrawGrace)
			}
			if backlogInterval < time.Second || backlogInterval > 10*time.Minute {
				return cli.Usagef("--backlog-interval %s: want 1s … 10m", backlogInterval)
			}
			if registrationTTL < replica.MinRegistrationTTL || registrationTTL > replica.MaxRegistrationTTL {
				return cli.Usagef("--registration-ttl %s: want %s … %s", registrationTTL, replica.MinRegistrationTTL, replica.MaxRegistrationTTL)
			}
			_, err := a.connConfig()
			return err
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			names, err := roles.NewNames(rolePrefix)
			if err != nil {
				return cli.RolePrefixError(err)
			}
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			return a.run(cmd.Context(), cfg, runOptions{httpAddr, withdrawGrace, backlogInterval, names, registrationTTL})
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Owner, "owner", cfg.Owner, "claim owner written into every fence; unique per replica (the default is this host's name and the process id)")
	f.IntVar(&cfg.Budget, "budget", cfg.Budget, fmt.Sprintf("claims per round, 1 … %d", coordinator.MaxBudget))
	f.DurationVar(&cfg.Cadence, "cadence", cfg.Cadence, "time between round starts, 10ms … 1m")
	f.DurationVar(&cfg.Lease, "lease", cfg.Lease, "claim lease, 1s … 10m and at least 2 × cadence")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "how long stop waits for the round in progress, 1s … 10m")
	f.IntVar(&cfg.AdmitRetries, "admit-retries", cfg.AdmitRetries, "serialization-failure retries per admit, 0 … 20")
	f.IntVar(&cfg.AdmitBatch, "admit-batch", cfg.AdmitBatch, "batch admission: rows per claim statement and per SERIALIZABLE admit transaction, 1 … budget (1: the ADR's one-row claim)")
	f.DurationVar(&cfg.BackoffCap, "backoff-cap", cfg.BackoffCap, "after a failed round the next waits --cadence, doubled per failure in a row, up to this; cadence … 10m")
	f.IntVar(&cfg.NotReadyAfter, "not-ready-after", cfg.NotReadyAfter, fmt.Sprintf("failed rounds in a row after which /readyz fails until a round succeeds, 1 … %d", coordinator.MaxNotReadyAfter))
	f.IntVar(&cfg.InitBatch, "init-batch", cfg.InitBatch, fmt.Sprintf("rows waiting for initialisation (new or republished triggers) claimed and written back per statement, 1 … %d", coordinator.MaxInitBatch))
	f.IntVar(&cfg.InitBudget, "init-budget", cfg.InitBudget, fmt.Sprintf("rows a round initialises at most (they do not spend --budget), --init-batch … %d; due rows are claimed after them every round", coordinator.MaxInitBudget))
	f.StringVar(&httpAddr, "http-addr", "127.0.0.1:9464", "listen address of /healthz, /readyz and /metrics (port 0: any free port, logged)")
	f.DurationVar(&withdrawGrace, "withdraw-grace", 0, "on stop, how long /readyz fails before the lifecycle stops, 0s … 1m")
	f.DurationVar(&backlogInterval, "backlog-interval", 5*time.Second, "how often the database gauges (backlog, rows waiting for initialisation) are read in the background, 1s … 10m")
	f.StringVar(&rolePrefix, "role-prefix", roles.DefaultPrefix, "prefix of the four roles; readiness expects to be connected as <prefix>runtime")
	f.DurationVar(&registrationTTL, "registration-ttl", replica.DefaultRegistrationTTL, fmt.Sprintf("how long this replica's registration of --owner outlives its last heartbeat (heartbeat every third of it), %s … %s", replica.MinRegistrationTTL, replica.MaxRegistrationTTL))
	f.StringVar(&cpuProfile, "cpu-profile", "", "diagnosis: write a Go CPU profile (go tool pprof) of this process to this file, from the start until it stops (default: none)")
	return cmd
}

// startCPUProfile creates path and profiles the process's CPU into it until the returned stop
// (docs/performance.md, "Real processes against in-process replicas"). A file that cannot be
// created is bad usage (exit 2), before any connection.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, cli.Usagef("--cpu-profile %s: %v", path, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, cli.Usagef("--cpu-profile %s: %v", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

type runOptions struct {
	httpAddr        string
	withdrawGrace   time.Duration
	backlogInterval time.Duration
	names           roles.Names
	registrationTTL time.Duration
}

func (a *app) run(ctx context.Context, cfg coordinator.Config, opts runOptions) error {
	log := a.logger().With("owner", cfg.Owner)
	// Bind first: a busy or forbidden address is bad configuration (exit 2), and the contract is
	// that configuration fails before any connection is opened, not after recovery has run. The
	// listener only queues connections until the lifecycle runs and Serve starts below.
	ln, err := listen("--http-addr", opts.httpAddr)
	if err != nil {
		return err
	}
	defer ln.Close() // until Serve owns it; closing twice is harmless
	pool, err := a.conn.Open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	var ready readiness
	measured := metrics.NewMeasurements(cfg.Owner) // fed by the coordinator from its first round
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown"
	}
	r, err := replica.Start(ctx, pool, replica.Options{Config: cfg, Names: opts.names, Log: a.logger(),
		Observer: measured.Observer(),
		Register: &replica.RegisterOptions{Hostname: host, Version: buildinfo.Read().Version, TTL: opts.registrationTTL}})
	if err != nil {
		var (
			notReady *verify.NotReadyError
			held     *replica.OwnerHeldError
		)
		switch {
		case errors.As(err, &notReady):
			return &cli.ProblemError{Err: err}
		case errors.As(err, &held):
			return &cli.UsageError{Err: err}
		}
		return err
	}
	co, lc, reg := r.Coordinator, r.Lifecycle, r.Registration
	released := false
	defer func() { // any return before the clean stop below: give the owner back
		if !released {
			relCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = reg.Release(relCtx)
		}
	}()
	ready.lc.Store(lc)
	m := metrics.New(co, measured, ready.ready, metrics.DatabaseBacklog(pool), opts.backlogInterval)
	// The database gauges are read in the background, never inside a scrape.
	if err := m.Start(ctx, log); err != nil {
		_ = lc.Stop(context.Background())
		return err
	}
	defer func() { _ = m.Stop(context.Background()) }()
	hs := serveHTTP(&http.Server{Handler: httpHandler(ready.check, m.Handler()), ReadHeaderTimeout: 5 * time.Second}, ln)
	ready.admitting.Store(true)
	log.Info("replica running", "http_addr", ln.Addr().String(), "budget", cfg.Budget, "cadence", cfg.Cadence.String(),
		"lease", cfg.Lease.String(), "database", a.conn.Describe())

	// A replica whose /readyz and /metrics are gone is one no probe can see: it stops as on
	// SIGTERM, and exits with the server's error.
	var serveErr error
	select {
	case <-ctx.Done():
	case <-hs.Failed():
		serveErr = hs.Err()
		log.Error("stopping: the HTTP server failed", "err", serveErr)
	case <-reg.Lost():
		// another instance holds this owner now: claiming on would renew its claims as ours
		serveErr = &cli.ProblemError{Err: fmt.Errorf("%w: --owner %q is held by another instance; this replica stopped claiming (give every replica its own --owner)",
			replica.ErrRegistrationLost, cfg.Owner)}
	}
	// Stop in reverse: withdraw admission, stop and drain the scheduler, then the rest.
	ready.admitting.Store(false)
	log.Info("stopping: admission withdrawn", "withdraw_grace", opts.withdrawGrace.String())
	if serveErr == nil { // with the server gone nobody sees /readyz fail
		withdrawGrace(ctx, log, opts.withdrawGrace)
	}
	log.Info("draining", "drain_timeout", cfg.DrainTimeout.String())
	stopErr := lc.Stop(context.Background())
	wakeCtx, wakeCancel := context.WithTimeout(context.Background(), 5*time.Second)
	r.Store.Close(wakeCtx) // the dispatchers' last wake-up, then its sender ends
	wakeCancel()
	// the owner is free for a successor at once (a lost registration releases nothing: Release
	// deletes only this instance's row)
	relCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := reg.Release(relCtx); err != nil {
		log.Warn("release of the replica registration failed; it expires on its own", "err", err,
			"registration_ttl", opts.registrationTTL.String())
	}
	cancel()
	released = true
	if err := hs.Shutdown(2 * time.Second); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	st := co.Stats.Snapshot()
	log.Info("stopped", "claims", st.Claims, "admits", st.Admits, "skips", st.Skips, "releases", st.Releases,
		"races", st.Races, "retries", st.Retries, "errors", st.Errors, "drain_error", errString(stopErr))
	return serveErr
}

// withdrawGrace waits grace, so that probes and load balancers see /readyz fail, unless a second
// SIGINT or SIGTERM asks to stop at once.
func withdrawGrace(ctx context.Context, log *slog.Logger, grace time.Duration) {
	if grace <= 0 {
		return
	}
	began := time.Now()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-cli.SecondSignal(ctx):
		log.Warn("second signal: withdraw grace cut short", "waited", time.Since(began).Round(time.Millisecond).String())
	}
}

// readiness is what /readyz and qlsched_ready report: the replica admits (from the lifecycle's
// start until SIGTERM) and its rounds have not failed --not-ready-after times in a row.
type readiness struct {
	admitting atomic.Bool
	lc        atomic.Pointer[coordinator.Lifecycle] // set before admitting
}

// check says whether the replica is ready and, if not, why: the line /readyz answers.
func (r *readiness) check() (bool, string) {
	if !r.admitting.Load() {
		return false, "not admitting"
	}
	if h := r.lc.Load().Health(); !h.Ready {
		return false, fmt.Sprintf("not ready: %d rounds failed in a row since %s: %v",
			h.FailedRounds, h.Since.UTC().Format(time.RFC3339), h.Err)
	}
	return true, ""
}

func (r *readiness) ready() bool {
	ok, _ := r.check()
	return ok
}

func httpHandler(ready func() (bool, string), metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := ready(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// validateHTTPAddr checks --http-addr's form and port range before anything is opened; whether
// the address can be bound is known only by binding it (run does that first).
func validateHTTPAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return cli.Usagef("--http-addr %q: want host:port (port 0 picks a free one)", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return cli.Usagef("--http-addr %q: port %q is not a number in 0 … 65535 (0 picks a free one)", addr, port)
	}
	return nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (a *app) logger() *slog.Logger { return cli.Logger(a.logFormat, a.logLevel) }
