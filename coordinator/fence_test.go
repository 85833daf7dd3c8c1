package coordinator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/schedule"
)

// Tests of the fence and of every item the admit verifies, each on its own and at two batch sizes
// of the one admission statement (Admit): one row per transaction (the ADR's admit) and the rows
// of a test admitted together (AdmitBatch with more than one item). They are written from ADR-0105's list ("before committing, the admission re-locks and
// verifies, item by item"), and each names the item it breaks, so that the mutation list of
// docs/testing.md can point at the test that must kill each mutation.

// admitPath is a batch size of the admission statement.
type admitPath struct {
	name  string
	batch bool // the claims are admitted together, in one statement; else one AdmitBatch per claim
}

var admitPaths = []admitPath{{"admit", false}, {"batch admit", true}}

// claimAll claims n rows as owner with lease, in one claim statement.
func claimAll(t *testing.T, s *Store, owner string, lease time.Duration, n int) []*Claim {
	t.Helper()
	claims := must(s.ClaimBatch(context.Background(), owner, lease, n)).of(t)
	if len(claims) != n {
		t.Fatalf("claimed %d rows, want %d", len(claims), n)
	}
	return claims
}

// admitEach admits its on path: one admit per item (batch size 1), or all of them in one (size ≥ 2).
func admitEach(t *testing.T, s *Store, p admitPath, its []AdmitItem) []AdmitResult {
	t.Helper()
	ctx := context.Background()
	if p.batch {
		if len(its) < 2 {
			t.Fatal("a batch admit of fewer than 2 items is the single-row path")
		}
		return s.AdmitBatch(ctx, its, 3)
	}
	out := make([]AdmitResult, len(its))
	for i, it := range its {
		out[i] = s.AdmitBatch(ctx, []AdmitItem{it}, 3)[0]
	}
	return out
}

// waitForDatabaseTimePast polls the database's clock (never the test's) until it reads later
// than ms, failing after a deadline.
func (f *fixture) waitForDatabaseTimePast(ms int64) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for f.count("SELECT (control_core.db_now_ms() > $1::bigint)::int", ms) == 0 {
		if time.Now().After(deadline) {
			f.t.Fatalf("database time did not pass %d within 10 s", ms)
		}
		<-tick.C
	}
}

// A claim whose lease ran out is no fence, even when nobody took it over: its owner, token and
// version still match the row, only database time has passed its expiry. Its admit, skip and
// release are races that write nothing, in both admission paths; a fresh claim of the same row
// (the takeover the expiry allows) then admits the occurrence exactly once.
func TestAnExpiredClaimAdmitsNothingEvenUntakenOver(t *testing.T) {
	t.Parallel()
	for _, p := range admitPaths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			f, s := dueFixture(t, time.Second, "a", "b")
			claims := claimAll(t, s, "replica", 300*time.Millisecond, 2) // the lease runs out by itself
			var expires int64
			for _, c := range claims {
				expires = max(expires, c.Fence.ExpiresAtMs)
			}
			f.waitForDatabaseTimePast(expires)
			res := admitEach(t, s, p, items(claims, 60_000))
			for i, r := range res {
				if r.Err != nil || r.Outcome != Race {
					t.Errorf("%s: admit under an expired claim: %s, %v; want a race", claims[i].TriggerID, r.Outcome, r.Err)
				}
				for _, next := range []int64{*claims[i].CursorMs, *claims[i].CursorMs + 60_000} { // release, skip
					if out, err := s.Advance(context.Background(), claims[i], next); err != nil || out != Race {
						t.Errorf("%s: advance to %d under an expired claim: %s, %v; want a race", claims[i].TriggerID, next, out, err)
					}
				}
			}
			if n := f.count("SELECT count(*) FROM control_core.runs"); n != 0 {
				t.Fatalf("%d runs admitted under expired claims, want 0", n)
			}
			for _, c := range claims {
				if f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE trigger_id = $1
					AND claim_token = $2 AND state_version = $3 AND next_fire_at_ms = $4`,
					c.TriggerID, c.Fence.Token, c.StateVersion, *c.CursorMs) != 1 {
					t.Errorf("%s: the expired claim's row changed", c.TriggerID)
				}
			}
			fresh := claimAll(t, s, "replica", 30*time.Second, 2)
			for i, r := range admitEach(t, s, p, items(fresh, 60_000)) {
				if r.Err != nil || r.Outcome != Written {
					t.Errorf("%s: admit after the takeover: %s, %v; want written", fresh[i].TriggerID, r.Outcome, r.Err)
				}
			}
			if n := f.audit(); n != 2 {
				t.Errorf("%d runs, want 2", n)
			}
		})
	}
}

// forgery changes one item of a claim (or of the rows behind it) so that exactly that item no
// longer holds; the admit must then write nothing for it.
type forgery struct {
	name string
	// claim edits a copy of the claim and may move the occurrence (scheduled, next).
	claim func(c *Claim, scheduled, next *int64)
	// tamper runs as a superuser with $1 = the trigger id, after the claim.
	tamper string
	// advance: the item is one AdvanceClaimed checks too (init, skip, release).
	advance bool
}

var forgeries = []forgery{
	{name: "owner", claim: func(c *Claim, _, _ *int64) { c.Fence.Owner += "-other" }, advance: true},
	{name: "token", claim: func(c *Claim, _, _ *int64) { c.Fence.Token = uuid.New() }, advance: true},
	{name: "claim version", claim: func(c *Claim, _, _ *int64) { c.Fence.Version-- }, advance: true},
	{name: "trigger revision", claim: func(c *Claim, _, _ *int64) { c.TriggerRevision++ }, advance: true},
	{name: "state version", claim: func(c *Claim, _, _ *int64) { c.StateVersion-- }, advance: true},
	{name: "cursor", claim: func(c *Claim, _, _ *int64) { cur := *c.CursorMs - 60_000; c.CursorMs = &cur }, advance: true},
	{name: "row address", claim: func(c *Claim, _, _ *int64) { c.RowCtid = "(4000,1)" }},
	{name: "observation", claim: func(c *Claim, _, next *int64) { c.ClaimedAtMs -= 500; *next = c.ClaimedAtMs + 1 }},
	{name: "candidate before the cursor", claim: func(c *Claim, scheduled, _ *int64) { *scheduled -= 60_000 }},
	{name: "candidate after the observation", claim: func(c *Claim, scheduled, next *int64) {
		*scheduled, *next = c.ClaimedAtMs+1, c.ClaimedAtMs+60_000
	}},
	{name: "next fire time not after the candidate", claim: func(c *Claim, scheduled, next *int64) { *next = *scheduled }},
	// The row's lower bound of the clock lies ahead of database time (a clock that went back):
	// a candidate due at that observation is not due yet by the admit's own database time.
	{name: "candidate not yet due by database time", tamper: `UPDATE control_core.trigger_schedules
		SET updated_at_ms = updated_at_ms + 600000, claim_expires_at_ms = claim_expires_at_ms + 600000 WHERE project_id = 'p' AND trigger_id = $1`,
		claim: func(c *Claim, scheduled, next *int64) {
			c.ClaimedAtMs += 600_000
			// an occurrence between the cursor and the moved observation, after database time
			*scheduled, *next = c.ClaimedAtMs-1000, c.ClaimedAtMs+1
		}},
	{name: "project revision", claim: func(c *Claim, _, _ *int64) { c.ProjectRevision++ }},
	{name: "project digest", claim: func(c *Claim, _, _ *int64) { c.ProjectDigest = c.TriggerDigest }},
	{name: "trigger digest", claim: func(c *Claim, _, _ *int64) { c.TriggerDigest = c.TaskDigest }},
	{name: "task digest", claim: func(c *Claim, _, _ *int64) { c.TaskDigest = c.TriggerDigest }},
	{name: "execution revision", claim: func(c *Claim, _, _ *int64) { c.ExecutionRevisionID = uuid.New() }},
	{name: "execution digest", claim: func(c *Claim, _, _ *int64) { c.ExecutionDigest = c.TaskDigest }},
	// The trigger's head moved to a new revision behind the publisher's back: the schedule row
	// (revision, versions, claim) is untouched, only the head no longer is its revision.
	{name: "trigger head moved", tamper: `INSERT INTO control_core.trigger_revisions (project_id, trigger_id, revision, kind,
			cron_spec, timezone, misfire_policy, misfire_grace_ms, enabled, task_id, task_revision, content_digest)
		SELECT project_id, trigger_id, revision + 1, kind, cron_spec, timezone, misfire_policy, misfire_grace_ms, enabled, task_id,
			task_revision, content_digest FROM control_core.trigger_revisions
		WHERE project_id = 'p' AND trigger_id = $1 AND revision = (SELECT head_revision FROM control_core.triggers
			WHERE project_id = 'p' AND trigger_id = $1);
		UPDATE control_core.triggers SET head_revision = head_revision + 1 WHERE project_id = 'p' AND trigger_id = $1`},
	{name: "trigger spec behind its digest", tamper: `UPDATE control_core.trigger_revisions SET cron_spec = '*/2 * * * *'
		WHERE project_id = 'p' AND trigger_id = $1`},
	{name: "trigger misfire grace behind its digest", tamper: `UPDATE control_core.trigger_revisions SET misfire_grace_ms = misfire_grace_ms + 1
		WHERE project_id = 'p' AND trigger_id = $1`},
}

// Every item the admit verifies, broken on its own (the rest of the claim intact), makes it write
// nothing for that row, in both paths; in a batch the row next to it, whose items all hold, is
// admitted. Items AdvanceClaimed checks too make the skip and the release races as well.
func TestEveryVerifiedItemOnItsOwn(t *testing.T) {
	t.Parallel()
	for _, p := range admitPaths {
		for _, fg := range forgeries {
			t.Run(p.name+"/"+fg.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				f, s := dueFixture(t, 2*time.Second, "a", "b")
				claims := claimAll(t, s, "replica", 30*time.Second, 2)
				its := items(claims, 60_000)
				forged := *claims[0]
				if fg.tamper != "" {
					for _, stmt := range splitStatements(fg.tamper) {
						f.exec(stmt, forged.TriggerID)
					}
					// an UPDATE of the row moves it: address the new version, so that only the
					// item under test differs
					if err := f.su.QueryRow(ctx, "SELECT ctid::text FROM control_core.trigger_schedules WHERE project_id = 'p' AND trigger_id = $1",
						forged.TriggerID).Scan(&forged.RowCtid); err != nil {
						t.Fatal(err)
					}
				}
				if fg.claim != nil {
					fg.claim(&forged, &its[0].ScheduledFor, &its[0].Next)
				}
				its[0].Claim = &forged
				if !p.batch {
					its = its[:1]
				}
				res := admitEach(t, s, p, its)
				if res[0].Outcome == Written {
					t.Fatalf("the admit with a forged %s wrote a Run", fg.name)
				}
				if p.batch && (res[1].Err != nil || res[1].Outcome != Written) {
					t.Errorf("the intact row next to it: %s, %v; want written", res[1].Outcome, res[1].Err)
				}
				if n := f.count("SELECT count(*) FROM control_core.runs WHERE trigger_id = $1", forged.TriggerID); n != 0 {
					t.Errorf("%d runs of the forged row, want 0", n)
				}
				if fg.advance {
					for _, next := range []int64{*forged.CursorMs, its[0].Next} { // release, skip
						if out, err := s.Advance(ctx, &forged, next); err != nil || out != Race {
							t.Errorf("advance to %d with a forged %s: %s, %v; want a race", next, fg.name, out, err)
						}
					}
				}
				if f.count("SELECT count(*) FROM control_core.trigger_schedules WHERE trigger_id = $1 AND claim_token = $2",
					forged.TriggerID, claims[0].Fence.Token) != 1 {
					t.Error("the forged row's real claim is no longer held: something wrote to it")
				}
			})
		}
	}
}

// splitStatements splits a tamper into its statements (they take one parameter each, which a
// multi-statement Exec does not allow).
func splitStatements(sql string) []string {
	var out []string
	start, depth := 0, 0
	for i, r := range sql {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ';':
			if depth == 0 {
				out = append(out, sql[start:i])
				start = i + 1
			}
		}
	}
	return append(out, sql[start:])
}

// AdvanceClaimed never moves a cursor backwards, under a claim that holds in every other respect.
func TestAdvanceNeverMovesTheCursorBack(t *testing.T) {
	t.Parallel()
	_, s := dueFixture(t, time.Second, "a")
	c := claimAll(t, s, "replica", 30*time.Second, 1)[0]
	if out, err := s.Advance(context.Background(), c, *c.CursorMs-60_000); err != nil || out != Race {
		t.Errorf("advance to before the cursor: %s, %v; want a race", out, err)
	}
	if out, err := s.Advance(context.Background(), c, *c.CursorMs); err != nil || out != Written {
		t.Errorf("release at the cursor: %s, %v; want written", out, err)
	}
}

// Every Run's idempotency key is the documented one, ql3:cron:v1:<triggerId>:<triggerRevision>:
// <scheduledForMs> (ADR-0105), computed here from what was published and scheduled, in both paths;
// and the batch path writes its keys in its own statement, not through the one-row fallback.
func TestEveryAdmittedKeyHasTheDocumentedFormat(t *testing.T) {
	t.Parallel()
	for _, p := range admitPaths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFixture(t)
			want := map[string]string{} // trigger → key
			for _, id := range []string{"night-ly_2", "x", "a0"} {
				f.trigger(id, "* * * * *", schedule.MisfireSkip)
				pub := f.trigger(id, "*/1 * * * *", schedule.MisfireSkip) // revision 2: a key without it cannot pass
				cursor := f.setCursor(id, -time.Second)
				want[id] = fmt.Sprintf("ql3:cron:v1:%s:%d:%d", id, pub.Revision, cursor)
			}
			s := NewStore(f.rt)
			claims := claimAll(t, s, "replica", 30*time.Second, 3)
			its := items(claims, 60_000)
			if p.batch {
				written, err := s.admitOnce(ctx, its, nil) // the batch statement itself
				if err != nil {
					t.Fatalf("the batch admit statement: %v", err)
				}
				for i, w := range written {
					if w == nil {
						t.Errorf("%s: the batch admit statement wrote nothing", claims[i].TriggerID)
					}
				}
			} else {
				for i, r := range admitEach(t, s, p, its) {
					if r.Err != nil || r.Outcome != Written {
						t.Fatalf("%s: %s, %v; want written", claims[i].TriggerID, r.Outcome, r.Err)
					}
				}
			}
			rows, err := f.su.Query(ctx, "SELECT trigger_id, idempotency_key FROM control_core.runs")
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for rows.Next() {
				var id, key string
				if err := rows.Scan(&id, &key); err != nil {
					t.Fatal(err)
				}
				got[id] = key
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("keys %v\nwant %v", got, want)
			}
		})
	}
}

// At batch size 2 too the admit recomputes every digest from the rows (as at size 1,
// TestAdmitRefusesCorruptOrChangedRevisions): a revision edited behind its digest admits nothing.
func TestBatchAdmitRefusesCorruptRevisions(t *testing.T) {
	t.Parallel()
	for name, tamper := range map[string]string{
		"execution spec edited behind its digest":   `UPDATE control_core.execution_revisions SET spec = spec || '{"tampered": true}'`,
		"trigger revision edited behind its digest": `UPDATE control_core.trigger_revisions SET cron_spec = '*/2 * * * *'`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f, s := dueFixture(t, time.Second, "a", "b")
			claims := claimAll(t, s, "replica", 30*time.Second, 2)
			f.exec(tamper)
			for i, r := range admitEach(t, s, admitPath{"batch admit", true}, items(claims, 60_000)) {
				if r.Err != nil || r.Outcome != Corrupt {
					t.Errorf("%s: %s, %v; want corrupt", claims[i].TriggerID, r.Outcome, r.Err)
				}
			}
			if n := f.count("SELECT count(*) FROM control_core.runs"); n != 0 {
				t.Errorf("%d runs admitted, want 0", n)
			}
		})
	}
}
