//! antler-protocol: every message that crosses an Antler process, the codec, framing,
//! handshake, RPC connections and links, the host process runtime, and the shared
//! configuration types.

pub mod approvals;
pub mod beneath;
pub mod calls;
mod clock;
pub mod codec;
pub mod config;
pub mod connection;
mod deadline;
pub mod envelope;
pub mod fencing;
pub mod frame;
pub mod handshake;
pub mod host;
pub mod io;
pub mod json;
pub mod link;
pub mod messages;
mod outbox;
pub mod placement;
pub mod quiet;
pub mod runtime_dir;
pub mod server;
pub mod sock;
pub mod sys;
pub mod telemetry;
pub mod thread_dir;
pub mod tls;
pub mod transport;
pub mod uploads_dir;

pub use calls::{Requester, UnexpectedReply};
pub use connection::{Call, Connection, ConnectionConfig, InFlight, RpcError, Service};
pub use envelope::{Body, Envelope, RemoteError, TraceContext};
pub use handshake::{Identity, PeerInfo, Role};
pub use json::Json;
pub use messages::{Reply, Request};
pub use transport::Address;
