package pgcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// lowLevelBaseBackup makes dataDir a standby's copy of a running primary without pg_basebackup,
// which the server-only binary packages of PostgreSQL 16 to 18 (scripts/pg-bin.sh) lack: the
// documented low-level API (pg_backup_start, a file copy, pg_backup_stop's backup_label), with
// no WAL in the copy. A physical replication slot, created before the backup starts, keeps the
// primary's WAL from that point until the standby has streamed it; standby.signal and
// primary_conninfo make it stream. The slot stays on the primary, a throwaway server like the
// standby. The files belong to cred's uid when the caller is root.
func lowLevelBaseBackup(ctx context.Context, primary *Cluster, dataDir string, cred *syscall.Credential) error {
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	slot := "qlpg_standby_" + hex.EncodeToString(suffix)
	return primary.superuser(ctx, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "SELECT pg_create_physical_replication_slot($1, true)", slot); err != nil {
			return fmt.Errorf("create replication slot: %w", err)
		}
		if _, err := conn.Exec(ctx, "SELECT pg_backup_start('qlpg standby', true)"); err != nil {
			return fmt.Errorf("pg_backup_start: %w", err)
		}
		copyErr := copyDataDir(primary.DataDir(), dataDir, cred)
		var label string
		if err := conn.QueryRow(ctx, "SELECT labelfile FROM pg_backup_stop(false)").Scan(&label); err != nil {
			return fmt.Errorf("pg_backup_stop: %w", err)
		}
		if copyErr != nil {
			return fmt.Errorf("copy the primary's data directory: %w", copyErr)
		}
		conf := fmt.Sprintf("primary_conninfo = 'host=127.0.0.1 port=%d user=postgres'\nprimary_slot_name = '%s'\n", primary.Port, slot)
		for name, text := range map[string]string{"backup_label": label, "standby.signal": ""} {
			if err := writeOwned(filepath.Join(dataDir, name), []byte(text), cred); err != nil {
				return err
			}
		}
		f, err := os.OpenFile(filepath.Join(dataDir, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteString(conf)
		return errors.Join(err, f.Close())
	})
}

// copyDataDir copies a running server's data directory as the low-level backup API documents:
// the contents of pg_wal and of the runtime-only folders are left out (the folders themselves are
// kept), as are postmaster.pid and postmaster.opts. Files that vanish during the copy were
// dropped by the running server and are not needed.
func copyDataDir(src, dst string, cred *syscall.Credential) error {
	skipContents := map[string]bool{"pg_wal": true, "pg_replslot": true, "pg_dynshmem": true, "pg_notify": true,
		"pg_serial": true, "pg_snapshots": true, "pg_stat_tmp": true, "pg_subtrans": true}
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			if err := mkdirOwned(target, cred); err != nil {
				return err
			}
			if !skipContents[rel] {
				return nil
			}
			if rel == "pg_wal" {
				if err := mkdirOwned(filepath.Join(target, "archive_status"), cred); err != nil {
					return err
				}
			}
			return filepath.SkipDir
		}
		switch d.Name() {
		case "postmaster.pid", "postmaster.opts", "pg_internal.init":
			return nil
		}
		return copyFileOwned(path, target, cred)
	})
}

func mkdirOwned(dir string, cred *syscall.Credential) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return chownTo(dir, cred)
}

func writeOwned(path string, data []byte, cred *syscall.Credential) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	return chownTo(path, cred)
}

func copyFileOwned(src, dst string, cred *syscall.Credential) error {
	in, err := os.Open(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err = errors.Join(err, out.Close()); err != nil {
		return err
	}
	return chownTo(dst, cred)
}

func chownTo(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return os.Chown(path, int(cred.Uid), int(cred.Gid))
}
