//! The invariants a chaos schedule must keep, checked against what the cluster left: the
//! runs' views through the gateway, their checkpoints and receipts in runs.sqlite, the
//! files their tools and tasks wrote in the threads' directories, the sandbox pool, the
//! processes' memory, and the processes left once the cluster has stopped.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cluster::ChaosCluster;
use crate::faults::FaultOutcome;
use crate::plan::{self, RunKind};
use crate::runs::RunOutcome;

/// One invariant and whether it held.
#[derive(Debug, Clone)]
pub struct Invariant {
    pub name: &'static str,
    pub held: bool,
    pub detail: String,
}

fn invariant(name: &'static str, problems: Vec<String>, fine: String) -> Invariant {
    Invariant {
        name,
        held: problems.is_empty(),
        detail: if problems.is_empty() {
            fine
        } else {
            problems.join("; ")
        },
    }
}

use antler_protocol::sys::{anon_rss_kib, rss_kib};

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

/// The outputs a finished run of `kind` presents.
fn expected_artifacts(kind: RunKind, i: usize) -> Vec<String> {
    let out = |f: String| format!("/mnt/user-data/outputs/{f}");
    match kind {
        RunKind::Tools => vec![out(format!("report-{i}.md"))],
        RunKind::Clarify => vec![out(format!("answered-{i}.md"))],
        RunKind::Delegate => vec![out(format!("sub-{i}-a.md")), out(format!("sub-{i}-b.md"))],
    }
}

/// A virtual path of thread `chaos-i` on each sandbox-host replica's base (its files are
/// on the replica its thread is pinned to).
fn host_paths(bases: &[PathBuf], i: usize, virtual_path: &str) -> Vec<PathBuf> {
    bases
        .iter()
        .map(|b| {
            b.join(format!("users/default/threads/chaos-{i}/user-data"))
                .join(virtual_path.trim_start_matches("/mnt/user-data/"))
        })
        .collect()
}

/// Whether the file is on some replica.
fn on_disk(bases: &[PathBuf], i: usize, virtual_path: &str) -> bool {
    host_paths(bases, i, virtual_path)
        .iter()
        .any(|p| p.is_file())
}

/// The lines of the file, over every replica.
fn lines(bases: &[PathBuf], i: usize, virtual_path: &str) -> usize {
    host_paths(bases, i, virtual_path)
        .iter()
        .map(|p| {
            std::fs::read_to_string(p)
                .map(|t| t.lines().count())
                .unwrap_or(0)
        })
        .sum()
}

/// The run's last checkpointed state and its receipts, from runs.sqlite.
fn stored(db: &Path, run_id: &str) -> Result<(Value, u32), String> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| e.to_string())?;
    let state: String = conn
        .query_row(
            "SELECT state FROM checkpoints WHERE run_id = ?1 ORDER BY step DESC LIMIT 1",
            [run_id],
            |r| r.get(0),
        )
        .map_err(|e| format!("no checkpoint: {e}"))?;
    let receipts: u32 = conn
        .query_row(
            "SELECT COUNT(*) FROM receipts WHERE run_id = ?1",
            [run_id],
            |r| r.get(0),
        )
        .map_err(|e| e.to_string())?;
    Ok((
        serde_json::from_str(&state).map_err(|e| e.to_string())?,
        receipts,
    ))
}

/// Tool calls of the messages without exactly one result, and results without a call.
fn unanswered(messages: &[Value]) -> Vec<String> {
    let mut calls = Vec::new();
    let mut results: std::collections::HashMap<String, usize> = Default::default();
    for m in messages {
        if let Some(tc) = m["tool_calls"].as_array() {
            calls.extend(
                tc.iter()
                    .filter_map(|c| c["id"].as_str().map(str::to_owned)),
            );
        }
        if m["role"] == "tool" {
            if let Some(id) = m["tool_call_id"].as_str() {
                *results.entry(id.to_owned()).or_default() += 1;
            }
        }
    }
    let mut problems: Vec<String> = calls
        .iter()
        .filter(|c| results.get(*c).copied().unwrap_or(0) != 1)
        .map(|c| {
            format!(
                "call {c} has {} results",
                results.get(c).copied().unwrap_or(0)
            )
        })
        .collect();
    for id in results.keys() {
        if !calls.contains(id) {
            problems.push(format!("result {id} answers no call"));
        }
    }
    problems
}

/// The invariants over the runs and the cluster once every run has ended.
pub async fn after_runs(
    cluster: &ChaosCluster,
    runs: &[RunOutcome],
    memory_before: &Memory,
    healthy: bool,
    faults: &[FaultOutcome],
) -> Vec<Invariant> {
    let base = cluster.bases();
    let db = cluster.runtime().join("runs.sqlite");
    let mut out = Vec::new();

    let not_ended: Vec<String> = runs
        .iter()
        .filter(|r| r.ended_at.is_none())
        .map(|r| match &r.run_id {
            None => format!("run {} was never accepted", r.planned.index),
            Some(id) => format!(
                "{id} still `{}`",
                r.view["status"].as_str().unwrap_or("unknown")
            ),
        })
        .collect();
    out.push(invariant(
        "every run ends in a terminal state",
        not_ended,
        format!("{} of {} runs ended", runs.len(), runs.len()),
    ));

    let mut artifact_problems = Vec::new();
    let mut receipt_problems = Vec::new();
    let mut result_problems = Vec::new();
    let mut task_problems = Vec::new();
    let mut once_problems = Vec::new();
    for r in runs {
        let (Some(id), Some(_)) = (&r.run_id, r.ended_at) else {
            continue;
        };
        let i = r.planned.index;
        let success = r.view["status"] == "success";
        let artifacts: Vec<String> = r.view["artifacts"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let mut seen = std::collections::HashSet::new();
        for a in &artifacts {
            if !seen.insert(a) {
                artifact_problems.push(format!("{id} presents {a} twice"));
            }
        }
        for a in expected_artifacts(r.planned.kind, i) {
            let on_disk = on_disk(&base, i, &a);
            if artifacts.contains(&a) && !on_disk {
                artifact_problems.push(format!("{id} presented {a}, which is gone"));
            }
            // A scripted model goes on after a failed write; an output it did produce
            // must be delivered (settlement turns an unpresented one into an error).
            if success && on_disk && !artifacts.contains(&a) {
                artifact_problems.push(format!("{id} ended success without presenting {a}"));
            }
        }
        match stored(&db, id) {
            Err(e) => result_problems.push(format!("{id}: {e}")),
            Ok((state, receipts)) => {
                if success && receipts != 1 {
                    receipt_problems.push(format!("{id} has {receipts} receipts"));
                }
                let messages = state["messages"].as_array().cloned().unwrap_or_default();
                result_problems.extend(
                    unanswered(&messages)
                        .into_iter()
                        .map(|p| format!("{id}: {p}")),
                );
            }
        }
        if r.planned.kind == RunKind::Delegate {
            for task in ["a", "b"] {
                let n = lines(&base, i, &plan::task_trace(i, task));
                if n > 1 {
                    task_problems.push(format!("{id}: task {task} ran {n} times"));
                }
            }
        }
        if r.planned.kind == RunKind::Tools {
            let n = lines(&base, i, &format!("/mnt/user-data/workspace/bash-{i}.log"));
            if n > 1 {
                once_problems.push(format!("{id}: its bash call ran {n} times"));
            }
        }
    }
    let ended = runs.iter().filter(|r| r.ended_at.is_some()).count();
    out.push(invariant(
        "no artifact is lost or presented twice",
        artifact_problems,
        "every finished run presents its outputs once, and they are on disk".into(),
    ));
    out.push(invariant(
        "exactly one delivery receipt per finished run",
        receipt_problems,
        "one receipt each".into(),
    ));
    out.push(invariant(
        "every tool call has exactly one result in the run's messages",
        result_problems,
        format!("checked the last checkpoint of {ended} runs"),
    ));
    out.push(invariant(
        "no task runs twice",
        task_problems,
        "each task's trace file has at most one line".into(),
    ));
    out.push(invariant(
        "no sandbox call runs twice",
        once_problems,
        "each run's bash trace has at most one line".into(),
    ));

    // Leases end with their runs (a killed lead's are reclaimed by the next one).
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
    out.push(invariant(
        "no sandbox is leaked",
        held,
        "no sandbox is held once the runs have ended".into(),
    ));

    // Each run's pooled stdio session stops once idle: what is left is each mcp-host's
    // session of the configured server, nothing per run.
    let idle = Duration::from_secs(crate::plan::POOL_IDLE_TIMEOUT_S + 20);
    let until = Instant::now() + idle;
    let mut sessions = stdio_sessions(cluster).await;
    while !sessions.is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(500)).await;
        sessions = stdio_sessions(cluster).await;
    }
    out.push(invariant(
        "no stdio session is leaked",
        sessions,
        format!(
            "every run's pooled stdio session stopped once idle ({} s)",
            crate::plan::POOL_IDLE_TIMEOUT_S
        ),
    ));

    let after = memory(cluster).await;
    let (total, before) = (after.total(), memory_before.total());
    let limit = before + before / 10;
    let figures = format!(
        "lead and hosts resident {total} KiB after, {before} KiB before; allocated {} KiB after, {} KiB before ({})",
        after.allocated(),
        memory_before.allocated(),
        after.against(memory_before)
    );
    out.push(invariant(
        "memory back within 10% of before the schedule",
        if total <= limit && total > 0 {
            Vec::new()
        } else {
            vec![figures.clone()]
        },
        figures,
    ));

    let zombies = zombies_of(cluster).await;
    out.push(invariant(
        "the cluster serves again, with no zombie process",
        if healthy {
            zombies
        } else {
            vec!["the cluster was not healthy after the schedule".into()]
        },
        "every process healthy, none left unreaped".into(),
    ));

    let invisible: Vec<String> = faults
        .iter()
        .filter(|f| f.pid.is_some() && f.recovery.is_some() && f.evidence.is_none())
        .map(|f| format!("{} at {:.1} s left no trace", f.kind.name(), f.at_s))
        .collect();
    let unrecovered: Vec<String> = faults
        .iter()
        .filter(|f| f.pid.is_some() && f.recovery.is_none())
        .map(|f| format!("{} at {:.1} s did not recover", f.kind.name(), f.at_s))
        .collect();
    out.push(invariant(
        "every fault is visible with its reason",
        invisible,
        "each fault shows in `antler status`, a counter or a log line".into(),
    ));
    out.push(invariant(
        "every fault is recovered from",
        unrecovered,
        "each hit process is replaced or resumed and the cluster serves again".into(),
    ));
    out
}

/// Zombie children of the lead and its hosts.
/// Every process of the machine as (pid, state, parent pid), from `/proc/PID/stat`.
fn processes() -> Vec<(u32, char, u32)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The state and the parent follow the command in parentheses.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        out.push((pid, state, ppid));
    }
    out
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

/// This process and the ones that started it (their command lines may name the
/// directory too).
fn ancestors() -> Vec<u32> {
    let mut out = vec![std::process::id()];
    let mut pid = std::process::id();
    while pid > 1 {
        let Some(ppid) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .and_then(|p| p.parse::<u32>().ok())
            })
        else {
            break;
        };
        out.push(ppid);
        pid = ppid;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_call_needs_exactly_one_result() {
        let ok = vec![
            json!({"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b"}]}),
            json!({"role": "tool", "tool_call_id": "a"}),
            json!({"role": "tool", "tool_call_id": "b"}),
        ];
        assert!(unanswered(&ok).is_empty());
        let twice = vec![
            json!({"role": "assistant", "tool_calls": [{"id": "a"}]}),
            json!({"role": "tool", "tool_call_id": "a"}),
            json!({"role": "tool", "tool_call_id": "a"}),
            json!({"role": "tool", "tool_call_id": "z"}),
        ];
        assert_eq!(
            unanswered(&twice),
            ["call a has 2 results", "result z answers no call"]
        );
    }
}
