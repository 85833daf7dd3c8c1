// Package roles knows the four non-privileged LOGIN roles of control-core (owner, admin, runtime,
// worker ingress), creates them without ever altering an existing one, and holds the exact
// privilege model that qlmigrate verify compares with the catalogs.
package roles
