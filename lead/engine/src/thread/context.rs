//! Who and where a run is: its ids, the thread's directories ([`ThreadPaths`], owned by
//! `files`) and how it reaches the thread's files, and the custom agent it runs as (its
//! files under the same `{base}`, see [`AgentContext`]), and the lease epoch its requests
//! carry when several leads share the runs (issue 38).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::files::ThreadFiles;
pub use super::files::ThreadPaths;

/// The virtual root of a thread's user data, as the model sees it.
pub const VIRTUAL_USER_DATA: &str = "/mnt/user-data";

/// A run's identity and settings the tools and middlewares read.
#[derive(Clone, Debug)]
pub struct RunContext {
    pub run_id: String,
    pub user_id: String,
    pub thread_id: String,
    pub paths: ThreadPaths,
    /// How the run reaches the thread's files: on this disk under `paths`, or through the
    /// sandbox-host replica that owns the thread.
    pub files: Arc<dyn ThreadFiles>,
    /// Whether `ask_clarification` interrupts the run (a person can answer) or returns
    /// the "proceed with your best judgment" text.
    pub clarification_enabled: bool,
    /// The custom agent the run is for, and where agents live.
    pub agent: AgentContext,
    /// The epoch of this lead's lease on the run (issue 38, docs/ha.md): every request
    /// the run's drive sends to a host or a worker carries it, and one from an epoch
    /// below the newest they have seen is refused. `None`: no lease (a single lead).
    pub epoch: Option<u64>,
}

impl RunContext {
    /// Run `run_id` of `user` on `thread`, whose files are on this disk under `base` (the
    /// data root, where agents live too): no clarification, the default agent, no lease.
    /// Its directories are not made here ([`ThreadPaths::create`]).
    pub fn local(base: &Path, user: &str, thread: &str, run_id: &str) -> RunContext {
        let paths = ThreadPaths::new(base, user, thread);
        RunContext {
            run_id: run_id.to_owned(),
            user_id: user.to_owned(),
            thread_id: thread.to_owned(),
            files: paths.local_files(),
            paths,
            clarification_enabled: false,
            agent: AgentContext::new(base),
            epoch: None,
        }
    }
}

/// DeerFlow's `agent_name` and `channel_name` from the run context, with `Paths.base_dir`
/// (the data root the thread directories are under too): custom agents live in
/// `{base_dir}/users/{user}/agents/{name}/`, the legacy shared layout is
/// `{base_dir}/agents/{name}/`, and the default agent's soul is `{base_dir}/SOUL.md`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentContext {
    pub base_dir: PathBuf,
    /// Set in a custom agent's chat, or for the agent being created in bootstrap mode.
    pub agent_name: Option<String>,
    /// The channel the run's request came from (`github` is a webhook fan-out).
    pub channel_name: Option<String>,
    /// The configured model names (`models:` in config.yaml): `update_agent` refuses others.
    pub models: Vec<String>,
    /// A bootstrap run: `setup_agent` is offered to create `agent_name`.
    pub bootstrap: bool,
    /// A run no one talks to (`interactive: false`, `antler run --no-input`):
    /// `ask_clarification` is not offered, as on DeerFlow's non-interactive channels.
    pub non_interactive: bool,
    /// The run is offered `task` (subagents).
    pub subagents: bool,
    /// The role of the principal the run acts for (the gateway's), for the catalog's
    /// authorization policy and the hosts.
    pub role: Option<String>,
}

impl AgentContext {
    /// The default agent (no name, no channel, no models) under the data root `base_dir`.
    pub fn new(base_dir: &Path) -> AgentContext {
        AgentContext {
            base_dir: base_dir.to_path_buf(),
            ..AgentContext::default()
        }
    }
}
