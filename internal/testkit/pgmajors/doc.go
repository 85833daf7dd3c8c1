// Package pgmajors holds no code: its tests pin down, on every PostgreSQL major the project
// supports (15, 16, 17, 18; `make test-matrix` runs the whole suite on each), the behaviour that
// differs between majors and that control-core depends on. Each test runs on every major and
// asserts what that major does: a difference that disappears, or a new one, fails it.
//
// The differences, and where the code handles them:
//
//   - PostgreSQL 16: a non-superuser CREATEROLE role that creates a role is implicitly granted
//     membership in it WITH ADMIN OPTION (grantor: the bootstrap superuser). `qlmigrate roles
//     create` run by such a role therefore leaves one membership in each of the four roles;
//     roles.Audit reports those as notes (memberships *in* the four roles are their members'
//     business), never as drift. Since 16 pg_auth_members also keeps one row per grantor, so the
//     audit's fix for a membership names it: REVOKE … FROM … GRANTED BY ….
//
//   - PostgreSQL 17: the MAINTAIN table privilege (and the predefined role pg_maintain). An owner
//     holds MAINTAIN on its tables on 17 and later and cannot on 15 and 16; the model takes an
//     owner's privileges from acldefault() at verify time (sql/queries/verify.sql,
//     OwnerDefaultPrivileges), so a 17 server expects it and a 15 server does not. MAINTAIN granted
//     to one of the four roles is drift like any other privilege, and pg_maintain like any other
//     membership.
//
//   - PostgreSQL 18 also lists NOT NULL constraints in pg_constraint (contype 'n'); the readiness
//     contract keeps nullability on the columns, so ReadinessConstraints (sql/queries/verify.sql)
//     reads only primary, unique, foreign key, CHECK and exclusion constraints, and a clean v28
//     database on 18 has no extra constraints to report (TestRunOnACleanV17DatabaseFindsNothing in
//     internal/app/verify, run on 18 by make test-matrix).
//
// No other catalog column or view that control-core reads changed between 15 and 18 (the queries
// in sql/queries read pg_roles, pg_auth_members' roleid/member/grantor/admin_option, pg_class,
// pg_namespace, pg_proc, pg_attribute's attacl, pg_default_acl and aclexplode/acldefault, all
// stable across these majors); the whole suite passing on every major is the check of that.
package pgmajors
