//! Run leases with fencing epochs: which lead drives each run. A lead acquires a run's lease
//! for a time to live and renews it while the run lives; a lease that lapses (the lead was
//! killed, paused or cut off) can be acquired by another lead, with the epoch one higher.
//! Each decision is one SQL statement judged on the database's clock (`now()`). An epoch
//! belongs to one owner and only grows, so hosts and workers accept a run's calls only from
//! its current epoch ([`Leases::current_epoch`]) and a lead that woke late is fenced off.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_postgres::{Row, Statement};

use super::{HaError, Postgres};

/// Takes a run nobody holds: a new row (epoch 1), or a lapsed or released lease (epoch + 1).
/// Under READ COMMITTED, racers for one row wait for each other and the `WHERE` is judged on
/// the row the winner left, so exactly one of them gets an epoch.
const ACQUIRE: &str = "INSERT INTO run_leases AS l (run_id, lead_id, epoch, expires_at)
    VALUES ($1, $2, 1, now() + $3::bigint * interval '1 millisecond')
    ON CONFLICT (run_id) DO UPDATE
        SET lead_id = excluded.lead_id, epoch = l.epoch + 1, expires_at = excluded.expires_at
        WHERE l.lead_id IS NULL OR l.expires_at <= now()
    RETURNING epoch";

/// Extends a live lease held by exactly this lead and epoch; a lapsed lease is lost.
const RENEW: &str = "UPDATE run_leases
    SET expires_at = now() + $4::bigint * interval '1 millisecond'
    WHERE run_id = $1 AND lead_id = $2 AND epoch = $3 AND expires_at > now()";

/// Extends, in one statement, every live lease `$3` holds at the epochs given (`$1` run ids,
/// `$2` their epochs): the runs it still holds.
const RENEW_MANY: &str = "UPDATE run_leases AS l
    SET expires_at = now() + $4::bigint * interval '1 millisecond'
    FROM unnest($1::text[], $2::bigint[]) AS h(run_id, epoch)
    WHERE l.run_id = h.run_id AND l.epoch = h.epoch AND l.lead_id = $3
        AND l.expires_at > now()
    RETURNING l.run_id";

/// Gives a run up: no owner, the epoch kept (the next owner's is higher).
const RELEASE: &str = "UPDATE run_leases SET lead_id = NULL, expires_at = now()
    WHERE run_id = $1 AND lead_id = $2 AND epoch = $3";

/// Owned leases that lapsed, the longest lapsed first.
const EXPIRED: &str = "SELECT run_id, lead_id, epoch FROM run_leases
    WHERE lead_id IS NOT NULL AND expires_at <= now()
    ORDER BY expires_at, run_id LIMIT $1";

/// A run's lease as it stands.
const LEASE: &str = "SELECT lead_id, epoch, lead_id IS NOT NULL AND expires_at > now()
    FROM run_leases WHERE run_id = $1";

/// Records (or refreshes) where a lead's gateway is reached (`leads`).
const ADVERTISE: &str =
    "INSERT INTO leads (lead_id, gateway_url, renewed_at) VALUES ($1, $2, now())
    ON CONFLICT (lead_id) DO UPDATE
        SET gateway_url = excluded.gateway_url, renewed_at = excluded.renewed_at";

/// The gateway of the lead holding a run's live lease, and that lead.
const OWNER_GATEWAY: &str = "SELECT l.lead_id, d.gateway_url FROM run_leases l
    JOIN leads d ON d.lead_id = l.lead_id
    WHERE l.run_id = $1 AND l.expires_at > now()";

/// A lead's identity in the leases: unique to one lead process (an incarnation), so a lead
/// that restarts is a new owner and cannot mistake its predecessor's leases for its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeadId(String);

impl LeadId {
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LeadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A fencing epoch: the number of times a run's lease changed owner. A run's call made
/// under an epoch lower than the current one comes from a lead that lost the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch(i64);

impl Epoch {
    pub fn get(self) -> i64 {
        self.0
    }

    /// The epoch as the wire carries it (`TraceContext::epoch`): epochs start at 1.
    pub fn wire(self) -> u64 {
        u64::try_from(self.0).unwrap_or(0)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A run's lease as [`Leases::lease`] read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The lead that holds or held it; `None` once released.
    pub owner: Option<LeadId>,
    pub epoch: Epoch,
    /// Whether it is held now: an owner and an expiry still ahead on the database's clock.
    pub live: bool,
}

/// A lease whose owner stopped renewing it: the run awaits a takeover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredLease {
    pub run_id: String,
    /// The lead that lost it.
    pub owner: LeadId,
    /// The epoch it held; the taker's is this plus one.
    pub epoch: Epoch,
}

/// The run leases of one database, through one connection; cheap to clone and share among
/// a lead's tasks (tokio-postgres pipelines their requests on the one connection). Opened
/// from a DSN ([`Leases::open`]), a connection found closed (the server ended it, the
/// network was cut) is made again before the next call, its statements prepared again:
/// a lead cut from the database renews and takes runs over again once it is reachable.
#[derive(Clone)]
pub struct Leases {
    /// The DSN to connect again with; `None` for leases on a connection given
    /// ([`Leases::new`]), which are not reconnected.
    dsn: Option<Arc<str>>,
    session: Arc<Mutex<Arc<Session>>>,
}

/// One connection and its prepared statements.
struct Session {
    db: Arc<Postgres>,
    statements: Statements,
}

/// The lease statements, prepared once per connection: each call is one round trip.
struct Statements {
    acquire: Statement,
    renew: Statement,
    renew_many: Statement,
    release: Statement,
    expired: Statement,
    lease: Statement,
    advertise: Statement,
    owner_gateway: Statement,
}

impl Session {
    /// The lease statements prepared on `db`.
    async fn prepare(db: Arc<Postgres>) -> Result<Self, HaError> {
        let prepare = |sql| db.within("lease statement", db.client().prepare(sql));
        let statements = Statements {
            acquire: prepare(ACQUIRE).await?,
            renew: prepare(RENEW).await?,
            renew_many: prepare(RENEW_MANY).await?,
            release: prepare(RELEASE).await?,
            expired: prepare(EXPIRED).await?,
            lease: prepare(LEASE).await?,
            advertise: prepare(ADVERTISE).await?,
            owner_gateway: prepare(OWNER_GATEWAY).await?,
        };
        Ok(Self { db, statements })
    }
}

impl Leases {
    /// The leases of the database `db` is connected to; its schema must be migrated
    /// ([`Postgres::migrate`]), or preparing the statements fails here.
    pub async fn new(db: Arc<Postgres>) -> Result<Self, HaError> {
        Ok(Self {
            dsn: None,
            session: Arc::new(Mutex::new(Arc::new(Session::prepare(db).await?))),
        })
    }

    /// The connection the statements go through, made again when it closed (for the sweep
    /// of `retention` and the submission budgets).
    pub(super) async fn db(&self) -> Result<Arc<Postgres>, HaError> {
        Ok(Arc::clone(&self.session().await?.db))
    }

    /// Connects to the DSN's database, migrates it and opens its leases: what a lead does
    /// at start in cluster mode. A lost connection is made again (see [`Leases`]).
    pub async fn open(dsn: &str) -> Result<Self, HaError> {
        let mut db = Postgres::connect(dsn).await?;
        db.migrate().await?;
        let mut leases = Self::new(Arc::new(db)).await?;
        leases.dsn = Some(Arc::from(dsn));
        Ok(leases)
    }

    /// The connection to use now: the current one, or, when it is closed and the DSN is
    /// known, a new one (two callers may both connect; the last one is kept, and the other
    /// goes when its call ends). No lock is held across the connect.
    async fn session(&self) -> Result<Arc<Session>, HaError> {
        let current = Arc::clone(&self.current());
        let Some(dsn) = self.dsn.as_deref().filter(|_| current.db.is_closed()) else {
            return Ok(current);
        };
        let fresh = Arc::new(Session::prepare(Arc::new(Postgres::connect(dsn).await?)).await?);
        tracing::info!("connected to PostgreSQL again for the run leases");
        *self.current() = Arc::clone(&fresh);
        Ok(fresh)
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Arc<Session>> {
        self.session.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `run` for `lead` for `ttl`: its epoch, or `None` while a live lease holds it
    /// (even `lead`'s own: a holder renews, it does not acquire again).
    pub async fn acquire(
        &self,
        run: &str,
        lead: &LeadId,
        ttl: Duration,
    ) -> Result<Option<Epoch>, HaError> {
        let ttl = ttl_ms(ttl)?;
        let s = self.session().await?;
        let row =
            s.db.within(
                "lease acquire",
                s.db.client()
                    .query_opt(&s.statements.acquire, &[&run, &lead.as_str(), &ttl]),
            )
            .await?;
        row.map(|row| epoch(&row, 0, "lease acquire")).transpose()
    }

    /// Extends `lead`'s lease on `run` at `epoch` to `ttl` from now. `false`: the lease
    /// lapsed, was released or was taken over, and the lead has lost the run: it must stop
    /// acting for it at once.
    #[must_use = "false means the lead lost the run and must stop acting for it"]
    pub async fn renew(
        &self,
        run: &str,
        lead: &LeadId,
        epoch: Epoch,
        ttl: Duration,
    ) -> Result<bool, HaError> {
        let ttl = ttl_ms(ttl)?;
        let s = self.session().await?;
        let updated =
            s.db.within(
                "lease renew",
                s.db.client()
                    .execute(&s.statements.renew, &[&run, &lead.as_str(), &epoch.0, &ttl]),
            )
            .await?;
        Ok(updated == 1)
    }

    /// [`Leases::renew`] for many runs in one round trip: of `held` (run id and the epoch
    /// `lead` holds it at), the run ids whose leases were extended. A run left out is lost.
    pub async fn renew_many(
        &self,
        held: &[(String, Epoch)],
        lead: &LeadId,
        ttl: Duration,
    ) -> Result<Vec<String>, HaError> {
        let ttl = ttl_ms(ttl)?;
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let runs: Vec<&str> = held.iter().map(|(run, _)| run.as_str()).collect();
        let epochs: Vec<i64> = held.iter().map(|(_, epoch)| epoch.0).collect();
        let what = "lease renew";
        let s = self.session().await?;
        let rows =
            s.db.within(
                what,
                s.db.client().query(
                    &s.statements.renew_many,
                    &[&runs, &epochs, &lead.as_str(), &ttl],
                ),
            )
            .await?;
        rows.iter()
            .map(|row| {
                row.try_get::<_, String>(0)
                    .map_err(|source| HaError::Query { what, source })
            })
            .collect()
    }

    /// Gives `run` up (its run ended, or the lead hands it over); the next lead to acquire it
    /// gets a higher epoch at once. `false`: `lead` no longer held it at `epoch`.
    pub async fn release(&self, run: &str, lead: &LeadId, epoch: Epoch) -> Result<bool, HaError> {
        let s = self.session().await?;
        let updated =
            s.db.within(
                "lease release",
                s.db.client()
                    .execute(&s.statements.release, &[&run, &lead.as_str(), &epoch.0]),
            )
            .await?;
        Ok(updated == 1)
    }

    /// Up to `limit` runs whose owner let the lease lapse, the longest lapsed first: the
    /// runs to take over (with [`Leases::acquire`], which only one lead wins).
    pub async fn expired(&self, limit: u32) -> Result<Vec<ExpiredLease>, HaError> {
        let s = self.session().await?;
        let rows =
            s.db.within(
                "expired leases",
                s.db.client()
                    .query(&s.statements.expired, &[&i64::from(limit)]),
            )
            .await?;
        rows.iter()
            .map(|row| {
                let column = |i| {
                    row.try_get::<_, String>(i)
                        .map_err(|source| HaError::Query {
                            what: "expired leases",
                            source,
                        })
                };
                Ok(ExpiredLease {
                    run_id: column(0)?,
                    owner: LeadId(column(1)?),
                    epoch: epoch(row, 2, "expired leases")?,
                })
            })
            .collect()
    }

    /// `run`'s lease as it stands, or `None` for a run never leased.
    pub async fn lease(&self, run: &str) -> Result<Option<Lease>, HaError> {
        let what = "lease read";
        let s = self.session().await?;
        let row =
            s.db.within(what, s.db.client().query_opt(&s.statements.lease, &[&run]))
                .await?;
        let Some(row) = row else { return Ok(None) };
        let owner: Option<String> = row
            .try_get(0)
            .map_err(|source| HaError::Query { what, source })?;
        let live: bool = row
            .try_get(2)
            .map_err(|source| HaError::Query { what, source })?;
        Ok(Some(Lease {
            owner: owner.map(LeadId),
            epoch: epoch(&row, 1, what)?,
            live,
        }))
    }

    /// Records that `lead`'s gateway is reached at `gateway_url` (refreshing `renewed_at`).
    pub async fn advertise(&self, lead: &LeadId, gateway_url: &str) -> Result<(), HaError> {
        let s = self.session().await?;
        s.db.within(
            "lead advertise",
            s.db.client()
                .execute(&s.statements.advertise, &[&lead.as_str(), &gateway_url]),
        )
        .await?;
        Ok(())
    }

    /// The lead holding `run`'s live lease and its gateway URL; `None` when no lead holds
    /// it live (never leased, released, lapsed) or its owner advertised no gateway.
    pub async fn owner_gateway(&self, run: &str) -> Result<Option<(LeadId, String)>, HaError> {
        let what = "run owner's gateway";
        let s = self.session().await?;
        let row =
            s.db.within(
                what,
                s.db.client()
                    .query_opt(&s.statements.owner_gateway, &[&run]),
            )
            .await?;
        let Some(row) = row else { return Ok(None) };
        let column = |i| {
            row.try_get::<_, String>(i)
                .map_err(|source| HaError::Query { what, source })
        };
        Ok(Some((LeadId(column(0)?), column(1)?)))
    }

    /// The epoch `run`'s calls must carry (the latest owner's, live or lapsed), or `None`
    /// for a run never leased: what hosts and workers check before they act for a lead.
    pub async fn current_epoch(&self, run: &str) -> Result<Option<Epoch>, HaError> {
        Ok(self.lease(run).await?.map(|lease| lease.epoch))
    }
}

/// `ttl` in whole milliseconds, at least one.
fn ttl_ms(ttl: Duration) -> Result<i64, HaError> {
    i64::try_from(ttl.as_millis())
        .ok()
        .filter(|ms| *ms > 0)
        .ok_or(HaError::Ttl { ttl })
}

fn epoch(row: &Row, column: usize, what: &'static str) -> Result<Epoch, HaError> {
    row.try_get(column)
        .map(Epoch)
        .map_err(|source| HaError::Query { what, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttl_is_whole_milliseconds_and_at_least_one() {
        assert_eq!(ttl_ms(Duration::from_millis(1500)).ok(), Some(1500));
        assert!(matches!(
            ttl_ms(Duration::from_micros(999)),
            Err(HaError::Ttl { .. })
        ));
        assert!(matches!(ttl_ms(Duration::MAX), Err(HaError::Ttl { .. })));
    }
}
