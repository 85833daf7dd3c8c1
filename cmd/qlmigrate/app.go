package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"

	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/roles"
)

// app holds the global flags and what they resolve to.
type app struct {
	databaseURL string
	rolePrefix  string
	format      cli.Format

	names roles.Names
	conn  *dbconn.Config
}

// validateFlags checks every global flag except the connection settings: all a command that
// does not connect (hash, help) needs.
func (a *app) validateFlags() error {
	names, err := roles.NewNames(a.rolePrefix)
	if err != nil {
		return cli.RolePrefixError(err)
	}
	a.names = names
	return nil
}

// resolveConn parses the connection settings, without connecting, for a command that connects.
func (a *app) resolveConn() error {
	conn, err := dbconn.Resolve(a.databaseURL)
	if err != nil {
		return err
	}
	migrate.ApplyTimeouts(conn)
	a.conn = conn
	return nil
}

// flagOf names the flag that sets each field internal/app/migrate names in a *migrate.FieldError.
var flagOf = map[string]string{"To": "--to", "LockTimeout": "--lock-timeout", "Version": "--version"}

// flagError turns a *migrate.FieldError into the usage error the user reads, naming the flag.
func flagError(err error) error {
	var field *migrate.FieldError
	if errors.As(err, &field) {
		if flag, ok := flagOf[field.Field]; ok {
			return cli.Usagef("%s %v: %s", flag, field.Value, field.Want)
		}
		return &cli.UsageError{Err: err}
	}
	return err
}

func (a *app) redact(s string) string {
	if a.conn == nil {
		return s
	}
	return a.conn.Redact(s)
}

func (a *app) openRunner(ctx context.Context, asOwner bool) (*migrate.Runner, error) {
	return migrate.Open(ctx, a.conn, migrate.Options{Names: a.names, AsOwner: asOwner})
}

// JSON schema identifiers of the documents qlmigrate prints (docs/json.md). Each changes only
// when a field is removed or changes meaning; fields may be added.
const (
	schemaUp     = "qlmigrate.up/v1"
	schemaPlan   = "qlmigrate.plan/v1"
	schemaStatus = "qlmigrate.status/v1"
	schemaAccept = "qlmigrate.accept/v1"

	schemaGrants      = "qlmigrate.grants/v1"
	schemaGrantsSQL   = "qlmigrate.grants-sql/v1"
	schemaHash        = "qlmigrate.hash/v1"
	schemaHashCheck   = "qlmigrate.hash-check/v1"
	schemaRolesCreate = "qlmigrate.roles-create/v1"
)

func (a *app) json() bool { return a.format == "json" }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
