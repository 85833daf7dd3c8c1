package dispatch_test

import (
	"testing"

	"github.com/qlcontrol/controlcore/dispatch"
)

// runtimeCommitsDurably gives the runtime role the production default, synchronous_commit on, in
// f's database: the test server commits asynchronously everywhere (speed).
func (f *fx) runtimeCommitsDurably() {
	f.t.Helper()
	f.exec(`DO $$ BEGIN EXECUTE format('ALTER ROLE ql_runtime IN DATABASE %I SET synchronous_commit = on', current_database()); END $$`)
}

// durableStore makes f's store a new one on ql_runtime whose connections open after
// runtimeCommitsDurably, so they commit durably unless a transaction says otherwise.
func (f *fx) durableStore() {
	f.t.Helper()
	f.runtimeCommitsDurably()
	f.store = dispatch.NewStore(f.d.Handle(f.t, "ql_runtime"), testConfig)
}

// recordCommitModes arranges triggers that record, in public.commit_modes (what, mode, in order
// of n), synchronous_commit as the transaction of each offer ("offer") and ACK ("ack") sees it.
func (f *fx) recordCommitModes() {
	f.t.Helper()
	f.exec(`CREATE TABLE public.commit_modes (n bigserial, what text NOT NULL, mode text NOT NULL)`)
	f.exec(`CREATE FUNCTION public.record_commit_mode() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
		SET search_path = pg_catalog AS $$
		BEGIN
			INSERT INTO public.commit_modes (what, mode) VALUES (TG_ARGV[0], current_setting('synchronous_commit'));
			RETURN NULL;
		END $$`)
	f.exec(`CREATE TRIGGER record_offer AFTER INSERT ON control_core.dispatch_offers
		FOR EACH ROW EXECUTE FUNCTION public.record_commit_mode('offer')`)
	f.exec(`CREATE TRIGGER record_ack AFTER INSERT ON control_core.run_leases
		FOR EACH ROW EXECUTE FUNCTION public.record_commit_mode('ack')`)
}

// The offer's transaction commits without waiting for the WAL flush; the ACK's, which grants the
// lease, stays durable (sql/queries/dispatch_offer_commit.sql). Triggers arranged by the test
// record synchronous_commit as each transition's transaction sees it, for two Runs one after the
// other on the same pool: the setting is the offer transaction's only and never reaches the ACK.
func TestOfferCommitsAsynchronouslyAckStaysDurable(t *testing.T) {
	f := newFx(t)
	f.durableStore()
	f.recordCommitModes()

	c := f.token("w")
	s := f.session(c, 2, nil)
	for range 2 {
		f.queue("p", 1)
		o := f.place(c, s, 1)[0]
		if _, err := f.store.Ack(bg, c, o.OfferID, s.ID, o.CallbackToken); err != nil {
			t.Fatal(err)
		}
	}
	got := f.str(`SELECT string_agg(what || '=' || mode, ' ' ORDER BY n) FROM public.commit_modes`)
	if want := "offer=off ack=on offer=off ack=on"; got != want {
		t.Fatalf("synchronous_commit seen by the transitions = %q, want %q", got, want)
	}
}
