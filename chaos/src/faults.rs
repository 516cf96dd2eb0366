//! The faults a chaos schedule injects, and how each is measured: `kill -9`, SIGTERM and
//! SIGSTOP/SIGCONT of every process kind (the lead, mcp-host, sandbox-host, the workers),
//! `kill -9` of an MCP server's process and of a sandbox's supervisor inside bubblewrap;
//! in multi-host mode also the network between the lead and each host kind: its fault
//! proxy restarted with delay, drop, throttle or corruption, or its link cut, for a while.
//! Recovery is the time from the fault (for a pause, a proxy fault or a cut: from its
//! end) until the cluster serves again: every process healthy, the killed one replaced,
//! the MCP server ready. Each fault also records what made it visible (the restart counter
//! or the "unreachable" reason of `antler status`, a pid that changed, a reconnect count,
//! a log line).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cluster::ChaosCluster;

/// What a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    Lead,
    McpHost,
    SandboxHost,
    Worker,
    McpServer,
    SandboxSupervisor,
    /// The runs database (runs.sqlite).
    RunsDb,
    /// A sandbox's actor (local mode: `antler up --chaos`).
    Sandbox,
    /// A subagent task's graph on its worker.
    TaskGraph,
    /// The lead's catalog actor.
    Catalog,
    /// The lead's link to a host.
    PeerLink,
    /// The actor driving a run.
    Run,
    /// A sandbox-host's volume.
    SandboxVolume,
}

/// How it is hit: a signal to its process, or (multi-host) its network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    Kill,
    Term,
    Stop,
    /// Its proxy restarted with 1.2 to 2 s of latency per chunk, both ways.
    Delay,
    /// Its proxy restarted dropping 30% of the chunks.
    Drop,
    /// Its proxy restarted at 2 KB/s.
    Throttle,
    /// Its proxy restarted corrupting a byte of 5% of the chunks.
    Corrupt,
    /// Its veth set down: the host is cut off, with no reset, until it is set up again.
    Cut,
    /// Made read-only (the runs database).
    ReadOnly,
    /// Filled to its last bytes (a sandbox volume).
    Fill,
    /// One actor stopped as if it crashed (`antler chaos stop`; local mode, where the
    /// cluster runs with `--chaos`).
    Crash,
}

impl Signal {
    /// Whether the fault is on the network (multi-host only).
    pub fn network(self) -> bool {
        matches!(
            self,
            Signal::Delay | Signal::Drop | Signal::Throttle | Signal::Corrupt | Signal::Cut
        )
    }

    /// faulty's flags for a proxy fault.
    fn proxy_flags(self) -> &'static [&'static str] {
        match self {
            Signal::Delay => &["--delay", "1200-2000"],
            Signal::Drop => &["--drop", "0.3"],
            Signal::Throttle => &["--throttle", "2kb"],
            Signal::Corrupt => &["--corrupt", "0.05"],
            _ => &[],
        }
    }
}

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FaultKind {
    pub signal: Signal,
    pub target: Target,
}

impl FaultKind {
    /// Every kind a cluster of `mode` can take: signals to every process kind, `kill -9`
    /// of an MCP server and of a sandbox supervisor; in multi-host mode also every network
    /// fault on the link to each host kind.
    pub fn all(mode: crate::command::Mode) -> Vec<FaultKind> {
        use Signal::*;
        use Target::*;
        let mut all = Vec::new();
        for target in [Lead, McpHost, SandboxHost, Worker] {
            for signal in [Kill, Term, Stop] {
                all.push(FaultKind { signal, target });
            }
        }
        for target in [McpServer, SandboxSupervisor] {
            for signal in [Kill, Term, Stop] {
                all.push(FaultKind { signal, target });
            }
        }
        if crate::disk::available() {
            all.push(FaultKind {
                signal: ReadOnly,
                target: RunsDb,
            });
            all.push(FaultKind {
                signal: Fill,
                target: SandboxVolume,
            });
        }
        if mode == crate::command::Mode::Local {
            for target in [McpServer, Sandbox, TaskGraph, Catalog, PeerLink, Run] {
                all.push(FaultKind {
                    signal: Crash,
                    target,
                });
            }
        }
        if mode == crate::command::Mode::MultiHost {
            for target in [McpHost, SandboxHost, Worker] {
                for signal in [Delay, Drop, Throttle, Corrupt, Cut] {
                    all.push(FaultKind { signal, target });
                }
            }
        }
        all
    }

    /// Every kind of a local cluster.
    #[cfg(test)]
    pub fn all_local() -> Vec<FaultKind> {
        FaultKind::all(crate::command::Mode::Local)
    }

    /// `kill9:lead`, `sigterm:worker`, `sigstop:mcp-host`, `cut:sandbox-host`, ...
    pub fn name(&self) -> String {
        let signal = match self.signal {
            Signal::Kill => "kill9",
            Signal::Term => "sigterm",
            Signal::Stop => "sigstop",
            Signal::Delay => "delay",
            Signal::Drop => "drop",
            Signal::Throttle => "throttle",
            Signal::Corrupt => "corrupt",
            Signal::Cut => "cut",
            Signal::ReadOnly => "readonly",
            Signal::Fill => "full",
            Signal::Crash => "actor",
        };
        let target = match self.target {
            Target::Lead => "lead",
            Target::McpHost => "mcp-host",
            Target::SandboxHost => "sandbox-host",
            Target::Worker => "worker",
            Target::McpServer => "mcp-server",
            Target::SandboxSupervisor => "sandbox-supervisor",
            Target::RunsDb => "runs-db",
            Target::SandboxVolume => "sandbox-volume",
            Target::Sandbox => "sandbox",
            Target::TaskGraph => "task-graph",
            Target::Catalog => "catalog",
            Target::PeerLink => "peer-link",
            Target::Run => "run",
        };
        format!("{signal}:{target}")
    }

    /// The kind named `name` (as [`FaultKind::name`] writes it) that `mode` can take.
    pub fn parse(name: &str, mode: crate::command::Mode) -> Option<FaultKind> {
        FaultKind::all(mode).into_iter().find(|k| k.name() == name)
    }
}

/// What one injected fault came to.
#[derive(Debug, Clone)]
pub struct FaultOutcome {
    pub kind: FaultKind,
    /// Seconds after the schedule started.
    pub at_s: f64,
    /// The pid that was hit; `None` when there was nothing to hit (no sandbox alive).
    pub pid: Option<u32>,
    /// How long until the cluster served again; `None`: not within the limit.
    pub recovery: Option<Duration>,
    /// What showed the fault, with its reason; `None`: nothing did.
    pub evidence: Option<String>,
    /// When it was injected.
    pub hit: Instant,
    /// The replica it hit (a worker's index, ...).
    pub replica: u32,
    /// For a lead fault: when the lead answered again.
    pub back: Option<Instant>,
    /// For a SIGTERM: how long the process took to exit (it drains first: finishes the
    /// work in flight, as Kubernetes' grace period allows). Its restart begins then.
    pub drained: Option<Duration>,
}

/// How long a fault may take to recover before it counts as not survived.
const RECOVERY_LIMIT: Duration = Duration::from_secs(60);

/// How long a fault that needs something alive to hit (a worker with a task in flight, a
/// running run, an active sandbox, a running task graph) waits for one before it is
/// skipped: runs come and go within seconds, and a fault that fires between them would
/// otherwise measure nothing.
const AIM_WAIT: Duration = Duration::from_secs(15);

/// A worker replica with a task in flight, waiting up to [`AIM_WAIT`] for one (with the
/// view it was seen in); `None` when none had one meanwhile.
async fn busy_worker(cluster: &ChaosCluster, pick: usize) -> Option<(Value, u32)> {
    let until = Instant::now() + AIM_WAIT;
    let replicas = cluster.replicas("subagent").max(1);
    loop {
        if let Some(view) = cluster.view().await {
            let busy: Vec<u32> = (0..replicas)
                .filter(|r| {
                    process_of(cluster, &view, "subagent", *r)
                        .is_some_and(|p| p["in_use"].as_u64().is_some_and(|n| n > 0))
                })
                .collect();
            if let Some(r) = busy.get(pick % busy.len().max(1)) {
                return Some((view, *r));
            }
        }
        if Instant::now() >= until {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

fn send(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// The direct children of `pid`.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// The pid of `role` (index `index`) in a cluster view's processes.
pub fn pid_of(view: &Value, role: &str, index: Option<u64>) -> Option<u32> {
    view["processes"]
        .as_array()?
        .iter()
        .find(|p| p["role"] == role && index.is_none_or(|i| p["index"].as_u64() == Some(i)))?["pid"]
        .as_u64()
        .map(|p| p as u32)
}

fn reconnects(view: &Value) -> u64 {
    view["mcp_servers"]
        .as_array()
        .map(|s| s.iter().filter_map(|m| m["reconnects"].as_u64()).sum())
        .unwrap_or(0)
}

fn mcp_ready(view: &Value) -> bool {
    view["mcp_servers"]
        .as_array()
        .is_some_and(|s| !s.is_empty() && s.iter().all(|m| m["state"] == "ready"))
}

fn role_name(target: Target) -> &'static str {
    match target {
        Target::Lead | Target::RunsDb | Target::Catalog | Target::PeerLink | Target::Run => "lead",
        Target::McpHost | Target::McpServer => "mcp-host",
        Target::SandboxHost
        | Target::SandboxSupervisor
        | Target::SandboxVolume
        | Target::Sandbox => "sandbox-host",
        Target::TaskGraph => "subagent",
        Target::Worker => "subagent",
    }
}

/// The wall-clock second now, as the logs' timestamps begin (`2026-12-01T17:21:30`).
pub fn log_clock() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    )
}

/// The newest line of `log`, written at `since` or later, containing every one of
/// `needles`.
pub fn logged_since(log: &Path, needles: &[&str], since: &str) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .rev()
        .take_while(|l| l.get(..19).is_none_or(|t| t >= since))
        .find(|l| needles.iter().all(|n| l.contains(n)))
        .map(|l| l.chars().take(240).collect())
}

/// The newest line any replica of host `role` logged at `since` or later containing every
/// one of `needles`, as "ROLE: LINE".
fn host_logged(
    cluster: &ChaosCluster,
    role: &str,
    needles: &[&str],
    since: &str,
) -> Option<String> {
    (0..cluster.replicas(role))
        .find_map(|i| logged_since(&cluster.host_log(role, i), needles, since))
        .map(|l| format!("{role}: {l}"))
}

/// The process entry of `role` replica `replica` in a cluster view: by its proxied
/// address in multi-host mode (the lead numbers discovered replicas as it finds them),
/// by role and worker index in local mode.
fn process_of<'v>(
    cluster: &ChaosCluster,
    view: &'v Value,
    role: &str,
    replica: u32,
) -> Option<&'v Value> {
    let ps = view["processes"].as_array()?;
    match &cluster.multi {
        Some(m) => {
            let node = &m.nodes[m.node(role, replica)?];
            let address = node.proxied();
            ps.iter().find(|p| {
                p["role"] == role
                    && p["address"]
                        .as_str()
                        .is_some_and(|a| a.ends_with(address.trim_start_matches("tcp:")))
            })
        }
        None => ps.iter().find(|p| {
            p["role"] == role
                && (role != "subagent" || p["index"].as_u64() == Some(u64::from(replica)))
        }),
    }
}

/// Injects one fault and measures it. `pick` chooses among candidates (the schedule's
/// random choice of a replica, a worker or a sandbox).
pub async fn inject(
    cluster: &ChaosCluster,
    kind: FaultKind,
    pause: Duration,
    started: Instant,
    pick: usize,
) -> FaultOutcome {
    let at_s = started.elapsed().as_secs_f64();
    let mut outcome = FaultOutcome {
        kind,
        at_s,
        pid: None,
        recovery: None,
        evidence: None,
        hit: Instant::now(),
        replica: 0,
        back: None,
        drained: None,
    };
    let Some(mut before) = cluster.view().await else {
        // The lead does not answer (another fault holds it): nothing to aim at now.
        return outcome;
    };
    let role = role_name(kind.target);
    let mut replica = (pick % cluster.replicas(role).max(1) as usize) as u32;
    if kind.target == Target::Worker {
        // A worker with a task in flight, when one comes: its loss is what a lost
        // worker's task measures. Otherwise the one picked, idle.
        if let Some((view, busy)) = busy_worker(cluster, pick).await {
            (before, replica) = (view, busy);
        }
        outcome.at_s = started.elapsed().as_secs_f64();
    }
    outcome.replica = replica;
    let node = cluster.multi.as_ref().and_then(|m| m.node(role, replica));
    if kind.signal == Signal::Crash {
        return crash(cluster, kind, &before, started, pick).await;
    }
    let host_pid = if matches!(kind.target, Target::Lead | Target::RunsDb) {
        cluster.lead_pid()
    } else {
        cluster.host_pid(&before, role, replica)
    };
    let pid = match kind.target {
        Target::McpServer => host_pid.and_then(|h| {
            let servers = children(h);
            servers.get(pick % servers.len().max(1)).copied()
        }),
        Target::SandboxSupervisor => host_pid.and_then(|h| {
            // bubblewrap's children are the sandboxes' supervisors (each its namespace's
            // pid 1).
            let all: Vec<u32> = children(h)
                .into_iter()
                .filter(|p| cmdline(*p).contains("bwrap"))
                .flat_map(children)
                .collect();
            all.get(pick % all.len().max(1)).copied()
        }),
        _ => host_pid,
    };
    // Another fault may have taken the process since the view was read (a lead killed
    // takes its hosts with it): there is nothing to hit then.
    let Some(pid) = pid.filter(|p| antler_protocol::sys::process_runs(*p)) else {
        return outcome;
    };
    outcome.pid = Some(pid);
    outcome.hit = Instant::now();
    let since = log_clock();
    let lead_then = cluster.lead_pid();
    let restarts = process_of(cluster, &before, role, replica)
        .and_then(|p| p["restarts"].as_u64())
        .unwrap_or(0);
    let reconnects_before = reconnects(&before);
    // What `antler status` said of the hit process while it was away.
    let mut shown_away: Option<String> = None;
    let watch = |view: Option<&Value>, shown_away: &mut Option<String>| {
        if shown_away.is_some() {
            return;
        }
        match view {
            None if kind.target == Target::Lead => {
                *shown_away = Some("the lead stopped answering `antler status`".into())
            }
            None => {}
            Some(v) => {
                // A host that does not answer its part of the view is named in its errors.
                if let Some(e) = v["errors"].as_array().into_iter().flatten().find_map(|e| {
                    e.as_str()
                        .filter(|e| e.starts_with(role))
                        .map(str::to_owned)
                }) {
                    *shown_away = Some(format!("the cluster view: {e}"));
                    return;
                }
                if let Some(p) = process_of(cluster, v, role, replica) {
                    if p["healthy"] == false {
                        *shown_away = Some(format!(
                            "`antler status` showed {role} {replica} unhealthy ({})",
                            p["reason"]
                                .as_str()
                                .unwrap_or(p["state"].as_str().unwrap_or("?"))
                        ));
                    }
                }
            }
        }
    };
    let from = match kind.signal {
        Signal::Kill | Signal::Term => {
            if kind.target == Target::Lead {
                // This fault restarts the lead: the watchdog must not start another.
                cluster.lead_restart_begins();
            }
            send(
                pid,
                if kind.signal == Signal::Kill {
                    libc::SIGKILL
                } else {
                    libc::SIGTERM
                },
            );
            if kind.signal == Signal::Term {
                // The drain: until the process is gone (a zombie counts as gone).
                let signalled = Instant::now();
                while antler_protocol::sys::process_runs(pid)
                    && signalled.elapsed() < RECOVERY_LIMIT
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                outcome.drained = Some(signalled.elapsed());
            }
            match (kind.target, &cluster.multi, node) {
                // Nothing restarts the lead but its orchestrator: this command.
                (Target::Lead, _, _) => cluster.restart_lead(pid).await,
                // Nor, in multi-host mode, a host.
                (Target::McpHost | Target::SandboxHost | Target::Worker, Some(m), Some(n)) => {
                    m.restart_host(n, pid).await
                }
                _ => {}
            }
            Instant::now()
        }
        Signal::Stop => {
            send(pid, libc::SIGSTOP);
            let until = Instant::now() + pause;
            while Instant::now() < until {
                let v = cluster.view().await;
                watch(v.as_ref(), &mut shown_away);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            send(pid, libc::SIGCONT);
            Instant::now()
        }
        Signal::ReadOnly | Signal::Fill => {
            let base = cluster.bases().get(replica as usize).cloned();
            let hit = match (kind.signal, &base) {
                (Signal::ReadOnly, _) => crate::disk::database_read_only(&cluster.runtime(), true),
                (_, Some(b)) => crate::disk::fill(b).map(|_| ()),
                (_, None) => Err(anyhow::anyhow!("no sandbox volume")),
            };
            if let Err(e) = hit {
                eprintln!("antler chaos: {}: {e:#}", kind.name());
                outcome.pid = None;
                return outcome;
            }
            let until = Instant::now() + pause * 2;
            while Instant::now() < until {
                let v = cluster.view().await;
                if kind.signal == Signal::Fill && shown_away.is_none() {
                    if let Some(free) = v.as_ref().and_then(|v| volume_full(cluster, v, replica)) {
                        shown_away = Some(format!(
                            "the cluster view showed sandbox-host {replica}'s volume full ({} KiB free)",
                            free >> 10
                        ));
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            match (kind.signal, &base) {
                (Signal::ReadOnly, _) => {
                    if let Err(e) = crate::disk::database_read_only(&cluster.runtime(), false) {
                        eprintln!("antler chaos: {e:#}");
                    }
                }
                (_, Some(b)) => crate::disk::unfill(b),
                _ => {}
            }
            Instant::now()
        }
        network => {
            let (Some(m), Some(n)) = (&cluster.multi, node) else {
                outcome.pid = None;
                return outcome;
            };
            let hit = if network == Signal::Cut {
                m.link(n, false)
            } else {
                tokio::task::block_in_place(|| m.spawn_proxy(n, network.proxy_flags()))
            };
            if let Err(e) = hit {
                eprintln!("antler chaos: {}: {e:#}", kind.name());
                outcome.pid = None;
                return outcome;
            }
            let until = Instant::now() + pause * 2;
            while Instant::now() < until {
                let v = cluster.view().await;
                watch(v.as_ref(), &mut shown_away);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let restored = if network == Signal::Cut {
                m.link(n, true)
            } else {
                tokio::task::block_in_place(|| m.spawn_proxy(n, &[]))
            };
            if let Err(e) = restored {
                eprintln!("antler chaos: restoring after {}: {e:#}", kind.name());
            }
            Instant::now()
        }
    };
    // Serving again: every process healthy, the one hit replaced, the MCP server ready.
    let mut back = None;
    outcome.recovery = recovered(cluster, from, |view| {
        watch(view, &mut shown_away);
        let lead_back = match kind.signal {
            Signal::Kill | Signal::Term => cluster.lead_pid().is_some_and(|p| p != pid),
            _ => true,
        };
        // The lead is back when it serves: its gateway answers and it says it is healthy
        // (a lead that cannot write its runs database, under a disk fault at the same
        // time, drives no run until it can).
        let lead_serves = view.is_some_and(|v| {
            v["processes"]
                .as_array()
                .and_then(|ps| ps.iter().find(|p| p["role"] == "lead"))
                .is_some_and(|p| p["healthy"] == true)
        });
        if kind.target == Target::Lead && lead_serves && lead_back && back.is_none() {
            back = Some(Instant::now());
        }
        view.is_some_and(|v| served_again(cluster, kind, v, role, replica, pid))
    })
    .await;
    outcome.back = back;
    let before = Before {
        restarts,
        reconnects: reconnects_before,
        pid,
        shown_away: shown_away.as_deref(),
        since: &since,
    };
    outcome.evidence = evidence_within(cluster, |view| {
        evidence(cluster, kind, view?, &before).or_else(|| {
            // A lead restarted by another fault meanwhile started every host again.
            let now = cluster.lead_pid();
            (cluster.multi.is_none()
                && kind.target != Target::Lead
                && now.is_some()
                && now != lead_then)
                .then(|| {
                    format!(
                        "the lead restarted meanwhile (pid {lead_then:?} -> {now:?}) and started every host again"
                    )
                })
        })
    })
    .await;
    outcome
}

/// Polls the cluster view (`None`: the lead does not answer) every 100 ms until `done`
/// says what was hit serves again, at most [`RECOVERY_LIMIT`] after `from`: how long it
/// took.
async fn recovered(
    cluster: &ChaosCluster,
    from: Instant,
    mut done: impl FnMut(Option<&Value>) -> bool,
) -> Option<Duration> {
    while from.elapsed() < RECOVERY_LIMIT {
        let view = cluster.view().await;
        if done(view.as_ref()) {
            return Some(from.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// What shows a fault, looked for every 200 ms for 5 s: it may come a moment after the
/// cluster serves again (a log line written once the host notices).
async fn evidence_within(
    cluster: &ChaosCluster,
    mut find: impl FnMut(Option<&Value>) -> Option<String>,
) -> Option<String> {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let view = cluster.view().await;
        if let Some(found) = find(view.as_ref()) {
            return Some(found);
        }
        if Instant::now() >= until {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Stops one actor as if it crashed (`antler chaos stop`), chosen among those alive now,
/// and measures until the cluster serves again. What shows it: the MCP reconnect for a
/// server's connection, else the lead's log of the stop with its reason, and what the
/// actor's supervisor logged after it.
async fn crash(
    cluster: &ChaosCluster,
    kind: FaultKind,
    before: &Value,
    started: Instant,
    pick: usize,
) -> FaultOutcome {
    let mut outcome = FaultOutcome {
        kind,
        at_s: started.elapsed().as_secs_f64(),
        pid: None,
        recovery: None,
        evidence: None,
        hit: Instant::now(),
        replica: 0,
        back: None,
        drained: None,
    };
    // Something alive to stop, waiting up to `AIM_WAIT` for one to come.
    let until = Instant::now() + AIM_WAIT;
    let mut before = before.clone();
    loop {
        if let Some(actor) = crash_candidate(cluster, kind, &before, pick).await {
            let since = log_clock();
            let reconnects_before = reconnects(&before);
            let name = actor.to_string();
            outcome.at_s = started.elapsed().as_secs_f64();
            outcome.hit = Instant::now();
            // Nothing of that name alive any more (a task that ended meanwhile): try
            // another.
            if crate::lead::stop_actor(&cluster.runtime(), actor)
                .await
                .is_ok()
            {
                return crashed(cluster, kind, outcome, since, reconnects_before, name).await;
            }
        }
        if Instant::now() >= until {
            return outcome;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        if let Some(view) = cluster.view().await {
            before = view;
        }
    }
}

/// An actor of `kind` alive now, chosen by `pick`.
async fn crash_candidate(
    cluster: &ChaosCluster,
    kind: FaultKind,
    before: &Value,
    pick: usize,
) -> Option<antler_protocol::messages::ActorRef> {
    use antler_protocol::messages::ActorRef;
    let running: Vec<String> = match kind.target {
        Target::TaskGraph | Target::Run => cluster
            .get("/api/runs?status=running")
            .await
            .and_then(|v| v["runs"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|r| {
                let thread = r["thread"].as_str()?;
                let i: usize = thread.strip_prefix("chaos-")?.parse().ok()?;
                match kind.target {
                    // Delegate runs: their tasks' `task` call ids.
                    Target::TaskGraph => (i % 3 == 2).then(|| {
                        crate::plan::task_call_id(i, if pick.is_multiple_of(2) { "a" } else { "b" })
                    }),
                    _ => r["run_id"].as_str().map(str::to_owned),
                }
            })
            .collect(),
        _ => Vec::new(),
    };
    let one = |list: &[String]| list.get(pick % list.len().max(1)).cloned();
    let actor = match kind.target {
        Target::McpServer => Some(ActorRef::McpServer {
            name: "everything".into(),
        }),
        Target::Sandbox => {
            let active: Vec<String> = before["sandboxes"]["sandboxes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|s| s["state"] == "active")
                .filter_map(|s| {
                    Some(format!(
                        "{}:{}",
                        s["user_id"].as_str()?,
                        s["thread_id"].as_str()?
                    ))
                })
                .collect();
            one(&active).and_then(|n| ActorRef::parse("sandbox", Some(&n)).ok())
        }
        Target::TaskGraph => one(&running).map(|task_id| ActorRef::TaskGraph { task_id }),
        Target::Run => one(&running).map(|run_id| ActorRef::Run { run_id }),
        Target::Catalog => Some(ActorRef::Catalog),
        Target::PeerLink => {
            let links = ["mcp-host-0".to_owned(), "sandbox-host-0".to_owned()]
                .into_iter()
                .chain((0..cluster.workers).map(|w| format!("subagent-{w}")))
                .collect::<Vec<_>>();
            one(&links).and_then(|n| ActorRef::parse("peer-link", Some(&n)).ok())
        }
        _ => None,
    };
    actor
}

/// Measures a stopped actor until the cluster serves again, and finds what shows it.
async fn crashed(
    cluster: &ChaosCluster,
    kind: FaultKind,
    mut outcome: FaultOutcome,
    since: String,
    reconnects_before: u64,
    name: String,
) -> FaultOutcome {
    outcome.pid = cluster.lead_pid();
    outcome.recovery = recovered(cluster, Instant::now(), |view| {
        view.is_some_and(|v| served_again(cluster, kind, v, "lead", 0, 0))
    })
    .await;
    outcome.evidence = evidence_within(cluster, |view| {
        let now = view.map_or(0, reconnects);
        if kind.target == Target::McpServer && now > reconnects_before {
            Some(format!(
                "mcp-host reconnected {name} ({reconnects_before} -> {now} reconnects)"
            ))
        } else {
            cluster
                .lead_log_matching(&["chaos: stopping", "as if it crashed"], &since)
                .map(|l| format!("the lead: {l}"))
        }
    })
    .await;
    outcome
}

/// Whether what `kind` hit serves again: the lead back with every host (a lead fault), or
/// the hit host healthy (and replaced, when it was killed), with the MCP server ready
/// when the fault was on MCP's side. Other faults at the same time do not count against
/// this one's recovery.
fn served_again(
    cluster: &ChaosCluster,
    kind: FaultKind,
    view: &Value,
    role: &str,
    replica: u32,
    pid: u32,
) -> bool {
    let killed = matches!(kind.signal, Signal::Kill | Signal::Term);
    match kind.target {
        Target::Lead => {
            (!killed || cluster.lead_pid().is_some_and(|p| p != pid))
                && cluster.all_healthy(view)
                && mcp_ready(view)
        }
        Target::McpServer => mcp_ready(view),
        Target::RunsDb
        | Target::Sandbox
        | Target::TaskGraph
        | Target::Catalog
        | Target::PeerLink
        | Target::Run => cluster.all_healthy(view) && mcp_ready(view),
        Target::SandboxVolume => volume_full(cluster, view, replica).is_none(),
        Target::SandboxSupervisor => {
            process_of(cluster, view, role, replica).is_some_and(|p| p["healthy"] == true)
        }
        Target::McpHost | Target::SandboxHost | Target::Worker => {
            process_of(cluster, view, role, replica).is_some_and(|p| p["healthy"] == true)
                && (!killed
                    || cluster
                        .host_pid(view, role, replica)
                        .is_some_and(|p| p != pid))
                && (kind.target != Target::McpHost || mcp_ready(view))
        }
    }
}

/// The free bytes of sandbox-host `replica`'s volume, when the cluster view shows it full.
fn volume_full(cluster: &ChaosCluster, view: &Value, replica: u32) -> Option<u64> {
    let volumes = view["sandboxes"]["volumes"].as_array()?;
    let volume = match &cluster.multi {
        None => volumes.first()?,
        Some(m) => {
            let address = m.nodes[m.node("sandbox-host", replica)?].proxied();
            volumes
                .iter()
                .find(|v| v["replica"].as_str() == Some(address.as_str()))?
        }
    };
    (volume["full"] == true).then(|| volume["free_bytes"].as_u64().unwrap_or(0))
}

/// What was known when a fault was injected, to tell what it changed.
struct Before<'a> {
    restarts: u64,
    reconnects: u64,
    pid: u32,
    shown_away: Option<&'a str>,
    since: &'a str,
}

fn evidence(
    cluster: &ChaosCluster,
    kind: FaultKind,
    view: &Value,
    before: &Before<'_>,
) -> Option<String> {
    let role = role_name(kind.target);
    let away = || before.shown_away.map(str::to_owned);
    match (kind.signal, kind.target) {
        // A paused MCP server or sandbox supervisor stops answering its host's pings.
        (Signal::Stop, Target::McpServer) => host_logged(
            cluster,
            "mcp-host",
            &["did not answer a ping", "server=everything"],
            before.since,
        ),
        (Signal::Stop, Target::SandboxSupervisor) => host_logged(
            cluster,
            "sandbox-host",
            &["sandbox supervisor did not answer a ping"],
            before.since,
        ),
        (Signal::Stop, _) => away().map(|a| format!("while paused: {a}")),
        (_, Target::RunsDb) => ["ERROR", "WARN"].iter().find_map(|level| {
            ["checkpoint", "runs database", "readonly", "not permitted"]
                .iter()
                .find_map(|n| cluster.lead_log_matching(&[level, n], before.since))
                .map(|l| format!("the lead: {l}"))
        }),
        (_, Target::SandboxVolume) => away().or_else(|| {
            host_logged(
                cluster,
                "sandbox-host",
                &["sandbox volume is full"],
                before.since,
            )
        }),
        (s, _) if s.network() => away().or_else(|| {
            cluster
                .lead_log_matching(&["WARN", role], before.since)
                .map(|l| format!("the lead: {l}"))
        }),
        (_, Target::Lead) => cluster.lead_pid().filter(|p| *p != before.pid).map(|p| {
            format!(
                "the lead came back as pid {p}; its log: {}",
                cluster.lead_log_tail()
            )
        }),
        (_, Target::McpServer) => {
            let now = reconnects(view);
            host_logged(
                cluster,
                "mcp-host",
                &["WARN", "server=everything"],
                before.since,
            )
            .or_else(|| {
                (now > before.reconnects).then(|| {
                    format!(
                        "mcp-host reconnected the server ({} -> {now} reconnects)",
                        before.reconnects
                    )
                })
            })
        }
        (_, Target::SandboxSupervisor) => host_logged(
            cluster,
            "sandbox-host",
            &["sandbox supervisor exited unexpectedly"],
            before.since,
        ),
        // A remote host is the orchestrator's to restart: the lead shows it away.
        _ if cluster.multi.is_some() => away(),
        _ => {
            let total: u64 = view["processes"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .filter(|p| p["role"] == role)
                        .filter_map(|p| p["restarts"].as_u64())
                        .sum()
                })
                .unwrap_or(0);
            let role_field = format!("role={role}");
            let reason = cluster
                .lead_log_matching(&["child exited; restarting", &role_field], before.since)
                .unwrap_or_default();
            (total > before.restarts || !reason.is_empty()).then(|| {
                format!(
                    "`antler status` counts {role} restarts {} -> {total}; {reason}",
                    before.restarts
                )
            })
        }
    }
}
