//! antler-sandbox-host: every place where a tool has side effects. A `SandboxPool` actor
//! owns the sandboxes of (user, thread) pairs under deterministic ids, with a warm pool; a
//! `Sandbox` actor per live sandbox owns its isolation (a long-lived supervisor inside
//! bubblewrap, or DeerFlow's local provider); the sandbox tools run against it with
//! DeerFlow's parameters, limits and texts; a lead or worker without the volume reaches a
//! thread's own files through `thread_files`; `invoke_acp_agent` runs its agents (`acp`).

pub mod acp;
pub mod approvals;
pub mod cgroup;
pub mod command_policy;
pub mod exec;
pub mod identity;
pub mod jobs;
pub mod lease;
pub mod output;
pub mod paths;
pub mod pool;
pub mod provider;
pub mod recent_calls;
pub mod sandbox;
pub mod service;
pub mod settings;
pub mod skill_state;
pub mod supervisor;
pub mod thread_files;
pub mod tools;
pub mod user_volume;
pub mod volume;
