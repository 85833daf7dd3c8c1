// Package testpg gives every test a real PostgreSQL database of its own, cloned from a template on
// which the four roles exist and the whole migration stream has been applied.
//
// The server, once per test binary, is the first of:
//  1. QL_TEST_DATABASE_URL: an existing server, reached as a superuser;
//  2. a throwaway cluster from local server binaries (QL_PG_BIN, pg_config, /usr/lib/postgresql);
//  3. testcontainers-go's postgres module, when a Docker engine answers: the image QL_PG_IMAGE,
//     default the official postgres:15.
//
// QL_TEST_SOURCE=docker takes only the third: no local binaries, and QL_TEST_DATABASE_URL must
// not be set; without a Docker engine the tests fail (make test-containers).
//
// With none of them the tests fail and say how to get one. QL_TEST_SKIP_DB=1 turns that into
// skips for people who want unit tests only; CI never sets it.
package testpg

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/app/pgcluster"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/roles"
)

// Password is given to the four roles so that role URLs work on servers that do not trust
// loopback connections (QL_TEST_DATABASE_URL). Test servers only.
const Password = "ql-test-password"

// Server is the PostgreSQL of one test binary.
type Server struct {
	superURL string // a superuser URL; its database is replaced per use
	Names    roles.Names
	Source   string // where the server came from: "QL_TEST_DATABASE_URL", "local binaries in …", "testcontainers"
	// Image is the Docker image the server runs when Source is "testcontainers".
	Image string
	// BinDir is the folder of the server binaries when the test binary started its own server
	// from local binaries (pgcluster); empty for QL_TEST_DATABASE_URL and Docker.
	BinDir string
	// Version is the server's SELECT version(); VersionNum its server_version_num (180004), for
	// tests of behaviour that differs between majors.
	Version    string
	VersionNum int
	template   string
	stop       func()
	mu         sync.Mutex // CREATE DATABASE … TEMPLATE needs the template to be idle
	// rolesMu serialises roles create and ALTER ROLE … PASSWORD: the roles are cluster-wide, and
	// two parallel tests updating the same pg_authid row fail with "tuple concurrently updated".
	rolesMu sync.Mutex
	seq     atomic.Int64
	// seeded are the templates of NewSeeded by key, dropped with the template in close.
	seededMu sync.Mutex
	seeded   map[string]*seededTemplate
}

// seededTemplate is one NewSeeded template: made once, by the first test that asks for it.
type seededTemplate struct {
	mu   sync.Mutex
	name string // set once seeded
}

var (
	mainCalled bool
	startOnce  sync.Once
	server     *Server
	setupErr   error
)

// Main provides the server for a test binary: call it from TestMain. The server starts at the
// first Get, not here: a binary whose selected tests need no database (go test -run '^$', or a
// -run that picks only unit tests) starts none.
func Main(m *testing.M) {
	os.Exit(run(m))
}

// run gives the binary a temporary folder of its own (scratch), runs the tests, and leaves
// nothing behind: the folder, and if a test started the server, the template and any database or
// role of this binary that a test's clean-up missed are removed whether the tests passed or not.
func run(m *testing.M) int {
	removeScratch, err := scratch()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testpg: %v\n", err)
		return 1
	}
	defer removeScratch()
	mainCalled = true
	code := m.Run()
	if server != nil {
		left, err := server.close()
		if len(left) > 0 {
			fmt.Fprintf(os.Stderr, "testpg: tests left %s on %s; dropped now\n", strings.Join(left, ", "), server.Source)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "testpg: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Get returns the binary's server, failing (or skipping, on explicit opt-out) the test without one.
func Get(t testing.TB) *Server {
	t.Helper()
	startOnce.Do(func() {
		if !mainCalled {
			setupErr = errors.New("testpg.Main was not called from TestMain")
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		server, setupErr = start(ctx)
	})
	if server == nil {
		if os.Getenv("QL_TEST_SKIP_DB") == "1" {
			t.Skipf("QL_TEST_SKIP_DB=1: skipping a test that needs PostgreSQL (%v)", setupErr)
		}
		t.Fatalf("this test needs PostgreSQL: %v\n"+
			"Get one of: QL_TEST_DATABASE_URL=postgres://superuser@host/db; PostgreSQL server binaries "+
			"(apt-get install postgresql, or QL_PG_BIN=/path/to/bin); a running Docker engine. "+
			"QL_TEST_SKIP_DB=1 skips these tests instead (a skip is not a pass).", setupErr)
	}
	return server
}

func start(ctx context.Context) (*Server, error) {
	names, _ := roles.NewNames(roles.DefaultPrefix)
	s := &Server{Names: names, template: fmt.Sprintf("ql_tmpl_%d", os.Getpid()), stop: func() {}}
	switch source := os.Getenv("QL_TEST_SOURCE"); {
	case source != "" && source != SourceDocker:
		return nil, fmt.Errorf("QL_TEST_SOURCE=%q: the only value is %q (Docker only); unset it for the usual order", source, SourceDocker)
	case source == SourceDocker && os.Getenv("QL_TEST_DATABASE_URL") != "":
		return nil, errors.New("QL_TEST_SOURCE=docker and QL_TEST_DATABASE_URL are both set: unset one")
	case source == SourceDocker:
		url, stop, err := startContainer(ctx, Image())
		if err != nil {
			return nil, fmt.Errorf("QL_TEST_SOURCE=docker: %w", err)
		}
		s.superURL, s.Source, s.Image, s.stop = url, "testcontainers", Image(), stop
	case os.Getenv("QL_TEST_DATABASE_URL") != "":
		s.superURL, s.Source = os.Getenv("QL_TEST_DATABASE_URL"), "QL_TEST_DATABASE_URL"
	default:
		c, localErr := pgcluster.Start(ctx, pgcluster.Options{})
		if localErr == nil {
			s.superURL, s.Source, s.stop = c.URL("postgres", "postgres"), "local binaries in "+c.BinDir, func() { _ = c.Stop() }
			s.BinDir = c.BinDir
			break
		}
		url, stop, dockerErr := startContainer(ctx, Image())
		if dockerErr != nil {
			return nil, fmt.Errorf("no PostgreSQL available: local binaries: %v; Docker: %v", localErr, dockerErr)
		}
		s.superURL, s.Source, s.Image, s.stop = url, "testcontainers", Image(), stop
	}
	if err := s.buildTemplate(ctx); err != nil {
		s.stop()
		return nil, fmt.Errorf("prepare template database on %s: %w", s.Source, err)
	}
	if err := s.recordVersion(ctx); err != nil {
		s.stop()
		return nil, fmt.Errorf("server version of %s: %w", s.Source, err)
	}
	return s, nil
}

// Major is the server's major version (15, 16, …).
func (s *Server) Major() int { return s.VersionNum / 10000 }

// recordVersion reads SELECT version() and, when QL_TEST_SERVER_LOG names a file, appends one
// line to it: "<server_version_num>\t<version()>\t<source>". make test-matrix reads that file
// to print the exact server version and to check that every test binary ran on the major it asked
// for.
func (s *Server) recordVersion(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.URL("", "postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SELECT version(), current_setting('server_version_num')::int").
		Scan(&s.Version, &s.VersionNum); err != nil {
		return err
	}
	path := os.Getenv("QL_TEST_SERVER_LOG")
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	// one write of one short line: O_APPEND keeps concurrent test binaries' lines whole
	_, err = fmt.Fprintf(f, "%d\t%s\t%s\n", s.VersionNum, s.Version, s.Source)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// URL is a URL for role (empty: the superuser) on database.
func (s *Server) URL(role, database string) string {
	u, err := url.Parse(s.superURL)
	if err != nil {
		panic(fmt.Sprintf("testpg: bad server URL: %v", err))
	}
	u.Path = "/" + database
	if role != "" {
		u.User = url.UserPassword(role, Password)
	}
	return u.String()
}

func (s *Server) buildTemplate(ctx context.Context) error {
	admin, err := pgx.Connect(ctx, s.URL("", "postgres"))
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident(s.template)); err != nil {
		return err
	}
	if err := s.Bootstrap(ctx, s.template); err != nil {
		return err
	}
	return s.migrate(ctx, s.template)
}

// migrate runs every migration on database as its owner role.
func (s *Server) migrate(ctx context.Context, database string) error {
	cfg, err := dbconn.Resolve(s.URL(s.Names.Owner, database))
	if err != nil {
		return err
	}
	r, err := migrate.Open(ctx, cfg, migrate.Options{Names: s.Names, AsOwner: true})
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = r.Up(ctx, 0)
	return err
}

// Bootstrap runs `roles create` on database, with test passwords for the roles. The roles are
// cluster-wide, so this is idempotent across databases.
func (s *Server) Bootstrap(ctx context.Context, database string) error {
	return s.BootstrapNames(ctx, database, s.Names)
}

// BootstrapNames is Bootstrap for another set of role names (a test that changes role attributes
// uses a prefix of its own, so that it disturbs no other test).
func (s *Server) BootstrapNames(ctx context.Context, database string, names roles.Names) error {
	s.rolesMu.Lock()
	defer s.rolesMu.Unlock()
	conn, err := pgx.Connect(ctx, s.URL("", database))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	report, err := roles.Create(ctx, conn, names)
	if err != nil {
		return err
	}
	if !report.OK() {
		return fmt.Errorf("roles create: %v", report.Roles)
	}
	for _, role := range names.All() {
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", ident(role), Password)); err != nil {
			return err
		}
	}
	return nil
}

// close drops the template and whatever databases and roles of this binary are still on the
// server, then stops the server if the binary started it. On a long-lived server
// (QL_TEST_DATABASE_URL) anything left would stay for ever. It returns what a test's clean-up
// had missed (for a warning), and an error if something could not be dropped.
func (s *Server) close() (left []string, err error) {
	defer s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("", "postgres"))
	if err != nil {
		return nil, fmt.Errorf("clean up %s: %w", s.Source, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(s.template)+" WITH (FORCE)"); err != nil {
		return nil, fmt.Errorf("drop the template %s: %w", s.template, err)
	}
	if _, err := dropOwn(ctx, conn, fmt.Sprintf(`^ql_tmpl_%d_s[0-9]+$`, os.Getpid()), "^$"); err != nil {
		return nil, fmt.Errorf("drop the seeded templates: %w", err)
	}
	left, err = dropOwn(ctx, conn, fmt.Sprintf(`^ql_t_%d_[0-9]+$`, os.Getpid()), fmt.Sprintf(`^ql[a-z]+%d_`, os.Getpid()))
	if err != nil {
		return left, fmt.Errorf("databases and roles of this test binary left on %s: %w", s.Source, err)
	}
	return left, nil
}

// dropOwn drops every database whose name matches databases and then every role whose name
// matches roles (regular expressions), the roles in one DROP ROLE so that roles depending on one
// another (memberships, grants between them) go together. It returns what it dropped.
func dropOwn(ctx context.Context, conn *pgx.Conn, databases, roles string) ([]string, error) {
	var dropped []string
	if databases != "" {
		rows, err := conn.Query(ctx, "SELECT datname FROM pg_catalog.pg_database WHERE datname ~ $1 ORDER BY 1", databases)
		if err != nil {
			return nil, err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(n)+" WITH (FORCE)"); err != nil {
				return dropped, fmt.Errorf("drop database %s: %w", n, err)
			}
			dropped = append(dropped, "database "+n)
		}
	}
	rows, err := conn.Query(ctx, "SELECT rolname FROM pg_catalog.pg_roles WHERE rolname ~ $1 ORDER BY 1", roles)
	if err != nil {
		return dropped, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(names) == 0 {
		return dropped, err
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = ident(n)
	}
	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS "+strings.Join(quoted, ", ")); err != nil {
		return dropped, fmt.Errorf("drop roles %s: %w", strings.Join(names, ", "), err)
	}
	return append(dropped, "roles "+strings.Join(names, ", ")), nil
}

// DB is one test's database.
type DB struct {
	Name   string
	Server *Server
	Names  roles.Names
}

// New returns a database of the test's own, cloned from the migrated template (control-core v28,
// the four roles with exactly the modelled privileges). It is dropped when the test ends.
func New(t testing.TB) *DB {
	t.Helper()
	s := Get(t)
	return s.grantDatabase(t, s.create(t, s.template))
}

// NewSeeded is New with what seed did on a database of its own: seed runs once per test binary
// and key, on a clone of the migrated template that becomes the template of every database
// NewSeeded returns for that key. It spares tests that each start from the same published
// objects the commands that publish them (processes, connections, transactions), once per test.
// seed may fail its test (t.Fatal): the next test asking for key seeds again. It must leave no
// connection open: a template with a session cannot be cloned.
func NewSeeded(t testing.TB, key string, seed func(d *DB)) *DB {
	t.Helper()
	s := Get(t)
	s.seededMu.Lock()
	if s.seeded == nil {
		s.seeded = map[string]*seededTemplate{}
	}
	st := s.seeded[key]
	if st == nil {
		st = &seededTemplate{}
		s.seeded[key] = st
	}
	s.seededMu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock() // also when seed fails its test (runtime.Goexit)
	if st.name == "" {
		name := fmt.Sprintf("ql_tmpl_%d_s%d", os.Getpid(), s.seq.Add(1))
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, s.URL("", "postgres"))
		if err != nil {
			t.Fatalf("connect to %s server: %v", s.Source, err)
		}
		s.mu.Lock()
		_, err = conn.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(s.template)+s.cloneStrategy())
		s.mu.Unlock()
		conn.Close(ctx)
		if err != nil {
			t.Fatalf("create the seeded template %s: %v", name, err)
		}
		seed(s.grantDatabase(t, &DB{Name: name, Server: s, Names: s.Names}))
		st.name = name
	}
	return s.grantDatabase(t, s.create(t, st.name))
}

// grantDatabase installs the model's database ACL on d, which CREATE DATABASE does not copy from
// the template.
func (s *Server) grantDatabase(t testing.TB, d *DB) *DB {
	t.Helper()
	ctx := context.Background()
	// CREATE DATABASE does not copy the template's database ACL: install that part of the model.
	conn, err := pgx.Connect(ctx, s.URL("", d.Name))
	if err != nil {
		t.Fatalf("connect to %s: %v", d.Name, err)
	}
	defer conn.Close(ctx)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := roles.GrantDatabase(ctx, tx, s.Names, d.Name); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL ROLE %s; GRANT CONNECT ON DATABASE %s TO %s, %s",
			ident(s.Names.Owner), ident(d.Name), ident(s.Names.Admin), ident(s.Names.Runtime)))
		return err
	})
	if err != nil {
		t.Fatalf("install database grants on %s: %v", d.Name, err)
	}
	return d
}

// NewEmpty returns an empty database of the test's own on which `roles create` has run: nothing
// is migrated.
func NewEmpty(t testing.TB) *DB {
	t.Helper()
	s := Get(t)
	d := s.create(t, "template0")
	if err := s.Bootstrap(context.Background(), d.Name); err != nil {
		t.Fatalf("roles create on %s: %v", d.Name, err)
	}
	return d
}

// NewCollated is New on a database whose default collation is the ICU locale icu (e.g.
// "en-US") rather than the cluster's C: created from template0 and migrated on its own (seconds,
// not a clone). It skips the test when the server cannot create such a database (no ICU, or a
// server before PostgreSQL 15).
func NewCollated(t testing.TB, icu string) *DB {
	t.Helper()
	s := Get(t)
	if s.VersionNum < 150000 {
		t.Skipf("database ICU locale %s: PostgreSQL %d has no LOCALE_PROVIDER", icu, s.Major())
	}
	d := s.createWith(t, "template0", " LOCALE_PROVIDER icu ICU_LOCALE "+quoteLiteral(icu)+" LOCALE 'C'", true)
	if d == nil {
		return nil // skipped
	}
	ctx := context.Background()
	if err := s.Bootstrap(ctx, d.Name); err != nil {
		t.Fatalf("roles create on %s: %v", d.Name, err)
	}
	if err := s.migrate(ctx, d.Name); err != nil {
		t.Fatalf("migrate %s: %v", d.Name, err)
	}
	return s.grantDatabase(t, d)
}

func quoteLiteral(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }

func (s *Server) create(t testing.TB, template string) *DB {
	t.Helper()
	return s.createWith(t, template, s.cloneStrategy(), false)
}

// createWith creates a database of the test's own from template with the CREATE DATABASE options
// opts; skipUnsupported skips the test (and returns nil) when the server refuses opts.
func (s *Server) createWith(t testing.TB, template, opts string, skipUnsupported bool) *DB {
	t.Helper()
	name := fmt.Sprintf("ql_t_%d_%d", os.Getpid(), s.seq.Add(1))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.URL("", "postgres"))
	if err != nil {
		t.Fatalf("connect to %s server: %v", s.Source, err)
	}
	defer conn.Close(ctx)
	s.mu.Lock()
	_, err = conn.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(template)+opts)
	s.mu.Unlock()
	if err != nil && skipUnsupported {
		t.Skipf("create database %s from %s with%s: %v", name, template, opts, err)
		return nil
	}
	if err != nil {
		t.Fatalf("create database %s from %s: %v", name, template, err)
	}
	t.Cleanup(func() {
		if err := dropSubscriptions(ctx, s.URL("", name)); err != nil {
			t.Errorf("clean-up: %s: %v", name, err)
		}
		conn, err := pgx.Connect(ctx, s.URL("", "postgres"))
		if err != nil {
			t.Errorf("clean-up: connect to drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("clean-up: drop database %s: %v", name, err)
		}
	})
	return &DB{Name: name, Server: s, Names: s.Names}
}

// cloneStrategy is FILE_COPY (PostgreSQL 15+; older servers only have it) on the servers testpg
// starts: the clone is copied as files, not WAL-logged block by block (15's default, WAL_LOG).
// There (fsync off, so the two checkpoints it takes are cheap) that halves the server's work per
// clone and its drop, and the clone holds s.mu, which every parallel test of the binary waits on.
func (s *Server) cloneStrategy() string {
	if s.BinDir != "" && s.VersionNum >= 150000 {
		return " STRATEGY FILE_COPY"
	}
	return ""
}

// URL is a URL for role on this database; "" is the superuser.
func (d *DB) URL(role string) string { return d.Server.URL(role, d.Name) }

// Config is the connection configuration for role on this database.
func (d *DB) Config(t testing.TB, role string) *dbconn.Config {
	t.Helper()
	cfg, err := dbconn.Resolve(d.URL(role))
	if err != nil {
		t.Fatalf("connection settings for %s: %v", role, err)
	}
	return cfg
}

// Handle opens a database handle (dbconn.DB) for role on this database, closed when the test ends.
func (d *DB) Handle(t testing.TB, role string) *dbconn.DB {
	t.Helper()
	h, err := d.Config(t, role).Open(context.Background())
	if err != nil {
		t.Fatalf("open pool for %q on %s: %v", role, d.Name, err)
	}
	t.Cleanup(h.Close)
	return h
}

// Pool opens a pool for role on this database, closed when the test ends (for the test's own
// statements; what the code under test takes is a Handle).
func (d *DB) Pool(t testing.TB, role string) *pgxpool.Pool {
	t.Helper()
	return d.Handle(t, role).Pool()
}

// Exec runs statements as the superuser (test set-up and fault injection).
func (d *DB) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.URL(""))
	if err != nil {
		t.Fatalf("connect as superuser: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("exec %q: %v", firstLine(sql), err)
	}
}

// WorkerSession inserts a worker token and a worker session in state (active, draining)
// expiring expiresInMs after the database's now (negative: already expired), as a
// dispatcher registers one: the scheduler wakes the dispatchers only while a session is active
// (sql/queries/wake.sql, WakeWanted). It returns the session's id.
func (d *DB) WorkerSession(t testing.TB, state string, expiresInMs int64) string {
	t.Helper()
	id := uuid.NewString()
	d.Exec(t, `WITH tok AS (
		INSERT INTO control_core.worker_tokens (worker_token_id, name, token_hash)
		VALUES (gen_random_uuid(), 'w-'||$1::text, encode(sha256($1::text::bytea), 'hex')) RETURNING worker_token_id)
	INSERT INTO control_core.worker_sessions (worker_session_id, worker_id, state, capacity, heartbeat_at_ms,
		expires_at_ms, created_at_ms, worker_token_id, protocol)
	SELECT $1::uuid, 'w-'||$1::text, $2, 4, control_core.db_now_ms() - 60000,
		control_core.db_now_ms() + $3::bigint, control_core.db_now_ms() - 60000, worker_token_id, 1 FROM tok`, id, state, expiresInMs)
	return id
}

func ident(s string) string { return pgx.Identifier{s}.Sanitize() }

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// privateSeq numbers the role prefixes of NewPrivate within a test binary.
var privateSeq atomic.Int64

// PrivatePrefix returns a role prefix of the test's own, ql<tag><pid>_<n>_ (tag: lower-case
// letters naming the package, as "r" for roles), for a test that creates roles. Roles are
// cluster-wide and the ql_ roles are shared by every other test. Every role whose name starts
// with the prefix is dropped when the test ends, after d (see DropWithRoles); the binary's own
// clean-up drops any that a test's clean-up missed, by the same pattern.
func (d *DB) PrivatePrefix(t testing.TB, tag string) string {
	t.Helper()
	for _, r := range tag {
		if r < 'a' || r > 'z' {
			t.Fatalf("PrivatePrefix: tag %q must be lower-case letters", tag)
		}
	}
	prefix := fmt.Sprintf("ql%s%d_%d_", tag, os.Getpid(), privateSeq.Add(1))
	t.Cleanup(func() { d.DropWithRoles(t, prefix) })
	return prefix
}

// NewPrivate returns a migrated v28 database whose four roles have a prefix of their own
// (qlp<pid>_<n>_), for a test that changes a role: settings, attributes, memberships. Roles are
// cluster-wide and the ql_ roles are shared by every other test. The database, the prefix's
// roles and any other role whose name starts with the prefix are dropped when the test ends.
func NewPrivate(t testing.TB) *DB {
	t.Helper()
	return NewPrivateAt(t, 0)
}

// NewPrivateAt is NewPrivate migrated up to version to (0: all).
func NewPrivateAt(t testing.TB, to int64) *DB {
	t.Helper()
	ctx := context.Background()
	d := NewEmpty(t)
	names, err := roles.NewNames(d.PrivatePrefix(t, "p"))
	if err != nil {
		t.Fatal(err)
	}
	// NewEmpty bootstrapped the shared ql_ roles here; this database is the prefix's alone.
	d.Exec(t, "REVOKE ALL ON DATABASE "+ident(d.Name)+" FROM "+ident(d.Server.Names.Owner))
	if err := d.Server.BootstrapNames(ctx, d.Name, names); err != nil {
		t.Fatalf("roles create %s*: %v", names.Prefix, err)
	}
	r, err := migrate.Open(ctx, d.Config(t, ""), migrate.Options{Names: names, AsOwner: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Up(ctx, to); err != nil {
		t.Fatalf("up as %s: %v", names.Owner, err)
	}
	d.Names = names
	return d
}

// DropWithRoles drops the database (before create's own clean-up, which then finds nothing)
// and every role whose name starts with one of prefixes, in one DROP ROLE. What cannot be
// dropped fails the test: it would stay on a long-lived server (QL_TEST_DATABASE_URL). A role
// that owns objects or holds privileges in another database of the cluster cannot be dropped:
// drop that database first (a clean-up registered later runs earlier).
func (d *DB) DropWithRoles(t testing.TB, prefixes ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.Server.URL("", "postgres"))
	if err != nil {
		t.Errorf("clean-up: connect to drop %s and roles %v*: %v", d.Name, prefixes, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(d.Name)+" WITH (FORCE)"); err != nil {
		t.Errorf("clean-up: drop database %s: %v", d.Name, err)
		return
	}
	quoted := make([]string, len(prefixes))
	for i, p := range prefixes {
		quoted[i] = regexp.QuoteMeta(p)
	}
	d.Server.rolesMu.Lock()
	defer d.Server.rolesMu.Unlock()
	if _, err := dropOwn(ctx, conn, "", "^("+strings.Join(quoted, "|")+")"); err != nil {
		t.Errorf("clean-up: %v", err)
	}
}
