package dbconn

import (
	"bytes"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// A uuid.UUID, alone and in an array, is encoded as its 16 bytes by our plan, not by pgx's
// driver.Valuer fallback (text, a failed binary encode, a parse back).
func TestUUIDsEncodeAsTheirBytes(t *testing.T) {
	m := pgtype.NewMap()
	registerTypes(m)
	u := uuid.MustParse("0192f3a4-5b6c-7d8e-9fa0-b1c2d3e4f506")
	if _, ok := m.PlanEncode(pgtype.UUIDOID, pgtype.BinaryFormatCode, u).(*uuidEncodePlan); !ok {
		t.Fatalf("the binary plan of a uuid.UUID is %T, not ours", m.PlanEncode(pgtype.UUIDOID, pgtype.BinaryFormatCode, u))
	}
	got, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, u, nil)
	if err != nil || !bytes.Equal(got, u[:]) {
		t.Fatalf("encode %s: %x, %v; want %x", u, got, err, u[:])
	}
	arr, err := m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, []uuid.UUID{u, uuid.Nil}, nil)
	if err != nil || !bytes.HasSuffix(arr, append(append([]byte{0, 0, 0, 16}, u[:]...), append([]byte{0, 0, 0, 16}, uuid.Nil[:]...)...)) {
		t.Fatalf("encode []uuid.UUID: %x, %v", arr, err)
	}
	var back [2]pgtype.UUID
	if err := m.Scan(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, arr, &back); err != nil || back[0].Bytes != u || back[1].Bytes != uuid.Nil {
		t.Fatalf("scan back: %v, %v", back, err)
	}
}
