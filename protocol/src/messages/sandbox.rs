//! Messages between the lead (or a worker) and sandbox-host.

use serde::{Deserialize, Serialize};

use super::control::Health;

/// Requests sandbox-host answers beyond the control pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SandboxRequest {
    /// The host's health together with its pool summary.
    Health,
}

/// Replies from sandbox-host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SandboxReply {
    Health { health: Health, live_sandboxes: u32 },
}
