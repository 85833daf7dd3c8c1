// Command pgentrypoint is the entry point of the PostgreSQL test image that scripts/pg-image.sh
// builds offline from this machine's own PostgreSQL 15 binaries (make test-containers). It does
// what the official postgres image's docker-entrypoint.sh does for the settings testpg uses:
//
//   - POSTGRES_USER (default postgres), POSTGRES_PASSWORD (required, unless
//     POSTGRES_HOST_AUTH_METHOD=trust), POSTGRES_DB (default POSTGRES_USER), PGDATA
//     (default /var/lib/postgresql/data);
//   - as root, it makes PGDATA and /var/run/postgresql the postgres user's and drops to that user
//     (PostgreSQL refuses to run as root);
//   - on first start (no PGDATA/PG_VERSION): initdb, listen_addresses = '*', password
//     (scram-sha-256) authentication for every TCP connection, then a temporary server on the
//     Unix socket only that creates POSTGRES_DB, and stops; that server's "database system is
//     ready to accept connections" is the first of the two the testcontainers postgres module
//     waits for;
//   - then it replaces itself with postgres and the container's arguments ("postgres -c
//     fsync=off"; arguments starting with "-" get "postgres" put in front), whose own "ready to
//     accept connections" is the second.
//
// Not done: /docker-entrypoint-initdb.d scripts, POSTGRES_INITDB_ARGS, *_FILE secrets.
// Arguments other than postgres are run as they are, as the official image does.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const socketDir = "/var/run/postgresql"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "pgentrypoint: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		args = append([]string{"postgres"}, args...)
	}
	if args[0] != "postgres" {
		return execPath(args)
	}
	pgdata := env("PGDATA", "/var/lib/postgresql/data")
	if os.Getuid() == 0 {
		if err := dropRoot(pgdata); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(pgdata, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := initialise(pgdata); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("PGDATA=%s: %w", pgdata, err)
	}
	return execPath(args)
}

// dropRoot gives PGDATA and the socket folder to the postgres user and becomes that user.
func dropRoot(pgdata string) error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("user postgres (PostgreSQL refuses to run as root): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, dir := range []string{pgdata, socketDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			return fmt.Errorf("chown %s to postgres: %w", dir, err)
		}
	}
	if err := os.Chmod(pgdata, 0o700); err != nil {
		return fmt.Errorf("chmod PGDATA=%s: %w", pgdata, err)
	}
	if err := syscall.Setgroups([]int{gid}); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid %d: %w", uid, err)
	}
	return os.Setenv("HOME", u.HomeDir)
}

func initialise(pgdata string) error {
	superuser := env("POSTGRES_USER", "postgres")
	password := os.Getenv("POSTGRES_PASSWORD")
	method := env("POSTGRES_HOST_AUTH_METHOD", "scram-sha-256")
	if password == "" && method != "trust" {
		return errors.New("the database is uninitialized and POSTGRES_PASSWORD is not set; " +
			"set it, or POSTGRES_HOST_AUTH_METHOD=trust to allow connections without a password")
	}
	database := env("POSTGRES_DB", superuser)

	pwfile, err := os.CreateTemp("", "pwfile")
	if err != nil {
		return fmt.Errorf("password file: %w", err)
	}
	defer os.Remove(pwfile.Name())
	if _, err := fmt.Fprintln(pwfile, password); err != nil {
		return fmt.Errorf("password file: %w", err)
	}
	if err := pwfile.Close(); err != nil {
		return fmt.Errorf("password file: %w", err)
	}
	// --no-sync: a test image; the official one syncs, which only makes its start slower.
	initdb := []string{"initdb", "-D", pgdata, "--username=" + superuser, "-E", "UTF8", "--locale=C", "--no-sync"}
	if password != "" {
		initdb = append(initdb, "--pwfile="+pwfile.Name())
	}
	if err := runCmd(initdb...); err != nil {
		return err
	}
	if err := appendFile(filepath.Join(pgdata, "postgresql.conf"), "listen_addresses = '*'\n"); err != nil {
		return err
	}
	if err := appendFile(filepath.Join(pgdata, "pg_hba.conf"), "host all all all "+method+"\n"); err != nil {
		return err
	}

	// A temporary server on the Unix socket only, as the official image runs one.
	if err := runCmd("pg_ctl", "-D", pgdata, "-o", "-c listen_addresses='' -p 5432", "-w", "start"); err != nil {
		return err
	}
	if database != "postgres" {
		err = runCmd("psql", "-v", "ON_ERROR_STOP=1", "--no-psqlrc", "-h", socketDir, "-U", superuser, "-d", "postgres",
			"-c", `CREATE DATABASE "`+strings.ReplaceAll(database, `"`, `""`)+`"`)
	}
	if stopErr := runCmd("pg_ctl", "-D", pgdata, "-m", "fast", "-w", "stop"); err == nil {
		err = stopErr
	}
	if err != nil {
		return err
	}
	fmt.Println("\nPostgreSQL init process complete; ready for start up.")
	return nil
}

func runCmd(args ...string) error {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	return nil
}

// execPath replaces this process with args[0], looked up on PATH.
func execPath(args []string) error {
	path, err := exec.LookPath(args[0])
	if err != nil {
		return fmt.Errorf("run %s: %w", args[0], err)
	}
	return syscall.Exec(path, args, os.Environ())
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("append to %s: %w", path, err)
	}
	return nil
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
