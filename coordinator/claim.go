package coordinator

import "github.com/google/uuid"

// Fence is the four-part fence of ADR-0105 as the claim statement wrote it into the schedule row:
// every write that ends the claim (admit, skip, release, init) holds only while the row still
// carries the same owner, token and version and database time is before the expiry.
type Fence struct {
	Owner       string    // claim_owner: the replica's Config.Owner
	Token       uuid.UUID // claim_token: fresh for every claim
	Version     int64     // claim_version: incremented by every claim and every republish
	ExpiresAtMs int64     // claim_expires_at_ms: ClaimedAtMs + the lease, in database time
}

// Claim is a schedule row this replica holds under its Fence, with everything the decision and
// the admit need (all returned by the claim statement itself, so the claim is the only read).
// Its values are plain Go; store.go maps them from and to the generated query types.
type Claim struct {
	ProjectID, TriggerID string
	TriggerRevision      int64
	// CursorMs is next_fire_at_ms as claimed: the occurrence due next; nil while the row waits
	// for initialisation (its first decision sets it).
	CursorMs          *int64
	LastScheduledAtMs *int64 // the last admitted occurrence; nil before the first
	StateVersion      int64  // state_version after the claim's own increment
	Fence             Fence
	// ClaimedAtMs is the claim's observation of database time: the updated_at_ms the claim
	// wrote, greatest(database now, the row's previous updated_at_ms), which never moves
	// backwards for a row (ADR-0107). The decision is made at this instant and the admit
	// verifies that it still is the row's updated_at_ms.
	ClaimedAtMs int64
	Takeover    bool // the claim replaced an expired one

	ProjectRevision int64
	ProjectDigest   string
	CronSpec        string
	TimeZone        string
	MisfirePolicy   string
	MisfireGraceMs  int64 // the misfire grace: a due occurrence at most this late is on time
	TriggerDigest   string
	TaskID          string
	TaskRevision    int64
	TaskDigest      string
	// the execution revision the task revision pins (a remote_worker spec)
	ExecutionRevisionID uuid.UUID
	ExecutionDigest     string

	// RowCtid is the physical address of the row version the claim wrote; the admit reaches
	// the row by it (a TID scan, see sql/queries/scheduler.sql) and finds nothing if it changed.
	RowCtid string
}

// cursorAttr is the claimed cursor for a log line: the occurrence, or nil while uninitialised.
func (c *Claim) cursorAttr() any {
	if c.CursorMs == nil {
		return nil
	}
	return *c.CursorMs
}
