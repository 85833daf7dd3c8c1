package roles

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// CreateStatus is what Create found or did for one role.
type CreateStatus string

const (
	Created    CreateStatus = "created"
	Exists     CreateStatus = "exists"     // present with exactly the required attributes
	Privileged CreateStatus = "privileged" // present but with an attribute it must not have; left alone
)

// CreateResult is one line of the Create report.
type CreateResult struct {
	Name     string       `json:"name"`
	Status   CreateStatus `json:"status"`
	Problems []string     `json:"problems,omitempty"` // e.g. SUPERUSER, NOLOGIN
}

// CreateReport says what Create did.
type CreateReport struct {
	Database string         `json:"database"`
	Roles    []CreateResult `json:"roles"`
}

// OK reports whether every role is now usable as it is.
func (r CreateReport) OK() bool {
	for _, role := range r.Roles {
		if role.Status == Privileged {
			return false
		}
	}
	return true
}

// NotAllowedError means the connected role may not create roles.
type NotAllowedError struct{ User string }

func (e *NotAllowedError) Error() string {
	return fmt.Sprintf("role %s is neither SUPERUSER nor CREATEROLE; run \"qlmigrate roles create\" as one that is", e.User)
}

// Create makes the four LOGIN roles if they are missing (NOSUPERUSER NOCREATEDB NOCREATEROLE
// NOREPLICATION NOBYPASSRLS), and gives the owner role CONNECT and CREATE on the current database
// (with grant option, so pg-0017 can grant CONNECT to the admin and runtime roles). PUBLIC loses
// its default CONNECT and TEMPORARY on the database: control-core wants a database of its own in
// which only the modelled roles connect. An existing role is never altered: one with a privileged
// attribute, or without LOGIN, is reported and left as it is. Create is idempotent.
//
// conn is one session (a *dbconn.Conn: its transactions begin with the connection's prologue).
func Create(ctx context.Context, conn interface {
	dbconn.Querier
	Beginner
}, names Names) (CreateReport, error) {
	q := db.New(conn)
	me, err := q.CurrentRole(ctx)
	if err != nil {
		return CreateReport{}, fmt.Errorf("read connected role: %w", err)
	}
	if !me.Superuser.Bool && !me.CreateRole.Bool {
		return CreateReport{}, &NotAllowedError{User: me.CurrentUser}
	}
	report := CreateReport{Database: me.Database}
	existing, err := q.RoleAttributes(ctx, names.All())
	if err != nil {
		return report, fmt.Errorf("read role attributes: %w", err)
	}
	byName := make(map[string]db.RoleAttributesRow, len(existing))
	for _, r := range existing {
		byName[r.Name] = r
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return report, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	for _, name := range names.All() {
		attrs, ok := byName[name]
		if !ok {
			stmt := "CREATE ROLE " + pgx.Identifier{name}.Sanitize() +
				" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return report, fmt.Errorf("create role %s: %w", name, err)
			}
			report.Roles = append(report.Roles, CreateResult{Name: name, Status: Created})
			continue
		}
		if problems := attributeProblems(attrs); len(problems) > 0 {
			report.Roles = append(report.Roles, CreateResult{Name: name, Status: Privileged, Problems: problems})
			continue
		}
		report.Roles = append(report.Roles, CreateResult{Name: name, Status: Exists})
	}
	if err := GrantDatabase(ctx, tx, names, me.Database); err != nil {
		return report, err
	}
	return report, tx.Commit(ctx)
}

// GrantDatabase installs the database-level part of the model that needs the database owner or
// a superuser: PUBLIC loses CONNECT and TEMPORARY, the owner role gets CONNECT and CREATE with
// grant option.
func GrantDatabase(ctx context.Context, tx pgx.Tx, names Names, database string) error {
	dbIdent := pgx.Identifier{database}.Sanitize()
	for _, stmt := range []string{
		"REVOKE ALL ON DATABASE " + dbIdent + " FROM PUBLIC",
		"GRANT CONNECT, CREATE ON DATABASE " + dbIdent + " TO " + pgx.Identifier{names.Owner}.Sanitize() + " WITH GRANT OPTION",
	} {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

// attributeProblems lists what r is that the model's Attributes forbid or lack, in their order,
// as CREATE ROLE words (SUPERUSER, NOLOGIN).
func attributeProblems(r db.RoleAttributesRow) []string {
	var p []string
	have := attributesOf(r)
	for _, at := range Attributes {
		if have[at.Name] != at.Want {
			p = append(p, attrWord(at.Name, have[at.Name]))
		}
	}
	return p
}

// String renders a result as one report line, with the statement that would fix a problem.
func (r CreateResult) String() string {
	if len(r.Problems) == 0 {
		return fmt.Sprintf("%-24s %s", r.Name, r.Status)
	}
	fix := make([]string, len(r.Problems))
	for i, p := range r.Problems {
		if p == "NOLOGIN" {
			fix[i] = "LOGIN"
		} else {
			fix[i] = "NO" + p
		}
	}
	return fmt.Sprintf("%-24s %s: %s (left unchanged; to fix: ALTER ROLE %s %s;)",
		r.Name, r.Status, strings.Join(r.Problems, " "), pgx.Identifier{r.Name}.Sanitize(), strings.Join(fix, " "))
}
