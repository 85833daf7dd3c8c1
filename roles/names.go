package roles

import (
	"fmt"
	"regexp"
)

// DefaultPrefix is the prefix of the role names in the committed migrations.
const DefaultPrefix = "ql_"

// Names are the four roles' names under one prefix.
type Names struct {
	Prefix        string
	Owner         string // owns control_core and runs migrations
	Admin         string // publishes projects, tasks and triggers
	Runtime       string // claims and admits
	WorkerIngress string // nothing at all
}

var prefixPattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,40}$`)

// NewNames validates prefix and returns the four names: <prefix>owner, <prefix>admin,
// <prefix>runtime, <prefix>worker_ingress.
func NewNames(prefix string) (Names, error) {
	if !prefixPattern.MatchString(prefix) {
		return Names{}, &PrefixError{Prefix: prefix}
	}
	return Names{Prefix: prefix, Owner: prefix + "owner", Admin: prefix + "admin",
		Runtime: prefix + "runtime", WorkerIngress: prefix + "worker_ingress"}, nil
}

// PrefixError is a role prefix that NewNames refuses; commands name their flag with it.
type PrefixError struct{ Prefix string }

// Want says what a prefix must be.
func (e *PrefixError) Want() string {
	return "a lower-case identifier prefix matching " + prefixPattern.String()
}

func (e *PrefixError) Error() string {
	return fmt.Sprintf("role prefix %q: want %s", e.Prefix, e.Want())
}

// All lists the four names, owner first.
func (n Names) All() []string { return []string{n.Owner, n.Admin, n.Runtime, n.WorkerIngress} }

var committedRole = regexp.MustCompile(`\bql_(owner|admin|runtime|worker_ingress)\b`)

// Rewrite maps the role names written in the committed SQL (ql_owner …) onto these names. The
// files stay valid SQL with the default names (sqlc reads them as they are); checksums are always
// taken over the committed bytes, never over a rewritten copy.
func (n Names) Rewrite(sql []byte) []byte {
	if n.Prefix == DefaultPrefix {
		return sql
	}
	return committedRole.ReplaceAll(sql, []byte(n.Prefix+"$1"))
}
