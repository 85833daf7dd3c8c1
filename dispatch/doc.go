// Package dispatch is the closed loop's domain: worker sessions, offers, leases and completions
// of admitted Runs (docs/dispatch.md, ADR-0105's dispatcher authority).
//
// Guarantees, each held by the database rather than by this code:
//   - a Run has at most one active lease (unique partial index run_leases_live_run_idx);
//   - every transition is one fenced statement: a lost race writes nothing and is answered by a
//     sentinel error (ErrOfferGone, ErrLeaseLost, …), chosen by a read-only diagnosis;
//   - lease expiry is judged by database time; a heartbeat never renews an expired lease;
//   - a Run's state changes write exactly one run_events row.
//
// Store maps the generated queries; Placer answers long polls by placing Runs for the polling
// session; Sweeper expires offers, leases and sessions on every dispatcher (no leader).
package dispatch
