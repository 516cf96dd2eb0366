//! Readiness: whether this lead can prepare runs now, as `/ready` and the Kubernetes
//! readiness probe ask it (liveness, `/health`, is the process answering at all). Ready
//! means a linked replica of each host a run needs (sandbox-host, mcp-host) and a runs
//! store that takes writes. A run submitted before that does not fail: `prepare` waits
//! for the hosts' links, at most [`HOSTS_START_WAIT`].

use std::time::{Duration, Instant};

use actix::Addr;
use antler_protocol::link::Snapshot;
use antler_protocol::Role;

use super::hosts::replicas;
use crate::run::hosts::ToolHosts;
use crate::supervisor::Supervisor;

/// The hosts every run needs linked.
pub const RUN_HOSTS: [Role; 2] = [Role::SandboxHost, Role::McpHost];
/// The longest a run being prepared waits for hosts that are still starting (the set-up
/// deadline of its first host request; a host that is not linked by then fails the run,
/// or for mcp-host leaves it without MCP tools, with a warning).
pub const HOSTS_START_WAIT: Duration = Duration::from_secs(30);
/// How often the wait looks at the links again.
const LINK_POLL: Duration = Duration::from_millis(20);
/// What `/ready` lists for a runs store that cannot be written.
pub const RUNS_STORE: &str = "the runs store";

/// What the lead waits for before it can prepare runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// What is not ready yet, in a fixed order: `sandbox-host`, `mcp-host` (no linked
    /// replica), [`RUNS_STORE`] (its database cannot be written).
    pub waiting_for: Vec<String>,
}

impl Readiness {
    /// Whether runs can be prepared now (`/ready` answers 200, else 503).
    pub fn is_ready(&self) -> bool {
        self.waiting_for.is_empty()
    }
}

/// Whether this lead is ready for runs: every host of [`RUN_HOSTS`] has a linked replica
/// among the supervisor's children, and the runs store takes writes.
pub async fn readiness(supervisor: &Addr<Supervisor>) -> Readiness {
    let mut waiting_for = Vec::new();
    for role in RUN_HOSTS {
        if !any_linked(supervisor, role).await {
            waiting_for.push(role.as_str().to_owned());
        }
    }
    if crate::checkpoint::unwritable().is_some() {
        waiting_for.push(RUNS_STORE.to_owned());
    }
    Readiness { waiting_for }
}

/// Whether a replica of `role` has a live connection now.
pub async fn any_linked(supervisor: &Addr<Supervisor>, role: Role) -> bool {
    let Ok(replicas) = replicas(supervisor, role).await else {
        return false;
    };
    for (_, link) in replicas {
        if link.send(Snapshot).await.is_ok_and(|s| s.connected) {
            return true;
        }
    }
    false
}

/// Waits until `hosts` has a linked replica of `role`, until `until` at the latest;
/// whether it has one.
pub async fn wait_linked(hosts: &dyn ToolHosts, role: Role, until: Instant) -> bool {
    loop {
        if hosts.linked(role).await {
            return true;
        }
        let now = Instant::now();
        if now >= until {
            return false;
        }
        tokio::time::sleep(LINK_POLL.min(until - now)).await;
    }
}
