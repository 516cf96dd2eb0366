//! [`WorkerHosts`]: how a worker's tasks reach sandbox-host and mcp-host: reconnecting
//! links dialled by the worker itself (the lead only dispatches and collects), each
//! request with the caller's deadline. A task names the replicas the lead pinned its
//! thread to (its sandbox and pooled sessions live there); the worker dials each such
//! address once and keeps the link in a table every task reads. A task that names none
//! uses the hosts given on the command line.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use antler_engine::{call_link, stream_link, HostError, ToolHosts};
use antler_protocol::{
    handshake::{Identity, Role},
    link::HostLink,
    messages::{Reply, Request},
    transport::Address,
    ConnectionConfig,
};
use dashmap::DashMap;
use futures::future::BoxFuture;

/// The worker's links to the hosts.
pub struct WorkerHosts {
    sandbox: Option<(String, Addr<HostLink>)>,
    mcp: Option<(String, Addr<HostLink>)>,
    /// Links to the replicas tasks were pinned to, by (role, address).
    pinned: DashMap<(Role, String), Addr<HostLink>>,
    identity: Identity,
    config: ConnectionConfig,
}

impl WorkerHosts {
    /// Starts a link to each host given.
    pub fn start(
        sandbox: Option<Address>,
        mcp: Option<Address>,
        identity: Identity,
        config: ConnectionConfig,
    ) -> WorkerHosts {
        let link = |address: Address, role: Role| {
            let name = address.to_string();
            let link = HostLink::new(address, identity.clone(), config.clone())
                .expecting(role)
                .start();
            (name, link)
        };
        WorkerHosts {
            sandbox: sandbox.map(|a| link(a, Role::SandboxHost)),
            mcp: mcp.map(|a| link(a, Role::McpHost)),
            pinned: DashMap::new(),
            identity,
            config,
        }
    }

    /// The link to `address` for `role`, dialled the first time it is named. An address
    /// that does not parse is `None` (the task then uses the default host).
    fn link_to(&self, role: Role, address: &str) -> Option<Addr<HostLink>> {
        let default = match role {
            Role::SandboxHost => self.sandbox.as_ref(),
            _ => self.mcp.as_ref(),
        };
        if let Some((_, link)) = default.filter(|(name, _)| name == address) {
            return Some(link.clone());
        }
        let key = (role, address.to_owned());
        if let Some(link) = self.pinned.get(&key) {
            return Some(link.clone());
        }
        let parsed: Address = address.parse().ok()?;
        let link = self
            .pinned
            .entry(key)
            .or_insert_with(|| {
                HostLink::new(parsed, self.identity.clone(), self.config.clone())
                    .expecting(role)
                    .start()
            })
            .clone();
        Some(link)
    }

    /// The hosts of one task: the replicas the lead pinned it to, else the defaults.
    pub fn for_task(
        self: &Arc<Self>,
        sandbox_host: Option<&str>,
        mcp_host: Option<&str>,
    ) -> TaskHosts {
        TaskHosts {
            sandbox: sandbox_host
                .and_then(|a| self.link_to(Role::SandboxHost, a))
                .or_else(|| self.sandbox.as_ref().map(|(_, l)| l.clone())),
            mcp: mcp_host
                .and_then(|a| self.link_to(Role::McpHost, a))
                .or_else(|| self.mcp.as_ref().map(|(_, l)| l.clone())),
        }
    }
}

/// The links one task uses.
pub struct TaskHosts {
    sandbox: Option<Addr<HostLink>>,
    mcp: Option<Addr<HostLink>>,
}

impl ToolHosts for TaskHosts {
    fn request(
        &self,
        role: Role,
        request: Request,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Reply, HostError>> {
        let link = match role {
            Role::SandboxHost => self.sandbox.clone(),
            Role::McpHost => self.mcp.clone(),
            _ => None,
        };
        Box::pin(async move {
            let Some(link) = link else {
                return Err(HostError::failed(format!(
                    "this worker has no link to {role}"
                )));
            };
            call_link(role, &link, request, timeout).await
        })
    }

    /// A task's MCP calls stream their server's elicitations: the worker relays them to
    /// the parent run as task events, so its user can answer.
    fn relays_items(&self) -> bool {
        self.mcp.is_some()
    }

    fn request_items<'a>(
        &'a self,
        role: Role,
        request: Request,
        timeout: Duration,
        items: &'a (dyn Fn(Reply) + Send + Sync),
    ) -> BoxFuture<'a, Result<Reply, HostError>> {
        let link = match role {
            Role::SandboxHost => self.sandbox.clone(),
            Role::McpHost => self.mcp.clone(),
            _ => None,
        };
        Box::pin(async move {
            let Some(link) = link else {
                return Err(HostError::failed(format!(
                    "this worker has no link to {role}"
                )));
            };
            stream_link(role, &link, request, timeout, items).await
        })
    }
}
