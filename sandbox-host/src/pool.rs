//! `SandboxPool`: owns every sandbox of this host, keyed by its deterministic id. Acquire is
//! idempotent (handled one at a time by the actor, so concurrent acquires of one thread get
//! one sandbox) and takes a lease ([`crate::lease`]); release ends it, and the last one
//! parks the sandbox warm. Leases whose owner is gone are reclaimed: one not renewed within
//! `lease_ttl` (checked every quarter TTL), and every lease of an older lead incarnation
//! once a newer one names itself. Invariants: active + warm stays at or under `replicas`
//! unless every slot is active (then it grows, with a warning); active + warm + pre-warmed
//! never exceeds `capacity` (an acquire then waits or is rejected); one user holds at most
//! its share of active sandboxes (`limits.user_max_sandboxes`, half the capacity by
//! default), so one user cannot take every slot; warm sandboxes idle
//! past `idle_timeout` are destroyed by a check every `idle_check_interval`. A call with a
//! call id runs once ([`crate::recent_calls`]). The pool supervises its sandbox actors: one
//! that stopped (crashed) is replaced at its next use by a fresh one over the same thread
//! directories, under the same id and leases.

use std::{
    collections::{BTreeMap, VecDeque},
    sync::Arc,
    time::{Duration, Instant},
};

use actix::prelude::*;
use antler_protocol::messages::{
    AcquireSource, Acquired, LeaseOwner, PoolStatus, Principal, SandboxError, SandboxStatus,
    ToolResult,
};
use tokio::sync::oneshot;

use crate::{
    identity::{self, SandboxId},
    lease::{LeaseKey, Leases},
    paths::ThreadPaths,
    provider::ProviderVerdict,
    recent_calls::{Begin, CallKey, Ending, RecentCalls},
    sandbox::{Bind, Crash, Kill, ReleaseBackground, Sandbox, SupervisorPid},
    settings::{OverflowPolicy, ProviderKind, SandboxSettings},
};

struct Entry {
    user_id: String,
    thread_id: String,
    addr: Addr<Sandbox>,
    /// Its holders; none (and no call running) means warm.
    leases: Leases,
    created: Instant,
    touched: Instant,
    /// Times its actor stopped unexpectedly and was started again.
    restarts: u32,
}

impl Entry {
    fn is_warm(&self) -> bool {
        self.leases.is_idle()
    }
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
    owner: Option<LeaseOwner>,
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
    /// The lead incarnation that named itself last; older ones' leases are reclaimed.
    incarnation: Option<String>,
    next_anonymous: u64,
    recent: RecentCalls,
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
            incarnation: None,
            next_anonymous: 0,
            recent: RecentCalls::default(),
        }
    }

    fn lease_until(&self) -> Instant {
        Instant::now() + self.settings.lease_ttl
    }

    fn lease_key(&mut self, owner: Option<&LeaseOwner>) -> LeaseKey {
        match owner {
            Some(o) => LeaseKey::Run(o.clone()),
            None => {
                self.next_anonymous += 1;
                LeaseKey::Anonymous(self.next_anonymous)
            }
        }
    }

    /// A lead incarnation names itself: when it is newer than the last one (incarnation
    /// ids sort by the lead's start), the leases of every other one are reclaimed (one lead
    /// drives a cluster's runs; a new incarnation means the old one is gone). A late
    /// request of an older one changes nothing.
    fn note_incarnation(&mut self, owner: Option<&LeaseOwner>) {
        let Some(owner) = owner else { return };
        if self
            .incarnation
            .as_deref()
            .is_some_and(|current| owner.incarnation.as_str() <= current)
        {
            return;
        }
        if let Some(old) = self.incarnation.replace(owner.incarnation.clone()) {
            tracing::info!(old = %old, new = %owner.incarnation, "a new lead incarnation; reclaiming the old one's leases");
        }
        let now = Instant::now();
        for (id, e) in &mut self.entries {
            let was_warm = e.is_warm();
            for key in e.leases.reclaim_other_incarnations(&owner.incarnation) {
                tracing::info!(sandbox = %id, "reclaiming the lease of {key}: its lead is gone");
            }
            if e.is_warm() && !was_warm {
                e.touched = now;
                e.addr.do_send(ReleaseBackground);
            }
        }
        self.after_release();
    }

    /// Reclaims the leases not renewed within the TTL (their holder is gone).
    fn expire_leases(&mut self) {
        let now = Instant::now();
        let mut changed = false;
        for (id, e) in &mut self.entries {
            let expired = e.leases.expire(now);
            for key in &expired {
                tracing::warn!(sandbox = %id, "reclaiming the lease of {key}: not renewed within the lease TTL");
            }
            if !expired.is_empty() && e.is_warm() {
                e.touched = now;
                e.addr.do_send(ReleaseBackground);
                changed = true;
            }
        }
        if changed {
            self.after_release();
        }
    }

    /// Sandboxes went warm: trim to `replicas` and serve waiters.
    fn after_release(&mut self) {
        while self.entries.len() > self.settings.replicas as usize {
            if !self.evict_oldest_warm() {
                break;
            }
        }
        self.serve_waiters();
    }

    fn kind(&self) -> Result<ProviderKind, SandboxError> {
        match &self.verdict {
            ProviderVerdict::Serve { kind, .. } => Ok(*kind),
            ProviderVerdict::Refuse(why) => Err(SandboxError::ProviderUnavailable(why.clone())),
        }
    }

    /// Active sandboxes one user may hold: `sandbox.limits.user_max_sandboxes`, else half
    /// the capacity (at least one).
    fn user_sandbox_limit(&self) -> usize {
        match self.settings.limits.user_max_sandboxes {
            0 => (self.settings.capacity as usize / 2).max(1),
            n => n as usize,
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
            .filter(|(_, e)| e.is_warm())
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
            let mut slot = ThreadPaths::new(&self.prewarm_root(), "pool", &name);
            // Bound to no user yet: it sees no user's skills (Bind gives it its user's).
            slot.user_id.clear();
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
        // A user's own filesystem (the disk quota) is not the one the slots are on: their
        // directories cannot be moved there.
        if thread.root.exists() || self.settings.volumes.is_some() {
            return None;
        }
        let ready = self.prewarmed.iter().position(Prewarmed::is_ready)?;
        let p = self.prewarmed.remove(ready);
        let moved = thread
            .create_parents()
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

    /// The supervision of the sandbox actors: an entry whose actor stopped (it crashed)
    /// gets a fresh one over the same thread directories, keeping its id and leases.
    fn revive(&mut self, id: &SandboxId) -> Result<(), SandboxError> {
        let kind = self.kind()?;
        let Some(e) = self.entries.get_mut(id) else {
            return Ok(());
        };
        if e.addr.connected() {
            return Ok(());
        }
        let thread = ThreadPaths::new(&self.settings.base_dir, &e.user_id, &e.thread_id);
        let fresh = Sandbox::new(self.settings.clone(), kind, thread).map_err(|e| {
            SandboxError::ProviderUnavailable(format!("cannot restart the sandbox: {e}"))
        })?;
        e.addr = fresh.start();
        e.restarts += 1;
        tracing::warn!(sandbox = %id, restarts = e.restarts, "the sandbox's actor had stopped; started a fresh one over the same files");
        Ok(())
    }

    /// Acquire without waiting: `Ok(None)` means "at capacity, wait".
    fn try_acquire(
        &mut self,
        p: &Principal,
        known_id: Option<&str>,
        owner: Option<&LeaseOwner>,
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
        let lease_ttl_ms = self.settings.lease_ttl.as_millis() as u64;
        let acquired = |source| Acquired {
            sandbox_id: id.to_string(),
            source,
            lease_ttl_ms,
        };
        if self.entries.contains_key(&id) {
            self.revive(&id)?;
            let key = self.lease_key(owner);
            let until = self.lease_until();
            if let Some(e) = self.entries.get_mut(&id) {
                e.touched = Instant::now();
                let source = if e.is_warm() {
                    AcquireSource::Warm
                } else {
                    AcquireSource::Active
                };
                e.leases.hold(key, until);
                return Ok(Some(acquired(source)));
            }
        }
        // One user's share: its sandboxes that are in use (its warm ones give way).
        let limit = self.user_sandbox_limit();
        let held = self
            .entries
            .values()
            .filter(|e| e.user_id == p.user_id && !e.is_warm())
            .count();
        if held >= limit {
            return Err(SandboxError::UserAtLimit {
                user_id: p.user_id.clone(),
                limit: limit as u32,
            });
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
        let key = self.lease_key(owner);
        let until = self.lease_until();
        self.entries.insert(
            id.clone(),
            Entry {
                user_id: p.user_id.clone(),
                thread_id: p.thread_id.clone(),
                addr,
                leases: Leases::held(key, until),
                created: now,
                touched: now,
                restarts: 0,
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
            match self.try_acquire(&w.principal, w.known_id.as_deref(), w.owner.as_ref()) {
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
            .filter(|(_, e)| e.is_warm() && e.touched.elapsed() >= timeout)
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
        // A full volume is seen within two seconds (statvfs: no blocking worth a thread).
        let mut volume = crate::volume::Watch::default();
        ctx.run_interval(Duration::from_secs(2), move |pool, _| {
            volume.check(&pool.settings.base_dir)
        });
        ctx.run_interval(
            self.settings
                .idle_check_interval
                .max(Duration::from_millis(10)),
            |pool, _| pool.evict_idle(),
        );
        ctx.run_interval(
            (self.settings.lease_ttl / 4).max(Duration::from_millis(25)),
            |pool, _| pool.expire_leases(),
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
    /// Who holds the lease (`None`: an anonymous hold).
    pub owner: Option<LeaseOwner>,
}

impl Handler<Acquire> for SandboxPool {
    type Result = ResponseFuture<Result<Acquired, SandboxError>>;

    fn handle(&mut self, msg: Acquire, _: &mut Context<Self>) -> Self::Result {
        self.note_incarnation(msg.owner.as_ref());
        match self.try_acquire(&msg.principal, msg.known_id.as_deref(), msg.owner.as_ref()) {
            Ok(Some(a)) => Box::pin(async move { Ok(a) }),
            Err(e) => Box::pin(async move { Err(e) }),
            Ok(None) => {
                let (tx, rx) = oneshot::channel();
                self.waiters.push_back(Waiter {
                    principal: msg.principal,
                    known_id: msg.known_id,
                    owner: msg.owner,
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

/// Ends one lease on a sandbox (`owner`'s, or one anonymous hold); the last release
/// parks it warm.
#[derive(Debug, Message)]
#[rtype(result = "Result<(), SandboxError>")]
pub struct Release {
    pub sandbox_id: String,
    pub owner: Option<LeaseOwner>,
}

impl Handler<Release> for SandboxPool {
    type Result = Result<(), SandboxError>;

    fn handle(&mut self, msg: Release, _: &mut Context<Self>) -> Self::Result {
        self.note_incarnation(msg.owner.as_ref());
        let key = SandboxId::unbound(&msg.sandbox_id);
        let Some(e) = self.entries.get_mut(&key) else {
            return Err(SandboxError::UnknownSandbox(msg.sandbox_id));
        };
        e.touched = Instant::now();
        let was_warm = e.is_warm();
        e.leases.release(msg.owner.as_ref());
        if e.is_warm() && !was_warm {
            // Parked: what its commands left running in the background dies now.
            e.addr.do_send(ReleaseBackground);
        }
        self.after_release();
        Ok(())
    }
}

/// Renews every lease `owner` holds; replies how many.
#[derive(Debug, Message)]
#[rtype(result = "u32")]
pub struct RenewLease(pub LeaseOwner);

impl Handler<RenewLease> for SandboxPool {
    type Result = u32;

    fn handle(&mut self, RenewLease(owner): RenewLease, _: &mut Context<Self>) -> u32 {
        self.note_incarnation(Some(&owner));
        let until = self.lease_until();
        let mut renewed = 0;
        for e in self.entries.values_mut() {
            if e.leases.renew(&owner, until) {
                renewed += 1;
            }
        }
        renewed
    }
}

/// How a call may go ahead ([`BeginCall`]).
pub enum CallStart {
    /// Run it in this sandbox, then send [`EndCall`].
    Run(Addr<Sandbox>),
    /// The same call is running; its result comes here.
    Repeat(oneshot::Receiver<ToolResult>),
    /// The same call ran; this was its result.
    Repeated(ToolResult),
}

/// A call is about to run in sandbox `sandbox_id`: renews (or takes again) `owner`'s lease,
/// keeps every lease of the sandbox from expiring until [`EndCall`], and with a call id
/// makes sure the call runs once.
#[derive(Debug, Message)]
#[rtype(result = "Result<CallStart, SandboxError>")]
pub struct BeginCall {
    pub sandbox_id: String,
    pub owner: Option<LeaseOwner>,
    pub call_id: Option<String>,
}

fn call_key(
    sandbox_id: &str,
    owner: Option<&LeaseOwner>,
    call_id: Option<&str>,
) -> Option<CallKey> {
    Some(CallKey {
        sandbox_id: sandbox_id.to_owned(),
        run_id: owner?.run_id.clone(),
        call_id: call_id?.to_owned(),
    })
}

impl Handler<BeginCall> for SandboxPool {
    type Result = Result<CallStart, SandboxError>;

    fn handle(&mut self, msg: BeginCall, _: &mut Context<Self>) -> Self::Result {
        self.kind()?;
        self.note_incarnation(msg.owner.as_ref());
        let until = self.lease_until();
        self.revive(&SandboxId::unbound(&msg.sandbox_id))?;
        let Some(e) = self.entries.get_mut(&SandboxId::unbound(&msg.sandbox_id)) else {
            return Err(SandboxError::UnknownSandbox(msg.sandbox_id));
        };
        e.touched = Instant::now();
        if let Some(owner) = &msg.owner {
            // Any call renews its lease; a lease that expired (its lead was stopped) is
            // taken again, since its run is evidently alive.
            e.leases.hold(LeaseKey::Run(owner.clone()), until);
        }
        let addr = e.addr.clone();
        if let Some(key) = call_key(&msg.sandbox_id, msg.owner.as_ref(), msg.call_id.as_deref()) {
            match self.recent.begin(key) {
                Begin::Run => {}
                Begin::Wait(rx) => {
                    tracing::warn!(sandbox = %msg.sandbox_id, call = ?msg.call_id, "a call that is running came again; it waits for the first one's result");
                    return Ok(CallStart::Repeat(rx));
                }
                Begin::Done(result) => {
                    tracing::warn!(sandbox = %msg.sandbox_id, call = ?msg.call_id, "a call that ran came again; it gets the first one's result");
                    return Ok(CallStart::Repeated(result));
                }
            }
        }
        if let Some(e) = self.entries.get_mut(&SandboxId::unbound(&msg.sandbox_id)) {
            e.leases.call_started();
        }
        Ok(CallStart::Run(addr))
    }
}

/// A call that [`BeginCall`] let run has ended.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct EndCall {
    pub sandbox_id: String,
    pub owner: Option<LeaseOwner>,
    pub call_id: Option<String>,
    pub ending: Ending,
}

impl Handler<EndCall> for SandboxPool {
    type Result = ();

    fn handle(&mut self, msg: EndCall, _: &mut Context<Self>) {
        let until = self.lease_until();
        if let Some(e) = self.entries.get_mut(&SandboxId::unbound(&msg.sandbox_id)) {
            e.leases.call_ended();
            e.touched = Instant::now();
            if let Some(owner) = &msg.owner {
                e.leases.renew(owner, until);
            }
        }
        if let Some(key) = call_key(&msg.sandbox_id, msg.owner.as_ref(), msg.call_id.as_deref()) {
            self.recent.end(&key, msg.ending);
        }
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
        self.revive(&SandboxId::unbound(&id))?;
        match self.entries.get_mut(&SandboxId::unbound(&id)) {
            Some(e) => {
                e.touched = Instant::now();
                Ok(e.addr.clone())
            }
            None => Err(SandboxError::UnknownSandbox(id)),
        }
    }
}

/// Chaos mode: stop the sandbox actor of (user, thread) as if it crashed. False when
/// the thread has no sandbox here.
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct ChaosStop {
    pub user_id: String,
    pub thread_id: String,
}

impl Handler<ChaosStop> for SandboxPool {
    type Result = bool;

    fn handle(&mut self, msg: ChaosStop, _: &mut Context<Self>) -> bool {
        let id = SandboxId::for_thread(&msg.user_id, &msg.thread_id);
        match self.entries.get(&id) {
            Some(e) => {
                e.addr.do_send(Crash);
                true
            }
            None => false,
        }
    }
}

/// Before a deleted thread's files go: its warm sandbox is destroyed (its processes end
/// with it), so a thread made again under the same id never gets a sandbox whose mounts
/// still hold the deleted directories. A sandbox still leased refuses (the thread is in use).
#[derive(Debug, Message)]
#[rtype(result = "Result<(), ThreadInUse>")]
pub struct DiscardThread {
    pub user_id: String,
    pub thread_id: String,
}

/// A thread whose sandbox is leased (a run or an MCP session holds it).
#[derive(Debug, PartialEq, Eq)]
pub struct ThreadInUse;

impl Handler<DiscardThread> for SandboxPool {
    type Result = Result<(), ThreadInUse>;

    fn handle(&mut self, msg: DiscardThread, _: &mut Context<Self>) -> Self::Result {
        let ids: Vec<SandboxId> = self
            .entries
            .iter()
            .filter(|(_, e)| e.user_id == msg.user_id && e.thread_id == msg.thread_id)
            .map(|(id, _)| id.clone())
            .collect();
        if ids
            .iter()
            .any(|id| self.entries.get(id).is_some_and(|e| !e.is_warm()))
        {
            return Err(ThreadInUse);
        }
        for id in ids {
            tracing::info!(sandbox = %id, "destroying the sandbox of a deleted thread");
            self.entries.remove(&id);
        }
        self.serve_waiters();
        Ok(())
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
            volume: crate::volume::status(&s.base_dir),
            sandboxes: Vec::new(),
        };
        let mut rows: Vec<(SandboxStatus, Addr<Sandbox>)> = Vec::new();
        for (id, e) in &self.entries {
            let (state, holders) = if e.is_warm() {
                ("warm", 0)
            } else {
                ("active", e.leases.count())
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
