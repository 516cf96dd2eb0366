//! Readiness: whether this lead can prepare runs now, as `/ready` and the Kubernetes
//! readiness probe ask it (liveness, `/health`, is the process answering at all). Ready
//! means a linked replica of each host a run needs (sandbox-host, mcp-host) and a runs
//! store that takes writes. A run submitted before that does not fail: `prepare` waits
//! for the links of hosts that are starting or restarting (never for one the supervisor
//! gave up on), at most [`HOSTS_START_WAIT`].

use std::time::{Duration, Instant};

use antler_protocol::Role;

use super::hosts::{any_linked, HostLinks};
use antler_engine::{HostReadiness, ToolHosts};

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
pub async fn readiness(links: &dyn HostLinks) -> Readiness {
    let mut waiting_for = Vec::new();
    for role in RUN_HOSTS {
        if !any_linked(links, role).await {
            waiting_for.push(role.as_str().to_owned());
        }
    }
    if crate::runs::store::unwritable().is_some() {
        waiting_for.push(RUNS_STORE.to_owned());
    }
    Readiness { waiting_for }
}

/// Waits while `hosts` has no linked replica of `role` but one is coming, until `until`
/// at the latest; whether one is linked. A host that is down for good is not waited for.
pub async fn wait_linked(hosts: &dyn ToolHosts, role: Role, until: Instant) -> bool {
    loop {
        match hosts.readiness(role).await {
            HostReadiness::Linked => return true,
            HostReadiness::Down => return false,
            HostReadiness::Starting => {}
        }
        let now = Instant::now();
        if now >= until {
            return false;
        }
        tokio::time::sleep(LINK_POLL.min(until - now)).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use antler_protocol::messages::{Reply, Request};
    use futures::future::BoxFuture;

    use super::*;
    use antler_engine::HostError;

    /// Hosts whose readiness follows a script (the last state repeats); they serve no
    /// request.
    struct ScriptedHosts(Mutex<Vec<HostReadiness>>);

    impl ToolHosts for ScriptedHosts {
        fn request(
            &self,
            _role: Role,
            _request: Request,
            _timeout: Duration,
        ) -> BoxFuture<'_, Result<Reply, HostError>> {
            Box::pin(async { Err(HostError::failed("scripted")) })
        }

        fn readiness(&self, _role: Role) -> BoxFuture<'_, HostReadiness> {
            let mut script = self.0.lock().unwrap();
            let next = if script.len() > 1 {
                script.remove(0)
            } else {
                script[0]
            };
            Box::pin(async move { next })
        }
    }

    fn hosts(script: &[HostReadiness]) -> ScriptedHosts {
        ScriptedHosts(Mutex::new(script.to_vec()))
    }

    #[tokio::test]
    async fn a_starting_host_is_waited_for_and_a_down_one_is_not() {
        use HostReadiness::*;
        let later = Instant::now() + Duration::from_secs(5);
        let starting = hosts(&[Starting, Starting, Linked]);
        assert!(wait_linked(&starting, Role::SandboxHost, later).await);

        let gave_up = hosts(&[Starting, Down]);
        let t = Instant::now();
        assert!(!wait_linked(&gave_up, Role::SandboxHost, later).await);
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());

        // One that never comes is waited for until the deadline, no longer.
        let never = hosts(&[Starting]);
        let t = Instant::now();
        let soon = t + Duration::from_millis(200);
        assert!(!wait_linked(&never, Role::McpHost, soon).await);
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
    }

    #[test]
    fn ready_only_with_nothing_to_wait_for() {
        assert!(Readiness::default().is_ready());
        let starting = Readiness {
            waiting_for: vec!["sandbox-host".into()],
        };
        assert!(!starting.is_ready());
    }
}
