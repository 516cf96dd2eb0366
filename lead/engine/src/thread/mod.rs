//! A thread as a run sees it, and the ports a run uses to reach what it does not own:
//! `state` the thread's state and its reducers (messages, artifacts, promoted tools,
//! sandbox, viewed images, delegations), `context` who and where the run is, `files` the
//! thread's own files and their paths (local or through sandbox-host), `hosts` the way to
//! sandbox-host and mcp-host, `lease` the run's lease on its sandbox, `input` what
//! untrusted text becomes when it enters the thread's messages, `goal` the goal a thread
//! keeps and how its evaluations are read, `approvals` the calls waiting for a person.

pub mod approvals;
pub mod context;
pub mod files;
pub mod goal;
pub mod hosts;
pub mod input;
pub mod lease;
pub mod state;
