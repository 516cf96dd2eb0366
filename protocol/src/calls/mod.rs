//! Typed calls across the wire: one method per request, returning what the request's
//! reply means, as rmcp's `Peer` has `call_tool(…) -> Result<CallToolResult, ServiceError>`.
//! A [`Requester`] sends one [`Request`] with its mandatory deadline and hands back the
//! envelope's [`Reply`]; the extension traits of each peer ([`SandboxCalls`],
//! [`McpCalls`], [`WorkerCalls`], [`ControlCalls`], [`LeadCalls`]) wrap and unwrap the
//! envelope, and a reply that does not answer its request becomes an [`UnexpectedReply`],
//! written here once. Call sites never match an envelope.

mod control;
mod lead;
mod mcp;
mod sandbox;
mod worker;

use std::future::Future;
use std::time::Duration;

pub use control::ControlCalls;
pub use lead::{watch_run, Forwarder, LeadCalls, RunCancelled, RunWatchItem};
pub use mcp::{watch_credentials, watch_tools, Elicitation, McpCalls, ToolsChanged};
pub use sandbox::SandboxCalls;
pub use worker::{attach_task, run_task, TaskItem, WorkerCalls, WorkerCapacity};

pub use crate::connection::UnexpectedReply;
use crate::connection::{Connection, ReplyStream, RpcError};
use crate::envelope::TraceContext;
use crate::messages::{McpReply, Reply, Request, SandboxReply};

impl UnexpectedReply {
    /// `reply` came back to `request`.
    pub fn new(request: &Request, reply: &Reply) -> UnexpectedReply {
        UnexpectedReply {
            peer: peer_of(request),
            request: request_kind(request),
            reply: reply_kind(reply),
        }
    }
}

/// Sends one request and waits for its reply, at most `timeout`: the deadline is part of
/// every call (a request cannot be sent without one). Dropping the returned future
/// cancels the request wherever the implementation can (a [`Connection`] tells the peer).
pub trait Requester: Sync {
    /// Why a call failed: the transport's error, which an [`UnexpectedReply`] becomes.
    type Error: From<UnexpectedReply> + Send;

    /// Sends `request` and returns its final reply.
    fn send(
        &self,
        request: Request,
        timeout: Duration,
    ) -> impl Future<Output = Result<Reply, Self::Error>> + Send;

    /// Like [`Requester::send`], handing each stream item of the reply to `items` before
    /// the final reply (an MCP call's elicitations, an ACP agent's activity). By default
    /// the request is unary and there are none.
    fn send_items<'a>(
        &'a self,
        request: Request,
        timeout: Duration,
        items: &'a (dyn Fn(Reply) + Send + Sync),
    ) -> impl Future<Output = Result<Reply, Self::Error>> + Send + 'a {
        let _ = items;
        self.send(request, timeout)
    }
}

/// A connection sends each request under a new root trace, as every caller did.
impl Requester for Connection {
    type Error = RpcError;

    fn send(
        &self,
        request: Request,
        timeout: Duration,
    ) -> impl Future<Output = Result<Reply, RpcError>> + Send {
        self.request(request, TraceContext::current(), timeout)
    }
}

/// A host reached through its [`HostLink`](crate::link::HostLink), each request under
/// `trace`: the typed calls over the lead's links.
pub struct Linked<'a> {
    pub link: &'a actix::Addr<crate::link::HostLink>,
    pub trace: TraceContext,
}

impl<'a> Linked<'a> {
    /// `link`, each request under a new root trace.
    pub fn new(link: &'a actix::Addr<crate::link::HostLink>) -> Linked<'a> {
        Linked {
            link,
            trace: TraceContext::current(),
        }
    }
}

/// Why a request through a link got no reply.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The link actor is gone (its mailbox closed).
    #[error("{0}")]
    Gone(actix::MailboxError),
    /// The request failed on the link's connection, or its reply was out of protocol.
    #[error(transparent)]
    Rpc(#[from] RpcError),
}

impl From<UnexpectedReply> for LinkError {
    fn from(unexpected: UnexpectedReply) -> LinkError {
        LinkError::Rpc(RpcError::Unexpected(unexpected))
    }
}

impl Requester for Linked<'_> {
    type Error = LinkError;

    fn send(
        &self,
        request: Request,
        timeout: Duration,
    ) -> impl Future<Output = Result<Reply, LinkError>> + Send {
        let sent = self.link.send(crate::link::Call {
            request,
            trace: self.trace.clone(),
            timeout,
        });
        async move { Ok(sent.await.map_err(LinkError::Gone)??) }
    }
}

/// Sends `request` and turns its reply into `T` with `answer`, which gives the kind of a
/// reply that does not answer the request: the one place an unexpected reply is made.
pub(crate) async fn ask<R, T>(
    requester: &R,
    request: Request,
    timeout: Duration,
    answer: impl FnOnce(Reply) -> Result<T, &'static str>,
) -> Result<T, R::Error>
where
    R: Requester + ?Sized,
{
    let kind = Probe::of(&request);
    let reply = requester.send(request, timeout).await?;
    answer(reply).map_err(|reply| kind.unexpected(reply).into())
}

/// Like [`ask`], with the reply's stream items handed to `items`.
pub(crate) async fn ask_items<R, T>(
    requester: &R,
    request: Request,
    timeout: Duration,
    items: &(dyn Fn(Reply) + Send + Sync),
    answer: impl FnOnce(Reply) -> Result<T, &'static str>,
) -> Result<T, R::Error>
where
    R: Requester + ?Sized,
{
    let kind = Probe::of(&request);
    let reply = requester.send_items(request, timeout, items).await?;
    answer(reply).map_err(|reply| kind.unexpected(reply).into())
}

/// The typed items of a streamed reply, in order (the last is the final reply). Dropping
/// it cancels the request at the peer.
pub struct Watch<T> {
    stream: ReplyStream,
    probe: Probe,
    decode: fn(Reply) -> Result<T, &'static str>,
}

impl<T> Watch<T> {
    /// Sends `request` on `connection`, the whole stream bounded by `timeout`; `decode`
    /// turns each item into `T` or gives the kind of one that does not belong.
    pub(crate) async fn start(
        connection: &Connection,
        request: Request,
        timeout: Duration,
        decode: fn(Reply) -> Result<T, &'static str>,
    ) -> Result<Watch<T>, RpcError> {
        let probe = Probe::of(&request);
        let stream = connection
            .request_stream(request, TraceContext::current(), timeout)
            .await?;
        Ok(Watch {
            stream,
            probe,
            decode,
        })
    }

    /// The next item, `None` after the final reply or an error.
    pub async fn next(&mut self) -> Option<Result<T, RpcError>> {
        let item = self.stream.next().await?;
        Some(item.and_then(|reply| {
            (self.decode)(reply).map_err(|kind| self.probe.unexpected(kind).into())
        }))
    }
}

/// What an [`UnexpectedReply`] says of the request, kept while the request travels.
struct Probe {
    peer: &'static str,
    request: &'static str,
}

impl Probe {
    fn of(request: &Request) -> Probe {
        Probe {
            peer: peer_of(request),
            request: request_kind(request),
        }
    }

    fn unexpected(&self, reply: &'static str) -> UnexpectedReply {
        UnexpectedReply {
            peer: self.peer,
            request: self.request,
            reply,
        }
    }
}

/// Whether `reply` is a stream item that comes before a request's final reply (an MCP
/// call's elicitation, an ACP agent's activity), not the final reply itself.
pub fn is_stream_item(reply: &Reply) -> bool {
    matches!(
        reply,
        Reply::Mcp(McpReply::Elicitation { .. }) | Reply::Sandbox(SandboxReply::AcpActivity { .. })
    )
}

/// Who answers `request`, as error texts name it.
fn peer_of(request: &Request) -> &'static str {
    match request {
        Request::Control(_) => "the peer",
        Request::Lead(_) => "the lead",
        Request::Mcp(_) => "mcp-host",
        Request::Sandbox(_) => "sandbox-host",
        Request::Worker(_) => "a worker",
    }
}

/// The kind of a request, `Peer::Variant`, without its payload (each peer's enum derives
/// its variants' names, so a new variant is named with no table to keep in step).
pub fn request_kind(request: &Request) -> &'static str {
    match request {
        Request::Control(r) => r.into(),
        Request::Lead(r) => r.into(),
        Request::Mcp(r) => r.into(),
        Request::Sandbox(r) => r.into(),
        Request::Worker(r) => r.into(),
    }
}

/// The kind of a reply, `Peer::Variant`, without its payload.
pub fn reply_kind(reply: &Reply) -> &'static str {
    match reply {
        Reply::Control(r) => r.into(),
        Reply::Lead(r) => r.into(),
        Reply::Mcp(r) => r.into(),
        Reply::Sandbox(r) => r.into(),
        Reply::Worker(r) => r.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{McpCallResult, SandboxRequest};

    #[test]
    fn kinds_are_peer_and_variant() {
        use crate::messages::{ControlReply, LeadRequest, McpRequest, WorkerReply};
        assert_eq!(
            request_kind(&Request::Mcp(McpRequest::WatchTools)),
            "Mcp::WatchTools"
        );
        assert_eq!(
            request_kind(&Request::Lead(LeadRequest::GetRun { run_id: "r".into() })),
            "Lead::GetRun"
        );
        assert_eq!(
            request_kind(&Request::Sandbox(SandboxRequest::Status)),
            "Sandbox::Status"
        );
        assert_eq!(
            reply_kind(&Reply::Control(ControlReply::Pong {
                payload: Vec::new()
            })),
            "Control::Pong"
        );
        assert_eq!(
            reply_kind(&Reply::Worker(WorkerReply::UnknownTask)),
            "Worker::UnknownTask"
        );
    }

    #[test]
    fn an_unexpected_reply_names_kinds_never_payloads() {
        let request = Request::Sandbox(SandboxRequest::Status);
        let reply = Reply::Mcp(McpReply::CallResult(McpCallResult {
            content: Vec::new(),
            structured: Some(crate::json::Json::Object(vec![(
                "token".into(),
                crate::json::Json::String("hunter2".into()),
            )])),
            is_error: false,
        }));
        let text = UnexpectedReply::new(&request, &reply).to_string();
        assert_eq!(
            text,
            "unexpected reply from sandbox-host: Mcp::CallResult to Sandbox::Status"
        );
        assert!(!text.contains("hunter2"));
    }
}
