//! Several leads on one PostgreSQL (issue 38, docs/ha.md): the connection to PostgreSQL from
//! a DSN ([`Postgres`]), the versioned schema applied at start ([`Postgres::migrate`]: the
//! leases, and the runs store that `runs::store` keeps there when a DSN is configured), and
//! the run leases with fencing epochs that say which lead drives a run ([`Leases`], not yet
//! on the run path).
//! Every lease decision is one SQL statement on the database's clock (`now()`), so the
//! leads' clocks never matter; an epoch only grows, so a call carrying an older one is stale.

mod error;
mod leases;
mod migrations;
mod postgres;

pub use error::HaError;
pub use leases::{Epoch, ExpiredLease, LeadId, Lease, Leases};
pub use migrations::{Migrated, SCHEMA_VERSION};
pub use postgres::Postgres;
