//! Messages from the CLI (or an operator tool) to the lead's control socket.

use serde::{Deserialize, Serialize};

use super::{Reply, Request};
use crate::handshake::Role;

/// Requests the lead answers on its control socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LeadRequest {
    /// Every process of the cluster with its supervision state.
    Status,
    /// Ping every peer through the lead's links (or only those of one role).
    PingPeers { role: Option<Role> },
    /// Send `request` to the peer of `role` (worker `index` for subagents) through the
    /// lead's link and return its reply: how the CLI reaches the hosts.
    Forward {
        role: Role,
        index: u32,
        request: Box<Request>,
        timeout_ms: u32,
    },
}

/// Replies to [`LeadRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LeadReply {
    Status(Vec<ProcessStatus>),
    PingPeers(Vec<PeerPing>),
    Forwarded(Box<Reply>),
}

/// One process as `antler status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessStatus {
    pub role: Role,
    /// Worker index for subagents, 0 otherwise.
    pub index: u32,
    pub pid: Option<u32>,
    pub address: String,
    pub healthy: bool,
    pub restarts: u32,
    pub uptime_s: f64,
    /// Milliseconds since the last heartbeat from this process (None: never heard).
    pub last_heartbeat_ms: Option<u64>,
    /// `running`, `starting`, `restarting` or `failed`.
    pub state: String,
    /// Why the process is failed or was last restarted.
    pub reason: Option<String>,
}

/// The outcome of pinging one peer through its link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerPing {
    pub role: Role,
    pub index: u32,
    pub address: String,
    /// Round trip in microseconds, or the error.
    pub result: Result<u64, String>,
}
