// Package schema holds the cluster-mode database schema as versioned SQL
// migrations embedded in the binary, and applies them.
//
// Migrations are the files migrations/NNNN_name.sql, applied in version
// order, each recorded in the schema_migrations table once it has run.
// Migrate promises:
//
//   - Idempotence: running it again applies nothing; a migration cut short
//     (DDL commits implicitly, so there is no rollback) runs again from its
//     start, which is why every statement must be re-runnable (CREATE TABLE
//     IF NOT EXISTS and the like).
//   - Mutual exclusion: two nodes that migrate at once take turns on a
//     lock row (schema_migration_lock, a lease taken with a replicated
//     upsert, so it holds across the servers of a Galera cluster too); the
//     second finds the work done. Recording a migration is idempotent as
//     well, so even two migrators at once (a lease that ran out) succeed.
//   - No downgrade: a database already at a version this binary does not
//     know makes Migrate and Check fail instead of running old code on a
//     newer schema.
package schema
