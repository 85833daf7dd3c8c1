package admin

import (
	"context"
	"fmt"
	"regexp"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/dispatch"
)

// The worker token fields a FieldError names.
const (
	FieldTokenName = "name"
	FieldTokenID   = "id"
)

// workerName is the CHECK of worker_tokens.name (pg-0022), also a worker session's name.
var workerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// WorkerNameRule describes a worker token's name.
const WorkerNameRule = "1 to 63 characters: a lower-case letter or digit, then a-z 0-9 _ . -"

// ValidateWorkerName checks a worker token's name against the database's CHECK.
func ValidateWorkerName(name string) error {
	if !workerName.MatchString(name) {
		return fieldErrf(FieldTokenName, "%s: want %s", quoteField(name), WorkerNameRule)
	}
	return nil
}

// WorkerTokenCreated is a token just created. Token is the bearer secret: it exists only here,
// once (the database keeps its sha256); a caller shows it to the operator and nowhere else.
type WorkerTokenCreated struct {
	ID          uuid.UUID `json:"id"`
	Name        string    `json:"name"`
	Token       string    `json:"token"`
	CreatedAtMs int64     `json:"created_at_ms"`
}

// CreateWorkerToken creates a worker token named name in one admin transaction: the token is
// generated here (dispatch.NewWorkerToken, 256 random bits), only its sha256 is sent and stored.
// The database stamps the creation time and writes the worker_token.create audit row (id and
// name, never the hash). Several live tokens may share a name (rotation).
func (p *Publisher) CreateWorkerToken(ctx context.Context, name string) (WorkerTokenCreated, error) {
	out := WorkerTokenCreated{Name: name}
	if err := ValidateWorkerName(name); err != nil {
		return out, err
	}
	token, hash, err := dispatch.NewWorkerToken()
	if err != nil {
		return out, err
	}
	err = p.inTx(ctx, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.SetAuditReason(ctx, "worker token create"); err != nil {
			return fmt.Errorf("create worker token %s: audit reason: %w", name, err)
		}
		row, err := q.CreateWorkerToken(ctx, db.CreateWorkerTokenParams{Name: name, TokenHash: hash})
		if err != nil {
			return fmt.Errorf("create worker token %s: %w", name, err) // the hash is not in the message: only bound
		}
		out.ID, out.CreatedAtMs = row.WorkerTokenID, row.CreatedAtMs
		return nil
	})
	if err != nil {
		return WorkerTokenCreated{Name: name}, err
	}
	out.Token = token
	return out, nil
}

// WorkerTokenRevoke names the tokens to revoke: one id, or every live token of one name.
type WorkerTokenRevoke struct {
	ID   uuid.UUID // uuid.Nil: by Name
	Name string
}

// Validate checks that exactly one of ID and Name is given, and the name's form.
func (r WorkerTokenRevoke) Validate() error {
	switch {
	case r.ID != uuid.Nil && r.Name != "":
		return fieldErrf(FieldTokenID, "give an id or a name, not both")
	case r.ID == uuid.Nil && r.Name == "":
		return fieldErrf(FieldTokenID, "give the id or the name of the tokens to revoke")
	case r.Name != "":
		return ValidateWorkerName(r.Name)
	}
	return nil
}

// WorkerTokensRevoked is what a revoke did: Revoked lists the tokens it revoked now (none when
// they all were revoked already: a revoke is idempotent).
type WorkerTokensRevoked struct {
	ID      *uuid.UUID           `json:"id"`
	Name    *string              `json:"name"`
	Revoked []RevokedWorkerToken `json:"revoked"`
}

// RevokedWorkerToken is one token a revoke revoked.
type RevokedWorkerToken struct {
	ID   uuid.UUID `json:"id"`
	Name string    `json:"name"`
}

// RevokeWorkerTokens revokes the live tokens of one id or one name in one admin transaction; the
// database stamps revoked_at_ms and writes one worker_token.revoke audit row per token. A
// revocation takes effect at the next request of a worker holding it (the dispatcher checks
// revoked_at_ms inside every statement). A token already revoked is left alone (nothing written,
// Revoked empty); an id or name no token ever had is ErrNotFound.
func (p *Publisher) RevokeWorkerTokens(ctx context.Context, r WorkerTokenRevoke) (WorkerTokensRevoked, error) {
	out := WorkerTokensRevoked{Revoked: []RevokedWorkerToken{}}
	if err := r.Validate(); err != nil {
		return out, err
	}
	args := db.RevokeWorkerTokensParams{}
	what := "name " + r.Name
	if r.ID != uuid.Nil {
		id := r.ID
		out.ID, args.ID, what = &id, uuid.NullUUID{UUID: id, Valid: true}, "id "+id.String()
	} else {
		name := r.Name
		out.Name, args.Name = &name, pgtype.Text{String: name, Valid: true}
	}
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.SetAuditReason(ctx, "worker token revoke"); err != nil {
			return fmt.Errorf("revoke worker tokens of %s: audit reason: %w", what, err)
		}
		rows, err := q.RevokeWorkerTokens(ctx, args)
		if err != nil {
			return fmt.Errorf("revoke worker tokens of %s: %w", what, err)
		}
		for _, x := range rows {
			out.Revoked = append(out.Revoked, RevokedWorkerToken{ID: x.WorkerTokenID, Name: x.Name})
		}
		if len(rows) > 0 {
			return nil
		}
		n, err := q.CountWorkerTokens(ctx, db.CountWorkerTokensParams(args))
		if err != nil {
			return fmt.Errorf("worker tokens of %s: %w", what, err)
		}
		if n == 0 {
			return fmt.Errorf("worker token of %s: %w", what, ErrNotFound)
		}
		return nil
	})
	return out, err
}

// WorkerToken is a token as listed: never its hash.
type WorkerToken struct {
	ID          uuid.UUID `json:"id"`
	Name        string    `json:"name"`
	CreatedAtMs int64     `json:"created_at_ms"`
	RevokedAtMs *int64    `json:"revoked_at_ms"`
}

// MaxWorkerTokens bounds a token list.
const MaxWorkerTokens = 10000

// WorkerTokens lists the worker tokens, live and revoked, by name and age, up to MaxWorkerTokens
// (More: there are more), in one snapshot.
func (r *Reader) WorkerTokens(ctx context.Context) (tokens []WorkerToken, more bool, err error) {
	err = r.snapshot(ctx, func(q *db.Queries) error {
		rows, err := q.ListWorkerTokens(ctx, MaxWorkerTokens+1)
		if err != nil {
			return fmt.Errorf("list worker tokens: %w", err)
		}
		if len(rows) > MaxWorkerTokens {
			rows, more = rows[:MaxWorkerTokens], true
		}
		tokens = make([]WorkerToken, 0, len(rows))
		for _, x := range rows {
			tokens = append(tokens, WorkerToken{ID: x.WorkerTokenID, Name: x.Name, CreatedAtMs: x.CreatedAtMs, RevokedAtMs: int8Ptr(x.RevokedAtMs)})
		}
		return nil
	})
	return tokens, more, err
}
