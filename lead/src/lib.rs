//! antler-lead: the lead process's library: the supervisor of the local cluster, the
//! lead's control socket, the run manager (the runs it hosts, their checkpoints and
//! events), custom agents, the subagent dispatcher, the gateway and the CLI's plumbing.
//! The agent engine (catalog and run loop) is `antler-engine`, used by its own name.

pub mod agents;
pub mod chaos_actors;
pub mod checkpoint;
pub mod cli;
pub mod cluster;
pub mod commands;
pub mod control;
pub mod discovery;
pub mod gateway;
pub mod mcp_credentials;
pub mod run_manager;
pub mod subagents;
pub mod supervisor;
pub mod teardown;

pub use antler_protocol::host as host_runtime;
