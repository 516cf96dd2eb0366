//! Direct calls: a session's plain `tools/call` handed by the gateway to the session's
//! handler without rmcp's session worker (its request-wise channel, serve loop, handler
//! task and event stream: round trips within the worker's thread and an SSE framing each
//! way, most of what `/mcp` added to a call). Only a call nothing can interrupt to talk to
//! its client goes this way: no progress token and no `_meta` but the thread's, a client
//! that declared no elicitation (no approval or downstream question is put to it
//! mid-call: those are denials or wait for the run's user, as over rmcp), the version it
//! negotiated in its `MCP-Protocol-Version` header, and no other `Mcp-` header. Anything
//! else goes through rmcp as before. The answer is the JSON-RPC message rmcp would have
//! written for it; what the call tells the client after (tools or resources changed) goes
//! on the session's stream as rmcp's notifications do; a `notifications/cancelled` naming
//! it stops it ([`AntlerTools`]'s `on_cancelled`). [`DirectCalls`] finds a session's
//! handler by its id: each registers once it knows its id (its client's `initialized`,
//! or its first request) and leaves when it is dropped.

use std::sync::{Arc, Weak};

use dashmap::DashMap;
use rmcp::model::{
    CallToolRequestMethod, CallToolRequestParams, JsonRpcVersion2_0, ProtocolVersion, RequestId,
    RequestMetaObject, ServerJsonRpcMessage, ServerResult,
};
use rmcp::{Peer, RoleServer};
use serde::Deserialize;

use super::handler::{AntlerTools, THREAD_META_KEY};

/// The handlers of the gateway's open MCP sessions, by session id (read by every request
/// the gateway's worker serves, written when a session starts and ends).
#[derive(Default)]
pub struct DirectCalls {
    sessions: DashMap<String, Weak<AntlerTools>>,
}

impl DirectCalls {
    /// The handler of `session`, while it lives.
    pub fn handler(&self, session: &str) -> Option<Arc<AntlerTools>> {
        self.sessions.get(session).and_then(|h| h.upgrade())
    }

    pub(super) fn register(&self, session: &str, handler: Weak<AntlerTools>) {
        self.sessions.insert(session.to_owned(), handler);
    }

    pub(super) fn forget(&self, session: &str) {
        self.sessions.remove(session);
    }
}

/// What of the HTTP request decides whether a call may go direct.
pub struct Headers<'a> {
    /// `MCP-Protocol-Version`.
    pub protocol: Option<&'a str>,
    /// `Accept` names both JSON and event streams, and the body is declared JSON (what
    /// rmcp asks of every post).
    pub accepts: bool,
    /// An `Mcp-` header other than the session's id and its protocol version.
    pub other_mcp: bool,
}

/// A direct call's answer.
pub enum Answer {
    /// The JSON-RPC answer's bytes.
    Json(Vec<u8>),
    /// The client cancelled it: no JSON-RPC answer is sent (as rmcp sends none).
    Cancelled,
    /// The answer could not be written as JSON.
    Unwritable(String),
}

/// A posted `tools/call`: the JSON-RPC request rmcp would parse it as, for this method
/// alone (a `method` other than `tools/call` fails to parse).
#[derive(Deserialize)]
struct PostedCall {
    #[allow(dead_code)]
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    #[allow(dead_code)]
    method: CallToolRequestMethod,
    params: CallToolRequestParams,
}

/// A call that may go direct, parsed: [`Direct::call`] answers it.
pub struct Direct {
    handler: Arc<AntlerTools>,
    peer: Peer<RoleServer>,
    id: RequestId,
    params: CallToolRequestParams,
    meta: RequestMetaObject,
}

/// The call `body` (a posted JSON-RPC message) on `handler`'s session, when it may go
/// direct. `None`: it goes through rmcp.
pub fn direct(handler: Arc<AntlerTools>, body: &[u8], headers: Headers<'_>) -> Option<Direct> {
    if !headers.accepts || headers.other_mcp {
        return None;
    }
    let peer = handler.peer()?;
    let client = peer.peer_info()?;
    // A client that can be asked something mid-call gets its call on rmcp's stream.
    if client.capabilities.elicitation.is_some() {
        return None;
    }
    let negotiated = &client.protocol_version;
    let supported = ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25);
    if headers.protocol != Some(negotiated.as_str()) || !supported.contains(negotiated) {
        return None;
    }
    // Cheap before parsing: only a `tools/call` is answered here.
    if !contains(body, b"\"tools/call\"") {
        return None;
    }
    // Read as a `tools/call` alone (the envelope and the call's params), not as rmcp's
    // enum of every client message: a fifth of the time. Anything else fails here.
    let PostedCall {
        jsonrpc: _,
        id,
        method: _,
        mut params,
    } = serde_json::from_slice(body).ok()?;
    // The params' `_meta` is the request's, as rmcp's parse moves it.
    let meta = params.meta.take().unwrap_or_default();
    if !meta.keys().all(|k| k == THREAD_META_KEY)
        || params.input_responses.is_some()
        || params.request_state.is_some()
    {
        return None;
    }
    Some(Direct {
        handler,
        peer,
        id,
        params,
        meta,
    })
}

impl Direct {
    /// Answers the call; `parts` is the request as the handler reads it (its principal in
    /// its extensions).
    pub async fn call(self, parts: http::request::Parts) -> Answer {
        let Direct {
            handler,
            peer,
            id,
            params,
            meta,
        } = self;
        let (answer, cancelled) = handler
            .call_direct(id.clone(), params, meta, peer, parts)
            .await;
        if cancelled {
            return Answer::Cancelled;
        }
        let answer = match answer {
            Ok(response) => ServerJsonRpcMessage::response(ServerResult::from(response), id),
            Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
        };
        match serde_json::to_vec(&answer) {
            Ok(json) => Answer::Json(json),
            // Not expected of rmcp's own types; said as rmcp would say a failed answer.
            Err(e) => Answer::Unwritable(e.to_string()),
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
