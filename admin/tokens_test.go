package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/dispatch"
)

// A created token is returned once and stored only as its sha256; the list never shows a token or
// a hash; a revoke by name revokes every live token of the name, is idempotent, and each create
// and revoke leaves its audit row (id and name, never the hash).
func TestWorkerTokensAreStoredHashedListedWithoutHashAndAudited(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	mark := f.auditMark()

	a1, err := f.pub.CreateWorkerToken(ctx, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := f.pub.CreateWorkerToken(ctx, "fleet") // rotation: two live tokens of one name
	if err != nil {
		t.Fatal(err)
	}
	other, err := f.pub.CreateWorkerToken(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{}
	for _, c := range []admin.WorkerTokenCreated{a1, a2, other} {
		if !dispatch.WellFormed(c.Token, dispatch.WorkerTokenPrefix) || c.ID == uuid.Nil {
			t.Fatalf("created %+v: want a well-formed qlw_ token and an id", c)
		}
		hash := dispatch.HashToken(c.Token)
		if n := f.count(`SELECT count(*) FROM control_core.worker_tokens WHERE worker_token_id = $1 AND token_hash = $2
			AND revoked_at_ms IS NULL`, c.ID, hash); n != 1 {
			t.Errorf("token %s: %d rows holding its sha256, want 1", c.ID, n)
		}
		secrets = append(secrets, c.Token, hash)
	}
	if n := f.count(`SELECT count(*) FROM control_core.worker_tokens WHERE token_hash LIKE 'qlw_%' OR token_hash !~ '^[0-9a-f]{64}$'`); n != 0 {
		t.Errorf("%d rows store something other than a sha256 hex", n)
	}

	list, more, err := admin.NewReader(f.d.Handle(t, "ql_admin")).WorkerTokens(ctx)
	if err != nil || more || len(list) != 3 {
		t.Fatalf("list %+v, more %v, %v; want 3 tokens", list, more, err)
	}
	doc, _ := json.Marshal(list)
	for _, s := range secrets {
		if strings.Contains(string(doc), s) {
			t.Fatalf("token list %s shows a token or a hash", doc)
		}
	}

	res, err := f.pub.RevokeWorkerTokens(ctx, admin.WorkerTokenRevoke{Name: "fleet"})
	if err != nil || len(res.Revoked) != 2 {
		t.Fatalf("revoke fleet: %+v, %v; want 2 revoked", res, err)
	}
	if n := f.count(`SELECT count(*) FROM control_core.worker_tokens WHERE name = 'fleet' AND revoked_at_ms IS NOT NULL`); n != 2 {
		t.Errorf("%d fleet tokens revoked, want 2", n)
	}
	if n := f.count(`SELECT count(*) FROM control_core.worker_tokens WHERE name = 'other' AND revoked_at_ms IS NULL`); n != 1 {
		t.Errorf("other's token: %d live, want 1 (a revoke by name touches that name only)", n)
	}
	again, err := f.pub.RevokeWorkerTokens(ctx, admin.WorkerTokenRevoke{Name: "fleet"})
	if err != nil || len(again.Revoked) != 0 {
		t.Errorf("second revoke: %+v, %v; want 0 revoked, no error", again, err)
	}
	byID, err := f.pub.RevokeWorkerTokens(ctx, admin.WorkerTokenRevoke{ID: other.ID})
	if err != nil || len(byID.Revoked) != 1 || byID.Revoked[0].ID != other.ID {
		t.Errorf("revoke by id: %+v, %v; want the one token", byID, err)
	}
	for _, r := range []admin.WorkerTokenRevoke{{Name: "nobody"}, {ID: uuid.New()}} {
		if _, err := f.pub.RevokeWorkerTokens(ctx, r); !errors.Is(err, admin.ErrNotFound) {
			t.Errorf("revoke %+v: %v, want ErrNotFound", r, err)
		}
	}
	list, _, _ = admin.NewReader(f.d.Handle(t, "ql_admin")).WorkerTokens(ctx)
	for _, tok := range list {
		if tok.RevokedAtMs == nil || *tok.RevokedAtMs < tok.CreatedAtMs {
			t.Errorf("listed %+v: want revoked, at or after its creation", tok)
		}
	}

	got := f.auditRows(mark)
	want := []string{"worker_token.create", "worker_token.create", "worker_token.create", "worker_token.revoke", "worker_token.revoke", "worker_token.revoke"}
	var actions []string
	for _, line := range got {
		actions = append(actions, strings.Fields(line)[0])
	}
	if strings.Join(actions, " ") != strings.Join(want, " ") {
		t.Errorf("audit rows %q; want 3 creates then 3 revokes", got)
	}
	for _, s := range secrets {
		if n := f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE strpos(detail::text || subject, $1) > 0`, s); n != 0 {
			t.Errorf("an audit row holds a token or its hash")
		}
	}
}

// A bad name or a revoke naming both or neither is refused before anything is sent.
func TestWorkerTokenRefusals(t *testing.T) {
	t.Parallel()
	pub := admin.NewPublisher(nil)
	ctx := context.Background()
	for _, name := range []string{"", "Fleet", "-x", strings.Repeat("a", 64), "a b"} {
		var fe *admin.FieldError
		if _, err := pub.CreateWorkerToken(ctx, name); !errors.As(err, &fe) || fe.Field != admin.FieldTokenName {
			t.Errorf("create %q: %v, want a FieldError naming %s", name, err, admin.FieldTokenName)
		}
	}
	for _, r := range []admin.WorkerTokenRevoke{{}, {ID: uuid.New(), Name: "x"}, {Name: "X"}} {
		var fe *admin.FieldError
		if _, err := pub.RevokeWorkerTokens(ctx, r); !errors.As(err, &fe) {
			t.Errorf("revoke %+v: %v, want a FieldError", r, err)
		}
	}
}
