// Command qlworker is the reference worker of protocol v1: it registers with one or more
// `qlsched dispatch` replicas and runs the commands of offered Runs (worker/process). See
// `qlworker --help`. Wiring only: flags → worker.Runner with process.New.
//
// It links no database driver (archrules): a worker reaches the database only through a
// dispatcher, so it uses the standard library's flag and slog, not internal/app/cli (which
// links pgx).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
	_ "time/tzdata" // every binary resolves zones identically, also in minimal containers

	"github.com/qlcontrol/controlcore/internal/base/buildinfo"
	"github.com/qlcontrol/controlcore/worker"
	"github.com/qlcontrol/controlcore/worker/process"
	"github.com/qlcontrol/controlcore/workerproto"
)

// Exit codes (the same contract as qlsched's, without the database).
const (
	exitOK      = 0
	exitProblem = 1 // the dispatcher refused the worker (token revoked, registration refused)
	exitUsage   = 2 // bad flags or files, reported before any connection
)

const usageText = `qlworker runs the commands of scheduled Runs for one or more qlsched dispatch replicas
(worker protocol v1, docs/dispatch.md).

Usage:
  qlworker --dispatcher URL[,URL…] --token-file FILE --name NAME [flags]

It registers a session of NAME with CAPACITY slots, long-polls for offers, runs each offered
spec {"command":["prog","arg",…],"env":{…},"dir":"…","timeout":"30s"} as an argv (never through a
shell) in a process group of its own, under a small supervisor process that kills the job and all
its descendants if qlworker dies (even by SIGKILL), renews its leases by heartbeat and stops a job before its
lease could expire if the dispatchers become unreachable. Any replica serves any request: list
them all: each worker starts at the one its NAME hashes to (so workers spread over the
replicas) and moves to the next one when one fails.

SIGTERM or SIGINT drains: no new jobs, running jobs get --drain-grace to finish, then they are
stopped and handed back (retried elsewhere); a second signal hands them back at once.
The token is read from --token-file (create one with "qlsched worker token create") and never
printed.

Exit codes: 0 drained after a signal, 1 the dispatcher refused the worker, 2 bad usage or files
(nothing was opened).

Flags:
`

type labelsFlag map[string]string

func (l labelsFlag) String() string {
	parts := make([]string, 0, len(l))
	for k, v := range l {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

func (l labelsFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return errors.New("want key=value")
	}
	if _, dup := l[k]; dup {
		return fmt.Errorf("label %s given twice", word(k))
	}
	l[k] = v
	return nil
}

type options struct {
	dispatchers []string
	token       string
	name        string
	capacity    int
	labels      map[string]string
	drainGrace  time.Duration
	transport   http.RoundTripper
	plaintext   bool
	logger      *slog.Logger
}

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// safeWord matches what an error may quote of a command line; anything else (a URL, a path
// that may hold a secret) is described by its length only, as qlsched does.
var safeWord = regexp.MustCompile(`^[A-Za-z0-9_.+-]{1,40}$`)

func word(s string) string {
	if safeWord.MatchString(s) {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("(%d characters, not shown)", len(s))
}

// parse reads the flags, the token file and the CA file; it opens no connection.
func parse(args []string, stdout, stderr io.Writer) (*options, bool, error) {
	fs := flag.NewFlagSet("qlworker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		dispatchers = fs.String("dispatcher", "", "the base URLs of the dispatcher replicas, `URL[,URL…]` (https://d1:8443,https://d2:8443)")
		tokenFile   = fs.String("token-file", "", "`FILE` holding the worker token (qlw_…); it should be readable by this user only")
		name        = fs.String("name", "", "worker `NAME` shown by \"qlsched workers list\" ("+workerproto.NamePattern+")")
		capacity    = fs.Int("capacity", 1, "jobs run at once, `N` in 1…256")
		drainGrace  = fs.Duration("drain-grace", 30*time.Second, "time running jobs get to finish after SIGTERM (1s…24h)")
		caFile      = fs.String("ca-file", "", "PEM `FILE` of the CA certificates that sign the dispatchers' certificates (default: the system's)")
		logFormat   = fs.String("log-format", "text", "log format on stderr: text (terminals) or json (collectors)")
		logLevel    = fs.String("log-level", "info", "log level: debug, info, warn or error")
		version     = fs.Bool("version", false, "print the version and exit")
		plaintext   = fs.Bool("allow-plaintext", false, "allow an http:// --dispatcher on another host than loopback (the token then crosses the network in clear text)")
		labels      = labelsFlag{}
	)
	fs.Var(labels, "label", "a label `key=value` the session offers to task selectors; repeatable (≤ 16)")
	printUsage := func(w io.Writer) {
		fmt.Fprint(w, usageText)
		fs.VisitAll(func(f *flag.Flag) { // as --flag, the form the rest of the help uses
			arg, usage := flag.UnquoteUsage(f)
			line := "  --" + f.Name
			if arg != "" {
				line += " " + arg
			}
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
				usage += " (default " + f.DefValue + ")"
			}
			fmt.Fprintf(w, "%s\n        %s\n", line, usage)
		})
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout)
			return nil, true, nil
		}
		return nil, false, usagef("%s (see qlworker --help)", flagError(err))
	}
	if *version {
		fmt.Fprintln(stdout, buildinfo.Read().String("qlworker"))
		return nil, true, nil
	}
	if fs.NArg() > 0 {
		return nil, false, usagef("unexpected argument %s (see qlworker --help)", word(fs.Arg(0)))
	}
	o := &options{name: *name, capacity: *capacity, labels: labels, drainGrace: *drainGrace, plaintext: *plaintext}
	var level slog.Level
	if *logFormat != "text" && *logFormat != "json" {
		return nil, false, usagef("--log-format %s: want text or json", word(*logFormat))
	}
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return nil, false, usagef("--log-level %s: want debug, info, warn or error", word(*logLevel))
	}
	hopts := &slog.HandlerOptions{Level: level}
	if *logFormat == "json" {
		o.logger = slog.New(slog.NewJSONHandler(stderr, hopts))
	} else {
		o.logger = slog.New(slog.NewTextHandler(stderr, hopts))
	}
	if *dispatchers == "" {
		return nil, false, usagef("--dispatcher is required: the URL of at least one qlsched dispatch replica")
	}
	for _, d := range strings.Split(*dispatchers, ",") {
		if d = strings.TrimSpace(d); d != "" {
			o.dispatchers = append(o.dispatchers, d)
		}
	}
	if !workerproto.ValidName(o.name) {
		return nil, false, usagef("--name %s: want %s (lower-case letters, digits, _ . -; at most 63)", word(o.name), workerproto.NamePattern)
	}
	if o.capacity < workerproto.MinCapacity || o.capacity > workerproto.MaxCapacity {
		return nil, false, usagef("--capacity %d: want %d…%d", o.capacity, workerproto.MinCapacity, workerproto.MaxCapacity)
	}
	if err := workerproto.ValidateLabels(o.labels); err != nil {
		return nil, false, usagef("--label: %v", err)
	}
	if o.drainGrace < time.Second || o.drainGrace > 24*time.Hour {
		return nil, false, usagef("--drain-grace %s: want 1s…24h", o.drainGrace)
	}
	if *tokenFile == "" {
		return nil, false, usagef("--token-file is required: a file holding the worker token (qlsched worker token create)")
	}
	tok, err := readToken(*tokenFile, o.logger)
	if err != nil {
		return nil, false, err
	}
	o.token = tok
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Keep a connection per request that can be in flight at once (the long poll, an ACK and a
	// report per slot, a heartbeat), not the default 2: the others would be closed after use and
	// dialed again (a TLS handshake each) on the path from an offer to its start.
	tr.MaxIdleConnsPerHost = 2*o.capacity + 2
	// …and the limit on all hosts together (net/http's default: 100) must not cut it: from
	// --capacity 50 on it would, for one dispatcher already.
	tr.MaxIdleConns = tr.MaxIdleConnsPerHost * len(o.dispatchers)
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			return nil, false, usagef("--ca-file: %v", pathError(err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, false, usagef("--ca-file: no PEM certificate in it")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	o.transport = tr
	return o, false, nil
}

// readToken reads the token file: one line, qlw_…, no other white space. Errors never quote it.
func readToken(path string, log *slog.Logger) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", usagef("--token-file: %v", pathError(err))
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode().Perm()&0o077 != 0 {
		log.Warn("the token file is readable by others than its owner; chmod 600 it", "mode", st.Mode().Perm().String())
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", usagef("--token-file: %v", pathError(err))
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case tok == "":
		return "", usagef("--token-file: the file is empty")
	case !strings.HasPrefix(tok, "qlw_") || strings.ContainsAny(tok, " \t\r\n"):
		return "", usagef("--token-file: the file does not hold one worker token (qlw_…, on one line)")
	}
	return tok, nil
}

// pathError drops the path (it was given by the operator; it may be anything) and keeps why.
func pathError(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}

// flagError restates the flag package's errors without quoting a value.
func flagError(err error) string {
	msg := err.Error()
	if strings.HasPrefix(msg, "invalid value ") {
		// invalid value "…" for flag -x: reason
		if i := strings.Index(msg, " for flag -"); i > 0 {
			return "bad value for --" + strings.TrimPrefix(msg[i:], " for flag -")
		}
	}
	if rest, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return "unknown flag --" + strings.TrimPrefix(rest, "-")
	}
	return msg
}

func run(args []string, stdout, stderr io.Writer) int {
	o, done, err := parse(args, stdout, stderr)
	if done {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "qlworker: %v\n", err)
		return exitUsage
	}
	client, err := worker.NewClient(worker.ClientOptions{Dispatchers: o.dispatchers, Token: o.token, Transport: o.transport,
		AllowPlaintext: o.plaintext, Spread: o.name})
	if err != nil {
		fmt.Fprintf(stderr, "qlworker: --dispatcher: %s\n", strings.TrimPrefix(err.Error(), "worker: "))
		return exitUsage
	}
	runner, err := worker.NewRunner(worker.Config{
		Client: client, Name: o.name, Capacity: o.capacity, Labels: o.labels,
		Handler: process.New(process.Options{Supervisor: supervisor}), DrainGrace: o.drainGrace, Logger: o.logger,
	})
	if err != nil {
		fmt.Fprintf(stderr, "qlworker: %v\n", err)
		return exitUsage
	}

	// The first SIGTERM/SIGINT drains, the second hands running jobs back at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		s := <-sigs
		o.logger.Info("signal: draining (a second signal hands running jobs back at once)", "signal", s.String(), "drain_grace", o.drainGrace.String())
		cancel()
		s = <-sigs
		o.logger.Warn("second signal: handing running jobs back", "signal", s.String())
		runner.HandBack()
	}()
	info := buildinfo.Read()
	o.logger.Info("qlworker starting", "version", info.Version, "name", o.name, "capacity", o.capacity,
		"dispatchers", len(o.dispatchers))
	if err := runner.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "qlworker: %v\n", err)
		return exitProblem
	}
	o.logger.Info("qlworker stopped")
	return exitOK
}

// supervisor re-executes this binary (the running one, even if replaced on disk) as the per-job
// supervisor: a job and all its descendants die when qlworker dies, also by SIGKILL.
var supervisor = []string{"/proc/self/exe", process.SupervisorCommand}

func main() {
	if len(os.Args) > 1 && os.Args[1] == process.SupervisorCommand {
		os.Exit(process.Supervise(os.Args[2:])) // hidden: never a flag, never in --help
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
