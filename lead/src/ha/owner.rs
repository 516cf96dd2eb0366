//! [`Ownership`]: the runs this lead holds a lease on, and the decisions about them: take a
//! run before driving it ([`Ownership::hold`]), renew every held lease in one statement and
//! say which were lost ([`Ownership::renew`]), give a run up when it ends
//! ([`Ownership::release`]), and find and take the runs a dead lead left
//! ([`Ownership::takeable`]). The run manager acts on what it says; the database and its
//! clock decide.
//!
//! A lead that cannot renew in time (the database unreachable, the lead paused) does not
//! wait for the database to tell it: once a lease's time to live has passed since the last
//! renewal the lead saw succeed, its runs count as lost, since another lead may own them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{Epoch, ExpiredLease, HaError, LeadId, Leases};

/// The most lapsed leases one takeover pass reads.
pub const TAKEOVER_BATCH: u32 = 64;

/// The leases this lead holds.
pub struct Ownership {
    leases: Leases,
    lead: LeadId,
    ttl: Duration,
    state: Mutex<Held>,
}

struct Held {
    runs: HashMap<String, Epoch>,
    /// When the last renewal that succeeded was sent (or the lead started): every lease
    /// held then runs at least a time to live from this instant.
    renewed_at: Instant,
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
    /// identity; its leases live `ttl` unrenewed.
    pub async fn open(dsn: &str, ttl: Duration) -> Result<Arc<Self>, HaError> {
        let leases = Leases::open(dsn).await?;
        Ok(Arc::new(Self::new(leases, new_lead_id(), ttl)))
    }

    pub fn new(leases: Leases, lead: LeadId, ttl: Duration) -> Self {
        Self {
            leases,
            lead,
            ttl,
            state: Mutex::new(Held {
                runs: HashMap::new(),
                renewed_at: Instant::now(),
            }),
        }
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

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The epoch this lead holds `run` at, if it does.
    pub fn epoch(&self, run: &str) -> Option<Epoch> {
        self.held().runs.get(run).copied()
    }

    /// Takes `run` before it is driven: the epoch it is held at (this lead's already, or a
    /// new one), or [`Hold::Elsewhere`] while another lead's lease on it is live.
    pub async fn hold(&self, run: &str) -> Result<Hold, HaError> {
        if let Some(epoch) = self.epoch(run) {
            return Ok(Hold::Held(epoch));
        }
        let Some(epoch) = self.leases.acquire(run, &self.lead, self.ttl).await? else {
            return Ok(Hold::Elsewhere);
        };
        self.held().runs.insert(run.to_owned(), epoch);
        Ok(Hold::Held(epoch))
    }

    /// Renews every lease this lead holds, in one statement: the runs it lost (another
    /// lead took them, or the lease lapsed), forgotten here. A renewal that fails counts
    /// none lost until a time to live has passed since the last one that succeeded; then
    /// all are.
    pub async fn renew(&self) -> Vec<(String, Epoch)> {
        let (held, since) = {
            let state = self.held();
            let held: Vec<(String, Epoch)> =
                state.runs.iter().map(|(r, e)| (r.clone(), *e)).collect();
            (held, state.renewed_at)
        };
        let sent = Instant::now();
        if sent.duration_since(since) >= self.ttl {
            // Paused or cut off for a whole time to live: another lead may own them all.
            return self.lose(held, sent);
        }
        // A renewal that lands after the leases lapsed renews nothing: it may wait no
        // longer than what is left of them.
        let left = self.ttl.saturating_sub(sent - since);
        let renewed =
            tokio::time::timeout(left, self.leases.renew_many(&held, &self.lead, self.ttl)).await;
        match renewed {
            Ok(Ok(renewed)) => {
                let renewed: std::collections::HashSet<String> = renewed.into_iter().collect();
                let lost = held
                    .into_iter()
                    .filter(|(run, _)| !renewed.contains(run))
                    .collect();
                self.held().renewed_at = sent;
                self.forget(lost)
            }
            Ok(Err(e)) => {
                tracing::warn!("cannot renew the run leases: {e}");
                Vec::new()
            }
            Err(_) => {
                tracing::warn!("the run leases' renewal did not answer in time");
                Vec::new()
            }
        }
    }

    /// Every held run in `held` lost at once (no renewal for a time to live).
    fn lose(&self, held: Vec<(String, Epoch)>, now: Instant) -> Vec<(String, Epoch)> {
        let lost = self.forget(held);
        // Leases acquired from here on are judged afresh.
        self.held().renewed_at = now;
        lost
    }

    /// Forgets the runs of `lost` still held at the same epoch (one released and taken
    /// again meanwhile is held anew): the ones forgotten.
    fn forget(&self, lost: Vec<(String, Epoch)>) -> Vec<(String, Epoch)> {
        let mut state = self.held();
        lost.into_iter()
            .filter(|(run, epoch)| {
                let same = state.runs.get(run) == Some(epoch);
                if same {
                    state.runs.remove(run);
                }
                same
            })
            .collect()
    }

    /// Gives `run` up (it ended, or was cancelled): the next lead to take it gets a higher
    /// epoch at once.
    pub async fn release(&self, run: &str) {
        let Some(epoch) = self.held().runs.remove(run) else {
            return;
        };
        match self.leases.release(run, &self.lead, epoch).await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(run, %epoch, "the run's lease was no longer held"),
            Err(e) => tracing::warn!(run, %epoch, "cannot release the run's lease: {e}"),
        }
    }

    /// Stops holding `run` without touching its lease (the lead lost it).
    pub fn drop_run(&self, run: &str) {
        self.held().runs.remove(run);
    }

    /// Leases other leads let lapse (the longest lapsed first): the runs to take over.
    pub async fn takeable(&self) -> Result<Vec<ExpiredLease>, HaError> {
        let mut expired = self.leases.expired(TAKEOVER_BATCH).await?;
        let held = self.held();
        expired.retain(|lease| !held.runs.contains_key(&lease.run_id));
        Ok(expired)
    }

    /// `run`'s lease as it stands (`None`: never leased).
    pub async fn lease(&self, run: &str) -> Result<Option<super::Lease>, HaError> {
        self.leases.lease(run).await
    }

    /// Takes over `lease`'s run: the new epoch, or `None` when another lead took it first.
    pub async fn take(&self, lease: &ExpiredLease) -> Result<Option<Epoch>, HaError> {
        match self.hold(&lease.run_id).await? {
            Hold::Held(epoch) => Ok(Some(epoch)),
            Hold::Elsewhere => Ok(None),
        }
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
