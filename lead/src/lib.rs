//! antler-lead: the lead process's library: the supervisor of the local cluster, the
//! lead's control socket, the run manager (the runs it hosts, their checkpoints and
//! events), memory, custom agents, the subagent dispatcher, the gateway, Antler's MCP server
//! (`mcp_server`), the PostgreSQL store of several leads in the making (`ha`, not yet used)
//! and the CLI's plumbing.
//! The agent engine (catalog and run loop) is `antler-engine`, used by its own name.

pub(crate) mod agents;
pub(crate) mod cli;
pub mod cluster;
pub mod commands;
pub mod gateway;
pub mod ha;
pub(crate) mod links;
pub(crate) mod mcp_server;
pub mod memory;
pub mod runs;
pub mod subagents;
pub(crate) mod teardown;

pub use antler_protocol::host as host_runtime;
