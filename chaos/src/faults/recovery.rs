//! A fault's recovery and its evidence: the cluster view polled until what was hit serves
//! again (within [`RECOVERY_LIMIT`]), and what showed the fault, looked for a moment
//! longer (a log line may come once the host notices): the restart counter or the
//! "unreachable" reason of `antler status`, a pid that changed, a reconnect count, a log
//! line.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::observe::{host_logged, mcp_ready, process_of, reconnects, role_name, volume_full};
use super::{FaultKind, Signal, Target, RECOVERY_LIMIT};
use crate::cluster::ChaosCluster;

/// Polls the cluster view (`None`: the lead does not answer) every 100 ms until `done`
/// says what was hit serves again, at most [`RECOVERY_LIMIT`] after `from`: how long it
/// took.
pub(super) async fn recovered(
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
pub(super) async fn evidence_within(
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

/// Whether what `kind` hit serves again: the lead back with every host (a lead fault), or
/// the hit host healthy (and replaced, when it was killed), with the MCP server ready
/// when the fault was on MCP's side. Other faults at the same time do not count against
/// this one's recovery.
pub(super) fn served_again(
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

/// What was known when a fault was injected, to tell what it changed.
pub(super) struct Before {
    /// The hit host's restarts, as the cluster view counted them.
    pub restarts: u64,
    /// The MCP servers' reconnects.
    pub reconnects: u64,
    pub pid: u32,
    /// The lead's pid (a lead restarted meanwhile starts every host again).
    pub lead_then: Option<u32>,
    /// What `antler status` said of the hit process while it was away (filled in while
    /// the fault lasts).
    pub shown_away: Option<String>,
    /// The logs' clock at the hit ([`super::observe::log_clock`]).
    pub since: String,
}

pub(super) fn evidence(
    cluster: &ChaosCluster,
    kind: FaultKind,
    view: &Value,
    before: &Before,
) -> Option<String> {
    let role = role_name(kind.target);
    let away = || before.shown_away.clone();
    match (kind.signal, kind.target) {
        // A paused MCP server or sandbox supervisor stops answering its host's pings.
        (Signal::Stop, Target::McpServer) => host_logged(
            cluster,
            "mcp-host",
            &["did not answer a ping", "server=everything"],
            &before.since,
        ),
        (Signal::Stop, Target::SandboxSupervisor) => host_logged(
            cluster,
            "sandbox-host",
            &["sandbox supervisor did not answer a ping"],
            &before.since,
        ),
        (Signal::Stop, _) => away().map(|a| format!("while paused: {a}")),
        (_, Target::RunsDb) => ["ERROR", "WARN"].iter().find_map(|level| {
            ["checkpoint", "runs database", "readonly", "not permitted"]
                .iter()
                .find_map(|n| cluster.lead_log_matching(&[level, n], &before.since))
                .map(|l| format!("the lead: {l}"))
        }),
        (_, Target::SandboxVolume) => away().or_else(|| {
            host_logged(
                cluster,
                "sandbox-host",
                &["sandbox volume is full"],
                &before.since,
            )
        }),
        (s, _) if s.network() => away().or_else(|| {
            cluster
                .lead_log_matching(&["WARN", role], &before.since)
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
                &before.since,
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
            &before.since,
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
                .lead_log_matching(&["child exited; restarting", &role_field], &before.since)
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
