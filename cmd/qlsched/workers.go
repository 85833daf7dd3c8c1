package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// workerCmd is `qlsched worker token create|revoke|list`: the bearer tokens workers authenticate
// with (issue 32). The database keeps only each token's sha256; the token is printed once.
func (a *app) workerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "worker", Short: "Manage worker tokens (admin role)"}
	token := &cobra.Command{Use: "token", Short: "Create, revoke and list the bearer tokens workers authenticate with"}
	token.AddCommand(a.workerTokenCreateCmd(), a.workerTokenRevokeCmd(), a.workerTokenListCmd())
	cmd.AddCommand(token)
	return cmd
}

func (a *app) workerTokenCreateCmd() *cobra.Command {
	var name string
	cmd := a.publish(&cobra.Command{
		Use:   "create --name NAME",
		Short: "Create a worker token and print it once",
		Long: `worker token create generates a worker token (qlw_ and 256 random bits, base64url) and stores
only its sha256, in one admin transaction with a worker_token.create audit row (id and name, never
the hash). The token is printed once, on stdout: it cannot be shown again, only revoked and
replaced. Give it to a worker as its --token-file. Several live tokens may share a name, so a
token is rotated by creating the new one, rolling the workers, and revoking the old one by --id.

--name: ` + admin.WorkerNameRule + `.
Text output: the token alone on stdout (a script can capture it), a warning on stderr.
--format json: {"schema","id","name","token","created_at_ms"}.`,
		Example: `  qlsched worker token create --name build-fleet > build-fleet.token`,
	}, func(*cobra.Command) error {
		return admin.ValidateWorkerName(name)
	}, func(cmd *cobra.Command, p *admin.Publisher) (any, func(io.Writer), error) {
		res, err := p.CreateWorkerToken(cmd.Context(), name)
		return createdToken{document{"qlsched.worker-token-create/v1", res}, res}, func(out io.Writer) {
			if _, err := fmt.Fprintln(out, res.Token); err == nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "worker token %s (id %s) created: it is shown once, store it now\n", res.Name, res.ID)
			}
		}, err
	})
	cmd.Flags().StringVar(&name, "name", "", "the token's name: "+admin.WorkerNameRule)
	return cmd
}

func (a *app) workerTokenRevokeCmd() *cobra.Command {
	var (
		r  admin.WorkerTokenRevoke
		id string
	)
	cmd := a.publish(&cobra.Command{
		Use:   "revoke (--id ID | --name NAME)",
		Short: "Revoke a worker token by id, or every live token of a name (idempotent)",
		Long: `worker token revoke stamps revoked_at_ms on one token (--id) or on every live token of a name
(--name), in one admin transaction, with one worker_token.revoke audit row per token. A revoked
token is refused at its next request to any dispatcher: its worker's heartbeats fail, and it stops
its jobs before their leases expire. Revocation is forever.

Idempotent: tokens already revoked are left alone; the command says how many it revoked (0) and
exits 0. An id or a name no token ever had exits 1.`,
	}, func(cmd *cobra.Command) error {
		r.ID = uuid.Nil
		if id != "" {
			u, err := uuid.Parse(id)
			if err != nil {
				return cli.Usagef("--id %q: not a UUID", id)
			}
			r.ID = u
		}
		return r.Validate()
	}, func(cmd *cobra.Command, p *admin.Publisher) (any, func(io.Writer), error) {
		res, err := p.RevokeWorkerTokens(cmd.Context(), r)
		return document{"qlsched.worker-token-revoke/v1", res}, func(out io.Writer) {
			what := "id " + id
			if r.Name != "" {
				what = "name " + r.Name
			}
			if len(res.Revoked) == 0 {
				fmt.Fprintf(out, "worker tokens of %s: 0 revoked (already revoked)\n", what)
				return
			}
			fmt.Fprintf(out, "worker tokens of %s: %d revoked\n", what, len(res.Revoked))
			for _, t := range res.Revoked {
				fmt.Fprintf(out, "  %s %s\n", t.ID, t.Name)
			}
		}, err
	})
	cmd.Flags().StringVar(&id, "id", "", "the token's id (as token create or token list shows it)")
	cmd.Flags().StringVar(&r.Name, "name", "", "revoke every live token of this name")
	return cmd
}

func (a *app) workerTokenListCmd() *cobra.Command {
	return a.list("list", "List worker tokens: id, name, created, revoked (never a hash)",
		`worker token list shows every worker token, live and revoked, by name and age: its id, name,
creation time and revocation time (database times, UTC). Neither a token nor its hash is ever
shown. Read-only, one snapshot.`,
		func() error { return nil },
		func(cmd *cobra.Command, r *admin.Reader) (document, func(io.Writer), error) {
			rows, more, err := r.WorkerTokens(cmd.Context())
			return document{"qlsched.worker-token-list/v1", struct {
					Tokens []admin.WorkerToken `json:"tokens"`
					More   bool                `json:"more"`
				}{rows, more}}, func(out io.Writer) {
					tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "ID\tNAME\tCREATED\tREVOKED")
					for _, t := range rows {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.ID, t.Name, utc(&t.CreatedAtMs), utc(t.RevokedAtMs))
					}
					tw.Flush()
					if more {
						fmt.Fprintf(out, "more: the first %d tokens shown\n", len(rows))
					}
				}, err
		})
}

// workersCmd is `qlsched workers list`.
func (a *app) workersCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "workers", Short: "Inspect worker sessions"}
	var f admin.WorkerFilter
	list := a.list("list [--all] [--limit N]", "List worker sessions: state, capacity, in flight, last heartbeat",
		`workers list shows the live worker sessions (active or draining, not past their expiry by the
database's time): session id, worker name, state, capacity, in flight (live offers plus active
leases), the age of the last heartbeat (database time), labels and the name of the token the
worker authenticated with. One snapshot, one statement; the live sessions are one range of an
index that holds only them, so the read costs the live fleet, never the history. --all shows
every session, newest first (closed and expired ones too: it reads the history).`,
		func() error {
			if f.Limit < 1 || f.Limit > admin.MaxWorkersLimit {
				return cli.Usagef("--limit: %d is out of range: want 1 … %d", f.Limit, admin.MaxWorkersLimit)
			}
			return f.Validate()
		},
		func(cmd *cobra.Command, r *admin.Reader) (document, func(io.Writer), error) {
			rows, more, err := r.WorkerSessions(cmd.Context(), f)
			return document{"qlsched.workers-list/v1", struct {
					Sessions []admin.WorkerSession `json:"sessions"`
					More     bool                  `json:"more"`
				}{rows, more}}, func(out io.Writer) {
					tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "SESSION\tWORKER\tSTATE\tCAPACITY\tIN FLIGHT\tHEARTBEAT\tLABELS\tTOKEN")
					for _, s := range rows {
						state := s.State
						if !s.Live && (s.State == "active" || s.State == "draining") {
							state += " (expired)"
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s ago\t%s\t%s\n", s.SessionID, s.Worker, state, s.Capacity, s.InFlight,
							msFixed(s.HeartbeatAgeMs, ""), labelsText(s.Labels), s.TokenName)
					}
					if len(rows) == 0 {
						fmt.Fprintln(tw, "(no sessions)\t\t\t\t\t\t\t")
					}
					tw.Flush()
					if more {
						fmt.Fprintf(out, "more: %d shown; raise --limit to see more\n", len(rows))
					}
				}, err
		})
	list.Flags().BoolVar(&f.All, "all", false, "every session, newest first, not only the live ones")
	list.Flags().IntVar(&f.Limit, "limit", admin.DefaultWorkersLimit, fmt.Sprintf("at most this many sessions (1 … %d)", admin.MaxWorkersLimit))
	cmd.AddCommand(list)
	return cmd
}

// labelsText renders labels as k=v,k=v in key order; "-" when there are none.
func labelsText(l map[string]string) string {
	if len(l) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}

// createdToken is token create's document: a token whose one showing failed is revoked at once,
// since nobody can ever hold it (and a live token nobody holds is only a risk).
type createdToken struct {
	document
	res admin.WorkerTokenCreated
}

func (c createdToken) undoUnshown(cmd *cobra.Command, pool *dbconn.DB, writeErr error) error {
	_, err := admin.NewPublisher(pool).RevokeWorkerTokens(cmd.Context(), admin.WorkerTokenRevoke{ID: c.res.ID})
	if err != nil {
		return fmt.Errorf("writing the token: %w; worker token %s (id %s) was created but never shown, and revoking it failed (%v): revoke it with `qlsched worker token revoke --id %s`",
			writeErr, c.res.Name, c.res.ID, err, c.res.ID)
	}
	return fmt.Errorf("writing the token: %w; worker token %s (id %s) was created but never shown, so it was revoked", writeErr, c.res.Name, c.res.ID)
}
