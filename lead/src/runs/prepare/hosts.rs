//! What a run being prepared waits for on its hosts: their links (at most
//! [`HOSTS_START_WAIT`] for one starting), and sandbox-host's base directory of thread
//! directories (asked once, then kept).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use antler_engine::HostOf;
use antler_protocol::calls::{ControlCalls, SandboxCalls};
use antler_protocol::Role;

use super::{PrepareError, RunEnv, SETUP_TIMEOUT};
use crate::runs::readiness::{wait_linked, HOSTS_START_WAIT};

impl RunEnv {
    /// Waits (at most `within`) until sandbox-host and mcp-host answer a ping.
    pub async fn wait_for_hosts(&self, within: Duration) {
        let until = std::time::Instant::now() + within;
        for role in [Role::SandboxHost, Role::McpHost] {
            let host = HostOf {
                hosts: self.hosts.as_ref(),
                role,
            };
            while std::time::Instant::now() < until {
                if host.ping(Vec::new(), Duration::from_secs(1)).await.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Waits (at most [`HOSTS_START_WAIT`]) for a linked sandbox-host, which every run
    /// needs at once: a run submitted while the cluster is still starting waits for it
    /// instead of failing with "unreachable". Returns at once when it is linked; when it
    /// does not come, the run's first request to it says why.
    pub(super) async fn wait_for_sandbox_host(&self) {
        let until = Instant::now() + HOSTS_START_WAIT;
        if !wait_linked(self.hosts.as_ref(), Role::SandboxHost, until).await {
            tracing::warn!(
                "sandbox-host is not linked (it failed, or is not back within {}s); the run cannot be prepared",
                HOSTS_START_WAIT.as_secs()
            );
        }
    }

    /// Where sandbox-host keeps thread directories (asked once, then remembered).
    pub async fn base_dir(&self) -> Result<PathBuf, PrepareError> {
        if let Some(dir) = self
            .base_dir
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
        {
            return Ok(dir);
        }
        let status = self.hosts.sandbox_status(SETUP_TIMEOUT).await?;
        let dir = PathBuf::from(status.base_dir);
        *self
            .base_dir
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(dir.clone());
        Ok(dir)
    }
}
