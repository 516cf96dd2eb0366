//! [`WorkerHosts`]: how a worker's tasks reach sandbox-host and mcp-host: one
//! reconnecting link per host, dialled by the worker itself (the lead only dispatches
//! and collects), each request with the caller's deadline.

use std::time::Duration;

use actix::prelude::*;
use antler_engine::run::hosts::{HostError, ToolHosts};
use antler_protocol::{
    envelope::TraceContext,
    handshake::{Identity, Role},
    link::{Call, HostLink},
    messages::{Reply, Request},
    transport::Address,
    ConnectionConfig,
};
use futures::future::BoxFuture;

/// The worker's links to the hosts.
pub struct WorkerHosts {
    sandbox: Option<Addr<HostLink>>,
    mcp: Option<Addr<HostLink>>,
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
            HostLink::new(address, identity.clone(), config.clone())
                .expecting(role)
                .start()
        };
        WorkerHosts {
            sandbox: sandbox.map(|a| link(a, Role::SandboxHost)),
            mcp: mcp.map(|a| link(a, Role::McpHost)),
        }
    }
}

impl ToolHosts for WorkerHosts {
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
            link.send(Call {
                request,
                trace: TraceContext::new_root(),
                timeout,
            })
            .await
            .map_err(|e| HostError::unavailable(format!("{role:?} unreachable: {e}")))?
            .map_err(|e| HostError::from_rpc(role, e))
        })
    }
}
