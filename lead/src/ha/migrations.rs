//! The store's schema, versioned: [`MIGRATIONS`] in order, each applied once and recorded in
//! `schema_migrations`. A lead applies the missing ones at start in one transaction under a
//! transaction-scoped advisory lock, so leads starting together apply each exactly once and
//! none sees a half-migrated schema; a database newer than [`SCHEMA_VERSION`] is refused.

use super::postgres::{within, Postgres};
use super::HaError;

/// One step of the schema.
struct Migration {
    /// 1, 2, 3…: consecutive, never reused, never edited once released.
    version: i64,
    /// What the step adds, recorded beside its version.
    name: &'static str,
    sql: &'static str,
}

/// The schema, oldest first. Append only: a released migration is never changed.
const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "run_leases",
    // One row per run ever leased. `lead_id` is the owner, NULL once released; `epoch`
    // grows by one at every change of owner and is kept across releases, so a later owner's
    // epoch is always higher than every earlier one's.
    sql: "CREATE TABLE run_leases (
              run_id text PRIMARY KEY,
              lead_id text,
              epoch bigint NOT NULL CHECK (epoch > 0),
              expires_at timestamptz NOT NULL
          );
          CREATE INDEX run_leases_owned_expiry ON run_leases (expires_at)
              WHERE lead_id IS NOT NULL;",
}];

/// The schema version this lead knows: the last of [`MIGRATIONS`].
pub const SCHEMA_VERSION: i64 = 1;

/// The advisory lock key that serializes migrations (`pg_advisory_xact_lock`): "antler"
/// in ASCII, so it is recognizable in `pg_locks`.
const MIGRATION_LOCK: i64 = 0x616e_746c_6572;

/// The version table, created by the first migration run.
const CREATE_VERSION_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version bigint PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

/// What [`Postgres::migrate`] found and left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    /// The schema version before (0: an empty database).
    pub from: i64,
    /// The schema version now ([`SCHEMA_VERSION`]).
    pub to: i64,
}

impl Postgres {
    /// Brings the database's schema to [`SCHEMA_VERSION`]: every missing migration, in one
    /// transaction (all or none). Refuses a database whose schema is newer
    /// ([`HaError::SchemaTooNew`]), and changes nothing then.
    pub async fn migrate(&mut self) -> Result<Migrated, HaError> {
        let deadline = self.deadline();
        let tx = within(deadline, "migration", self.client_mut().transaction()).await?;
        within(
            deadline,
            "migration lock",
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]),
        )
        .await?;
        within(
            deadline,
            "migration",
            tx.batch_execute(CREATE_VERSION_TABLE),
        )
        .await?;
        let row = within(
            deadline,
            "schema version",
            tx.query_one(
                "SELECT coalesce(max(version), 0)::bigint FROM schema_migrations",
                &[],
            ),
        )
        .await?;
        let from: i64 = row.try_get(0).map_err(|source| HaError::Query {
            what: "schema version",
            source,
        })?;
        if from > SCHEMA_VERSION {
            // Dropping the transaction rolls it back.
            return Err(HaError::SchemaTooNew {
                found: from,
                known: SCHEMA_VERSION,
            });
        }
        for migration in MIGRATIONS.iter().filter(|m| m.version > from) {
            within(deadline, "migration", tx.batch_execute(migration.sql)).await?;
            within(
                deadline,
                "migration",
                tx.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    &[&migration.version, &migration.name],
                ),
            )
            .await?;
        }
        within(deadline, "migration commit", tx.commit()).await?;
        if from < SCHEMA_VERSION {
            tracing::info!(from, to = SCHEMA_VERSION, "migrated the PostgreSQL schema");
        }
        Ok(Migrated {
            from,
            to: SCHEMA_VERSION,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_consecutive_from_one_and_end_at_schema_version() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "migration {}", m.name);
        }
        assert_eq!(MIGRATIONS.last().map(|m| m.version), Some(SCHEMA_VERSION));
    }
}
