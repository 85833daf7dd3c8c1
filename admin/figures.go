package admin

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/qlcontrol/controlcore/db"
)

// projectFigures is what status and the console's overview show of one project, each figure
// bounded by CountCap (sql/queries/status.sql): its trigger counts and the backlog walk of its due
// range. The live claims are read apart: exactly for status, by a bounded walk for the overview.
type projectFigures struct {
	ProjectID       string
	State           string
	Triggers        int64
	Enabled         int64
	Backlog         int64
	OldestOverdueMs int64 // 0: none found
	// DuePartial: the walk read CountCap rows of the due range, oldest first, so the backlog is a
	// lower bound; an overdue occurrence it found is the oldest, but none found does not mean none.
	DuePartial bool
	NowMs      int64
}

func (p projectFigures) countsPartial() bool { return p.Triggers >= CountCap || p.Enabled >= CountCap }

// readProjectFigures reads every project's figures, by project id, within the caller's snapshot.
func readProjectFigures(ctx context.Context, q *db.Queries) ([]projectFigures, error) {
	backlog, err := q.ProjectBacklog(ctx, CountCap)
	if err != nil {
		return nil, fmt.Errorf("read backlog by project: %w", err)
	}
	counts, err := q.ProjectTriggerCounts(ctx, CountCap)
	if err != nil {
		return nil, fmt.Errorf("read trigger counts by project: %w", err)
	}
	out := make([]projectFigures, 0, len(backlog))
	index := make(map[string]int, len(backlog))
	for i, b := range backlog {
		index[b.ProjectID] = i
		out = append(out, projectFigures{ProjectID: b.ProjectID, State: b.State, Backlog: b.Backlog,
			OldestOverdueMs: b.OldestOverdueMs, DuePartial: b.DueWalked >= CountCap, NowMs: b.NowMs})
	}
	// a project created between the statements is in one and not the other: the snapshot
	// (REPEATABLE READ) makes that impossible, and the lookups stay safe without it
	for _, c := range counts {
		if i, ok := index[c.ProjectID]; ok {
			out[i].Triggers, out[i].Enabled = c.Triggers, c.Enabled
		}
	}
	return out, nil
}

// replicaClaims sums the live claims of every project by owner, by owner, with the soonest
// expiry of each.
func replicaClaims(rows []db.LiveClaimsByProjectOwnerRow) []ReplicaClaims {
	byOwner := map[string]*ReplicaClaims{}
	for _, c := range rows {
		if r, ok := byOwner[c.Owner]; ok {
			r.Claims += c.Claims
			r.SoonestExpiryInMs = min(r.SoonestExpiryInMs, c.SoonestExpiryInMs)
			continue
		}
		byOwner[c.Owner] = &ReplicaClaims{c.Owner, c.Claims, c.SoonestExpiryInMs}
	}
	out := make([]ReplicaClaims, 0, len(byOwner))
	for _, r := range byOwner {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b ReplicaClaims) int { return cmp.Compare(a.Owner, b.Owner) })
	return out
}
