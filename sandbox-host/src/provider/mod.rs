//! Isolation providers: how a sandbox runs commands. `local` runs them on the host (on the
//! blocking pool); `bwrap` hands them to the sandbox's long-lived supervisor inside
//! bubblewrap. [`probe`] decides at start which one this host serves with.

pub mod bwrap;
pub mod seccomp;

use std::sync::Arc;

use crate::{
    exec::{self, ExecOutcome, ExecRequest},
    jobs::Jobs,
    settings::{ProviderKind, SandboxSettings},
};

/// Runs a sandbox's commands.
#[derive(Clone)]
pub enum Runner {
    /// On the host, as DeerFlow's `LocalSandboxProvider` does; the sandbox's jobs.
    Local(Arc<Jobs>),
    /// Through the supervisor inside bubblewrap.
    Bwrap(Arc<bwrap::Supervisor>),
}

impl Runner {
    /// Runs one command to completion (or its deadline). Dropping the future (its caller
    /// cancelled the call) kills the command's whole session.
    pub async fn exec(&self, req: ExecRequest) -> Result<ExecOutcome, String> {
        match self {
            Runner::Local(jobs) => {
                let jobs = jobs.clone();
                let started = Arc::new(exec::Started::default());
                let _kill_on_drop = KillOnDrop(started.clone());
                tokio::task::spawn_blocking(move || exec::run_watched(&req, &jobs, &started))
                    .await
                    .map_err(|e| format!("JoinError: {e}"))?
                    .map_err(|e| format!("OSError: {e}"))
            }
            Runner::Bwrap(s) => s.exec(req).await,
        }
    }

    /// The sandbox's OOM kills so far and its memory cap in bytes, when a cgroup bounds it.
    pub fn oom_kills(&self) -> Option<(u64, u64)> {
        match self {
            Runner::Local(_) => None,
            Runner::Bwrap(s) => s.cgroup().map(|cg| (cg.oom_kills(), cg.memory_limit)),
        }
    }

    /// Kills what the sandbox's commands left running (the sandbox was released).
    pub async fn kill_background(&self) {
        match self {
            Runner::Local(jobs) => {
                let jobs = jobs.clone();
                let _ = tokio::task::spawn_blocking(move || jobs.kill_all()).await;
            }
            Runner::Bwrap(s) => s.kill_background().await,
        }
    }
}

/// Kills a command that is still running when its call's future is dropped.
struct KillOnDrop(Arc<exec::Started>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.0.kill();
    }
}

/// What this host serves with, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderVerdict {
    /// Serve with this provider.
    Serve { kind: ProviderKind, note: String },
    /// Refuse sandboxed tools, with the reason the operator reads.
    Refuse(String),
}

/// Probes bubblewrap when the config asks for it; falls back to `local` only when the
/// config explicitly allows it.
pub fn probe(settings: &SandboxSettings) -> ProviderVerdict {
    match settings.provider {
        ProviderKind::Local => ProviderVerdict::Serve {
            kind: ProviderKind::Local,
            note: "local provider (sandbox.use is LocalSandboxProvider): no isolation".into(),
        },
        ProviderKind::Bwrap => match bwrap::probe() {
            Ok(what) => ProviderVerdict::Serve {
                kind: ProviderKind::Bwrap,
                note: format!("bubblewrap {what}"),
            },
            Err(why) if settings.allow_local_fallback => ProviderVerdict::Serve {
                kind: ProviderKind::Local,
                note: format!("bubblewrap cannot create its namespaces ({why}); falling back to the local provider because sandbox.allow_local_fallback is true"),
            },
            Err(why) => ProviderVerdict::Refuse(format!(
                "bubblewrap cannot create its namespaces ({why}); sandboxed tools are refused. Install bubblewrap and allow unprivileged user namespaces, or set sandbox.allow_local_fallback: true to run them unisolated"
            )),
        },
    }
}
