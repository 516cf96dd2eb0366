//! Runs hosted by the lead process. [`manager::RunManager`] owns every run of this lead:
//! it prepares a run (config, model, catalog, thread directories), drives its
//! `RunActor`, keeps its events for watchers (the CLI over the control socket, the
//! gateway's server-sent events), resumes the runs a crash left `running` when the lead
//! starts, and feeds [`metrics::Metrics`]. `hosts` reaches sandbox-host and mcp-host
//! through the supervisor's links; `prepare` turns a submission into a ready run loop;
//! `readiness` says whether runs can be prepared yet (`/ready`);
//! `view` is the JSON shape of a run for the CLI and the HTTP API; `elicitations` the
//! questions a run's MCP calls wait on; `event_journal` a run's events to the store as
//! they happen; `store` the runs store (SQLite: runs, their
//! checkpoints, kept events, receipts), reached off the actors' threads.

pub(crate) mod elicitations;
pub(crate) mod event_journal;
pub(crate) mod events;
pub(crate) mod hosts;
pub(crate) mod manager;
pub(crate) mod metrics;
pub(crate) mod prepare;
pub(crate) mod readiness;
pub mod store;
pub(crate) mod subagent_asks;
pub(crate) mod view;

pub use manager::{
    open_client_run, read_artifact, ArtifactContent, ClientRunEnded, HostClientRun,
    OpenClientRunError, RunManager, SubmitRun, WatchRun,
};
pub use metrics::Metrics;
pub use prepare::{ClientSession, PrepareError, RunEnv};
pub use store::{CheckpointError, CheckpointStore, RunStatus};
