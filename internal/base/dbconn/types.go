package dbconn

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// RegisterTypes teaches a connection's type map the Go types of our own that pgx would otherwise
// encode the slow way. Every pool of Resolve runs it after connecting (pgxpool.Config's
// AfterConnect; a command that sets its own AfterConnect calls it first).
func RegisterTypes(_ context.Context, conn *pgx.Conn) error {
	registerTypes(conn.TypeMap())
	return nil
}

func registerTypes(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{wrapUUID}, m.TryWrapEncodePlanFuncs...)
}

// wrapUUID encodes a github.com/google/uuid.UUID as the 16 bytes it is. pgx sees a driver.Valuer
// and falls back to its text: it formats the UUID, fails to encode the text as binary (building
// an error message), parses it back and encodes that. The admit sends three UUIDs per row, so a
// burst spent a fifth of the replica's CPU there (perf, issue 20).
func wrapUUID(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	u, ok := value.(uuid.UUID)
	if !ok {
		return nil, nil, false
	}
	return &uuidEncodePlan{}, pgtype.UUID{Bytes: u, Valid: true}, true
}

type uuidEncodePlan struct{ next pgtype.EncodePlan }

func (p *uuidEncodePlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *uuidEncodePlan) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode(pgtype.UUID{Bytes: value.(uuid.UUID), Valid: true}, buf)
}
