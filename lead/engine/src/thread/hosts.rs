//! How a run reaches the hosts that execute its tools: one request to sandbox-host or
//! mcp-host with a deadline (an MCP call for a run may stream its server's elicitations
//! before its result, when the hosts relay stream items: [`ToolHosts::relays_items`]). [`LeadConnectionHosts`] sends it through the lead of a
//! cluster (`LeadRequest::Forward`), which is how `antler run` reaches them today.

use std::time::Duration;

use std::future::Future;

use antler_protocol::{
    calls::{is_stream_item, LeadCalls},
    envelope::TraceContext,
    messages::{Reply, Request},
    Connection, RemoteError, Requester, Role, RpcError, UnexpectedReply,
};
use futures::future::BoxFuture;

/// A host could not be reached or answered out of protocol; the call becomes an error
/// tool message and the run goes on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HostError {
    pub kind: HostErrorKind,
    pub message: String,
}

/// Whether trying again later can help.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostErrorKind {
    /// The host is away, overloaded or did not answer in time (the lead's own load
    /// included): a new attempt later may work. The gateway answers 503.
    Unavailable,
    /// The host answered, and the answer is an error or out of protocol.
    Failed,
}

impl HostError {
    /// The host answered with an error or out of protocol.
    pub fn failed(message: impl Into<String>) -> HostError {
        HostError {
            kind: HostErrorKind::Failed,
            message: message.into(),
        }
    }

    /// The host could not be had now (away, overloaded, too slow).
    pub fn unavailable(message: impl Into<String>) -> HostError {
        HostError {
            kind: HostErrorKind::Unavailable,
            message: message.into(),
        }
    }

    /// A request that did not get its reply: a remote error is the host's answer
    /// (unavailable only when the host refused for load or is draining); everything else
    /// means the host could not be had.
    pub fn from_rpc(role: Role, error: RpcError) -> HostError {
        match error {
            RpcError::Remote(remote @ (RemoteError::Overloaded(_) | RemoteError::ShuttingDown)) => {
                HostError::unavailable(format!("{role:?} unavailable: {remote}"))
            }
            RpcError::Remote(remote) => HostError::failed(remote.to_string()),
            RpcError::TooLarge { .. } => HostError::failed(format!("{role:?}: {error}")),
            RpcError::Unexpected(unexpected) => unexpected.into(),
            other => HostError::unavailable(format!("{role:?} unreachable: {other}")),
        }
    }

    /// Whether a new attempt later may work.
    pub fn is_unavailable(&self) -> bool {
        self.kind == HostErrorKind::Unavailable
    }
}

/// The host answered out of protocol.
impl From<UnexpectedReply> for HostError {
    fn from(unexpected: UnexpectedReply) -> HostError {
        HostError::failed(unexpected.to_string())
    }
}

/// One request through a link to a host process, with its deadline: a link that is gone
/// or a host that cannot be had is unavailable; the host's own answer is its error. The
/// request is made on the link's connection by this future, so dropping it (a cancelled
/// run or call) cancels the request on the host (the connection sends its cancel).
pub async fn call_link(
    role: Role,
    link: &actix::Addr<antler_protocol::link::HostLink>,
    request: Request,
    timeout: Duration,
) -> Result<Reply, HostError> {
    let connection = link
        .send(antler_protocol::link::CurrentConnection)
        .await
        .map_err(|e| HostError::unavailable(format!("{role:?} unreachable: {e}")))?;
    if let Some(connection) = connection {
        return connection
            .request(request, TraceContext::current(), timeout)
            .await
            .map_err(|e| HostError::from_rpc(role, e));
    }
    // Not connected: the link says why.
    link.send(antler_protocol::link::Call {
        request,
        trace: TraceContext::current(),
        timeout,
    })
    .await
    .map_err(|e| HostError::unavailable(format!("{role:?} unreachable: {e}")))?
    .map_err(|e| HostError::from_rpc(role, e))
}

/// One request through a link whose reply may stream: each item goes to `items`
/// (an MCP call's elicitations, an ACP agent's activity), the final reply is returned;
/// all within `timeout`.
pub async fn stream_link(
    role: Role,
    link: &actix::Addr<antler_protocol::link::HostLink>,
    request: Request,
    timeout: Duration,
    items: &(dyn Fn(Reply) + Send + Sync),
) -> Result<Reply, HostError> {
    let connection = link
        .send(antler_protocol::link::CurrentConnection)
        .await
        .map_err(|e| HostError::unavailable(format!("{role:?} unreachable: {e}")))?
        .ok_or_else(|| HostError::unavailable(format!("{role:?} unreachable: not connected")))?;
    let mut stream = connection
        .request_stream(request, TraceContext::current(), timeout)
        .await
        .map_err(|e| HostError::from_rpc(role, e))?;
    while let Some(reply) = stream.next().await {
        match reply.map_err(|e| HostError::from_rpc(role, e))? {
            item if is_stream_item(&item) => items(item),
            last => return Ok(last),
        }
    }
    Err(HostError::unavailable(format!(
        "{role:?} unreachable: the reply's stream ended without a result"
    )))
}

/// Whether a host can be reached now ([`ToolHosts::readiness`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostReadiness {
    /// A replica is linked: a request finds a connection.
    Linked,
    /// None is linked yet, and one is starting or restarting: worth waiting for.
    Starting,
    /// None is linked and none is coming (it failed for good, or was stopped).
    Down,
}

/// Sends one request to a host and waits for its reply, at most `timeout`.
pub trait ToolHosts: Send + Sync {
    fn request(
        &self,
        role: Role,
        request: Request,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Reply, HostError>>;

    /// Whether [`ToolHosts::request_items`] hands over the reply's stream items (without
    /// that, nobody would see a call's elicitation, so a call does not ask for them).
    fn relays_items(&self) -> bool {
        false
    }

    /// Like [`ToolHosts::request`], handing each stream item of the reply to `items`
    /// before the final reply. By default there are none: the request is unary.
    fn request_items<'a>(
        &'a self,
        role: Role,
        request: Request,
        timeout: Duration,
        items: &'a (dyn Fn(Reply) + Send + Sync),
    ) -> BoxFuture<'a, Result<Reply, HostError>> {
        let _ = items;
        self.request(role, request, timeout)
    }

    /// Whether a request to `role` would find a connection now, and if not whether one
    /// is coming. By default [`HostReadiness::Linked`]: the request itself says otherwise.
    fn readiness(&self, _role: Role) -> BoxFuture<'_, HostReadiness> {
        Box::pin(async { HostReadiness::Linked })
    }

    /// The address of the replica of `role` that `key` (a sandbox id) is pinned to, so a
    /// subagent task of the thread uses the same one (`None`: whichever the worker has).
    fn pinned_address(&self, _role: Role, _key: &str) -> BoxFuture<'_, Option<String>> {
        Box::pin(async { None })
    }
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
            self.connection
                .forward(role, 0, request, timeout, FORWARD_MARGIN)
                .await
                .map_err(|e| HostError::from_rpc(role, e))
        })
    }
}

/// The hosts as a [`Requester`]: a request goes to the host of its kind (sandbox-host
/// or mcp-host), so the typed calls of `antler_protocol::calls` work over any hosts.
impl Requester for dyn ToolHosts + '_ {
    type Error = HostError;

    fn send(
        &self,
        request: Request,
        timeout: Duration,
    ) -> impl Future<Output = Result<Reply, HostError>> + Send {
        match host_of(&request) {
            Ok(role) => self.request(role, request, timeout),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    fn send_items<'a>(
        &'a self,
        request: Request,
        timeout: Duration,
        items: &'a (dyn Fn(Reply) + Send + Sync),
    ) -> impl Future<Output = Result<Reply, HostError>> + Send + 'a {
        match host_of(&request) {
            Ok(role) => self.request_items(role, request, timeout, items),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}

/// One host of the [`ToolHosts`], named by its role, as a [`Requester`]: the calls every
/// peer answers (ping, health), which the hosts' own `Requester` cannot route by request.
pub struct HostOf<'a> {
    pub hosts: &'a dyn ToolHosts,
    pub role: Role,
}

impl Requester for HostOf<'_> {
    type Error = HostError;

    fn send(
        &self,
        request: Request,
        timeout: Duration,
    ) -> impl Future<Output = Result<Reply, HostError>> + Send {
        self.hosts.request(self.role, request, timeout)
    }
}

/// One replica's link as a [`Requester`], its failures the hosts' [`HostError`]s
/// ([`call_link`]): the typed calls to one replica of several.
pub struct LinkTo<'a> {
    pub role: Role,
    pub link: &'a actix::Addr<antler_protocol::link::HostLink>,
}

impl Requester for LinkTo<'_> {
    type Error = HostError;

    fn send(
        &self,
        request: Request,
        timeout: Duration,
    ) -> impl Future<Output = Result<Reply, HostError>> + Send {
        call_link(self.role, self.link, request, timeout)
    }
}

/// The host that answers `request`: tool hosts answer sandbox and MCP requests only.
fn host_of(request: &Request) -> Result<Role, HostError> {
    match request {
        Request::Sandbox(_) => Ok(Role::SandboxHost),
        Request::Mcp(_) => Ok(Role::McpHost),
        other => Err(HostError::failed(format!(
            "no tool host answers {}",
            antler_protocol::calls::request_kind(other)
        ))),
    }
}
