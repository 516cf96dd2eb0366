//! The envelope every frame carries: correlation ids, the request deadline, the run and
//! trace ids that join one run's logs across processes, and the typed body.
//! Invariant: a `Request` with id N is answered by at most one final `Reply` (or
//! `StreamEnd`) with `reply_to = Some(N)`; stream items for N precede it.

use serde::{Deserialize, Serialize};

use crate::messages::{Reply, Request};

/// Correlation id of a request on one connection (assigned by the sender, never reused).
pub type RequestId = u64;

/// Trace context carried by every envelope so logs of one run join up across processes.
/// Trace ids identify, they do not authenticate: they come from a fast thread-local
/// generator seeded by the OS (no system call per request).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    /// The run this message belongs to, if any.
    pub run_id: Option<String>,
    /// A 128-bit trace id, shown as 32 hex characters in logs.
    pub trace_id: u128,
}

impl TraceContext {
    /// A fresh trace for work that does not belong to a run.
    pub fn new_root() -> Self {
        Self {
            run_id: None,
            trace_id: fastrand::u128(..),
        }
    }

    /// A fresh trace for a run.
    pub fn for_run(run_id: impl Into<String>) -> Self {
        Self {
            run_id: Some(run_id.into()),
            trace_id: fastrand::u128(..),
        }
    }

    /// The trace id as 32 lowercase hex characters.
    pub fn trace_hex(&self) -> String {
        format!("{:032x}", self.trace_id)
    }
}

/// One frame's payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Sender-assigned id; for a request, the correlation id its replies refer to.
    pub id: RequestId,
    /// For replies, stream items and cancellations: the request they belong to.
    pub reply_to: Option<RequestId>,
    /// For requests: milliseconds left before the sender gives up. Relative, so clocks
    /// of different machines need not agree.
    pub deadline: Option<u32>,
    /// Run and trace ids.
    pub trace: TraceContext,
    /// What the frame says.
    pub body: Body,
}

/// The kinds of frame after the handshake.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Body {
    /// A request that expects a reply (and possibly stream items before it).
    Request(Request),
    /// One streamed item of the reply to `reply_to`.
    StreamItem(Reply),
    /// The final reply to `reply_to`.
    Reply(Result<Reply, RemoteError>),
    /// The sender no longer wants the reply to `reply_to`; the receiver stops the work.
    Cancel,
    /// Liveness: sent every heartbeat interval in both directions.
    Heartbeat,
    /// The sender is draining: it accepts no new requests on this connection.
    GoingAway { reason: String },
}

/// An error reported by the remote side of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum RemoteError {
    /// The peer has too much work in flight and refused this request.
    #[error("peer overloaded: {0}")]
    Overloaded(String),
    /// The peer does not handle this request kind (for example a host of another role).
    #[error("request not supported by this peer: {0}")]
    Unsupported(String),
    /// The peer is draining and takes no new work.
    #[error("peer is shutting down")]
    ShuttingDown,
    /// The request was understood but failed; the text says why.
    #[error("{0}")]
    Failed(String),
}
