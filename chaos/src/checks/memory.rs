//! The memory of the lead and the hosts, measured once warm and again once the runs have
//! ended, and the invariant that it came back within a tenth.

use std::time::Duration;

use antler_protocol::sys::{anon_rss_kib, rss_kib};

use super::{invariant, Invariant};
use crate::cluster::ChaosCluster;

/// The memory of the lead, mcp-host and sandbox-host replicas, in KiB: each one's
/// resident set, which the invariant checks, and beside it what it allocated (anonymous
/// resident memory: heap, stacks), the part a leak grows (the rest is its binary's and
/// libraries' pages).
#[derive(Debug, Clone, Default)]
pub struct Memory {
    /// (process, allocated KiB, resident KiB): `lead`, then `mcp-host` and
    /// `sandbox-host` replicas by index.
    pub processes: Vec<(String, u64, u64)>,
}

impl Memory {
    pub fn total(&self) -> u64 {
        self.processes.iter().map(|(_, _, rss)| rss).sum()
    }

    fn allocated(&self) -> u64 {
        self.processes.iter().map(|(_, anon, _)| anon).sum()
    }

    /// Each process's figures before and after, e.g. `lead 31200→33100 KiB (allocated 3100→3300)`.
    fn against(&self, before: &Memory) -> String {
        self.processes
            .iter()
            .map(|(name, anon, rss)| {
                let was = before.processes.iter().find(|(n, ..)| n == name);
                let (a, r) = was.map_or_else(
                    || ("?".to_owned(), "?".to_owned()),
                    |(_, a, r)| (a.to_string(), r.to_string()),
                );
                format!("{name} {r}→{rss} KiB (allocated {a}→{anon})")
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Each process's resident memory once its heap trimmer has run since the work measured
/// (`HEAP_TRIM_EVERY` and a second): what it holds, not what it freed a moment ago.
pub async fn memory(cluster: &ChaosCluster) -> Memory {
    tokio::time::sleep(antler_protocol::sys::HEAP_TRIM_EVERY + Duration::from_secs(1)).await;
    let mut processes = Vec::new();
    if let Some(pid) = cluster.lead_pid() {
        processes.push(("lead".to_owned(), anon_rss_kib(pid), rss_kib(pid)));
    }
    if let Some(view) = cluster.view().await {
        for role in ["mcp-host", "sandbox-host"] {
            for i in 0..cluster.replicas(role) {
                if let Some(pid) = cluster.host_pid(&view, role, i) {
                    processes.push((format!("{role}#{i}"), anon_rss_kib(pid), rss_kib(pid)));
                }
            }
        }
    }
    Memory { processes }
}

/// The lead's and the hosts' resident memory back within 10% of `before` (measured warm,
/// before the schedule).
pub(super) async fn back_within_a_tenth(
    cluster: &ChaosCluster,
    memory_before: &Memory,
) -> Invariant {
    let after = memory(cluster).await;
    let (total, before) = (after.total(), memory_before.total());
    let limit = before + before / 10;
    let figures = format!(
        "lead and hosts resident {total} KiB after, {before} KiB before; allocated {} KiB after, {} KiB before ({})",
        after.allocated(),
        memory_before.allocated(),
        after.against(memory_before)
    );
    invariant(
        "memory back within 10% of before the schedule",
        if total <= limit && total > 0 {
            Vec::new()
        } else {
            vec![figures.clone()]
        },
        figures,
    )
}
