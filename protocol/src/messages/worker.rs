//! Messages between the lead and a subagent worker.

use serde::{Deserialize, Serialize};

use super::control::Health;

/// Requests a subagent worker answers beyond the control pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkerRequest {
    /// The worker's health and free task slots.
    Capacity,
}

/// Replies from a subagent worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkerReply {
    Capacity {
        health: Health,
        slots: u32,
        busy: u32,
    },
}
