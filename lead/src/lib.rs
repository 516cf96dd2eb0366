//! antler-lead: the lead process's library: the catalog, the supervisor of the local
//! cluster, the lead's control socket, the runs it hosts, and the CLI's plumbing.

pub mod catalog;
pub mod cli;
pub mod cluster;
pub mod commands;
pub mod control;
pub mod gateway;
pub mod run;
pub mod runs;
pub mod supervisor;

pub use antler_protocol::host as host_runtime;
