//! What can go wrong between a lead and its PostgreSQL: every error is the operator's (a
//! start-up that fails, a lease call the lead must treat as lost), none reaches a model.

use std::time::Duration;

/// An error of the PostgreSQL store.
#[derive(Debug, thiserror::Error)]
pub enum HaError {
    /// The DSN does not parse (`postgres://…` or `host=… user=…`): tokio-postgres's reason,
    /// with any `user:password@` in it masked (a malformed DSN can come back whole as an
    /// "unknown option").
    #[error("invalid PostgreSQL DSN: {0}")]
    Dsn(String),
    /// PostgreSQL could not be reached, refused the connection, or its TLS certificate
    /// did not pass the DSN's `sslmode`.
    #[error("cannot connect to PostgreSQL at {hosts}: {reason}")]
    Connect {
        /// `host:port`, each host the DSN names.
        hosts: String,
        /// The server's refusal, the certificate's fault, or the error with its causes.
        reason: String,
        #[source]
        source: tokio_postgres::Error,
    },
    /// The DSN's TLS settings cannot be used (`sslmode`, `sslrootcert`).
    #[error("PostgreSQL TLS: {0}")]
    Tls(String),
    /// A statement failed (the connection dropped, a constraint, a bad row).
    #[error("PostgreSQL {what} failed: {source}")]
    Query {
        what: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    /// A request got no answer within its deadline (PostgreSQL stalled or unreachable).
    #[error("PostgreSQL {what} got no answer within {after:?}")]
    Timeout { what: &'static str, after: Duration },
    /// The database was migrated by a newer Antler: this lead would misread it.
    #[error(
        "the database's schema is at version {found}, newer than this lead knows ({known}): \
         run a lead of the newer release"
    )]
    SchemaTooNew { found: i64, known: i64 },
    /// The connection closed while a transaction was open (it is made again after).
    #[error("the connection to PostgreSQL closed")]
    Closed,
    /// The thread or runtime that owns the store's PostgreSQL client could not start.
    #[error("cannot start the PostgreSQL client's thread: {0}")]
    Runtime(String),
    /// A lease's time to live cannot be expressed in milliseconds.
    #[error("a lease's time to live must be at least 1 ms (whole milliseconds), not {ttl:?}")]
    Ttl { ttl: Duration },
}
