//! How a run reaches the hosts that execute its tools: one request to sandbox-host or
//! mcp-host with a deadline. [`LeadConnectionHosts`] sends it through the lead of a
//! cluster (`LeadRequest::Forward`), which is how `antler run` reaches them today.

use std::time::Duration;

use antler_protocol::{
    envelope::TraceContext,
    messages::{LeadReply, LeadRequest, Reply, Request},
    Connection, Role,
};
use futures::future::BoxFuture;

/// A host could not be reached or answered out of protocol; the call becomes an error
/// tool message and the run goes on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HostError(pub String);

/// Sends one request to a host and waits for its reply, at most `timeout`.
pub trait ToolHosts: Send + Sync {
    fn request(
        &self,
        role: Role,
        request: Request,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Reply, HostError>>;
}

/// Hosts reached through a connection to the lead.
#[derive(Clone)]
pub struct LeadConnectionHosts {
    connection: Connection,
}

impl LeadConnectionHosts {
    pub fn new(connection: Connection) -> LeadConnectionHosts {
        LeadConnectionHosts { connection }
    }
}

/// Extra time the lead's own request gets over the host's deadline.
const FORWARD_MARGIN: Duration = Duration::from_secs(1);

impl ToolHosts for LeadConnectionHosts {
    fn request(
        &self,
        role: Role,
        request: Request,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Reply, HostError>> {
        Box::pin(async move {
            let forward = Request::Lead(LeadRequest::Forward {
                role,
                index: 0,
                request: Box::new(request),
                timeout_ms: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
            });
            let reply = self
                .connection
                .request(forward, TraceContext::new_root(), timeout + FORWARD_MARGIN)
                .await
                .map_err(|e| HostError(format!("{role:?} unreachable: {e}")))?;
            match reply {
                Reply::Lead(LeadReply::Forwarded(reply)) => Ok(*reply),
                other => Err(HostError(format!(
                    "unexpected reply from the lead: {other:?}"
                ))),
            }
        })
    }
}
