package main

import (
	"log/slog"

	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// app holds the global flags.
type app struct {
	databaseURL string
	format      cli.Format
	logFormat   string
	logLevelStr string

	logLevel slog.Level

	conn *dbconn.Config
}

func (a *app) validate() error {
	var err error
	a.logLevel, err = cli.LogLevel(a.logFormat, a.logLevelStr)
	return err
}

// connConfig resolves the connection settings (commands that need a database call it before
// doing anything else).
func (a *app) connConfig() (*dbconn.Config, error) {
	if a.conn == nil {
		conn, err := dbconn.Resolve(a.databaseURL)
		if err != nil {
			return nil, err
		}
		a.conn = conn
	}
	return a.conn, nil
}

func (a *app) redact(s string) string {
	if a.conn == nil {
		return s
	}
	return a.conn.Redact(s)
}
