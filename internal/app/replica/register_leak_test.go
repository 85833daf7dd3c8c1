package replica_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// A runtime client refused by replica_register must not learn the holder's instance id from the
// function itself, which the runtime role may call directly (not only through RegisterReplica):
// with the id, replica_release deletes a live replica's registration. pg-0028 returns NULL.
func TestARefusedRegisterCallerCannotLearnTheHoldersInstanceID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.New(t)
	rt := d.Pool(t, "ql_runtime")
	holder := uuid.New()
	var ok bool
	if err := rt.QueryRow(ctx, `SELECT registered FROM control_core.replica_register('sched-1', $1, 'host-a', 'v', 60000)`, holder).Scan(&ok); err != nil || !ok {
		t.Fatalf("the holder's register: %v %v", ok, err)
	}
	var got *uuid.UUID
	if err := rt.QueryRow(ctx, `SELECT registered, instance_id FROM control_core.replica_register('sched-1', $1, 'host-b', 'v', 60000)`,
		uuid.New()).Scan(&ok, &got); err != nil || ok {
		t.Fatalf("the second register: %v %v", ok, err)
	}
	if got != nil && *got == holder {
		var released bool
		if err := rt.QueryRow(ctx, `SELECT control_core.replica_release('sched-1', $1)`, *got).Scan(&released); err != nil {
			t.Fatal(err)
		}
		t.Errorf("a refused replica_register returned the holder's instance id %s; with it replica_release deleted the live registration: %v", got, released)
	}
}
