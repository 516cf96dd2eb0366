//! The invariants over what the cluster holds once the runs have ended: no sandbox still
//! leased, no pooled stdio session of a run still alive, no zombie process while it
//! serves again; and, once it has stopped, no process of it left.

use std::path::Path;
use std::time::{Duration, Instant};

use super::{invariant, Invariant};
use crate::cluster::ChaosCluster;
use crate::procfs::{ancestors, processes};

/// Leases end with their runs (a killed lead's are reclaimed by the next one): no sandbox
/// is held, within 45 s.
pub(super) async fn no_sandbox_leaked(cluster: &ChaosCluster) -> Invariant {
    let until = Instant::now() + Duration::from_secs(45);
    let mut held = Vec::new();
    while Instant::now() < until {
        held = match cluster.view().await {
            None => vec!["the cluster view did not answer".to_owned()],
            Some(v) => v["sandboxes"]["sandboxes"]
                .as_array()
                .map(|s| {
                    s.iter()
                        .filter(|x| x["holders"].as_u64().unwrap_or(0) > 0)
                        .map(|x| {
                            format!(
                                "sandbox of {} still held by {}",
                                x["thread_id"].as_str().unwrap_or("?"),
                                x["holders"]
                            )
                        })
                        .collect()
                })
                .unwrap_or_else(|| vec!["no sandbox pool in the cluster view".into()]),
        };
        if held.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    invariant(
        "no sandbox is leaked",
        held,
        "no sandbox is held once the runs have ended".into(),
    )
}

/// Each run's pooled stdio session stops once idle: what is left is each mcp-host's
/// session of the configured server, nothing per run.
pub(super) async fn no_stdio_session_leaked(cluster: &ChaosCluster) -> Invariant {
    let idle = Duration::from_secs(crate::plan::POOL_IDLE_TIMEOUT_S + 20);
    let until = Instant::now() + idle;
    let mut sessions = stdio_sessions(cluster).await;
    while !sessions.is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(500)).await;
        sessions = stdio_sessions(cluster).await;
    }
    invariant(
        "no stdio session is leaked",
        sessions,
        format!(
            "every run's pooled stdio session stopped once idle ({} s)",
            crate::plan::POOL_IDLE_TIMEOUT_S
        ),
    )
}

/// The cluster was `healthy` after the schedule, and no process of it left a zombie.
pub(super) async fn serves_again_without_zombies(
    cluster: &ChaosCluster,
    healthy: bool,
) -> Invariant {
    let zombies = zombies_of(cluster).await;
    invariant(
        "the cluster serves again, with no zombie process",
        if healthy {
            zombies
        } else {
            vec!["the cluster was not healthy after the schedule".into()]
        },
        "every process healthy, none left unreaped".into(),
    )
}

/// The MCP server sessions of each mcp-host beyond its one session of the configured
/// server (its direct children: each session's process group is led by one).
async fn stdio_sessions(cluster: &ChaosCluster) -> Vec<String> {
    let Some(view) = cluster.view().await else {
        return vec!["the cluster view is unavailable".into()];
    };
    let hosts: Vec<u32> = (0..cluster.replicas("mcp-host"))
        .filter_map(|i| cluster.host_pid(&view, "mcp-host", i))
        .collect();
    let mut children: std::collections::HashMap<u32, Vec<u32>> = Default::default();
    for (pid, state, ppid) in processes() {
        if state != 'Z' && hosts.contains(&ppid) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    children
        .into_iter()
        .filter(|(_, kids)| kids.len() > 1)
        .map(|(host, kids)| {
            format!(
                "mcp-host {host} still runs {} sessions of MCP servers",
                kids.len()
            )
        })
        .collect()
}

/// Zombie children of the lead and its hosts.
async fn zombies_of(cluster: &ChaosCluster) -> Vec<String> {
    let mut parents: Vec<u32> = cluster.lead_pid().into_iter().collect();
    if let Some(m) = &cluster.multi {
        parents.extend(m.pids());
    }
    if let Some(v) = cluster.view().await {
        for p in v["processes"].as_array().into_iter().flatten() {
            if let Some(pid) = p["pid"].as_u64() {
                parents.push(pid as u32);
            }
        }
    }
    let mut found = Vec::new();
    for (pid, state, ppid) in processes() {
        if state == 'Z' && parents.contains(&ppid) {
            found.push(format!("zombie {pid} of {ppid}"));
        }
    }
    found
}

/// After the cluster stopped: no process still names its directory (hosts, workers,
/// sandboxes, MCP servers), within 15 s.
pub fn nothing_left(dir: &Path, lead: Option<u32>) -> Invariant {
    let needle = dir.display().to_string();
    let ancestors = ancestors();
    let until = Instant::now() + Duration::from_secs(15);
    let mut left = Vec::new();
    while Instant::now() < until {
        left.clear();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if ancestors.contains(&pid) || Some(pid) == lead {
                continue;
            }
            let cmdline = std::fs::read(entry.path().join("cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            if cmdline.contains(&needle) {
                left.push(format!(
                    "{pid}: {}",
                    cmdline.chars().take(160).collect::<String>()
                ));
            }
        }
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    invariant(
        "no orphan process once the cluster stops",
        left,
        "every process of the cluster is gone".into(),
    )
}
