package pgcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartStandby makes a streaming physical standby of primary: pg_basebackup -R (which writes
// standby.signal and primary_conninfo) into a new temporary folder, or, where the binaries have
// no pg_basebackup, the low-level backup API (lowLevelBaseBackup); then a hot standby server on
// its own loopback port. The primary needs wal_level replica or logical (PostgreSQL's default)
// and free WAL senders; its pg_hba.conf from initdb -A trust already trusts replication
// connections on loopback. opts.Settings are added to the standby's settings. Stop removes it.
func StartStandby(ctx context.Context, primary *Cluster, opts Options) (*Cluster, error) {
	return startStandby(ctx, primary, opts, false)
}

// startStandby is StartStandby; lowLevel uses the low-level backup API even where pg_basebackup
// exists, so the tests exercise it on every major.
func startStandby(ctx context.Context, primary *Cluster, opts Options, lowLevel bool) (*Cluster, error) {
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "qlpg-standby-")
	if err != nil {
		return nil, fmt.Errorf("create standby folder: %w", err)
	}
	c := &Cluster{BinDir: primary.BinDir, dir: dir, exited: make(chan struct{})}
	if err := c.startStandby(ctx, primary, opts, cred, lowLevel); err != nil {
		c.removeDir()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) startStandby(ctx context.Context, primary *Cluster, opts Options, cred *syscall.Credential, lowLevel bool) error {
	if cred != nil {
		if err := os.Chown(c.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("hand standby folder to uid %d: %w", cred.Uid, err)
		}
	}
	basebackup := filepath.Join(c.BinDir, "pg_basebackup")
	if _, err := os.Stat(basebackup); err != nil || lowLevel {
		if err := lowLevelBaseBackup(ctx, primary, c.DataDir(), cred); err != nil {
			return fmt.Errorf("low-level base backup of port %d: %w", primary.Port, err)
		}
	} else {
		bb := exec.CommandContext(ctx, basebackup, "-D", c.DataDir(), "-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port),
			"-U", "postgres", "-X", "stream", "-R", "-c", "fast", "--no-sync")
		bb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := bb.CombinedOutput(); err != nil {
			return fmt.Errorf("pg_basebackup from port %d: %w: %s", primary.Port, err, lastLines(out, 5))
		}
	}
	return c.launch(ctx, c.DataDir(), serverSettings(c.dir, opts, map[string]string{"hot_standby": "on"}), cred, opts.Log)
}

// superuser runs f on a superuser connection to the cluster's postgres database.
func (c *Cluster) superuser(ctx context.Context, f func(*pgx.Conn) error) error {
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return f(conn)
}

// InRecovery says whether the server is a standby (pg_is_in_recovery).
func (c *Cluster) InRecovery(ctx context.Context) (bool, error) {
	var in bool
	err := c.superuser(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&in)
	})
	return in, err
}

// Promote ends recovery on a standby (pg_promote, waiting up to a minute) and checks that it
// now accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	return c.superuser(ctx, func(conn *pgx.Conn) error {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil {
			return fmt.Errorf("promote: %w", err)
		}
		if !ok {
			return fmt.Errorf("promote: the standby on port %d did not leave recovery within 60 s", c.Port)
		}
		var in bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&in); err != nil || in {
			return fmt.Errorf("promote: still in recovery (%v)", err)
		}
		return nil
	})
}

// Timeline returns the timeline of the latest checkpoint in the control file
// (pg_control_checkpoint().timeline_id), after a CHECKPOINT (a restartpoint on a standby), so a
// promotion shows as soon as it happened.
func (c *Cluster) Timeline(ctx context.Context) (int, error) {
	var tli int
	err := c.superuser(ctx, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
			return err
		}
		return conn.QueryRow(ctx, "SELECT timeline_id FROM pg_control_checkpoint()").Scan(&tli)
	})
	if err != nil {
		return 0, fmt.Errorf("read timeline on port %d: %w", c.Port, err)
	}
	return tli, nil
}

// WaitReplayed waits until standby has replayed everything primary had written to its WAL when
// it was called (pg_current_wal_insert_lsn on the primary ≤ pg_last_wal_replay_lsn on the
// standby; the insert position, because with synchronous_commit off a commit record may not be
// flushed yet). It returns that LSN.
func WaitReplayed(ctx context.Context, primary, standby *Cluster) (string, error) {
	var lsn string
	if err := primary.superuser(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn)
	}); err != nil {
		return "", fmt.Errorf("read primary LSN: %w", err)
	}
	err := standby.superuser(ctx, func(conn *pgx.Conn) error {
		for {
			var done bool
			if err := conn.QueryRow(ctx, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", lsn).Scan(&done); err != nil {
				return err
			}
			if done {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("standby did not replay %s: %w", lsn, ctx.Err())
			case <-time.After(20 * time.Millisecond): // polling the server's replay position
			}
		}
	})
	return lsn, err
}

// Kill stops the server at once (SIGKILL to its process group), leaving its folder, as a fenced
// node whose power was cut. Stop still removes the folder.
func (c *Cluster) Kill() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	select {
	case <-c.exited:
	default:
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.exited
	}
}
