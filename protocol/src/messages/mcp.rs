//! Messages between the lead (or a worker) and mcp-host.

use serde::{Deserialize, Serialize};

use super::control::Health;

/// Requests mcp-host answers beyond the control pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum McpRequest {
    /// The host's health together with its MCP registry summary.
    Health,
}

/// Replies from mcp-host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum McpReply {
    Health { health: Health, servers: u32 },
}
