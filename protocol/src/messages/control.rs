//! Control messages every peer answers: ping (echoes its payload) and health.

use serde::{Deserialize, Serialize};

use crate::handshake::Role;

/// Understood by every peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControlRequest {
    /// Echo the payload back: a liveness and round-trip probe.
    Ping { payload: Vec<u8> },
    /// Report the process's health.
    Health,
}

impl ControlRequest {
    pub fn kind(&self) -> &'static str {
        match self {
            ControlRequest::Ping { .. } => "ping",
            ControlRequest::Health => "health",
        }
    }
}

/// Replies to [`ControlRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControlReply {
    Pong { payload: Vec<u8> },
    Health(Health),
}

/// What a process says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub role: Role,
    pub node_id: String,
    pub pid: u32,
    pub uptime_ms: u64,
    /// Requests being handled right now, over all connections.
    pub in_flight: u32,
    /// False while draining.
    pub accepting: bool,
}
