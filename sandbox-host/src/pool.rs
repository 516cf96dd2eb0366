//! `SandboxPool`: owns every sandbox of this host, keyed by its deterministic id. Acquire is
//! idempotent (handled one at a time by the actor, so concurrent acquires of one thread get
//! one sandbox); release parks the sandbox warm. Invariants: active + warm stays at or
//! under `replicas` unless every slot is active (then it grows, with a warning); active +
//! warm + pre-warmed never exceeds `capacity` (an acquire then waits or is rejected); warm
//! sandboxes idle past `idle_timeout` are destroyed by a check every `idle_check_interval`.

use std::{
    collections::{BTreeMap, VecDeque},
    sync::Arc,
    time::{Duration, Instant},
};

use actix::prelude::*;
use antler_protocol::messages::{
    AcquireSource, Acquired, PoolStatus, Principal, SandboxError, SandboxStatus,
};
use tokio::sync::oneshot;

use crate::{
    identity::{self, SandboxId},
    paths::ThreadPaths,
    provider::ProviderVerdict,
    sandbox::{Bind, Kill, ReleaseBackground, Sandbox, SupervisorPid},
    settings::{OverflowPolicy, ProviderKind, SandboxSettings},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Active { holders: u32 },
    Warm,
}

struct Entry {
    user_id: String,
    thread_id: String,
    addr: Addr<Sandbox>,
    state: State,
    created: Instant,
    touched: Instant,
}

struct Prewarmed {
    id: SandboxId,
    slot: ThreadPaths,
    addr: Addr<Sandbox>,
    created: Instant,
    /// Set when its supervisor's mounts are in place; until then its directories must not
    /// be moved (bubblewrap would fail to mount them).
    ready: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl Prewarmed {
    fn is_ready(&self) -> bool {
        self.ready
            .as_ref()
            .is_none_or(|r| r.load(std::sync::atomic::Ordering::SeqCst))
    }
}

struct Waiter {
    principal: Principal,
    known_id: Option<String>,
    tx: oneshot::Sender<Result<Acquired, SandboxError>>,
}

/// The pool actor.
pub struct SandboxPool {
    settings: Arc<SandboxSettings>,
    verdict: ProviderVerdict,
    entries: BTreeMap<SandboxId, Entry>,
    prewarmed: Vec<Prewarmed>,
    waiters: VecDeque<Waiter>,
    next_slot: u64,
}

impl SandboxPool {
    pub fn new(settings: SandboxSettings, verdict: ProviderVerdict) -> Self {
        Self {
            settings: Arc::new(settings),
            verdict,
            entries: BTreeMap::new(),
            prewarmed: Vec::new(),
            waiters: VecDeque::new(),
            next_slot: 0,
        }
    }

    fn kind(&self) -> Result<ProviderKind, SandboxError> {
        match &self.verdict {
            ProviderVerdict::Serve { kind, .. } => Ok(*kind),
            ProviderVerdict::Refuse(why) => Err(SandboxError::ProviderUnavailable(why.clone())),
        }
    }

    fn total(&self) -> usize {
        self.entries.len() + self.prewarmed.len()
    }

    /// Destroys the warm sandbox idle the longest; false when there is none.
    fn evict_oldest_warm(&mut self) -> bool {
        let oldest = self
            .entries
            .iter()
            .filter(|(_, e)| e.state == State::Warm)
            .min_by_key(|(id, e)| (e.touched, (*id).clone()))
            .map(|(id, _)| id.clone());
        match oldest {
            Some(id) => {
                tracing::info!(sandbox = %id, "evicting a warm sandbox");
                self.entries.remove(&id);
                true
            }
            None => false,
        }
    }

    fn prewarm_root(&self) -> std::path::PathBuf {
        self.settings.base_dir.join("prewarm")
    }

    /// Starts pre-warmed sandboxes up to `prewarm`, within capacity.
    fn refill_prewarmed(&mut self) {
        let Ok(kind) = self.kind() else { return };
        while (self.prewarmed.len() as u32) < self.settings.prewarm
            && self.total() < self.settings.capacity as usize
        {
            self.next_slot += 1;
            let name = format!("slot-{}", self.next_slot);
            let slot = ThreadPaths::new(&self.prewarm_root(), "pool", &name);
            match Sandbox::new(self.settings.clone(), kind, slot.clone()) {
                Ok(s) => self.prewarmed.push(Prewarmed {
                    id: SandboxId::unbound(&format!("prewarm-{name}")),
                    slot,
                    ready: s.ready_flag(),
                    addr: s.start(),
                    created: Instant::now(),
                }),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot pre-warm a sandbox");
                    break;
                }
            }
        }
    }

    /// Takes a pre-warmed sandbox for a thread that has no directories yet.
    fn take_prewarmed(&mut self, thread: &ThreadPaths) -> Option<Addr<Sandbox>> {
        if thread.root.exists() {
            return None;
        }
        let ready = self.prewarmed.iter().position(Prewarmed::is_ready)?;
        let p = self.prewarmed.remove(ready);
        let moved = thread
            .root
            .parent()
            .map(std::fs::create_dir_all)
            .unwrap_or(Ok(()))
            .and_then(|()| std::fs::rename(&p.slot.root, &thread.root));
        match moved {
            Ok(()) => {
                p.addr.do_send(Bind(thread.clone()));
                Some(p.addr)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot bind a pre-warmed sandbox; starting a new one");
                None
            }
        }
    }

    /// Acquire without waiting: `Ok(None)` means "at capacity, wait".
    fn try_acquire(
        &mut self,
        p: &Principal,
        known_id: Option<&str>,
    ) -> Result<Option<Acquired>, SandboxError> {
        identity::validate(p)?;
        identity::authorize(&self.settings.authorization, p)?;
        let kind = self.kind()?;
        let id = SandboxId::for_thread(&p.user_id, &p.thread_id);
        if let Some(known) = known_id.filter(|k| *k != id.as_str()) {
            return Err(SandboxError::IdConflict {
                thread_id: p.thread_id.clone(),
                known: known.to_string(),
                actual: id.to_string(),
            });
        }
        let acquired = |source| Acquired {
            sandbox_id: id.to_string(),
            source,
        };
        if let Some(e) = self.entries.get_mut(&id) {
            e.touched = Instant::now();
            let source = match e.state {
                State::Active { holders } => {
                    e.state = State::Active {
                        holders: holders + 1,
                    };
                    AcquireSource::Active
                }
                State::Warm => {
                    e.state = State::Active { holders: 1 };
                    AcquireSource::Warm
                }
            };
            return Ok(Some(acquired(source)));
        }
        let thread = ThreadPaths::new(&self.settings.base_dir, &p.user_id, &p.thread_id);
        let reusable_prewarmed =
            !thread.root.exists() && self.prewarmed.iter().any(Prewarmed::is_ready);
        if !reusable_prewarmed && self.total() >= self.settings.capacity as usize {
            let freed = self.evict_oldest_warm() || self.prewarmed.pop().is_some();
            if !freed {
                return match self.settings.overflow {
                    OverflowPolicy::Reject => Err(SandboxError::AtCapacity {
                        capacity: self.settings.capacity,
                    }),
                    OverflowPolicy::Wait => Ok(None),
                };
            }
        }
        if self.entries.len() >= self.settings.replicas as usize && !self.evict_oldest_warm() {
            tracing::warn!(
                replicas = self.settings.replicas,
                active = self.entries.len(),
                "every sandbox slot is active; starting one over the replicas limit"
            );
        }
        let (addr, source) = match self.take_prewarmed(&thread) {
            Some(addr) => (addr, AcquireSource::Prewarmed),
            None => {
                let sandbox = Sandbox::new(self.settings.clone(), kind, thread).map_err(|e| {
                    SandboxError::ProviderUnavailable(format!("cannot start a sandbox: {e}"))
                })?;
                (sandbox.start(), AcquireSource::Created)
            }
        };
        let now = Instant::now();
        self.entries.insert(
            id.clone(),
            Entry {
                user_id: p.user_id.clone(),
                thread_id: p.thread_id.clone(),
                addr,
                state: State::Active { holders: 1 },
                created: now,
                touched: now,
            },
        );
        if source == AcquireSource::Prewarmed {
            self.refill_prewarmed();
        }
        Ok(Some(acquired(source)))
    }

    fn serve_waiters(&mut self) {
        while let Some(w) = self.waiters.pop_front() {
            if w.tx.is_closed() {
                continue;
            }
            match self.try_acquire(&w.principal, w.known_id.as_deref()) {
                Ok(Some(a)) => {
                    let _ = w.tx.send(Ok(a));
                }
                Ok(None) => {
                    self.waiters.push_front(w);
                    return;
                }
                Err(e) => {
                    let _ = w.tx.send(Err(e));
                }
            }
        }
    }

    fn evict_idle(&mut self) {
        let timeout = self.settings.idle_timeout;
        if timeout.is_zero() {
            return;
        }
        let idle: Vec<SandboxId> = self
            .entries
            .iter()
            .filter(|(_, e)| e.state == State::Warm && e.touched.elapsed() >= timeout)
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            tracing::info!(sandbox = %id, "destroying a sandbox idle past idle_timeout");
            self.entries.remove(&id);
        }
        self.serve_waiters();
    }
}

impl Actor for SandboxPool {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        match &self.verdict {
            ProviderVerdict::Serve { kind, note } => {
                tracing::info!(provider = kind.as_str(), %note, "sandbox provider")
            }
            ProviderVerdict::Refuse(why) => tracing::error!("{why}"),
        }
        let _ = std::fs::remove_dir_all(self.prewarm_root());
        self.refill_prewarmed();
        ctx.run_interval(
            self.settings
                .idle_check_interval
                .max(Duration::from_millis(10)),
            |pool, _| pool.evict_idle(),
        );
    }
}

/// How many sandboxes exist (active, warm and pre-warmed).
#[derive(Debug, Message)]
#[rtype(result = "u32")]
pub struct CountLive;

impl Handler<CountLive> for SandboxPool {
    type Result = u32;

    fn handle(&mut self, _: CountLive, _: &mut Context<Self>) -> u32 {
        self.total() as u32
    }
}

/// Acquire the sandbox of a principal (waiting for capacity when the policy says so).
#[derive(Debug, Message)]
#[rtype(result = "Result<Acquired, SandboxError>")]
pub struct Acquire {
    pub principal: Principal,
    pub known_id: Option<String>,
}

impl Handler<Acquire> for SandboxPool {
    type Result = ResponseFuture<Result<Acquired, SandboxError>>;

    fn handle(&mut self, msg: Acquire, _: &mut Context<Self>) -> Self::Result {
        match self.try_acquire(&msg.principal, msg.known_id.as_deref()) {
            Ok(Some(a)) => Box::pin(async move { Ok(a) }),
            Err(e) => Box::pin(async move { Err(e) }),
            Ok(None) => {
                let (tx, rx) = oneshot::channel();
                self.waiters.push_back(Waiter {
                    principal: msg.principal,
                    known_id: msg.known_id,
                    tx,
                });
                let wait = self.settings.acquire_timeout;
                let capacity = self.settings.capacity;
                Box::pin(async move {
                    match tokio::time::timeout(wait, rx).await {
                        Ok(Ok(r)) => r,
                        _ => Err(SandboxError::WaitTimedOut {
                            capacity,
                            waited_ms: wait.as_millis() as u64,
                        }),
                    }
                })
            }
        }
    }
}

/// Release one hold on a sandbox; the last release parks it warm.
#[derive(Debug, Message)]
#[rtype(result = "Result<(), SandboxError>")]
pub struct Release(pub String);

impl Handler<Release> for SandboxPool {
    type Result = Result<(), SandboxError>;

    fn handle(&mut self, Release(id): Release, _: &mut Context<Self>) -> Self::Result {
        let key = SandboxId::unbound(&id);
        let Some(e) = self.entries.get_mut(&key) else {
            return Err(SandboxError::UnknownSandbox(id));
        };
        e.touched = Instant::now();
        if let State::Active { holders } = e.state {
            e.state = if holders > 1 {
                State::Active {
                    holders: holders - 1,
                }
            } else {
                e.addr.do_send(ReleaseBackground);
                State::Warm
            };
        }
        while self.entries.len() > self.settings.replicas as usize {
            if !self.evict_oldest_warm() {
                break;
            }
        }
        self.serve_waiters();
        Ok(())
    }
}

/// Kills every sandbox (sandbox-host is shutting down); answers once each was told.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Shutdown;

impl Handler<Shutdown> for SandboxPool {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Shutdown, _: &mut Context<Self>) -> Self::Result {
        let addrs: Vec<Addr<Sandbox>> = std::mem::take(&mut self.entries)
            .into_values()
            .map(|e| e.addr)
            .chain(
                std::mem::take(&mut self.prewarmed)
                    .into_iter()
                    .map(|p| p.addr),
            )
            .collect();
        for w in self.waiters.drain(..) {
            let _ = w.tx.send(Err(SandboxError::ProviderUnavailable(
                "sandbox-host is shutting down".into(),
            )));
        }
        Box::pin(async move {
            for a in addrs {
                let _ = a.send(Kill).await;
            }
        })
    }
}

/// The sandbox actor of an id (active or warm).
#[derive(Debug, Message)]
#[rtype(result = "Result<Addr<Sandbox>, SandboxError>")]
pub struct Resolve(pub String);

impl Handler<Resolve> for SandboxPool {
    type Result = Result<Addr<Sandbox>, SandboxError>;

    fn handle(&mut self, Resolve(id): Resolve, _: &mut Context<Self>) -> Self::Result {
        self.kind()?;
        match self.entries.get_mut(&SandboxId::unbound(&id)) {
            Some(e) => {
                e.touched = Instant::now();
                Ok(e.addr.clone())
            }
            None => Err(SandboxError::UnknownSandbox(id)),
        }
    }
}

/// The pool's status.
#[derive(Debug, Message)]
#[rtype(result = "PoolStatus")]
pub struct Status;

impl Handler<Status> for SandboxPool {
    type Result = ResponseFuture<PoolStatus>;

    fn handle(&mut self, _: Status, _: &mut Context<Self>) -> Self::Result {
        let (provider, note) = match &self.verdict {
            ProviderVerdict::Serve { kind, note } => (kind.as_str().to_string(), note.clone()),
            ProviderVerdict::Refuse(why) => ("none".to_string(), why.clone()),
        };
        let s = &self.settings;
        let base = PoolStatus {
            provider,
            provider_note: note,
            replicas: s.replicas,
            capacity: s.capacity,
            idle_timeout_s: s.idle_timeout.as_secs(),
            base_dir: s.base_dir.display().to_string(),
            sandboxes: Vec::new(),
        };
        let mut rows: Vec<(SandboxStatus, Addr<Sandbox>)> = Vec::new();
        for (id, e) in &self.entries {
            let (state, holders) = match e.state {
                State::Active { holders } => ("active", holders),
                State::Warm => ("warm", 0),
            };
            rows.push((
                SandboxStatus {
                    sandbox_id: id.to_string(),
                    user_id: e.user_id.clone(),
                    thread_id: e.thread_id.clone(),
                    state: state.into(),
                    holders,
                    age_ms: e.created.elapsed().as_millis() as u64,
                    idle_ms: e.touched.elapsed().as_millis() as u64,
                    supervisor_pid: None,
                },
                e.addr.clone(),
            ));
        }
        for p in &self.prewarmed {
            rows.push((
                SandboxStatus {
                    sandbox_id: p.id.to_string(),
                    user_id: String::new(),
                    thread_id: String::new(),
                    // `prewarming` until its supervisor's mounts are in place.
                    state: if p.is_ready() {
                        "prewarmed"
                    } else {
                        "prewarming"
                    }
                    .into(),
                    holders: 0,
                    age_ms: p.created.elapsed().as_millis() as u64,
                    idle_ms: p.created.elapsed().as_millis() as u64,
                    supervisor_pid: None,
                },
                p.addr.clone(),
            ));
        }
        Box::pin(async move {
            let mut status = base;
            for (mut row, addr) in rows {
                row.supervisor_pid = addr.send(SupervisorPid).await.ok().flatten();
                status.sandboxes.push(row);
            }
            status
        })
    }
}
