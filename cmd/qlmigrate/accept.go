package main

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/app/migrate"
)

func (a *app) acceptCmd() *cobra.Command {
	var (
		version int64
		reason  string
	)
	cmd := &cobra.Command{
		Use:   "accept --version N --reason TEXT",
		Short: "Record an edit of comments or whitespace of an applied migration, with who, when and why",
		Long: `accept moves the checksum-ledger row of applied migration N to the sha256 of the file in this
binary, when the file differs from what ran in comments or whitespace only (the same normal form:
the same statements, in the same transactions; status shows "changed (comments/whitespace only)").
It writes an audit row to control_core.migration_acceptances in the same transaction: the old and
new sha256, the session user, the time and --reason. A statement edit cannot be accepted (exit 1):
restore the file as it ran and put the change in a new migration. Nothing else (no force, no
manual UPDATE) is ever needed.

Run it as the owner role (or a superuser: it does SET LOCAL ROLE <prefix>owner). Accepting a
migration whose ledger already holds the file's sha256 changes nothing and exits 0.`,
		Example: `  qlmigrate accept --version 5 --reason "reflowed comments, PR #123"`,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := migrate.CheckVersion(nil, version); err != nil {
				return err
			}
			trimmed := strings.TrimSpace(reason)
			if n := utf8.RuneCountInString(trimmed); n < 1 || n > 1000 || !utf8.ValidString(reason) {
				return cli.Usagef("--reason: want 1 … 1000 characters of text saying why the edit is accepted")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			r, err := a.openRunner(ctx, true)
			if err != nil {
				return err
			}
			defer r.Close()
			acc, err := r.Accept(ctx, version, reason)
			var refused *migrate.AcceptError
			if errors.As(err, &refused) {
				return &cli.ProblemError{Err: err}
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.json() {
				res := struct {
					Schema     string     `json:"schema"`
					Version    int64      `json:"version"`
					Name       string     `json:"name"`
					Accepted   bool       `json:"accepted"`
					OldSHA256  string     `json:"old_sha256"`
					NewSHA256  string     `json:"new_sha256"`
					Normalized string     `json:"normalized_sha256"`
					Reason     string     `json:"reason,omitempty"`
					AcceptedBy string     `json:"accepted_by,omitempty"`
					AcceptedAt *time.Time `json:"accepted_at,omitempty"`
				}{Schema: schemaAccept, Version: acc.Migration.Version, Name: acc.Migration.Name, Accepted: !acc.Unchanged,
					OldSHA256: acc.OldSHA256, NewSHA256: acc.NewSHA256, Normalized: acc.Normal}
				if !acc.Unchanged {
					at := acc.AcceptedAt.UTC()
					res.Reason, res.AcceptedBy, res.AcceptedAt = acc.Reason, acc.AcceptedBy, &at
				}
				return writeJSON(out, res)
			}
			if acc.Unchanged {
				fmt.Fprintf(out, "%s: the ledger already holds the file's sha256 %s; nothing to accept\n", acc.Migration.Name, acc.NewSHA256[:12])
				return nil
			}
			fmt.Fprintf(out, "accepted %s: comments/whitespace only (normal form %s); ledger sha256 %s -> %s; by %s at %s: %s\n",
				acc.Migration.Name, acc.Normal[:12], acc.OldSHA256[:12], acc.NewSHA256[:12], acc.AcceptedBy, acc.AcceptedAt.UTC().Format(time.RFC3339), acc.Reason)
			return nil
		},
	}
	cmd.Flags().Int64Var(&version, "version", 0, "the applied migration whose cosmetic edit to accept (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "why the edit is accepted, stored in the audit row (required, 1 … 1000 characters)")
	return cmd
}
