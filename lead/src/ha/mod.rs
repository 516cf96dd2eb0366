//! Several leads on one PostgreSQL (issue 38, docs/ha.md). It owns the connection to
//! PostgreSQL from a DSN ([`Postgres`]), the versioned schema applied at start
//! ([`Postgres::migrate`]: the leases, and the runs store that `runs::store` keeps there when
//! a DSN is configured), the run leases with fencing epochs that say which lead drives a
//! run ([`Leases`]), and this lead's hold on its runs' leases ([`Ownership`]), which the run
//! manager follows when leases are on (`antler.ha.leases_dsn`, or the store's DSN), and
//! the retention of the lease rows of finished runs and of dead leads' rows ([`Swept`]),
//! and the submissions-per-minute budget the leads' gateways share
//! ([`Leases::take_submission`]).
//! Every lease decision is one SQL statement on the database's clock (`now()`), so the
//! leads' clocks never matter; an epoch only grows, so a call carrying an older one is stale.

mod dsn;
mod error;
mod leases;
mod migrations;
mod owner;
mod postgres;
mod retention;
mod submissions;
mod tls;

pub use error::HaError;
pub use leases::{Epoch, ExpiredLease, LeadId, Lease, Leases};
pub use migrations::{Migrated, SCHEMA_VERSION};
pub use owner::{new_lead_id, Hold, Ownership, TAKEOVER_BATCH};
pub use postgres::Postgres;
pub use retention::Swept;
