package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/admin"
)

// replicasCmd is `qlsched replicas`: the registrations of the scheduler replicas (pg-0024).
func (a *app) replicasCmd() *cobra.Command {
	cmd := a.list("replicas", "List scheduler replicas: owner, instance, host, version, started, last heartbeat, live",
		`replicas lists the registrations of the scheduler replicas (qlsched run), one per --owner, by
owner: the owner, the instance (random per process), host name, version, start time, the age of
the last heartbeat (database time) and whether the registration is live (not past its expiry) or
expired (a replica that crashed or lost its database; a clean stop deletes its row, and the next
replica with the same --owner takes an expired one). Read-only, one snapshot, the admin role.`,
		func() error { return nil },
		func(cmd *cobra.Command, r *admin.Reader) (document, func(io.Writer), error) {
			rows, err := r.Replicas(cmd.Context())
			return document{"qlsched.replicas/v1", struct {
					Replicas []admin.Replica `json:"replicas"`
				}{rows}}, func(out io.Writer) {
					if len(rows) == 0 {
						fmt.Fprintln(out, "no replica registered")
						return
					}
					tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "OWNER\tINSTANCE\tHOST\tVERSION\tSTARTED\tHEARTBEAT\tSTATE")
					for _, x := range rows {
						state := "live"
						if !x.Live {
							state = "expired " + (time.Duration(x.NowMs-x.ExpiresAtMs) * time.Millisecond).Round(time.Second).String() + " ago"
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s ago\t%s\n", x.Owner, x.InstanceID, x.Hostname, x.Version,
							utc(&x.StartedAtMs), (time.Duration(x.HeartbeatAgeMs) * time.Millisecond).Round(time.Millisecond), state)
					}
					tw.Flush()
				}, err
		})
	cmd.Annotations[adminRead] = "the runtime role may not read control_core.replicas; it registers through functions"
	return cmd
}
