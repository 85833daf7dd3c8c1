// Package migrations embeds the hand-written goose migrations pg-0001 … pg-0022 of schema
// control_core and their integrity file, so every binary carries exactly the stream it verifies.
package migrations

import "embed"

// FS holds the migration files (NNNN_slug.sql) and their integrity file (migrations.sum) at its root.
//
//go:embed *.sql migrations.sum
var FS embed.FS
