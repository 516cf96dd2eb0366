//! The envelope every frame carries: correlation ids, the request deadline, the run and
//! trace ids that join one run's logs across processes, the run's lease epoch (its fence,
//! `crate::fencing`), and the typed body.
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
    #[serde(default, deserialize_with = "run_id_from_str")]
    pub run_id: Option<String>,
    /// A 128-bit trace id, shown as 32 hex characters in logs: the W3C trace id of the
    /// run's trace when traces are exported (`crate::telemetry`).
    pub trace_id: u128,
    /// The W3C parent span id: the sender's span this request is part of (0: none, the
    /// receiver's span is a root). Set only while traces are exported.
    #[serde(default)]
    pub parent_span_id: u64,
    /// The lease epoch of the lead that sends for `run_id` (issue 38, docs/ha.md): hosts
    /// and workers refuse a run's request whose epoch is below the highest they have seen
    /// for it ([`RemoteError::Fenced`]). `None`: no lease (a single lead), accepted as ever.
    #[serde(default)]
    pub epoch: Option<u64>,
}

impl TraceContext {
    /// A fresh trace for work that does not belong to a run.
    pub fn new_root() -> Self {
        Self {
            run_id: None,
            trace_id: fastrand::u128(..),
            parent_span_id: 0,
            epoch: None,
        }
    }

    /// A fresh trace for a run.
    pub fn for_run(run_id: impl Into<String>) -> Self {
        Self {
            run_id: Some(run_id.into()),
            trace_id: fastrand::u128(..),
            parent_span_id: 0,
            epoch: None,
        }
    }

    /// This trace fenced for `run_id` at `epoch`: what a lead holding the run's lease
    /// sends under. With `epoch` `None` the trace is returned unchanged.
    pub fn fenced(mut self, run_id: &str, epoch: Option<u64>) -> Self {
        if let Some(epoch) = epoch {
            if self.run_id.as_deref() != Some(run_id) {
                self.run_id = Some(run_id.to_owned());
            }
            self.epoch = Some(epoch);
        }
        self
    }

    /// The trace a request sent now belongs to: the current one
    /// ([`crate::telemetry::within`]) when the caller runs in one, else a fresh root.
    pub fn current() -> Self {
        crate::telemetry::current().unwrap_or_else(Self::new_root)
    }

    /// The trace id as 32 lowercase hex characters.
    pub fn trace_hex(&self) -> String {
        format!("{:032x}", self.trace_id)
    }
}

/// Reads a run id as a borrowed string, copied once into the field: every request carries
/// one, and an owned string from the codec is zero-filled first, then copied into.
fn run_id_from_str<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    struct RunId;
    impl<'de> serde::de::Visitor<'de> for RunId {
        type Value = Option<String>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a run id or none")
        }

        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(self)
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(v.to_owned()))
        }
    }
    d.deserialize_option(RunId)
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
    /// The request's run is owned by a newer lead: its epoch is below the highest this
    /// peer has seen for the run (`crate::fencing`). The request did nothing.
    #[error("run {run_id} is owned by a newer lead (epoch {current}); this lead's epoch {epoch} is fenced")]
    Fenced {
        run_id: String,
        /// The highest epoch this peer has seen for the run.
        current: u64,
        /// The request's epoch.
        epoch: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec;

    #[test]
    fn a_run_id_round_trips_through_the_codec_and_json() {
        for run_id in [None, Some(String::new()), Some("run-ünï-7".to_string())] {
            let t = TraceContext {
                run_id,
                trace_id: 42,
                parent_span_id: 7,
                epoch: Some(3),
            };
            assert_eq!(
                codec::decode::<TraceContext>(&codec::encode(&t).unwrap()).unwrap(),
                t
            );
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(serde_json::from_str::<TraceContext>(&json).unwrap(), t);
        }
        // An escaped JSON string is no borrowed one: it is read all the same.
        let t: TraceContext = serde_json::from_str(r#"{"run_id":"a\"b","trace_id":1}"#).unwrap();
        assert_eq!(t.run_id.as_deref(), Some("a\"b"));
    }

    #[test]
    fn a_run_id_that_is_not_utf8_is_refused() {
        let mut wire = codec::encode(&TraceContext::for_run("ab")).unwrap();
        // Some, length 2, then the two bytes of the id.
        assert_eq!(&wire[..4], &[1, 2, b'a', b'b']);
        wire[2] = 0xff;
        assert!(codec::decode::<TraceContext>(&wire).is_err());
    }
}
