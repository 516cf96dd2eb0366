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
const MIGRATIONS: &[Migration] = &[
    Migration {
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
    },
    Migration {
        version: 2,
        name: "runs_store",
        sql: RUNS_STORE,
    },
    Migration {
        version: 3,
        name: "leads",
        // One row per lead process with leases: where other leads reach its gateway to
        // forward a write to a run it drives. `renewed_at` moves with its lease renewals.
        sql: "CREATE TABLE leads (
              lead_id text PRIMARY KEY,
              gateway_url text NOT NULL,
              renewed_at timestamptz NOT NULL
          );",
    },
    Migration {
        version: 4,
        name: "run_events_gen",
        // Run events are written as they happen, each with its log's generation (the lease
        // epoch of the lead that wrote it), so a stream follows a run across leads.
        sql: "ALTER TABLE run_events ADD COLUMN gen bigint NOT NULL DEFAULT 0;",
    },
    Migration {
        version: 5,
        name: "gateway_submissions",
        // The submissions-per-minute budget every lead's gateway takes from (GCRA): per
        // user, the theoretical arrival time of its next submission. A row whose `tat` is
        // past is a full budget, as no row is, and is swept.
        sql: "CREATE TABLE gateway_submissions (
              user_id text PRIMARY KEY,
              tat timestamptz NOT NULL
          );",
    },
];

/// The runs store (`runs::store`), as its SQLite file has it: the same tables and columns,
/// integers as `bigint`, blobs as `bytea`. Tables read in the order rows were written get
/// a `rowid` identity column (SQLite's implicit one), so the store's statements are the same
/// text on both engines. No foreign keys: SQLite's are not enforced, and a row may name a
/// run recorded elsewhere (a subagent's ask under its parent run).
const RUNS_STORE: &str = "
CREATE TABLE runs (
    run_id        text PRIMARY KEY,
    user_id       text NOT NULL,
    thread_id     text NOT NULL,
    task          text NOT NULL,
    model         text NOT NULL,
    status        text NOT NULL,
    detail        text,
    clarification bigint NOT NULL DEFAULT 0,
    options       text NOT NULL DEFAULT '{}',
    started_ms    bigint,
    ended_ms      bigint,
    rowid         bigint GENERATED ALWAYS AS IDENTITY UNIQUE
);
CREATE INDEX runs_by_user_status ON runs (user_id, status);
CREATE INDEX runs_by_thread ON runs (user_id, thread_id);
CREATE INDEX runs_by_status ON runs (status);
CREATE TABLE checkpoints (
    run_id text NOT NULL,
    step   bigint NOT NULL,
    state  text NOT NULL,
    PRIMARY KEY (run_id, step)
);
CREATE TABLE outputs_snapshots (
    run_id   text PRIMARY KEY,
    snapshot text NOT NULL
);
CREATE TABLE write_probe (
    id bigint PRIMARY KEY CHECK (id = 1),
    at bigint NOT NULL
);
CREATE TABLE receipts (
    run_id  text PRIMARY KEY,
    receipt text NOT NULL
);
CREATE TABLE run_events (
    run_id text NOT NULL,
    seq    bigint NOT NULL,
    event  text NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE mcp_credentials (
    server     text NOT NULL,
    user_id    text NOT NULL,
    updated_ms bigint NOT NULL,
    sealed     bytea,
    PRIMARY KEY (server, user_id)
);
CREATE TABLE approval_decisions (
    run_id       text NOT NULL,
    tool_call_id text NOT NULL,
    tool         text NOT NULL,
    rule         text,
    choice       text NOT NULL,
    decided_by   text,
    decided_ms   bigint NOT NULL,
    reason       text,
    PRIMARY KEY (run_id, tool_call_id)
);
CREATE TABLE subagent_asks (
    run_id        text NOT NULL,
    tool_call_id  text NOT NULL,
    task_call_id  text NOT NULL,
    subagent_type text NOT NULL,
    call_id       text NOT NULL,
    pending       text NOT NULL,
    rowid         bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    PRIMARY KEY (run_id, tool_call_id)
);
CREATE TABLE threads (
    user_id       text NOT NULL,
    thread_id     text NOT NULL,
    created_ms    bigint NOT NULL,
    updated_ms    bigint NOT NULL,
    metadata      text NOT NULL DEFAULT '{}',
    title         text,
    status        text NOT NULL DEFAULT 'idle',
    state         text,
    last_run_id   text,
    active_run_id text,
    claimed_ms    bigint,
    rowid         bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    PRIMARY KEY (user_id, thread_id)
);
CREATE TABLE memory_profiles (
    user_id      text PRIMARY KEY,
    revision     bigint NOT NULL,
    last_updated text NOT NULL
);
CREATE TABLE memory_sections (
    user_id    text NOT NULL,
    section    text NOT NULL,
    summary    text NOT NULL,
    updated_at text NOT NULL,
    PRIMARY KEY (user_id, section)
);
CREATE TABLE memory_facts (
    user_id    text NOT NULL,
    agent      text NOT NULL,
    fact_id    text NOT NULL,
    fact       text NOT NULL,
    confidence double precision NOT NULL,
    PRIMARY KEY (user_id, agent, fact_id)
);
CREATE TABLE memory_queue (
    user_id         text NOT NULL,
    agent           text NOT NULL,
    thread_id       text NOT NULL,
    messages        text NOT NULL,
    last_identity   text NOT NULL,
    signal          bigint NOT NULL DEFAULT 0,
    first_ms        bigint NOT NULL,
    enqueued_ms     bigint NOT NULL,
    attempts        bigint NOT NULL DEFAULT 0,
    next_attempt_ms bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, agent, thread_id)
);
CREATE TABLE memory_watermarks (
    user_id   text NOT NULL,
    agent     text NOT NULL,
    thread_id text NOT NULL,
    identity  text NOT NULL,
    PRIMARY KEY (user_id, agent, thread_id)
);
";

/// The schema version this lead knows: the last of [`MIGRATIONS`].
pub const SCHEMA_VERSION: i64 = 5;

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
