//! One fault fired and measured, in steps: aim (the host role and replica, a busy worker
//! for a worker fault), find the pid to hit, note what is known before, strike (a signal,
//! a pause, a disk fault or a network fault, for as long as it lasts), time the recovery
//! from its end, and find what showed it. An actor fault goes to [`super::actor`].

use std::time::{Duration, Instant};

use serde_json::Value;

use super::actor;
use super::observe::{log_clock, process_of, reconnects, role_name, volume_full};
use super::recovery::{evidence, evidence_within, recovered, served_again, Before};
use super::{FaultKind, FaultOutcome, Signal, Target, AIM_WAIT, RECOVERY_LIMIT};
use crate::cluster::ChaosCluster;
use crate::disk;
use crate::procfs::{children, cmdline, send};

/// Injects one fault and measures it. `pick` chooses among candidates (the schedule's
/// random choice of a replica, a worker or a sandbox).
pub async fn inject(
    cluster: &ChaosCluster,
    kind: FaultKind,
    pause: Duration,
    started: Instant,
    pick: usize,
) -> FaultOutcome {
    let mut outcome = FaultOutcome::begun(kind, started);
    let Some(aim) = aim(cluster, kind, started, pick, &mut outcome).await else {
        // The lead does not answer (another fault holds it): nothing to aim at now.
        return outcome;
    };
    if kind.signal == Signal::Crash {
        return actor::crash(cluster, kind, &aim.before, started, pick).await;
    }
    // Another fault may have taken the process since the view was read (a lead killed
    // takes its hosts with it): there is nothing to hit then.
    let Some(pid) = pid_to_hit(cluster, kind, &aim, pick) else {
        return outcome;
    };
    outcome.pid = Some(pid);
    outcome.hit = Instant::now();
    let mut before = Before {
        since: log_clock(),
        lead_then: cluster.lead_pid(),
        restarts: process_of(cluster, &aim.before, aim.role, aim.replica)
            .and_then(|p| p["restarts"].as_u64())
            .unwrap_or(0),
        reconnects: reconnects(&aim.before),
        pid,
        shown_away: None,
    };
    let mut away = Away {
        kind,
        role: aim.role,
        replica: aim.replica,
        shown: None,
    };
    let Some(from) = strike(cluster, kind, pause, &aim, pid, &mut away, &mut outcome).await else {
        outcome.pid = None;
        return outcome;
    };
    (outcome.recovery, outcome.back) =
        time_recovery(cluster, kind, &aim, pid, from, &mut away).await;
    before.shown_away = away.shown;
    outcome.evidence = find_evidence(cluster, kind, &before).await;
    outcome
}

/// What a fault aims at: a replica of a host role, chosen in a cluster view.
struct Aim {
    /// The cluster view it was chosen in.
    before: Value,
    role: &'static str,
    replica: u32,
    /// Its node, in multi-host mode.
    node: Option<usize>,
}

/// The replica `kind` hits, chosen by `pick` (for a worker fault: a worker with a task
/// in flight, when one comes); `None` when the lead does not answer. Sets the outcome's
/// replica (and, after waiting for a busy worker, its time).
async fn aim(
    cluster: &ChaosCluster,
    kind: FaultKind,
    started: Instant,
    pick: usize,
    outcome: &mut FaultOutcome,
) -> Option<Aim> {
    let mut before = cluster.view().await?;
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
    Some(Aim {
        before,
        role,
        replica,
        node,
    })
}

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

/// The process `kind` hits, alive now: the lead's (for the lead and its database), the
/// host's, or one of the host's MCP servers or sandbox supervisors, chosen by `pick`.
fn pid_to_hit(cluster: &ChaosCluster, kind: FaultKind, aim: &Aim, pick: usize) -> Option<u32> {
    let host_pid = if matches!(kind.target, Target::Lead | Target::RunsDb) {
        cluster.lead_pid()
    } else {
        cluster.host_pid(&aim.before, aim.role, aim.replica)
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
    pid.filter(|p| antler_protocol::sys::process_runs(*p))
}

/// A process's last heartbeat this long ago shows it silent: heartbeats come every second
/// (`ConnectionConfig::heartbeat_interval`), and it is called unhealthy after three missed.
const SILENT_MS: u64 = 1500;

/// What `antler status` said of the hit process while it was away: the first sign seen.
struct Away {
    kind: FaultKind,
    role: &'static str,
    replica: u32,
    shown: Option<String>,
}

impl Away {
    /// Notes what `view` (`None`: the lead did not answer) shows of the hit process being
    /// away, unless something did already.
    fn watch(&mut self, cluster: &ChaosCluster, view: Option<&Value>) {
        if self.shown.is_some() {
            return;
        }
        let (role, replica) = (self.role, self.replica);
        match view {
            None if self.kind.target == Target::Lead => {
                self.shown = Some("the lead stopped answering `antler status`".into())
            }
            None => {}
            Some(v) => {
                // A host that does not answer its part of the view is named in its errors.
                if let Some(e) = v["errors"].as_array().into_iter().flatten().find_map(|e| {
                    e.as_str()
                        .filter(|e| e.starts_with(role))
                        .map(str::to_owned)
                }) {
                    self.shown = Some(format!("the cluster view: {e}"));
                    return;
                }
                if let Some(p) = process_of(cluster, v, role, replica) {
                    if p["healthy"] == false {
                        self.shown = Some(format!(
                            "`antler status` showed {role} {replica} unhealthy ({})",
                            p["reason"]
                                .as_str()
                                .unwrap_or(p["state"].as_str().unwrap_or("?"))
                        ));
                    } else if let Some(silent) = p["last_heartbeat_ms"]
                        .as_u64()
                        .filter(|ms| *ms >= SILENT_MS)
                    {
                        // Paused for less than the heartbeats it may miss before it is
                        // called unhealthy, it still shows as silent.
                        self.shown = Some(format!(
                            "`antler status` showed no heartbeat from {role} {replica} for {silent} ms"
                        ));
                    }
                }
            }
        }
    }
}

/// Fires the fault at `pid` and waits out its length: when it ended (the recovery is
/// timed from then), or `None` when it could not be made.
async fn strike(
    cluster: &ChaosCluster,
    kind: FaultKind,
    pause: Duration,
    aim: &Aim,
    pid: u32,
    away: &mut Away,
    outcome: &mut FaultOutcome,
) -> Option<Instant> {
    match kind.signal {
        Signal::Kill | Signal::Term => Some(end_process(cluster, kind, aim, pid, outcome).await),
        Signal::Stop => Some(pause_process(cluster, pid, pause, away).await),
        Signal::ReadOnly | Signal::Fill => disk_fault(cluster, kind, pause, aim, away).await,
        network => network_fault(cluster, kind, network, pause, aim, away).await,
    }
}

/// `kill -9` or SIGTERM (timing the drain until it is gone); then this command starts
/// again what nothing else restarts: the lead, and in multi-host mode a host.
async fn end_process(
    cluster: &ChaosCluster,
    kind: FaultKind,
    aim: &Aim,
    pid: u32,
    outcome: &mut FaultOutcome,
) -> Instant {
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
        while antler_protocol::sys::process_runs(pid) && signalled.elapsed() < RECOVERY_LIMIT {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        outcome.drained = Some(signalled.elapsed());
    }
    match (kind.target, &cluster.multi, aim.node) {
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

/// SIGSTOP for `pause`, watching the cluster view, then SIGCONT.
async fn pause_process(
    cluster: &ChaosCluster,
    pid: u32,
    pause: Duration,
    away: &mut Away,
) -> Instant {
    send(pid, libc::SIGSTOP);
    let until = Instant::now() + pause;
    while Instant::now() < until {
        let v = cluster.view().await;
        away.watch(cluster, v.as_ref());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    send(pid, libc::SIGCONT);
    Instant::now()
}

/// The runs database read-only, or the replica's sandbox volume full, for twice `pause`;
/// then undone. `None` when it could not be made.
async fn disk_fault(
    cluster: &ChaosCluster,
    kind: FaultKind,
    pause: Duration,
    aim: &Aim,
    away: &mut Away,
) -> Option<Instant> {
    let replica = aim.replica;
    let base = cluster.bases().get(replica as usize).cloned();
    let hit = match (kind.signal, &base) {
        (Signal::ReadOnly, _) => disk::database_read_only(&cluster.runtime(), true),
        (_, Some(b)) => disk::fill(b).map(|_| ()),
        (_, None) => Err(anyhow::anyhow!("no sandbox volume")),
    };
    if let Err(e) = hit {
        eprintln!("antler chaos: {}: {e:#}", kind.name());
        return None;
    }
    let until = Instant::now() + pause * 2;
    while Instant::now() < until {
        let v = cluster.view().await;
        if kind.signal == Signal::Fill && away.shown.is_none() {
            if let Some(free) = v.as_ref().and_then(|v| volume_full(cluster, v, replica)) {
                away.shown = Some(format!(
                    "the cluster view showed sandbox-host {replica}'s volume full ({} KiB free)",
                    free >> 10
                ));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    match (kind.signal, &base) {
        (Signal::ReadOnly, _) => {
            if let Err(e) = disk::database_read_only(&cluster.runtime(), false) {
                eprintln!("antler chaos: {e:#}");
            }
        }
        (_, Some(b)) => disk::unfill(b),
        _ => {}
    }
    Some(Instant::now())
}

/// Multi-host: the node's proxy restarted with `network`'s fault, or its link cut, for
/// twice `pause`, watching the cluster view; then restored. `None` when it could not be
/// made (or in local mode).
async fn network_fault(
    cluster: &ChaosCluster,
    kind: FaultKind,
    network: Signal,
    pause: Duration,
    aim: &Aim,
    away: &mut Away,
) -> Option<Instant> {
    let (Some(m), Some(n)) = (&cluster.multi, aim.node) else {
        return None;
    };
    let hit = if network == Signal::Cut {
        m.link(n, false)
    } else {
        tokio::task::block_in_place(|| m.spawn_proxy(n, network.proxy_flags()))
    };
    if let Err(e) = hit {
        eprintln!("antler chaos: {}: {e:#}", kind.name());
        return None;
    }
    let until = Instant::now() + pause * 2;
    while Instant::now() < until {
        let v = cluster.view().await;
        away.watch(cluster, v.as_ref());
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
    Some(Instant::now())
}

/// How long from `from` until what was hit serves again (every process healthy, the one
/// hit replaced, the MCP server ready), watching it away meanwhile; and for a lead fault,
/// when the lead served again.
async fn time_recovery(
    cluster: &ChaosCluster,
    kind: FaultKind,
    aim: &Aim,
    pid: u32,
    from: Instant,
    away: &mut Away,
) -> (Option<Duration>, Option<Instant>) {
    let mut back = None;
    let recovery = recovered(cluster, from, |view| {
        away.watch(cluster, view);
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
        view.is_some_and(|v| served_again(cluster, kind, v, aim.role, aim.replica, pid))
    })
    .await;
    (recovery, back)
}

/// What showed the fault; else, in local mode, a lead restarted by another fault
/// meanwhile (it started every host again).
async fn find_evidence(cluster: &ChaosCluster, kind: FaultKind, before: &Before) -> Option<String> {
    let lead_then = before.lead_then;
    evidence_within(cluster, |view| {
        evidence(cluster, kind, view?, before).or_else(|| {
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
    .await
}
