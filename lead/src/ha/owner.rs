//! [`Ownership`]: the runs this lead holds a lease on, and the decisions about them: take a
//! run before driving it ([`Ownership::hold`]), renew every held lease in one statement and
//! say which were lost ([`Ownership::renew`]), give a run up when it ends
//! ([`Ownership::release`]), and find and take the runs a dead lead left
//! ([`Ownership::takeable`]), and now and then remove the released leases of finished runs
//! and the rows of dead leads ([`Ownership::sweep`]). The run manager acts on what it says;
//! the database and its clock decide.
//!
//! A lead that cannot renew in time (the database unreachable, the lead paused) does not
//! wait for the database to tell it: once a lease's time to live has passed since the last
//! acquisition or renewal of it the lead saw succeed, its run counts as lost, since another
//! lead may own it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{Epoch, ExpiredLease, HaError, LeadId, Leases, Swept};

/// The most lapsed leases one takeover pass reads.
pub const TAKEOVER_BATCH: u32 = 64;

/// The most rows of each table one retention sweep removes.
pub const SWEEP_BATCH: u32 = 1000;

/// How often a lead sweeps at most: once a minute, or once a retention when that is
/// shorter; at its next look again when a sweep removed a whole batch.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The leases this lead holds.
pub struct Ownership {
    leases: Leases,
    lead: LeadId,
    ttl: Duration,
    /// Each held run's epoch, and when the acquisition or renewal that last succeeded for
    /// it was sent: its lease runs at least a time to live from then.
    held: Mutex<HashMap<String, (Epoch, Instant)>>,
    /// This lead's gateway URL once advertised (`leads`), refreshed with the renewals.
    gateway_url: Mutex<Option<String>>,
    /// How long a finished run's released lease and a silent lead's row are kept.
    retention: Duration,
    /// When the next retention sweep is due (`None`: now).
    next_sweep: Mutex<Option<Instant>>,
}

/// What [`Ownership::hold`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// This lead holds the run at this epoch (newly acquired or held already).
    Held(Epoch),
    /// Another lead holds a live lease on it.
    Elsewhere,
}

impl Ownership {
    /// The leases of the database `dsn` names (connected and migrated), for a new lead
    /// identity; its leases live `ttl` unrenewed, and what it sweeps is kept `retention`.
    pub async fn open(dsn: &str, ttl: Duration, retention: Duration) -> Result<Arc<Self>, HaError> {
        let leases = Leases::open(dsn).await?;
        Ok(Arc::new(
            Self::new(leases, new_lead_id(), ttl).with_retention(retention),
        ))
    }

    pub fn new(leases: Leases, lead: LeadId, ttl: Duration) -> Self {
        Self {
            leases,
            lead,
            ttl,
            held: Mutex::new(HashMap::new()),
            gateway_url: Mutex::new(None),
            retention: Duration::from_millis(antler_protocol::config::DEFAULT_LEASE_RETENTION_MS),
            next_sweep: Mutex::new(None),
        }
    }

    /// Keeps finished runs' released leases and silent leads' rows `retention` before
    /// [`Ownership::sweep`] removes them (an hour by default).
    pub fn with_retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    pub fn lead(&self) -> &LeadId {
        &self.lead
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How often leases are renewed and lapsed ones looked for: a third of the time to
    /// live, so two renewals may fail before a lease lapses.
    pub fn period(&self) -> Duration {
        (self.ttl / 3).max(Duration::from_millis(50))
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Epoch, Instant)>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The epoch this lead holds `run` at, if it does.
    pub fn epoch(&self, run: &str) -> Option<Epoch> {
        self.held().get(run).map(|(epoch, _)| *epoch)
    }

    /// Records where other leads reach this lead's gateway (`leads`), refreshed at every
    /// renewal from now on.
    pub async fn advertise(&self, gateway_url: &str) -> Result<(), HaError> {
        *self
            .gateway_url
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(gateway_url.to_owned());
        self.leases.advertise(&self.lead, gateway_url).await
    }

    /// Refreshes this lead's row in `leads` (nothing before [`Ownership::advertise`]).
    pub async fn refresh_advertised(&self) {
        let url = self
            .gateway_url
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(url) = url else { return };
        let refreshed = tokio::time::timeout(self.ttl, self.leases.advertise(&self.lead, &url));
        match refreshed.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("cannot refresh this lead's gateway URL: {e}"),
            Err(_) => tracing::warn!("this lead's gateway URL refresh did not answer in time"),
        }
    }

    /// The gateway URL of the other lead holding `run`'s live lease: `None` when this lead
    /// holds it, or no lead holds it live (a lapsed lease is this lead's to take).
    pub async fn owner_elsewhere(&self, run: &str) -> Result<Option<String>, HaError> {
        if self.epoch(run).is_some() {
            return Ok(None);
        }
        Ok(self
            .leases
            .owner_gateway(run)
            .await?
            .filter(|(lead, _)| lead != &self.lead)
            .map(|(_, url)| url))
    }

    /// Takes `run` before it is driven: the epoch it is held at (this lead's already, or a
    /// new one), or [`Hold::Elsewhere`] while another lead's lease on it is live.
    pub async fn hold(&self, run: &str) -> Result<Hold, HaError> {
        if let Some(epoch) = self.epoch(run) {
            return Ok(Hold::Held(epoch));
        }
        let sent = Instant::now();
        let Some(epoch) = self.leases.acquire(run, &self.lead, self.ttl).await? else {
            return Ok(Hold::Elsewhere);
        };
        self.held().insert(run.to_owned(), (epoch, sent));
        Ok(Hold::Held(epoch))
    }

    /// Renews every lease this lead holds, in one statement: the runs it lost (another
    /// lead took them, or the lease lapsed), forgotten here. A lease not renewed for a time
    /// to live (the database unreachable, the lead paused) is lost without asking: another
    /// lead may own the run by now. A renewal that fails loses nothing yet.
    pub async fn renew(&self) -> Vec<(String, Epoch)> {
        let sent = Instant::now();
        let (lapsed, live): (Vec<_>, Vec<_>) = self
            .held()
            .iter()
            .map(|(run, (epoch, since))| (run.clone(), *epoch, *since))
            .partition(|(_, _, since)| sent.duration_since(*since) >= self.ttl);
        let mut lost = self.forget(lapsed.into_iter().map(|(r, e, _)| (r, e)).collect());
        if live.is_empty() {
            return lost;
        }
        // A renewal that lands after the leases lapsed renews nothing: it may wait no
        // longer than the first of them has left.
        let left = live
            .iter()
            .map(|(_, _, since)| self.ttl.saturating_sub(sent.duration_since(*since)))
            .min()
            .unwrap_or(self.ttl);
        let held: Vec<(String, Epoch)> = live.into_iter().map(|(r, e, _)| (r, e)).collect();
        let renewed =
            tokio::time::timeout(left, self.leases.renew_many(&held, &self.lead, self.ttl)).await;
        match renewed {
            Ok(Ok(renewed)) => {
                let renewed: std::collections::HashSet<String> = renewed.into_iter().collect();
                let (kept, gone): (Vec<_>, Vec<_>) =
                    held.into_iter().partition(|(run, _)| renewed.contains(run));
                {
                    let mut state = self.held();
                    for (run, epoch) in kept {
                        if let Some(entry) = state.get_mut(&run).filter(|(e, _)| *e == epoch) {
                            entry.1 = sent;
                        }
                    }
                }
                lost.extend(self.forget(gone));
            }
            Ok(Err(e)) => tracing::warn!("cannot renew the run leases: {e}"),
            Err(_) => tracing::warn!("the run leases' renewal did not answer in time"),
        }
        lost
    }

    /// Forgets the runs of `lost` still held at the same epoch (one released and taken
    /// again meanwhile is held anew): the ones forgotten.
    fn forget(&self, lost: Vec<(String, Epoch)>) -> Vec<(String, Epoch)> {
        let mut state = self.held();
        lost.into_iter()
            .filter(|(run, epoch)| {
                let same = state.get(run).is_some_and(|(e, _)| e == epoch);
                if same {
                    state.remove(run);
                }
                same
            })
            .collect()
    }

    /// Gives `run` up (it ended, or was cancelled): the next lead to take it gets a higher
    /// epoch at once.
    pub async fn release(&self, run: &str) {
        let Some((epoch, _)) = self.held().remove(run) else {
            return;
        };
        match self.leases.release(run, &self.lead, epoch).await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(run, %epoch, "the run's lease was no longer held"),
            Err(e) => tracing::warn!(run, %epoch, "cannot release the run's lease: {e}"),
        }
    }

    /// Stops holding `run` without touching its lease (it lapses unrenewed).
    pub fn drop_run(&self, run: &str) {
        self.held().remove(run);
    }

    /// Leases other leads let lapse (the longest lapsed first): the runs to take over.
    pub async fn takeable(&self) -> Result<Vec<ExpiredLease>, HaError> {
        let mut expired = self.leases.expired(TAKEOVER_BATCH).await?;
        let held = self.held();
        expired.retain(|lease| !held.contains_key(&lease.run_id));
        Ok(expired)
    }

    /// Removes, when a sweep is due (at most once a minute, or once a retention when that is
    /// shorter), the released leases of finished runs and the rows of leads that stopped
    /// renewing, each older than the retention: one bounded `DELETE` per table. What it
    /// removed, or `None` when no sweep was due or it failed (it is tried again when due).
    pub async fn sweep(&self) -> Option<Swept> {
        let now = Instant::now();
        let due = |next: &Option<Instant>| next.is_none_or(|at| at <= now);
        if !due(&self
            .next_sweep
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
        {
            return None;
        }
        let swept = match self.leases.sweep(self.retention, SWEEP_BATCH).await {
            Ok(swept) => Some(swept),
            Err(e) => {
                tracing::warn!("cannot remove the old run leases and lead rows: {e}");
                None
            }
        };
        let next = match swept {
            Some(swept) if swept.full(SWEEP_BATCH) => now,
            _ => now + SWEEP_EVERY.min(self.retention),
        };
        *self
            .next_sweep
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(next);
        if let Some(swept) = swept.filter(|s| *s != Swept::default()) {
            tracing::debug!(
                leases = swept.leases,
                leads = swept.leads,
                submissions = swept.submissions,
                "removed the released leases of finished runs and the rows of silent leads"
            );
        }
        swept
    }

    /// Takes one of `user`'s `per_minute` submissions from the budget the leads share:
    /// `Ok(None)` when taken, `Ok(Some(wait))` when spent until `wait` from now.
    pub async fn take_submission(
        &self,
        user: &str,
        per_minute: u32,
    ) -> Result<Option<Duration>, HaError> {
        self.leases.take_submission(user, per_minute).await
    }

    /// `run`'s lease as it stands (`None`: never leased).
    pub async fn lease(&self, run: &str) -> Result<Option<super::Lease>, HaError> {
        self.leases.lease(run).await
    }

    /// Takes over `lease`'s run: the new epoch, or `None` when another lead took it first.
    /// Asks the database even when this lead thinks it holds the run: a lapsed lease is
    /// not held.
    pub async fn take(&self, lease: &ExpiredLease) -> Result<Option<Epoch>, HaError> {
        let run = &lease.run_id;
        let sent = Instant::now();
        let taken = self.leases.acquire(run, &self.lead, self.ttl).await?;
        let mut state = self.held();
        match taken {
            Some(epoch) => {
                state.insert(run.clone(), (epoch, sent));
            }
            None => {
                state.remove(run);
            }
        }
        Ok(taken)
    }
}

/// A lead identity unique to this process: its host name, pid and a random part.
pub fn new_lead_id() -> LeadId {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "lead".to_owned());
    let random = uuid::Uuid::new_v4().simple().to_string();
    LeadId::new(format!(
        "{host}-{}-{}",
        std::process::id(),
        &random[..12.min(random.len())]
    ))
}
