// Package pgcluster starts a throwaway PostgreSQL cluster from the server binaries installed on
// this machine: for the tests, the demo and the benchmark. It never touches a cluster it did not
// create, and Stop removes everything Start made.
//
// PostgreSQL refuses to run as root, so when the caller is root the cluster runs as an
// unprivileged OS user (postgres, else nobody) that owns its data directory.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// ErrNoBinaries means no PostgreSQL server binaries were found.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found (set QL_PG_BIN to the folder holding initdb and postgres, or install postgresql)")

// Options tune a throwaway cluster.
type Options struct {
	// BinDir holds initdb and postgres; empty means FindBinDir.
	BinDir string
	// Durable keeps fsync on (benchmarks); tests turn it off for speed.
	Durable bool
	// Settings are extra postgres -c settings.
	Settings map[string]string
	// Log receives the server's log output; nil discards it.
	Log *os.File
}

// Cluster is a running throwaway server listening on 127.0.0.1.
type Cluster struct {
	BinDir  string
	Port    int
	dir     string
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
}

// FindBinDir returns the folder with initdb and postgres: $QL_PG_BIN, then `pg_config --bindir`,
// then the newest /usr/lib/postgresql/*/bin.
func FindBinDir() (string, error) {
	if dir := os.Getenv("QL_PG_BIN"); dir != "" {
		if !hasServer(dir) {
			return "", fmt.Errorf("QL_PG_BIN=%s holds no initdb/postgres", dir)
		}
		return dir, nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); hasServer(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, dir := range dirs {
		if hasServer(dir) {
			return dir, nil
		}
	}
	return "", ErrNoBinaries
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func hasServer(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() {
			return false
		}
	}
	return true
}

// Start creates a cluster in a new temporary folder and starts it. The superuser is "postgres"
// and loopback connections are trusted, so URLs need no password.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bin := opts.BinDir
	if bin == "" {
		var err error
		if bin, err = FindBinDir(); err != nil {
			return nil, err
		}
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "qlpg-")
	if err != nil {
		return nil, fmt.Errorf("create cluster folder: %w", err)
	}
	c := &Cluster{BinDir: bin, dir: dir, exited: make(chan struct{})}
	if err := c.start(ctx, opts, cred); err != nil {
		c.removeDir()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, opts Options, cred *syscall.Credential) error {
	data := filepath.Join(c.dir, "data")
	if cred != nil {
		if err := os.Chown(c.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("hand cluster folder to uid %d: %w", cred.Uid, err)
		}
	}
	initdb := exec.CommandContext(ctx, filepath.Join(c.BinDir, "initdb"),
		"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, lastLines(out, 5))
	}
	return c.launch(ctx, data, serverSettings(c.dir, opts, nil), cred, opts.Log)
}

// BenchSettings are a benchmark server's settings, extra on top: the connections of qlbench's
// phases, and checkpoints only when the bench asks for one (CHECKPOINT between its phases, in
// settle), never timed or WAL-triggered within a phase, so no phase pays for the one before it.
// River's loop server has the same, so the two systems are measured on one server setting.
func BenchSettings(extra map[string]string) map[string]string {
	s := map[string]string{"max_connections": "300", "max_wal_size": "16GB", "checkpoint_timeout": "1h"}
	maps.Copy(s, extra)
	return s
}

// serverSettings are the command-line settings of every server this package starts, primary or
// standby (extra adds the role's own), then the caller's Options.Settings: written once, so a
// standby never lacks a setting its primary has.
func serverSettings(socketDir string, opts Options, extra map[string]string) map[string]string {
	settings := map[string]string{
		"listen_addresses":               "127.0.0.1",
		"unix_socket_directories":        socketDir,
		"max_connections":                "300",
		"shared_buffers":                 "128MB",
		"max_prepared_transactions":      "0",
		"max_pred_locks_per_transaction": "256",
		"log_min_messages":               "warning",
		"timezone":                       "UTC",
	}
	if !opts.Durable {
		settings["fsync"] = "off"
		settings["synchronous_commit"] = "off"
		settings["full_page_writes"] = "off"
	}
	for _, m := range []map[string]string{extra, opts.Settings} {
		for k, v := range m {
			settings[k] = v
		}
	}
	return settings
}

// launch starts postgres on dataDir with settings on a free port and waits until it accepts
// connections (a hot standby: once consistent). A failed start is retried on another port: most
// likely another process took the port between freePort and postgres' bind.
func (c *Cluster) launch(ctx context.Context, dataDir string, settings map[string]string, cred *syscall.Credential, log *os.File) error {
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		args := []string{"-D", dataDir, "-p", strconv.Itoa(port)}
		for k, v := range settings {
			args = append(args, "-c", k+"="+v)
		}
		cmd := exec.Command(filepath.Join(c.BinDir, "postgres"), args...)
		// Pdeathsig: if this process dies without stopping the server, the server dies too.
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
		if log != nil {
			cmd.Stdout, cmd.Stderr = log, log
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start postgres: %w", err)
		}
		c.cmd, c.Port = cmd, port
		c.exited = make(chan struct{})
		go func(exited chan struct{}) { c.waitErr = cmd.Wait(); close(exited) }(c.exited)
		err = c.waitReady(ctx)
		if err == nil {
			return nil
		}
		_ = cmd.Process.Kill()
		<-c.exited
		if attempt >= 3 || ctx.Err() != nil {
			return err
		}
	}
}

func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var lastErr error
	for {
		select {
		case <-c.exited:
			return fmt.Errorf("postgres exited during start-up: %v", c.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("postgres not ready: %w (last: %v)", ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
		conn, err := c.connect(ctx)
		if err == nil {
			return conn.Close(ctx)
		}
		lastErr = err
	}
}

// connect opens a superuser session on the postgres database through dbconn, the one
// connection route. What runs on it (probes, the backup API, CHECKPOINT) begins no transaction.
func (c *Cluster) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := dbconn.Resolve(c.URL("postgres", "postgres"))
	if err != nil {
		return nil, err
	}
	conn, err := cfg.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return conn.Conn, nil
}

// URL returns a connection URL for user on database, over TCP on loopback.
func (c *Cluster) URL(user, database string) string {
	u := url.URL{Scheme: "postgres", User: url.User(user), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port)),
		Path: "/" + database, RawQuery: "sslmode=disable"}
	return u.String()
}

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return filepath.Join(c.dir, "data") }

// Stop shuts the server down fast and removes its folder. It is safe to call more than once.
func (c *Cluster) Stop() error {
	if c.cmd != nil && c.cmd.Process != nil {
		select {
		case <-c.exited:
		default:
			_ = c.cmd.Process.Signal(syscall.SIGQUIT) // immediate shutdown: throwaway data
			select {
			case <-c.exited:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
				<-c.exited
			}
		}
	}
	return c.removeDir()
}

func (c *Cluster) removeDir() error {
	if c.dir == "" {
		return nil
	}
	err := os.RemoveAll(c.dir)
	c.dir = ""
	return err
}

// serverCredential returns the uid/gid to run the server as: nil when not root.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root and no unprivileged user (postgres or nobody) exists to run PostgreSQL as")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ServerCredential is the OS user a server started by a test runs as: nil when not root, else
// postgres (or nobody). Other servers the tests start (PgBouncer) refuse root too.
func ServerCredential() (*syscall.Credential, error) { return serverCredential() }
