package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/admin"
)

// rolloutCommand is the command that moves a task's triggers to its head revision.
func rolloutCommand(project, task string) string {
	return fmt.Sprintf("qlsched task rollout --project %s --task %s", project, task)
}

// taskPublished is task publish's document: the publish result and, when triggers of the task
// pin older revisions of it, the command that moves them (null when none do).
type taskPublished struct {
	admin.TaskPublished
	RolloutCommand *string `json:"rollout_command"`
}

func taskPublishedDoc(pub admin.TaskPublished) document {
	body := taskPublished{TaskPublished: pub}
	if body.StaleTriggers == nil {
		body.StaleTriggers = []admin.StaleTrigger{}
	}
	if len(pub.StaleTriggers) > 0 {
		c := rolloutCommand(pub.ProjectID, pub.TaskID)
		body.RolloutCommand = &c
	}
	return document{"qlsched.task-publish/v1", body}
}

// writeStaleTriggers says which triggers of the task still run older revisions of it, and how to
// move them: publishing a task does not move its triggers.
func writeStaleTriggers(out io.Writer, pub admin.TaskPublished) {
	if len(pub.StaleTriggers) == 0 {
		return
	}
	names := make([]string, 0, len(pub.StaleTriggers))
	for _, s := range pub.StaleTriggers {
		names = append(names, fmt.Sprintf("%s (task revision %d)", s.TriggerID, s.TaskRevision))
	}
	fmt.Fprintf(out, "  %d trigger(s) still run older revisions of this task: %s\n", len(names), strings.Join(names, ", "))
	fmt.Fprintf(out, "  a trigger pins its task revision; to move them to revision %d: %s\n", pub.Revision, rolloutCommand(pub.ProjectID, pub.TaskID))
}

func (a *app) taskRolloutCmd() *cobra.Command {
	var (
		project, task string
		check         bool
	)
	cmd := a.publish(&cobra.Command{
		Use:   "rollout --project ID --task ID [--check]",
		Short: "Move every trigger of a task to the task's head revision",
		Long: `task rollout moves every trigger of a task to the task's head revision. A trigger pins a task
revision, so task publish leaves the task's triggers running the revision they pinned (it names
them); rollout gives each trigger behind the head a new trigger revision pinned to the head, its
content otherwise unchanged, all in one admin transaction under the project lock, each with its
trigger.publish audit row (change "rollout"). As any trigger publish, it resets each moved
trigger's schedule row: cursor and claim cleared, state and claim versions incremented, so a claim
taken under the old revision can never admit; the first occurrence is the first one after the
next claim.

Idempotent: triggers already at the head are left alone (cursor and claim kept); when all are,
nothing is written, and the output says how many moved. --check shows what would move and writes
nothing.`,
		Example: `  qlsched task rollout --project billing --task invoice --check
  qlsched task rollout --project billing --task invoice`,
	}, func(*cobra.Command) error {
		if err := admin.ValidateID(admin.FieldProject, project); err != nil {
			return err
		}
		return admin.ValidateID(admin.FieldTask, task)
	}, func(cmd *cobra.Command, p *admin.Publisher) (any, func(io.Writer), error) {
		res, err := p.RolloutTask(cmd.Context(), project, task, check)
		return document{"qlsched.task-rollout/v1", res}, func(out io.Writer) {
			verb := "moved"
			if check {
				verb = "would move"
			}
			fmt.Fprintf(out, "task %s/%s head revision %d: %d trigger(s) %s, %d already at the head\n",
				project, task, res.TaskRevision, res.Moved, verb, res.AtHead)
			for _, rt := range res.Triggers {
				switch {
				case rt.Moved && check:
					fmt.Fprintf(out, "  %s: task revision %d → %d (would be published)\n", rt.TriggerID, rt.FromTaskRevision, rt.TaskRevision)
				case rt.Moved:
					fmt.Fprintf(out, "  %s: task revision %d → %d, trigger revision %d\n", rt.TriggerID, rt.FromTaskRevision, rt.TaskRevision, rt.Revision)
				default:
					fmt.Fprintf(out, "  %s: at task revision %d, unchanged\n", rt.TriggerID, rt.TaskRevision)
				}
			}
		}, err
	})
	fl := cmd.Flags()
	fl.StringVar(&project, "project", "", "project id")
	fl.StringVar(&task, "task", "", "task id")
	fl.BoolVar(&check, "check", false, "show what would move; write nothing")
	return cmd
}
