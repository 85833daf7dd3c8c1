package migrate

import (
	"fmt"
	"io/fs"
	"time"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/sql/migrations"
)

// Bounds of Options.LockTimeout.
const (
	MinLockTimeout = 100 * time.Millisecond
	MaxLockTimeout = 24 * time.Hour
)

// FieldError is an input the package refuses, named by its field: an Options field
// ("LockTimeout") or an argument ("To" of Up and DryRun, "Version" of Accept). A command maps
// the field to its own flag; this package never names one.
type FieldError struct {
	Field string
	Value any    // the value refused
	Want  string // what would be accepted, or why the value is refused
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s %v: %s", e.Field, e.Value, e.Want) }

// Validate checks the options before anything is opened.
func (o Options) Validate() error {
	if o.LockTimeout != 0 && (o.LockTimeout < MinLockTimeout || o.LockTimeout > MaxLockTimeout) {
		return &FieldError{Field: "LockTimeout", Value: o.LockTimeout, Want: fmt.Sprintf("want %s … %s", MinLockTimeout, MaxLockTimeout)}
	}
	return nil
}

// CheckTarget checks Up's and DryRun's target version before anything is opened: 0 (every
// migration) or a version of the stream in fsys (nil: the stream embedded in the binary).
func CheckTarget(fsys fs.FS, to int64) error {
	if to == 0 {
		return nil
	}
	return checkVersion(fsys, "To", to)
}

// CheckVersion checks Accept's version before anything is opened: a version of the stream in
// fsys (nil: the embedded one).
func CheckVersion(fsys fs.FS, version int64) error { return checkVersion(fsys, "Version", version) }

func checkVersion(fsys fs.FS, field string, v int64) error {
	if v < 1 {
		return &FieldError{Field: field, Value: v, Want: "want a migration version, 1 or more"}
	}
	if fsys == nil {
		fsys = migrations.FS
	}
	list, err := checksums.Load(fsys)
	if err != nil {
		return fmt.Errorf("read the migrations: %w", err)
	}
	return versionIn(list, field, v)
}

// versionIn refuses a version list does not have.
func versionIn(list []checksums.Migration, field string, v int64) error {
	for _, m := range list {
		if m.Version == v {
			return nil
		}
	}
	last := int64(0)
	if len(list) > 0 {
		last = list[len(list)-1].Version
	}
	return &FieldError{Field: field, Value: v, Want: fmt.Sprintf("the stream has versions 1 … %d", last)}
}

// ApplyTimeouts is qlmigrate's timeout policy for every connection it opens from cfg. A migration
// on a large table may rightly run longer than the runtime's statement bound
// (dbconn.DefaultStatementTimeout): unless the connection settings ask for a statement_timeout,
// none is set, nor the client's response bound that follows it; the connect bound, keepalives
// and TCP_USER_TIMEOUT still notice a dead peer. A statement_timeout the URL sets stays, and Open
// then lets the response bound outlast the lock wait. The lock wait itself always runs without
// statement_timeout (txPrologue): Options.LockTimeout alone bounds it.
func ApplyTimeouts(cfg *dbconn.Config) {
	if t := cfg.Timeouts(); t.Statement == dbconn.DefaultStatementTimeout {
		t.Statement, t.Response = 0, 0
		cfg.SetTimeouts(t)
	}
}
