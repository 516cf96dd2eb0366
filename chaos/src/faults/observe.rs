//! What the cluster shows of the processes a fault hits: their entries and pids in the
//! cluster view (`GET /api/cluster`: by role and worker index locally, by proxied address
//! in multi-host mode), the MCP servers' state and reconnects, a volume shown full, and
//! the lines their logs wrote since a fault (the logs' timestamps start with the second).

use std::path::Path;

use serde_json::Value;

use super::Target;
use crate::cluster::ChaosCluster;

/// The pid of `role` (index `index`) in a cluster view's processes.
pub fn pid_of(view: &Value, role: &str, index: Option<u64>) -> Option<u32> {
    view["processes"]
        .as_array()?
        .iter()
        .find(|p| p["role"] == role && index.is_none_or(|i| p["index"].as_u64() == Some(i)))?["pid"]
        .as_u64()
        .map(|p| p as u32)
}

pub(super) fn reconnects(view: &Value) -> u64 {
    view["mcp_servers"]
        .as_array()
        .map(|s| s.iter().filter_map(|m| m["reconnects"].as_u64()).sum())
        .unwrap_or(0)
}

pub(super) fn mcp_ready(view: &Value) -> bool {
    view["mcp_servers"]
        .as_array()
        .is_some_and(|s| !s.is_empty() && s.iter().all(|m| m["state"] == "ready"))
}

pub(super) fn role_name(target: Target) -> &'static str {
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
pub(super) fn host_logged(
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
pub(super) fn process_of<'v>(
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

/// The free bytes of sandbox-host `replica`'s volume, when the cluster view shows it full.
pub(super) fn volume_full(cluster: &ChaosCluster, view: &Value, replica: u32) -> Option<u64> {
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
