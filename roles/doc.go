// Package roles knows the four non-privileged LOGIN roles of control-core (owner, admin, runtime,
// worker ingress) and holds three things about them, each in files of its own:
//
//   - the model (model.go, names.go): the roles' names and attributes and the exact privilege
//     model of v28, as data;
//   - creation (create.go: Create, GrantDatabase, CreateReport), which `qlmigrate roles create`
//     runs: it makes the roles if they are missing and never alters an existing one;
//   - the audit (audit*.go: ReadAudit, ReadAuditIn, Audit, AuditOptions), which `qlmigrate
//     verify` and `qlmigrate grants` run: it only reads, compares the catalogs with the model and
//     names each difference with the statements that remove it.
package roles
