//! `McpRegistry`: owns the set of MCP server actors of this host (none are configured
//! until the MCP issue lands its connections) and answers mcp-host requests.

use actix::prelude::*;
use antler_protocol::{
    host::{HostArgs, RoleHandler},
    messages::{Health, McpReply, McpRequest, Reply, Request},
    Call, RemoteError,
};
use futures::future::BoxFuture;

/// The registry actor.
#[derive(Debug, Default)]
pub struct McpRegistry {
    servers: u32,
}

impl Actor for McpRegistry {
    type Context = Context<Self>;
}

/// How many server actors are live.
#[derive(Debug, Message)]
#[rtype(result = "u32")]
pub struct CountServers;

impl actix::Handler<CountServers> for McpRegistry {
    type Result = u32;

    fn handle(&mut self, _: CountServers, _: &mut Context<Self>) -> u32 {
        self.servers
    }
}

/// Routes mcp-host requests to the registry actor.
pub struct Handler {
    registry: Addr<McpRegistry>,
}

impl Handler {
    pub fn start(_: &HostArgs) -> Self {
        Self {
            registry: McpRegistry::default().start(),
        }
    }
}

impl RoleHandler for Handler {
    fn handle(&self, request: Request, _: Call, health: Health) -> BoxFuture<'static, Result<Reply, RemoteError>> {
        let registry = self.registry.clone();
        Box::pin(async move {
            match request {
                Request::Mcp(McpRequest::Health) => {
                    let servers = registry
                        .send(CountServers)
                        .await
                        .map_err(|e| RemoteError::Failed(format!("registry unavailable: {e}")))?;
                    Ok(Reply::Mcp(McpReply::Health { health, servers }))
                }
                other => Err(RemoteError::Unsupported(format!(
                    "mcp-host does not handle {} requests",
                    other.kind()
                ))),
            }
        })
    }
}
