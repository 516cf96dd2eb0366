//! The faults a chaos schedule injects into a local cluster, and how each is measured:
//! `kill -9`, SIGTERM and SIGSTOP/SIGCONT of every process kind (the lead, mcp-host,
//! sandbox-host, the workers), `kill -9` of an MCP server's process and of a sandbox's
//! supervisor inside bubblewrap. Recovery is the time from the fault (for a pause, from
//! SIGCONT) until the cluster serves again: every process healthy, the killed one
//! replaced, the MCP server ready. Each fault also records what made it visible (the
//! restart counter of `antler status`, a pid that changed, a reconnect count, a log line).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::ChaosCluster;

/// A process kind a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    Lead,
    McpHost,
    SandboxHost,
    Worker,
    McpServer,
    SandboxSupervisor,
}

/// How it is hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    Kill,
    Term,
    Stop,
}

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FaultKind {
    pub signal: Signal,
    pub target: Target,
}

impl FaultKind {
    /// Every kind a local cluster can take.
    pub fn all_local() -> Vec<FaultKind> {
        use Signal::*;
        use Target::*;
        let mut all = Vec::new();
        for target in [Lead, McpHost, SandboxHost, Worker] {
            for signal in [Kill, Term, Stop] {
                all.push(FaultKind { signal, target });
            }
        }
        all.push(FaultKind {
            signal: Kill,
            target: McpServer,
        });
        all.push(FaultKind {
            signal: Kill,
            target: SandboxSupervisor,
        });
        all
    }

    /// `kill9:lead`, `sigterm:worker`, `sigstop:mcp-host`, ...
    pub fn name(&self) -> String {
        let signal = match self.signal {
            Signal::Kill => "kill9",
            Signal::Term => "sigterm",
            Signal::Stop => "sigstop",
        };
        let target = match self.target {
            Target::Lead => "lead",
            Target::McpHost => "mcp-host",
            Target::SandboxHost => "sandbox-host",
            Target::Worker => "worker",
            Target::McpServer => "mcp-server",
            Target::SandboxSupervisor => "sandbox-supervisor",
        };
        format!("{signal}:{target}")
    }

    /// The kind named `name` (as [`FaultKind::name`] writes it).
    pub fn parse(name: &str) -> Option<FaultKind> {
        FaultKind::all_local()
            .into_iter()
            .find(|k| k.name() == name)
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
}

/// How long a fault may take to recover before it counts as not survived.
const RECOVERY_LIMIT: Duration = Duration::from_secs(60);

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

/// The restart counter of `role` (index `index`).
fn restarts_of(view: &Value, role: &str, index: Option<u64>) -> u64 {
    view["processes"]
        .as_array()
        .and_then(|ps| {
            ps.iter()
                .find(|p| p["role"] == role && index.is_none_or(|i| p["index"].as_u64() == Some(i)))
        })
        .and_then(|p| p["restarts"].as_u64())
        .unwrap_or(0)
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
        Target::Lead => "lead",
        Target::McpHost | Target::McpServer => "mcp-host",
        Target::SandboxHost | Target::SandboxSupervisor => "sandbox-host",
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

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// Injects one fault and measures it. `pick` chooses among candidates (the schedule's
/// random choice of a worker or sandbox).
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
    };
    let Some(before) = cluster.view().await else {
        // The lead does not answer (another fault holds it): nothing to aim at now.
        return outcome;
    };
    let role = role_name(kind.target);
    let worker_index = if kind.target == Target::Worker {
        let n = cluster.workers.max(1) as u64;
        Some(pick as u64 % n)
    } else {
        None
    };
    let host_pid = if kind.target == Target::Lead {
        cluster.lead_pid()
    } else {
        pid_of(&before, role, worker_index)
    };
    let pid = match kind.target {
        Target::McpServer => host_pid.and_then(|h| {
            let servers = children(h);
            servers.get(pick % servers.len().max(1)).copied()
        }),
        Target::SandboxSupervisor => host_pid.and_then(|h| {
            // bubblewrap's children are the sandboxes' supervisors.
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
    let Some(pid) = pid.filter(|p| alive(*p)) else {
        return outcome;
    };
    outcome.pid = Some(pid);
    let since = log_clock();
    let lead_then = cluster.lead_pid();
    let restarts = restarts_of(&before, role, worker_index);
    let reconnects_before = reconnects(&before);
    let mut paused_seen_unhealthy = false;
    let from = match kind.signal {
        Signal::Kill | Signal::Term => {
            send(
                pid,
                if kind.signal == Signal::Kill {
                    libc::SIGKILL
                } else {
                    libc::SIGTERM
                },
            );
            if kind.target == Target::Lead {
                // Nothing restarts the lead but its orchestrator: this one.
                cluster.restart_lead(pid).await;
            }
            Instant::now()
        }
        Signal::Stop => {
            send(pid, libc::SIGSTOP);
            let until = Instant::now() + pause;
            while Instant::now() < until {
                match cluster.view().await {
                    None => paused_seen_unhealthy = true,
                    Some(v) => {
                        let unhealthy = v["processes"].as_array().is_some_and(|ps| {
                            ps.iter().any(|p| {
                                p["role"] == role
                                    && worker_index.is_none_or(|i| p["index"].as_u64() == Some(i))
                                    && p["healthy"] == false
                            })
                        });
                        paused_seen_unhealthy |= unhealthy;
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            send(pid, libc::SIGCONT);
            Instant::now()
        }
    };
    // Serving again: every process healthy, the one hit replaced, the MCP server ready.
    while from.elapsed() < RECOVERY_LIMIT {
        if let Some(view) = cluster.view().await {
            let replaced = match (kind.signal, kind.target) {
                (Signal::Stop, _) | (_, Target::McpServer | Target::SandboxSupervisor) => true,
                (_, Target::Lead) => cluster.lead_pid().is_some_and(|p| p != pid),
                _ => pid_of(&view, role, worker_index).is_some_and(|p| p != pid),
            };
            if replaced && cluster.all_healthy(&view) && mcp_ready(&view) {
                outcome.recovery = Some(from.elapsed());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // What shows the fault may come a moment after the cluster serves again (a log line
    // written once the host notices).
    let until = Instant::now() + Duration::from_secs(5);
    while outcome.evidence.is_none() && Instant::now() < until {
        if let Some(view) = cluster.view().await {
            let before = Before {
                restarts,
                reconnects: reconnects_before,
                pid,
                paused_seen: paused_seen_unhealthy,
                since: &since,
            };
            outcome.evidence = evidence(cluster, kind, &view, &before)
            .or_else(|| {
                // A lead restarted by another fault meanwhile started every host again.
                let now = cluster.lead_pid();
                (kind.target != Target::Lead && now.is_some() && now != lead_then).then(|| {
                    format!(
                        "the lead restarted meanwhile (pid {lead_then:?} -> {now:?}) and started every host again"
                    )
                })
            });
        }
        if outcome.evidence.is_none() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    outcome
}

/// What was known when a fault was injected, to tell what it changed.
struct Before<'a> {
    restarts: u64,
    reconnects: u64,
    pid: u32,
    paused_seen: bool,
    since: &'a str,
}

fn evidence(
    cluster: &ChaosCluster,
    kind: FaultKind,
    view: &Value,
    before: &Before<'_>,
) -> Option<String> {
    let role = role_name(kind.target);
    match (kind.signal, kind.target) {
        (Signal::Stop, Target::Lead) => before
            .paused_seen
            .then(|| "the lead stopped answering `antler status` while paused".to_owned()),
        (Signal::Stop, _) => before
            .paused_seen
            .then(|| format!("{role} shown unhealthy in `antler status` while paused")),
        (_, Target::Lead) => cluster.lead_pid().filter(|p| *p != before.pid).map(|p| {
            format!(
                "the lead came back as pid {p}; its log: {}",
                cluster.lead_log_tail()
            )
        }),
        (_, Target::McpServer) => {
            let now = reconnects(view);
            logged_since(
                &cluster.host_log("mcp-host", 0),
                &["WARN", "server=everything"],
                before.since,
            )
            .map(|l| format!("mcp-host: {l}"))
            .or_else(|| {
                (now > before.reconnects).then(|| {
                    format!(
                        "mcp-host reconnected the server ({} -> {now} reconnects)",
                        before.reconnects
                    )
                })
            })
        }
        (_, Target::SandboxSupervisor) => logged_since(
            &cluster.host_log("sandbox-host", 0),
            &["sandbox supervisor exited unexpectedly"],
            before.since,
        )
        .map(|l| format!("sandbox-host: {l}")),
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
