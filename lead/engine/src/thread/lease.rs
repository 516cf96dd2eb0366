//! A run's lease on its sandbox. Leases are owned by (this lead's incarnation, the run):
//! the incarnation is an id made once per lead process, so sandbox-host can tell a lead
//! that restarted from one that is merely slow. While the run holds its sandbox the
//! lease is renewed every third of its TTL ([`keep_renewed`], beside the run's steps);
//! any sandbox call renews it too, and the run releases it when its drive ends.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use antler_protocol::{calls::SandboxCalls, messages::LeaseOwner};
use tokio::sync::Notify;

use super::hosts::ToolHosts;

/// The lease TTL assumed until sandbox-host says (its default).
const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// This lead process's incarnation id: its start time (zero-padded milliseconds since the
/// epoch, so a later incarnation sorts after an earlier one) and a random part, since it
/// names one process's life.
pub fn incarnation() -> &'static str {
    static INCARNATION: OnceLock<String> = OnceLock::new();
    INCARNATION.get_or_init(|| {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        format!("{started:020}-{}", uuid::Uuid::new_v4().simple())
    })
}

/// The run's hold on its sandbox in this incarnation.
pub struct SandboxLease {
    owner: LeaseOwner,
    held: AtomicBool,
    ttl_ms: AtomicU64,
    taken: Notify,
}

impl SandboxLease {
    pub fn new(run_id: &str) -> SandboxLease {
        SandboxLease {
            owner: LeaseOwner {
                incarnation: incarnation().to_owned(),
                run_id: run_id.to_owned(),
            },
            held: AtomicBool::new(false),
            ttl_ms: AtomicU64::new(DEFAULT_TTL.as_millis() as u64),
            taken: Notify::new(),
        }
    }

    pub fn owner(&self) -> &LeaseOwner {
        &self.owner
    }

    /// The host granted (or renewed through a call) the lease; `ttl` when it said.
    pub fn taken(&self, ttl: Option<Duration>) {
        if let Some(ttl) = ttl.filter(|t| !t.is_zero()) {
            self.ttl_ms.store(ttl.as_millis() as u64, Ordering::Relaxed);
        }
        if !self.held.swap(true, Ordering::SeqCst) {
            self.taken.notify_one();
        }
    }

    /// The run released its sandbox.
    pub fn released(&self) {
        self.held.store(false, Ordering::SeqCst);
    }

    pub fn is_held(&self) -> bool {
        self.held.load(Ordering::SeqCst)
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms.load(Ordering::Relaxed).max(300))
    }
}

/// Renews the lease every third of its TTL while it is held; never ends (it is dropped
/// with the run's drive). Without a timer runtime (a run driven by a plain executor, as
/// in tests) it only waits.
pub async fn keep_renewed(hosts: Arc<dyn ToolHosts>, lease: Arc<SandboxLease>) {
    loop {
        if !lease.is_held() {
            lease.taken.notified().await;
            continue;
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return futures::future::pending().await;
        }
        let every = lease.ttl() / 3;
        tokio::time::sleep(every).await;
        if !lease.is_held() {
            continue;
        }
        match hosts.renew_lease(lease.owner().clone(), every).await {
            Ok(_) => {}
            other => {
                tracing::debug!(run = %lease.owner().run_id, "lease renewal failed: {other:?}")
            }
        }
    }
}
