//! [`WorkerScaling`]: changes the number of subagent workers of a running cluster
//! (`antler workers N`). Added workers are started by the supervisor with the cluster's
//! own [`ChildPlan`] and the change is done once they are healthy and the dispatcher has
//! their slots. A removed worker (highest indexes first) is marked draining in the
//! dispatcher and told to drain, so it takes no new task; it is stopped only once it
//! reports no busy slot (or its drain deadline passed). One change runs at a time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use antler_protocol::{
    calls::{Linked, WorkerCalls},
    config::MAX_WORKERS,
    link::HostLink,
    messages::ProcessStatus,
    Role,
};

use crate::cluster::supervisor::{AddChildren, GetLinks, GetStatus, RemoveChild, Supervisor};
use crate::cluster::{ChildPlan, ClusterError};
use crate::subagents::dispatcher::{SetDraining, SubagentDispatcher, Workers};

/// How long new workers get to become healthy.
pub const START_DEADLINE: Duration = Duration::from_secs(60);
/// How long a removed worker gets to finish its tasks before it is stopped anyway.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(30 * 60);
/// How often a draining worker's busy slots are polled.
const DRAIN_POLL: Duration = Duration::from_millis(250);
/// How often the wait for a draining worker is logged.
const DRAIN_LOG_EVERY: Duration = Duration::from_secs(30);
/// A draining worker that cannot be reached this long has no task left to wait for.
const UNREACHABLE_FOR: Duration = Duration::from_secs(10);
/// Deadline of one request to a worker (drain, capacity).
const WORKER_REQUEST: Duration = Duration::from_secs(5);

/// Why the workers could not be changed (the operator sees it).
#[derive(Debug, thiserror::Error)]
pub enum ScaleError {
    #[error("expected a number of workers from 1 to {max}, got {got}")]
    OutOfRange { got: u32, max: u32 },
    #[error("another change of the workers is under way; try again once it is done")]
    Busy,
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("the supervisor is gone")]
    SupervisorGone,
    #[error("the new workers were not healthy within {} s: {detail}", START_DEADLINE.as_secs())]
    NotHealthy { detail: String },
}

/// Adds and removes the cluster's workers.
#[derive(Clone)]
pub struct WorkerScaling {
    plan: ChildPlan,
    supervisor: Addr<Supervisor>,
    dispatcher: Addr<SubagentDispatcher>,
    changing: Arc<AtomicBool>,
}

/// Clears the one-change-at-a-time flag when the change ends, however it ends.
struct Changing(Arc<AtomicBool>);

impl Drop for Changing {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl WorkerScaling {
    pub fn new(
        plan: ChildPlan,
        supervisor: Addr<Supervisor>,
        dispatcher: Addr<SubagentDispatcher>,
    ) -> WorkerScaling {
        WorkerScaling {
            plan,
            supervisor,
            dispatcher,
            changing: Arc::default(),
        }
    }

    /// The dispatcher, for `antler status`'s slots.
    pub fn dispatcher(&self) -> &Addr<SubagentDispatcher> {
        &self.dispatcher
    }

    /// Changes the number of workers to `workers`; the workers after the change.
    pub async fn set(&self, workers: u32) -> Result<Vec<ProcessStatus>, ScaleError> {
        if self.plan.cluster_mode {
            return Err(ClusterError::ScaledElsewhere.into());
        }
        let max = MAX_WORKERS as u32;
        if !(1..=max).contains(&workers) {
            return Err(ScaleError::OutOfRange { got: workers, max });
        }
        if self
            .changing
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Err(ScaleError::Busy);
        }
        let _changing = Changing(Arc::clone(&self.changing));
        let mut current = self.worker_indexes().await?;
        current.sort_unstable();
        let have = current.len();
        let want = workers as usize;
        if want > have {
            let added: Vec<u32> = (0..)
                .filter(|i| !current.contains(i))
                .take(want - have)
                .collect();
            self.add(&added).await?;
        } else if want < have {
            let removed: Vec<u32> = current.iter().rev().take(have - want).copied().collect();
            self.remove(&removed).await?;
        }
        self.status().await
    }

    /// The subagent rows of the status, with their slots.
    async fn status(&self) -> Result<Vec<ProcessStatus>, ScaleError> {
        let mut list = self
            .supervisor
            .send(GetStatus)
            .await
            .map_err(|_| ScaleError::SupervisorGone)?;
        list.retain(|p| p.role == Role::Subagent);
        with_slots(&mut list, &self.dispatcher).await;
        Ok(list)
    }

    async fn worker_indexes(&self) -> Result<Vec<u32>, ScaleError> {
        let list = self
            .supervisor
            .send(GetStatus)
            .await
            .map_err(|_| ScaleError::SupervisorGone)?;
        Ok(list
            .iter()
            .filter(|p| p.role == Role::Subagent && p.state != "stopped")
            .map(|p| p.index)
            .collect())
    }

    /// Starts workers `indexes` and waits until they are healthy and placeable.
    async fn add(&self, indexes: &[u32]) -> Result<(), ScaleError> {
        let specs = indexes
            .iter()
            .map(|i| self.plan.child(Role::Subagent, *i))
            .collect::<Result<Vec<_>, _>>()?;
        tracing::info!(?indexes, "adding subagent workers");
        for index in indexes {
            // An index removed earlier is placeable again.
            self.dispatcher.do_send(SetDraining {
                index: *index,
                draining: false,
            });
        }
        self.supervisor
            .send(AddChildren(specs))
            .await
            .map_err(|_| ScaleError::SupervisorGone)?;
        let until = Instant::now() + START_DEADLINE;
        loop {
            let list = self.status().await?;
            let ready = indexes.iter().all(|i| {
                list.iter()
                    .any(|p| p.index == *i && p.healthy && p.slots.is_some_and(|s| s > 0))
            });
            if ready {
                return Ok(());
            }
            if Instant::now() >= until {
                let detail = list
                    .iter()
                    .filter(|p| indexes.contains(&p.index) && !p.healthy)
                    .map(|p| {
                        format!(
                            "subagent-{} is {}{}",
                            p.index,
                            p.state,
                            p.reason
                                .as_deref()
                                .map(|r| format!(" ({r})"))
                                .unwrap_or_default()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(ScaleError::NotHealthy { detail });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Drains and stops workers `indexes`, in that order (highest first). All of them
    /// stop taking tasks at once.
    async fn remove(&self, indexes: &[u32]) -> Result<(), ScaleError> {
        tracing::info!(?indexes, "removing subagent workers");
        for index in indexes {
            self.dispatcher.do_send(SetDraining {
                index: *index,
                draining: true,
            });
            self.tell_drain(*index).await;
        }
        for index in indexes {
            self.drain(*index).await;
            self.supervisor
                .send(RemoveChild {
                    role: Role::Subagent,
                    index: *index,
                    grace: self.plan.drain_grace,
                })
                .await
                .map_err(|_| ScaleError::SupervisorGone)?;
            tracing::info!(index, "subagent worker removed");
        }
        Ok(())
    }

    /// Waits until worker `index` has no busy slot, neither on the worker nor in the
    /// dispatcher, or its drain deadline passed.
    async fn drain(&self, index: u32) {
        let started = Instant::now();
        let mut logged = Instant::now();
        let mut unreachable_since: Option<Instant> = None;
        loop {
            // Asked again each time: a worker that restarted meanwhile drains too.
            self.tell_drain(index).await;
            let busy = match self.busy(index).await {
                Some(busy) => {
                    unreachable_since = None;
                    Some(busy)
                }
                _ => {
                    let since = *unreachable_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= UNREACHABLE_FOR {
                        tracing::warn!(index, "draining worker cannot be reached; stopping it");
                        return;
                    }
                    None
                }
            };
            let placed = self
                .dispatcher
                .send(Workers)
                .await
                .unwrap_or_default()
                .iter()
                .find(|w| w.index == index)
                .map_or(0, |w| w.in_use);
            if busy == Some(0) && placed == 0 {
                tracing::info!(index, "draining worker has no task left");
                return;
            }
            if started.elapsed() >= DRAIN_DEADLINE {
                tracing::warn!(
                    index,
                    ?busy,
                    placed,
                    "draining worker still busy after {} s; stopping it",
                    DRAIN_DEADLINE.as_secs()
                );
                return;
            }
            if logged.elapsed() >= DRAIN_LOG_EVERY {
                logged = Instant::now();
                tracing::info!(
                    index,
                    ?busy,
                    placed,
                    "waiting for a draining worker to finish its tasks"
                );
            }
            tokio::time::sleep(DRAIN_POLL).await;
        }
    }

    /// The link to worker `index`, when it has one.
    async fn worker_link(&self, index: u32) -> Option<Addr<HostLink>> {
        let links = self.supervisor.send(GetLinks).await.ok()?;
        let (.., link) = links
            .into_iter()
            .find(|(r, i, ..)| *r == Role::Subagent && *i == index)?;
        Some(link)
    }

    /// Tells worker `index` to take no new task (one that cannot be reached is not told).
    async fn tell_drain(&self, index: u32) {
        if let Some(link) = self.worker_link(index).await {
            let _ = Linked::new(&link).drain(WORKER_REQUEST).await;
        }
    }

    /// How many of worker `index`'s slots are busy (`None`: it cannot be reached).
    async fn busy(&self, index: u32) -> Option<u32> {
        let link = self.worker_link(index).await?;
        let capacity = Linked::new(&link).capacity(WORKER_REQUEST).await.ok()?;
        Some(capacity.busy)
    }
}

/// Fills the subagent rows' `slots` and `in_use` from the dispatcher.
pub async fn with_slots(list: &mut [ProcessStatus], dispatcher: &Addr<SubagentDispatcher>) {
    let workers = dispatcher.send(Workers).await.unwrap_or_default();
    for p in list.iter_mut().filter(|p| p.role == Role::Subagent) {
        if let Some(w) = workers.iter().find(|w| w.index == p.index) {
            if w.slots > 0 {
                p.slots = Some(w.slots);
            }
            p.in_use = Some(w.in_use);
        }
    }
}
