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
//!
//! Here: the kinds and what a fault came to; [`inject`] fires one, [`actor`] stops an
//! actor, [`recovery`] times the recovery and finds the evidence, [`observe`] reads the
//! cluster view and the logs.

mod actor;
mod inject;
mod observe;
mod recovery;

use std::time::{Duration, Instant};

pub use inject::inject;
pub use observe::{logged_since, pid_of};

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
    /// Its link to PostgreSQL cut for a while (multi-lead mode: the lead's forwarder drops
    /// every connection and refuses new ones), then healed.
    Partition,
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
    /// fault on the link to each host kind; in multi-lead mode the leads' faults only
    /// (`kill -9`, SIGSTOP, a partition from PostgreSQL).
    pub fn all(mode: crate::command::Mode) -> Vec<FaultKind> {
        use Signal::*;
        use Target::*;
        if mode == crate::command::Mode::MultiLead {
            // The leads' own faults: the hosts are each lead's, as in local mode.
            return [Kill, Stop, Partition]
                .map(|signal| FaultKind {
                    signal,
                    target: Lead,
                })
                .to_vec();
        }
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
            Signal::Partition => "partition",
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

impl FaultOutcome {
    /// A fault of `kind` begun now, `started` being the schedule's start: nothing hit yet.
    pub(crate) fn begun(kind: FaultKind, started: Instant) -> FaultOutcome {
        FaultOutcome {
            kind,
            at_s: started.elapsed().as_secs_f64(),
            pid: None,
            recovery: None,
            evidence: None,
            hit: Instant::now(),
            replica: 0,
            back: None,
            drained: None,
        }
    }
}

/// How long a fault may take to recover before it counts as not survived.
pub(crate) const RECOVERY_LIMIT: Duration = Duration::from_secs(60);

/// How long a fault that needs something alive to hit (a worker with a task in flight, a
/// running run, an active sandbox, a running task graph) waits for one before it is
/// skipped: runs come and go within seconds, and a fault that fires between them would
/// otherwise measure nothing.
pub(crate) const AIM_WAIT: Duration = Duration::from_secs(15);
