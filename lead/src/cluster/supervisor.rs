//! `Supervisor`: spawns and restarts the local cluster's child processes (mcp-host,
//! sandbox-host, subagent workers) and owns their supervision state. A child that exits is
//! restarted with backoff; after `restart_max` crashes within `restart_window` it is marked
//! failed with the reason. Children die with the lead (PDEATHSIG) and are reaped here.
//! Children can be added while the cluster runs (`AddChildren`) and removed
//! (`RemoveChild`: SIGTERM, SIGKILL after the grace, then forgotten, never restarted).
//! In cluster mode the children are remote: processes on other machines that something
//! else (Kubernetes) starts and restarts. The supervisor only dials them ([`ChildSpec::remote`]):
//! their state is their link's, and removing one closes its link.

use std::{
    collections::{BTreeMap, VecDeque},
    os::unix::process::ExitStatusExt,
    path::PathBuf,
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

use actix::prelude::*;
use antler_protocol::link::Published;
use antler_protocol::{
    handshake::{Identity, Role},
    link::{HostLink, RedialNow, Snapshot, StopLink},
    messages::ProcessStatus,
    transport::Address,
    ConnectionConfig,
};
use futures::future::BoxFuture;

use crate::runs::hosts::{HostLinks, Links};

/// How to start one child process.
#[derive(Debug, Clone)]
pub struct ChildSpec {
    pub role: Role,
    pub index: u32,
    pub binary: PathBuf,
    pub socket: PathBuf,
    pub log: PathBuf,
    pub token_file: PathBuf,
    /// Extra arguments after the common ones.
    pub args: Vec<String>,
    /// The process outlives a killed lead, and the next lead adopts it (subagent
    /// workers: their tasks finish and their results wait to be collected).
    pub survives_lead: bool,
    /// A process this lead does not start: it only dials this address.
    pub remote: Option<Address>,
}

impl ChildSpec {
    /// A child on another machine (cluster mode), reached at `address`.
    pub fn remote(role: Role, index: u32, address: Address) -> ChildSpec {
        ChildSpec {
            role,
            index,
            binary: PathBuf::new(),
            socket: PathBuf::new(),
            log: PathBuf::new(),
            token_file: PathBuf::new(),
            args: Vec::new(),
            survives_lead: false,
            remote: Some(address),
        }
    }

    /// Where the child listens.
    pub fn address(&self) -> Address {
        self.remote
            .clone()
            .unwrap_or_else(|| Address::Unix(self.socket.clone()))
    }
}

/// Restart policy of the supervisor.
#[derive(Debug, Clone)]
pub struct RestartPolicy {
    pub max_crashes: u32,
    pub window: Duration,
    pub first_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self {
            max_crashes: 5,
            window: Duration::from_secs(60),
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Starting,
    Running,
    Restarting,
    Failed,
    Stopped,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Running => "running",
            Phase::Restarting => "restarting",
            Phase::Failed => "failed",
            Phase::Stopped => "stopped",
        }
    }
}

struct Child {
    spec: ChildSpec,
    pid: Option<u32>,
    started_at: Option<Instant>,
    restarts: u32,
    crashes: VecDeque<Instant>,
    phase: Phase,
    reason: Option<String>,
    link: Addr<HostLink>,
    /// The link's current connection, as it publishes it.
    conn: Published,
    /// Bumped at each spawn, so an exit report of an older process is recognised.
    generation: u64,
    /// Since when the running process has not been reachable through its link.
    unreachable_since: Option<Instant>,
    /// The process was started by an earlier lead and adopted by this one.
    adopted: bool,
    /// Being removed: its exit is final, and the waiters learn when it is reaped.
    removing: Option<Vec<tokio::sync::oneshot::Sender<()>>>,
}

type Key = (Role, u32);

/// One child's link, in [`LinkTable`].
#[derive(Clone)]
pub struct LinkEntry {
    /// The child's address (its identity for rendezvous hashing).
    pub address: String,
    pub link: Addr<HostLink>,
    /// The link's current connection, read without a message to it.
    pub conn: Published,
}

impl LinkEntry {
    /// The link's connection if it is up.
    pub fn connection(&self) -> Option<antler_protocol::Connection> {
        self.conn
            .read()
            .ok()
            .and_then(|c| c.clone())
            .filter(|c| !c.is_closed())
    }
}

/// The supervisor's links by (role, index), kept in step with its children, for callers
/// that must not wait on the supervisor's thread (the lead's relays, which run on its I/O
/// thread and read it from there).
pub type LinkTable = Arc<dashmap::DashMap<Key, LinkEntry>>;

/// Heartbeat windows a running child may stay unreachable before it is killed.
const HUNG_AFTER_MISSES: u32 = 2;

/// The supervisor actor.
pub struct Supervisor {
    children: BTreeMap<Key, Child>,
    policy: RestartPolicy,
    heartbeat_dead_after: Duration,
    stopping: bool,
    stop_waiters: Vec<tokio::sync::oneshot::Sender<()>>,
    /// How this lead introduces itself to a child it may adopt.
    identity: Identity,
    config: ConnectionConfig,
    /// `children`'s links, for readers on other threads.
    table: LinkTable,
}

impl Supervisor {
    /// A supervisor for `specs`; each child gets a link that dials its socket with `identity`.
    pub fn new(
        specs: Vec<ChildSpec>,
        identity: Identity,
        config: ConnectionConfig,
        policy: RestartPolicy,
    ) -> Self {
        let heartbeat_dead_after = config.heartbeat_interval * config.heartbeat_misses.max(1);
        let children: BTreeMap<Key, Child> = specs
            .into_iter()
            .map(|spec| ((spec.role, spec.index), new_child(spec, &identity, &config)))
            .collect();
        let table = LinkTable::default();
        for (key, child) in &children {
            table.insert(*key, child.entry());
        }
        Self {
            children,
            identity,
            config,
            table,
            policy,
            heartbeat_dead_after,
            stopping: false,
            stop_waiters: Vec::new(),
        }
    }

    /// The links of the children, kept in step with them (take it before starting).
    pub fn link_table(&self) -> LinkTable {
        self.table.clone()
    }

    /// Adds a child and its link to the table.
    fn add(&mut self, key: Key, child: Child) {
        self.table.insert(key, child.entry());
        self.children.insert(key, child);
    }

    /// Forgets a child and its link; the link is stopped for good.
    fn forget(&mut self, key: &Key) -> Option<Child> {
        self.table.remove(key);
        let old = self.children.remove(key)?;
        old.link.do_send(StopLink);
        Some(old)
    }

    /// Starts the child, or first adopts a live one an earlier lead left on its socket.
    fn spawn_child(&mut self, key: Key, ctx: &mut Context<Self>) {
        if self
            .children
            .get(&key)
            .is_some_and(|c| c.removing.is_some())
        {
            return;
        }
        let Some(child) = self.children.get_mut(&key) else {
            return;
        };
        if child.spec.remote.is_some() {
            child.generation += 1;
            child.started_at = Some(Instant::now());
            child.phase = Phase::Running;
            child.link.do_send(RedialNow);
            return;
        }
        if !child.spec.survives_lead || !child.spec.socket.exists() || child.restarts > 0 {
            self.start_fresh(key, ctx);
            return;
        }
        let address = Address::Unix(child.spec.socket.clone());
        let identity = self.identity.clone();
        let config = self.config.clone();
        actix::fut::wrap_future::<_, Self>(
            async move { live_pid(&address, &identity, config).await },
        )
        .map(move |pid, act, ctx| match pid {
            Some(pid) => act.adopt(key, pid, ctx),
            None => act.start_fresh(key, ctx),
        })
        .spawn(ctx);
    }

    /// Takes over a child an earlier lead started: it is watched by its pid, since this
    /// lead cannot wait for a process it did not start.
    fn adopt(&mut self, key: Key, pid: u32, ctx: &mut Context<Self>) {
        let Some(child) = self.children.get_mut(&key) else {
            return;
        };
        child.generation += 1;
        let generation = child.generation;
        child.pid = Some(pid);
        child.adopted = true;
        child.started_at = Some(Instant::now());
        child.unreachable_since = None;
        child.phase = Phase::Running;
        tracing::info!(role = %key.0, index = key.1, pid, "adopted a child an earlier lead started");
        child.link.do_send(RedialNow);
        Self::watch_adopted(key, generation, pid, ctx);
    }

    /// Checks every 250 ms that an adopted child still lives; stops watching once the
    /// child is gone from the table or replaced by a newer process.
    fn watch_adopted(key: Key, generation: u64, pid: u32, ctx: &mut Context<Self>) {
        ctx.run_later(Duration::from_millis(250), move |act, ctx| {
            if act
                .children
                .get(&key)
                .is_none_or(|c| c.generation != generation)
            {
                return;
            }
            if antler_protocol::sys::process_runs(pid) {
                Self::watch_adopted(key, generation, pid, ctx);
            } else {
                act.child_exited(key, generation, "the adopted process exited".into(), ctx);
            }
        });
    }

    fn start_fresh(&mut self, key: Key, ctx: &mut Context<Self>) {
        let Some(child) = self.children.get_mut(&key) else {
            return;
        };
        child.adopted = false;
        child.generation += 1;
        let generation = child.generation;
        let spec = child.spec.clone();
        let _ = std::fs::remove_file(&spec.socket);
        match start_process(&spec) {
            Ok(mut process) => {
                child.pid = process.id();
                child.started_at = Some(Instant::now());
                child.unreachable_since = None;
                child.phase = Phase::Running;
                tracing::info!(role = %spec.role, index = spec.index, pid = ?child.pid, "started child");
                // Reap the process and report its exit.
                actix::fut::wrap_future::<_, Self>(async move { process.wait().await })
                    .map(move |status, act, ctx| {
                        let desc = match status {
                            Ok(s) => describe_exit(s),
                            Err(e) => format!("could not be waited for: {e}"),
                        };
                        act.child_exited(key, generation, desc, ctx);
                    })
                    .spawn(ctx);
                // Dial as soon as the socket exists instead of waiting for the link's backoff.
                let link = child.link.clone();
                let socket = spec.socket.clone();
                actix::spawn(async move {
                    let until = Instant::now() + Duration::from_secs(5);
                    while !socket.exists() && Instant::now() < until {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    link.do_send(RedialNow);
                });
            }
            Err(e) => {
                let desc = format!("could not start {}: {e}", spec.binary.display());
                tracing::error!(role = %spec.role, index = spec.index, error = %desc, "spawn failed");
                self.child_exited(key, generation, desc, ctx);
            }
        }
    }

    fn child_exited(&mut self, key: Key, generation: u64, desc: String, ctx: &mut Context<Self>) {
        let policy = self.policy.clone();
        let stopping = self.stopping;
        let Some(child) = self.children.get_mut(&key) else {
            return;
        };
        if child.generation != generation {
            return;
        }
        child.pid = None;
        child.started_at = None;
        if let Some(waiters) = child.removing.take() {
            // A removed child's exit is final: it is forgotten, never restarted.
            tracing::info!(role = %key.0, index = key.1, exit = %desc, "removed child stopped");
            self.forget(&key);
            for w in waiters {
                let _ = w.send(());
            }
            self.maybe_finish_stop();
            return;
        }
        if stopping {
            child.phase = Phase::Stopped;
            self.maybe_finish_stop();
            return;
        }
        let now = Instant::now();
        child.crashes.push_back(now);
        while child
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) > policy.window)
        {
            child.crashes.pop_front();
        }
        let crashes = child.crashes.len() as u32;
        let log = child.spec.log.display().to_string();
        if crashes >= policy.max_crashes {
            let reason = format!(
                "{} crashed {crashes} times within {} s (last: {desc}); not restarting; see {log}",
                key.0,
                policy.window.as_secs()
            );
            tracing::error!(role = %key.0, index = key.1, %reason, "child failed");
            child.phase = Phase::Failed;
            child.reason = Some(reason);
            return;
        }
        let delay = policy
            .first_delay
            .saturating_mul(1u32 << (crashes.saturating_sub(1)).min(10))
            .min(policy.max_delay);
        tracing::warn!(role = %key.0, index = key.1, exit = %desc, ?delay, "child exited; restarting");
        child.phase = Phase::Restarting;
        child.reason = Some(format!("last exit: {desc}"));
        child.restarts += 1;
        ctx.run_later(delay, move |act, ctx| {
            if !act.stopping {
                act.spawn_child(key, ctx);
            }
        });
    }

    /// A running child that its link cannot reach (hung, or deadlocked: its heartbeats
    /// stopped) for `HUNG_AFTER_MISSES` heartbeat windows is killed, so the exit path
    /// restarts it. A child still starting gets the same time to come up.
    fn check_liveness(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        let hung_after = self.heartbeat_dead_after * HUNG_AFTER_MISSES;
        for (key, child) in &self.children {
            if child.phase != Phase::Running || child.removing.is_some() {
                continue;
            }
            let key = *key;
            let generation = child.generation;
            actix::fut::wrap_future::<_, Self>(child.link.send(Snapshot))
                .map(move |snap, act, _| {
                    let Some(child) = act.children.get_mut(&key) else { return };
                    if child.generation != generation || child.phase != Phase::Running {
                        return;
                    }
                    let reachable = snap.is_ok_and(|s| s.connected);
                    let remote = child.spec.remote.is_some();
                    if reachable {
                        child.unreachable_since = None;
                        if remote {
                            child.reason = None;
                        }
                        return;
                    }
                    let now = Instant::now();
                    let since = *child.unreachable_since.get_or_insert(now);
                    if remote {
                        // Not this lead's to restart: it says how long it has been away.
                        let away = now.duration_since(since).as_millis();
                        child.reason = Some(format!("unreachable for {away} ms"));
                        return;
                    }
                    if now.duration_since(since) >= hung_after {
                        if let Some(pid) = child.pid {
                            tracing::warn!(role = %key.0, index = key.1, pid, "child unreachable for {:?}; killing it to restart", now.duration_since(since));
                            child.reason = Some(format!("unresponsive for {} ms; killed", now.duration_since(since).as_millis()));
                            signal(pid, libc::SIGKILL);
                        }
                        child.unreachable_since = None;
                    }
                })
                .spawn(ctx);
        }
    }

    fn maybe_finish_stop(&mut self) {
        if self.children.values().all(|c| c.pid.is_none()) {
            for w in self.stop_waiters.drain(..) {
                let _ = w.send(());
            }
        }
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if crate::teardown::tearing_down() {
            return;
        }
        let keys: Vec<Key> = self.children.keys().copied().collect();
        for k in keys {
            self.spawn_child(k, ctx);
        }
        let every = (self.heartbeat_dead_after / 3).max(Duration::from_millis(100));
        ctx.run_interval(every, |act, ctx| act.check_liveness(ctx));
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        for c in self.children.values() {
            if let Some(pid) = c.pid {
                signal(pid, libc::SIGKILL);
            }
        }
    }
}

/// The pid of the live child answering on `address`, if one does.
async fn live_pid(address: &Address, identity: &Identity, config: ConnectionConfig) -> Option<u32> {
    use antler_protocol::calls::ControlCalls;
    let connection = tokio::time::timeout(
        Duration::from_secs(2),
        antler_protocol::link::dial(address, identity, config, None),
    )
    .await
    .ok()?
    .ok()?;
    let health = connection.health(Duration::from_secs(2)).await;
    connection.close("adoption probe done");
    health.ok().map(|health| health.pid)
}

/// A child not started yet, with its link.
impl Child {
    fn entry(&self) -> LinkEntry {
        LinkEntry {
            address: self.spec.address().to_string(),
            link: self.link.clone(),
            conn: self.conn.clone(),
        }
    }
}

fn new_child(spec: ChildSpec, identity: &Identity, config: &ConnectionConfig) -> Child {
    // Supervised: a link that stops (chaos mode) is restarted in place and redials.
    let link = HostLink::new(spec.address(), identity.clone(), config.clone()).expecting(spec.role);
    let conn = link.published();
    let link = link.supervised();
    Child {
        spec,
        conn,
        pid: None,
        started_at: None,
        restarts: 0,
        crashes: VecDeque::new(),
        phase: Phase::Starting,
        reason: None,
        link,
        generation: 0,
        unreachable_since: None,
        adopted: false,
        removing: None,
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions; the pid belongs to a child that has
    // not been reaped yet (its wait future has not resolved), so it cannot have been reused.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

fn describe_exit(s: std::process::ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "exited".to_string(),
    }
}

fn start_process(spec: &ChildSpec) -> std::io::Result<tokio::process::Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log)?;
    let mut cmd = tokio::process::Command::new(&spec.binary);
    cmd.arg("--listen")
        .arg(format!("unix:{}", spec.socket.display()))
        .arg("--token-file")
        .arg(&spec.token_file)
        .arg("--node-id")
        .arg(format!("{}-{}", spec.role.as_str(), spec.index))
        .arg("--index")
        .arg(spec.index.to_string())
        .args(&spec.args)
        // The children listen on Unix sockets, which carry no TLS; TLS files meant for
        // this process (another role's certificate) are not theirs.
        .env_remove(antler_protocol::tls::TLS_CA_ENV)
        .env_remove(antler_protocol::tls::TLS_CERT_ENV)
        .env_remove(antler_protocol::tls::TLS_KEY_ENV)
        // Chaos mode reaches a child only as `--chaos`, from a lead in chaos mode.
        .env_remove(antler_protocol::messages::CHAOS_ENV)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .kill_on_drop(true);
    // SAFETY: getpid is async-signal-safe and has no preconditions.
    let parent = unsafe { libc::getpid() };
    let survives_lead = spec.survives_lead;
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe
    // functions (prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || {
            if survives_lead {
                // A worker outlives a killed lead (its own orphan check ends it when
                // no lead comes back).
                return Ok(());
            }
            // Die with the lead, even when it is killed with SIGKILL.
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The lead may have died before prctl took effect.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// The status of every child, as `antler status` shows it.
#[derive(Debug, Message)]
#[rtype(result = "Vec<ProcessStatus>")]
pub struct GetStatus;

impl Handler<GetStatus> for Supervisor {
    type Result = ResponseActFuture<Self, Vec<ProcessStatus>>;

    fn handle(&mut self, _: GetStatus, _: &mut Context<Self>) -> Self::Result {
        let links: Vec<(Key, Addr<HostLink>)> = self
            .children
            .iter()
            .map(|(k, c)| (*k, c.link.clone()))
            .collect();
        let dead_after = self.heartbeat_dead_after;
        Box::pin(
            async move {
                let mut snaps = Vec::with_capacity(links.len());
                for (k, l) in links {
                    snaps.push((k, l.send(Snapshot).await.ok()));
                }
                snaps
            }
            .into_actor(self)
            .map(move |snaps, act, _| {
                snaps
                    .into_iter()
                    .filter_map(|(k, snap)| {
                        let c = act.children.get(&k)?;
                        let heard = snap.as_ref().and_then(|s| s.since_last_heard);
                        let connected = snap.as_ref().is_some_and(|s| s.connected);
                        Some(ProcessStatus {
                            role: k.0,
                            index: k.1,
                            pid: c.pid,
                            address: c.spec.address().to_string(),
                            healthy: c.phase == Phase::Running
                                && connected
                                && heard.is_some_and(|h| h < dead_after),
                            restarts: c.restarts,
                            uptime_s: c
                                .started_at
                                .map(|t| t.elapsed().as_secs_f64())
                                .unwrap_or(0.0),
                            last_heartbeat_ms: heard.map(|h| h.as_millis() as u64),
                            state: c.phase.as_str().to_string(),
                            // Why a child that is not linked is not: its own reason, else
                            // the link's (a refused handshake: another build, a wrong token).
                            reason: c.reason.clone().or_else(|| {
                                snap.as_ref()
                                    .filter(|s| !s.connected)
                                    .and_then(|s| s.last_error.clone())
                            }),
                            slots: None,
                            in_use: None,
                        })
                    })
                    .collect()
            }),
        )
    }
}

/// The links to the children, to send them requests.
#[derive(Debug, Message)]
#[rtype(result = "Vec<(Role, u32, String, Addr<HostLink>)>")]
pub struct GetLinks;

impl Handler<GetLinks> for Supervisor {
    type Result = MessageResult<GetLinks>;

    fn handle(&mut self, _: GetLinks, _: &mut Context<Self>) -> Self::Result {
        MessageResult(
            self.children
                .iter()
                .map(|(k, c)| (k.0, k.1, c.spec.address().to_string(), c.link.clone()))
                .collect(),
        )
    }
}

/// Stops every child: SIGTERM, then SIGKILL for those still running after `grace`.
/// Resolves when every child has been reaped.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StopAll {
    pub grace: Duration,
}

impl Handler<StopAll> for Supervisor {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, msg: StopAll, ctx: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        for c in self.children.values_mut() {
            if let Some(pid) = c.pid {
                signal(pid, libc::SIGTERM);
            } else {
                c.phase = Phase::Stopped;
            }
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.stop_waiters.push(tx);
        self.maybe_finish_stop();
        ctx.run_later(msg.grace, |act, _| {
            for c in act.children.values() {
                if let Some(pid) = c.pid {
                    tracing::warn!(role = %c.spec.role, pid, "child did not stop in time; killing it");
                    signal(pid, libc::SIGKILL);
                }
            }
        });
        Box::pin(
            async move {
                let _ = rx.await;
            }
            .into_actor(self),
        )
    }
}

/// Adds children to a running cluster and starts them (a key it has already is left as
/// it is). Supervised like the others from then on.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct AddChildren(pub Vec<ChildSpec>);

impl Handler<AddChildren> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: AddChildren, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        for spec in msg.0 {
            let key = (spec.role, spec.index);
            if self.children.contains_key(&key) {
                continue;
            }
            let child = new_child(spec, &self.identity, &self.config);
            self.add(key, child);
            self.spawn_child(key, ctx);
        }
    }
}

/// Removes one child: SIGTERM, SIGKILL if it still runs after `grace`, and once it is
/// reaped it is forgotten (its exit is never restarted). Resolves when it is gone
/// (at once for a key it does not have).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RemoveChild {
    pub role: Role,
    pub index: u32,
    pub grace: Duration,
}

impl Handler<RemoveChild> for Supervisor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: RemoveChild, ctx: &mut Context<Self>) -> Self::Result {
        let key = (msg.role, msg.index);
        let Some(child) = self.children.get_mut(&key) else {
            return Box::pin(async {});
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        child.removing.get_or_insert_with(Vec::new).push(tx);
        child.phase = Phase::Stopped;
        match child.pid {
            Some(pid) => {
                tracing::info!(role = %key.0, index = key.1, pid, "removing child: SIGTERM");
                signal(pid, libc::SIGTERM);
                let generation = child.generation;
                ctx.run_later(msg.grace, move |act, _| {
                    let Some(child) = act.children.get(&key) else { return };
                    if let (Some(pid), true) = (child.pid, child.generation == generation) {
                        tracing::warn!(role = %key.0, index = key.1, pid, "removed child did not stop in time; killing it");
                        signal(pid, libc::SIGKILL);
                    }
                });
            }
            None => {
                // Not running (restarting, failed): nothing to stop, forget it now.
                if let Some(old) = self.forget(&key) {
                    for w in old.removing.into_iter().flatten() {
                        let _ = w.send(());
                    }
                }
            }
        }
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

/// The runs (and the dispatcher) reach the hosts through the supervisor's links.
impl HostLinks for Addr<Supervisor> {
    fn links(&self) -> BoxFuture<'static, Result<Links, String>> {
        let supervisor = self.clone();
        Box::pin(async move { supervisor.send(GetLinks).await.map_err(|e| e.to_string()) })
    }

    fn processes(&self) -> BoxFuture<'static, Vec<ProcessStatus>> {
        let supervisor = self.clone();
        Box::pin(async move { supervisor.send(GetStatus).await.unwrap_or_default() })
    }
}

/// The entries of `role` in the supervisor's link table, by index.
pub fn table_replicas(links: &LinkTable, role: Role) -> Vec<LinkEntry> {
    let mut replicas: Vec<(u32, LinkEntry)> = links
        .iter()
        .filter(|e| e.key().0 == role)
        .map(|e| (e.key().1, e.value().clone()))
        .collect();
    replicas.sort_by_key(|(i, _)| *i);
    replicas.into_iter().map(|(_, e)| e).collect()
}
