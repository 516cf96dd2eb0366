//! The handshake that opens every connection: magic, the protocol versions each side
//! supports, the fingerprint of the message schema it was built with, role, node id,
//! capacity and the cluster token. A mismatch refuses the connection with a reason both
//! sides log; nothing else is read before it succeeds. Two different builds of Antler
//! (a host left on the old image by a rolling upgrade) are refused here, by schema, rather
//! than failing every frame after a successful hello.
//! Over TLS the listener also checks the role the dialer's certificate names: it must be
//! the role the hello claims and one [`crate::tls::may_connect`] lets call this side.

use std::{sync::Arc, time::Duration};

use futures::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

use crate::{codec, frame, tls::ClusterTls};

/// Four bytes that open every hello, so a peer speaking another protocol is told apart.
pub const MAGIC: [u8; 4] = *b"ANTL";
/// The newest protocol version this build speaks. 2: JSON values, tasks and their events
/// travel as protocol types ([`crate::json::Json`], `messages::TaskSpec`), not JSON text.
/// 3: a trace context carries its parent span (W3C trace context, `crate::telemetry`).
/// 4: a trace context carries the run's lease epoch (`crate::fencing`).
pub const PROTOCOL_VERSION: u16 = 4;
/// The oldest protocol version this build still speaks (rolling upgrades). Version 1's
/// JSON text fields do not decode here, so a peer of version 1 is refused at the hello;
/// version 2's envelopes lack the parent span and version 3's the epoch (bincode is
/// positional), so they are refused as well.
pub const MIN_PROTOCOL_VERSION: u16 = 4;
include!(concat!(env!("OUT_DIR"), "/schema_fingerprint.rs"));
/// How long a peer has to complete the handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Hellos are small; anything larger is not a hello.
pub const MAX_HELLO_BYTES: usize = 16 * 1024;

/// What a process is in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Role {
    Lead,
    McpHost,
    SandboxHost,
    Subagent,
    /// A command-line client of the lead's control socket.
    Cli,
}

impl Role {
    /// The name used in `antler status` and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Lead => "lead",
            Role::McpHost => "mcp-host",
            Role::SandboxHost => "sandbox-host",
            Role::Subagent => "subagent",
            Role::Cli => "cli",
        }
    }

    /// Parses a name produced by [`Role::as_str`].
    pub fn parse(s: &str) -> Option<Role> {
        [
            Role::Lead,
            Role::McpHost,
            Role::SandboxHost,
            Role::Subagent,
            Role::Cli,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who this side of a connection is, and the secret it presents or expects.
#[derive(Debug, Clone)]
pub struct Identity {
    pub role: Role,
    pub node_id: String,
    /// Work this process can take at once (task slots for workers).
    pub capacity: u32,
    /// The cluster token. `None` on a listener accepts any peer (tests and benches only).
    pub token: Option<String>,
    /// The versions this side speaks, inclusive.
    pub versions: (u16, u16),
    /// The fingerprint of the message schema this side encodes ([`SCHEMA_FINGERPRINT`]).
    pub schema: u64,
    /// The CA, certificate and key TCP connections use; `None` leaves TCP plaintext,
    /// which listens and dials on loopback only. Unix sockets never use it.
    pub tls: Option<Arc<ClusterTls>>,
    /// How often this side sends heartbeats (its connection config's), told to the peer
    /// in the handshake: each side then sends at the shorter of the two intervals and
    /// declares the other dead after the longer one's misses, so a client with another
    /// interval than the cluster's is not dropped for its quiet.
    pub heartbeat: Duration,
}

impl Identity {
    pub fn new(role: Role, node_id: impl Into<String>, token: Option<String>) -> Self {
        Self {
            role,
            node_id: node_id.into(),
            capacity: 0,
            token,
            versions: (MIN_PROTOCOL_VERSION, PROTOCOL_VERSION),
            schema: SCHEMA_FINGERPRINT,
            tls: None,
            heartbeat: Duration::from_secs(1),
        }
    }

    /// The same identity with TLS for its TCP connections.
    pub fn with_tls(mut self, tls: Option<Arc<ClusterTls>>) -> Self {
        self.tls = tls;
        self
    }
}

fn millis(d: Duration) -> u32 {
    d.as_millis().min(u32::MAX as u128) as u32
}

/// The first frame a connecting peer sends.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    pub magic: [u8; 4],
    pub min_version: u16,
    pub max_version: u16,
    /// The sender's [`SCHEMA_FINGERPRINT`].
    pub schema: u64,
    pub role: Role,
    pub node_id: String,
    pub capacity: u32,
    pub token: String,
    /// The sender's heartbeat interval in ms.
    pub heartbeat_ms: u32,
}

/// The listener's answer to a [`Hello`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum HelloReply {
    Accept {
        version: u16,
        /// The listener's [`SCHEMA_FINGERPRINT`].
        schema: u64,
        role: Role,
        node_id: String,
        capacity: u32,
        /// The listener's heartbeat interval in ms.
        heartbeat_ms: u32,
    },
    Refuse {
        reason: String,
    },
}

/// The other side of an established connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    pub role: Role,
    pub node_id: String,
    pub capacity: u32,
    /// The protocol version both sides agreed on.
    pub version: u16,
    /// Where the peer is (socket path or address), for logs.
    pub address: String,
    /// How often the peer sends heartbeats (what its handshake said).
    pub heartbeat: Duration,
}

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error("handshake refused by peer: {0}")]
    Refused(String),
    #[error("handshake rejected: {0}")]
    Rejected(String),
    #[error("handshake failed: {0}")]
    Io(String),
    #[error("handshake timed out after {0:?}")]
    Timeout(Duration),
    /// TLS refused the connection after its handshake (TLS 1.3 delivers the listener's
    /// verdict on a client certificate with the first read).
    #[error("TLS refused: {0}")]
    Tls(String),
}

/// Chooses the version both ranges share: the newest one, or an error saying why none fits.
pub fn negotiate(ours: (u16, u16), theirs: (u16, u16)) -> Result<u16, String> {
    let low = ours.0.max(theirs.0);
    let high = ours.1.min(theirs.1);
    if theirs.0 > theirs.1 {
        return Err(format!(
            "peer states an empty version range {}..={}",
            theirs.0, theirs.1
        ));
    }
    if low > high {
        return Err(format!(
            "protocol version mismatch: peer speaks {}..={}, this process speaks {}..={}",
            theirs.0, theirs.1, ours.0, ours.1
        ));
    }
    Ok(high)
}

/// Why two sides with these schema fingerprints cannot talk, if they cannot.
pub fn schema_verdict(ours: u64, theirs: u64) -> Result<(), String> {
    if ours == theirs {
        return Ok(());
    }
    Err(format!(
        "message schema mismatch: the peer was built with schema {theirs:016x}, this process with {ours:016x}; every process of a cluster must run the same Antler build"
    ))
}

/// Compares tokens in time independent of where they differ.
fn token_matches(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    let mut diff = (a.len() != b.len()) as u8;
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

/// The read half of a connection, framed.
pub type FrameReader = FramedRead<Box<dyn AsyncRead + Send + Unpin>, LengthDelimitedCodec>;
/// The write half of a connection, framed.
pub type FrameWriter = FramedWrite<Box<dyn AsyncWrite + Send + Unpin>, LengthDelimitedCodec>;

/// Frames both halves of a stream with the given frame limit.
pub fn framed(
    r: Box<dyn AsyncRead + Send + Unpin>,
    w: Box<dyn AsyncWrite + Send + Unpin>,
    max_frame_bytes: usize,
) -> (FrameReader, FrameWriter) {
    (
        FramedRead::new(r, frame::codec(max_frame_bytes)),
        FramedWrite::new(w, frame::codec(max_frame_bytes)),
    )
}

async fn read_frame(r: &mut FrameReader) -> Result<bytes::BytesMut, HandshakeError> {
    match r.next().await {
        Some(Ok(f)) if f.len() > MAX_HELLO_BYTES => Err(HandshakeError::Rejected(format!(
            "hello of {} bytes is over the {MAX_HELLO_BYTES}-byte limit",
            f.len()
        ))),
        Some(Ok(f)) => Ok(f),
        Some(Err(e)) => Err(match crate::tls::tls_reason(&e) {
            Some(reason) => HandshakeError::Tls(reason),
            None => HandshakeError::Rejected(format!("bad hello frame: {e}")),
        }),
        None => Err(HandshakeError::Io(
            "connection closed during handshake".into(),
        )),
    }
}

async fn write_frame(w: &mut FrameWriter, payload: Vec<u8>) -> Result<(), HandshakeError> {
    w.send(bytes::Bytes::from(payload))
        .await
        .map_err(|e| match crate::tls::tls_reason(&e) {
            Some(reason) => HandshakeError::Tls(reason),
            None => HandshakeError::Io(e.to_string()),
        })
}

/// The connecting side: sends a hello, reads the answer.
pub async fn connect(
    r: &mut FrameReader,
    w: &mut FrameWriter,
    me: &Identity,
    address: &str,
) -> Result<PeerInfo, HandshakeError> {
    let hello = Hello {
        magic: MAGIC,
        min_version: me.versions.0,
        max_version: me.versions.1,
        schema: me.schema,
        role: me.role,
        node_id: me.node_id.clone(),
        capacity: me.capacity,
        token: me.token.clone().unwrap_or_default(),
        heartbeat_ms: millis(me.heartbeat),
    };
    let fut = async {
        let bytes = codec::encode(&hello).map_err(|e| HandshakeError::Io(e.to_string()))?;
        write_frame(w, bytes).await?;
        let frame = read_frame(r).await?;
        let reply: HelloReply = codec::decode(&frame)
            .map_err(|e| HandshakeError::Rejected(format!("bad hello reply: {e}")))?;
        match reply {
            HelloReply::Accept {
                version,
                schema,
                role,
                node_id,
                capacity,
                heartbeat_ms,
            } => {
                if version < me.versions.0 || version > me.versions.1 {
                    return Err(HandshakeError::Rejected(format!(
                        "peer chose protocol version {version}, outside {}..={}",
                        me.versions.0, me.versions.1
                    )));
                }
                schema_verdict(me.schema, schema).map_err(HandshakeError::Rejected)?;
                Ok(PeerInfo {
                    role,
                    node_id,
                    capacity,
                    version,
                    address: address.to_string(),
                    heartbeat: Duration::from_millis(heartbeat_ms.into()),
                })
            }
            HelloReply::Refuse { reason } => Err(HandshakeError::Refused(reason)),
        }
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, fut)
        .await
        .unwrap_or(Err(HandshakeError::Timeout(HANDSHAKE_TIMEOUT)))
}

/// The listening side: reads a hello, checks it, answers. A refusal is sent to the peer
/// (so it can log why) and returned as `Rejected`.
pub async fn accept(
    r: &mut FrameReader,
    w: &mut FrameWriter,
    me: &Identity,
    address: &str,
) -> Result<PeerInfo, HandshakeError> {
    accept_certified(r, w, me, address, None).await
}

/// Why a dialer whose certificate names `certified` may not open this connection.
fn certificate_verdict(me: Role, claimed: Role, certified: Role) -> Result<(), String> {
    if claimed != certified {
        return Err(format!(
            "the hello claims role {claimed} but the peer's certificate names {certified}"
        ));
    }
    if !crate::tls::may_connect(certified, me) {
        let accepted: Vec<&str> = crate::tls::accepted_callers(me)
            .into_iter()
            .map(Role::as_str)
            .collect();
        return Err(format!(
            "{me} accepts certificates of {} only; the peer's certificate names {certified}",
            if accepted.is_empty() {
                "no role".to_string()
            } else {
                accepted.join(", ")
            }
        ));
    }
    Ok(())
}

/// [`accept`] on a TLS connection whose dialer's certificate names `certified`.
pub async fn accept_certified(
    r: &mut FrameReader,
    w: &mut FrameWriter,
    me: &Identity,
    address: &str,
    certified: Option<Role>,
) -> Result<PeerInfo, HandshakeError> {
    let fut = async {
        let frame = read_frame(r).await?;
        let hello: Hello = match codec::decode(&frame) {
            Ok(h) => h,
            Err(e) => {
                let reason = if frame.starts_with(&MAGIC) {
                    format!("hello does not decode ({e}): the peer runs another Antler build whose hello differs; every process of a cluster must run the same build")
                } else {
                    format!("hello does not decode: {e}")
                };
                let reply = HelloReply::Refuse {
                    reason: reason.clone(),
                };
                if let Ok(bytes) = codec::encode(&reply) {
                    let _ = write_frame(w, bytes).await;
                }
                return Err(HandshakeError::Rejected(reason));
            }
        };
        let verdict = if hello.magic != MAGIC {
            Err("not an Antler peer (bad magic)".to_string())
        } else {
            negotiate(me.versions, (hello.min_version, hello.max_version)).and_then(|v| {
                schema_verdict(me.schema, hello.schema)?;
                if let Some(certified) = certified {
                    certificate_verdict(me.role, hello.role, certified)?;
                }
                match &me.token {
                    Some(t) if !token_matches(t, &hello.token) => {
                        Err("cluster token mismatch".to_string())
                    }
                    _ => Ok(v),
                }
            })
        };
        match verdict {
            Ok(version) => {
                let reply = HelloReply::Accept {
                    version,
                    schema: me.schema,
                    role: me.role,
                    node_id: me.node_id.clone(),
                    capacity: me.capacity,
                    heartbeat_ms: millis(me.heartbeat),
                };
                let bytes = codec::encode(&reply).map_err(|e| HandshakeError::Io(e.to_string()))?;
                write_frame(w, bytes).await?;
                Ok(PeerInfo {
                    role: hello.role,
                    node_id: hello.node_id,
                    capacity: hello.capacity,
                    version,
                    address: address.to_string(),
                    heartbeat: Duration::from_millis(hello.heartbeat_ms.into()),
                })
            }
            Err(reason) => {
                let reply = HelloReply::Refuse {
                    reason: reason.clone(),
                };
                if let Ok(bytes) = codec::encode(&reply) {
                    let _ = write_frame(w, bytes).await;
                }
                Err(HandshakeError::Rejected(reason))
            }
        }
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, fut)
        .await
        .unwrap_or(Err(HandshakeError::Timeout(HANDSHAKE_TIMEOUT)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_picks_the_newest_shared_version() {
        assert_eq!(negotiate((1, 3), (2, 5)), Ok(3));
        assert_eq!(negotiate((1, 1), (1, 1)), Ok(1));
        assert!(negotiate((1, 1), (2, 2)).unwrap_err().contains("mismatch"));
        assert!(negotiate((1, 1), (3, 2)).is_err());
        // A build of version 1 (JSON text inside frames) is refused, by version.
        let old = negotiate((MIN_PROTOCOL_VERSION, PROTOCOL_VERSION), (1, 1));
        assert!(old.unwrap_err().contains("protocol version mismatch"));
    }

    #[test]
    fn a_certificate_must_name_the_claimed_role_and_one_allowed_to_call() {
        assert_eq!(
            certificate_verdict(Role::McpHost, Role::Lead, Role::Lead),
            Ok(())
        );
        assert_eq!(
            certificate_verdict(Role::SandboxHost, Role::Subagent, Role::Subagent),
            Ok(())
        );
        assert_eq!(
            certificate_verdict(Role::McpHost, Role::Lead, Role::Subagent).unwrap_err(),
            "the hello claims role lead but the peer's certificate names subagent"
        );
        assert_eq!(
            certificate_verdict(Role::Subagent, Role::McpHost, Role::McpHost).unwrap_err(),
            "subagent accepts certificates of lead only; the peer's certificate names mcp-host"
        );
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(token_matches("abc", "abc"));
        assert!(!token_matches("abc", "abd"));
        assert!(!token_matches("abc", "ab"));
        assert!(!token_matches("", "x"));
    }
}
