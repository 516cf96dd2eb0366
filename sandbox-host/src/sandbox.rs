//! `Sandbox`: one live sandbox. Owns its path mapping, its per-file locks, (local) the
//! processes its commands left running and (bwrap) its supervisor; hands out a
//! [`ToolContext`] for each call, starting a new supervisor over the same directories when
//! the previous one died. Stopping the actor kills the supervisor and its namespace;
//! the pool starts a fresh actor over the same directories at the next use of a stopped one.

use std::{sync::Arc, time::Duration};

use actix::prelude::*;

use crate::{
    jobs::Jobs,
    paths::{PathMap, ThreadPaths},
    provider::{bwrap::Supervisor, Runner},
    settings::{ProviderKind, SandboxSettings},
    tools::{FileLocks, ToolContext},
};

/// The sandbox actor.
pub struct Sandbox {
    map: Arc<PathMap>,
    settings: Arc<SandboxSettings>,
    kind: ProviderKind,
    supervisor: Option<Arc<Supervisor>>,
    locks: Arc<FileLocks>,
    /// What the local provider's commands left running.
    jobs: Arc<Jobs>,
}

impl Sandbox {
    /// Creates the thread's directories and (bwrap) starts the supervisor.
    pub fn new(
        settings: Arc<SandboxSettings>,
        kind: ProviderKind,
        thread: ThreadPaths,
    ) -> std::io::Result<Sandbox> {
        // The user's own filesystem first (the disk quota), then the directories in it.
        if let Some(volumes) = settings
            .volumes
            .as_ref()
            .filter(|_| !thread.user_id.is_empty())
        {
            volumes.ensure(&thread.user_id).map_err(|e| {
                std::io::Error::other(format!("the user's disk quota filesystem: {e}"))
            })?;
        }
        thread.create().map_err(|e| match e.raw_os_error() {
            Some(libc::ENOSPC) if settings.volumes.is_some() => std::io::Error::other(format!(
                "{}'s files fill the disk quota (sandbox.disk_quota): delete files of another thread to make room ({e})",
                thread.user_id
            )),
            _ => e,
        })?;
        let map = Arc::new(PathMap::new(thread, &settings));
        let supervisor = match kind {
            ProviderKind::Bwrap => Some(Arc::new(Supervisor::spawn(&settings, &map)?)),
            ProviderKind::Local => None,
        };
        let jobs = Arc::new(Jobs::new(settings.background_lifetime, false));
        Ok(Sandbox {
            map,
            settings,
            kind,
            supervisor,
            locks: Arc::default(),
            jobs,
        })
    }

    /// Set once the supervisor's mounts are in place (`None`: no supervisor, always ready).
    pub fn ready_flag(&self) -> Option<Arc<std::sync::atomic::AtomicBool>> {
        self.supervisor.as_ref().map(|s| s.ready_flag())
    }

    /// The supervisor's pid, when there is one.
    pub fn supervisor_pid(&self) -> Option<u32> {
        self.supervisor.as_ref().map(|s| s.pid())
    }
}

impl Actor for Sandbox {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.kind == ProviderKind::Local {
            let tick = (self.settings.background_lifetime / 4)
                .clamp(Duration::from_millis(50), Duration::from_secs(1));
            ctx.run_interval(tick, |sandbox, _| {
                let jobs = sandbox.jobs.clone();
                tokio::task::spawn_blocking(move || jobs.expire());
            });
        }
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        // The supervisor's namespace dies now, even while calls still hold the handle;
        // its cgroup goes once its processes have.
        if let Some(s) = self.supervisor.take() {
            s.kill();
            if let Some(cg) = s.cgroup() {
                cg.remove_later();
            }
        }
        let jobs = self.jobs.clone();
        tokio::task::spawn_blocking(move || jobs.kill_all());
    }
}

/// Kills what the sandbox's commands left running (its last holder released it).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ReleaseBackground;

impl Handler<ReleaseBackground> for Sandbox {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: ReleaseBackground, _: &mut Context<Self>) -> Self::Result {
        let runner = self.runner();
        Box::pin(async move {
            if let Some(r) = runner {
                r.kill_background().await;
            }
        })
    }
}

/// Kills the sandbox at once (sandbox-host is shutting down).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Kill;

impl Handler<Kill> for Sandbox {
    type Result = ();

    fn handle(&mut self, _: Kill, ctx: &mut Context<Self>) {
        if let Some(s) = self.supervisor.take() {
            s.kill();
        }
        self.jobs.kill_all();
        ctx.stop();
    }
}

/// Chaos mode: the actor stops as if it crashed (its supervisor and namespace die with
/// it, calls in flight in it fail); the pool starts a fresh one at the next use.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Crash;

impl Handler<Crash> for Sandbox {
    type Result = ();

    fn handle(&mut self, _: Crash, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

impl Sandbox {
    /// The runner of the live supervisor (or the local one), without starting one.
    fn runner(&self) -> Option<Runner> {
        match self.kind {
            ProviderKind::Local => Some(Runner::Local(self.jobs.clone())),
            ProviderKind::Bwrap => self
                .supervisor
                .as_ref()
                .filter(|s| s.is_alive())
                .map(|s| Runner::Bwrap(s.clone())),
        }
    }
}

/// The context for one tool call (a live supervisor first, restarting a dead one).
#[derive(Debug, Message)]
#[rtype(result = "Result<ToolContext, String>")]
pub struct Prepare;

impl Handler<Prepare> for Sandbox {
    type Result = Result<ToolContext, String>;

    fn handle(&mut self, _: Prepare, _: &mut Context<Self>) -> Self::Result {
        let runner = match self.kind {
            ProviderKind::Local => Runner::Local(self.jobs.clone()),
            ProviderKind::Bwrap => {
                let alive = self.supervisor.as_ref().is_some_and(|s| s.is_alive());
                if !alive {
                    if let Some(old) = &self.supervisor {
                        tracing::warn!(
                            pid = old.pid(),
                            "sandbox supervisor died; starting a new one over the same files"
                        );
                        if let Some(cg) = old.cgroup() {
                            cg.remove_later();
                        }
                    }
                    let fresh = Supervisor::spawn(&self.settings, &self.map)
                        .map_err(|e| format!("cannot start the sandbox supervisor: {e}"))?;
                    self.supervisor = Some(Arc::new(fresh));
                }
                match &self.supervisor {
                    Some(s) => Runner::Bwrap(s.clone()),
                    None => return Err("no sandbox supervisor".into()),
                }
            }
        };
        Ok(ToolContext {
            map: self.map.clone(),
            settings: self.settings.clone(),
            runner,
            locks: self.locks.clone(),
        })
    }
}

/// The supervisor's pid.
#[derive(Debug, Message)]
#[rtype(result = "Option<u32>")]
pub struct SupervisorPid;

impl Handler<SupervisorPid> for Sandbox {
    type Result = Option<u32>;

    fn handle(&mut self, _: SupervisorPid, _: &mut Context<Self>) -> Option<u32> {
        self.supervisor_pid()
    }
}

/// Binds a pre-warmed sandbox to a thread whose directories were just moved into place
/// (the supervisor's mounts follow the renamed directories). The skills mounts and the
/// cgroup depend on the user, who was not known when it was warmed: when skills are
/// mounted or cgroups bound sandboxes, its supervisor is replaced by one with this user's
/// skills (and no other user's), in this user's cgroup.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Bind(pub ThreadPaths);

impl Handler<Bind> for Sandbox {
    type Result = ();

    fn handle(&mut self, Bind(thread): Bind, _: &mut Context<Self>) {
        self.map = Arc::new(PathMap::new(thread, &self.settings));
        let moves_cgroup = self.settings.cgroups.is_some();
        if self.kind == ProviderKind::Bwrap && (self.settings.skills_dir.is_dir() || moves_cgroup) {
            if let Some(old) = self.supervisor.take() {
                old.kill();
                if let Some(cg) = old.cgroup() {
                    cg.remove_later();
                }
            }
            match Supervisor::spawn(&self.settings, &self.map) {
                Ok(fresh) => self.supervisor = Some(Arc::new(fresh)),
                // The next call starts one (Prepare), or reports why it cannot.
                Err(e) => tracing::warn!(error = %e, "cannot start the bound sandbox's supervisor"),
            }
        }
    }
}
