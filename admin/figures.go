package admin

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/qlcontrol/controlcore/db"
)

// projectFigures is what status and the console's overview show of one project, each figure
// bounded by CountCap (sql/queries/status.sql): its trigger counts, the backlog walk of its due
// range and the live claims in it.
type projectFigures struct {
	ProjectID       string
	State           string
	Triggers        int64
	Enabled         int64
	Backlog         int64
	OldestOverdueMs int64 // 0: none found
	// DuePartial: the walks read CountCap rows of the due range, so the backlog and the live
	// claims are lower bounds and an older overdue occurrence may lie beyond them.
	DuePartial bool
	NowMs      int64
	Claims     []ownerClaimsExpiring // by owner
}

type ownerClaimsExpiring struct {
	Owner           string
	Claims          int64
	SoonestExpiryMs int64
}

func (p projectFigures) countsPartial() bool { return p.Triggers >= CountCap || p.Enabled >= CountCap }

// ownerClaims is the project's live claims by owner, empty rather than nil.
func (p projectFigures) ownerClaims() []OwnerClaims {
	out := make([]OwnerClaims, 0, len(p.Claims))
	for _, c := range p.Claims {
		out = append(out, OwnerClaims{c.Owner, c.Claims})
	}
	return out
}

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
	claims, err := q.ProjectLiveClaims(ctx, CountCap)
	if err != nil {
		return nil, fmt.Errorf("read live claims by project: %w", err)
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
	for _, c := range claims { // by project, then owner
		if i, ok := index[c.ProjectID]; ok {
			out[i].Claims = append(out[i].Claims, ownerClaimsExpiring{c.Owner, c.Claims, c.SoonestExpiryMs})
		}
	}
	return out, nil
}

// replicaClaims sums the projects' live claims by owner, by owner, with the soonest expiry of each
// as a duration from the read's time.
func replicaClaims(projects []projectFigures) []ReplicaClaims {
	byOwner := map[string]*ReplicaClaims{}
	for _, p := range projects {
		for _, c := range p.Claims {
			in := c.SoonestExpiryMs - p.NowMs
			if r, ok := byOwner[c.Owner]; ok {
				r.Claims += c.Claims
				r.SoonestExpiryInMs = min(r.SoonestExpiryInMs, in)
				continue
			}
			byOwner[c.Owner] = &ReplicaClaims{c.Owner, c.Claims, in}
		}
	}
	out := make([]ReplicaClaims, 0, len(byOwner))
	for _, r := range byOwner {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b ReplicaClaims) int { return cmp.Compare(a.Owner, b.Owner) })
	return out
}
