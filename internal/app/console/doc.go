// Package console is the read-only web console of `qlsched ui`: server-rendered pages
// (html/template, every asset embedded) over package admin's readers, for the on-call engineer.
//
// It guarantees: no write path (GET and HEAD only, 405 otherwise, no form that posts); every read
// in one REPEATABLE READ READ ONLY transaction of admin.Reader (the command also sets
// default_transaction_read_only on the connection); every page bounded by an index and a page
// size or a count cap, whatever the size of the tables; query parameters validated (400 with the
// reason); everything escaped by html/template; a strict Content-Security-Policy with no inline
// script or style; executor specs never shown (the readers never return them).
package console
