package dispatch_test

import (
	"testing"

	"github.com/qlcontrol/controlcore/dispatch"
)

// The offer's transaction commits without waiting for the WAL flush; the ACK's, which grants the
// lease, stays durable (sql/queries/dispatch_offer_commit.sql). Triggers arranged by the test
// record synchronous_commit as each transition's transaction sees it, for two Runs one after the
// other on the same pool: the setting is the offer transaction's only and never reaches the ACK.
func TestOfferCommitsAsynchronouslyAckStaysDurable(t *testing.T) {
	f := newFx(t)
	// The test server commits asynchronously everywhere (speed): the runtime role gets the
	// production default, on, in this database, and a store whose connections open after that.
	f.exec(`DO $$ BEGIN EXECUTE format('ALTER ROLE ql_runtime IN DATABASE %I SET synchronous_commit = on', current_database()); END $$`)
	f.store = dispatch.NewStore(f.d.Handle(t, "ql_runtime"), testConfig)
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
