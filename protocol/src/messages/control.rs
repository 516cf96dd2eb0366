//! Control messages every peer answers: ping (echoes its payload), health, and, in chaos
//! mode only, `ChaosStop`: stop one named actor as if it had crashed, so its supervisor's
//! restart path runs (docs/faults.md says what restarts each actor and what callers see).

use serde::{Deserialize, Serialize};

use crate::handshake::Role;

/// The variable (and `--chaos` the flag) that turns chaos mode on in every process.
pub const CHAOS_ENV: &str = "ANTLER_CHAOS";

/// The error a `ChaosStop` gets from a process not in chaos mode.
pub const CHAOS_OFF: &str = "chaos mode is off: start the cluster with `antler up --chaos` \
     (or ANTLER_CHAOS=1) to stop actors on purpose";

/// Understood by every peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[strum(prefix = "Control::")]
pub enum ControlRequest {
    /// Echo the payload back: a liveness and round-trip probe.
    Ping {
        #[serde(with = "super::bytes")]
        payload: Vec<u8>,
    },
    /// Report the process's health.
    Health,
    /// Chaos mode: stop this actor as if it had crashed (no graceful path). Refused with
    /// [`CHAOS_OFF`] outside chaos mode. The lead routes it to the process owning the actor.
    ChaosStop { actor: ActorRef },
}

impl ControlRequest {
    pub fn kind(&self) -> &'static str {
        match self {
            ControlRequest::Ping { .. } => "ping",
            ControlRequest::Health => "health",
            ControlRequest::ChaosStop { .. } => "chaos-stop",
        }
    }
}

/// One actor of the cluster, named the way its owner finds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ActorRef {
    /// mcp-host: the connection of one MCP server (every pooled session of it too).
    McpServer { name: String },
    /// sandbox-host: the sandbox of one (user, thread).
    Sandbox { user: String, thread: String },
    /// A subagent worker: the graph of one task (the `task` call's id).
    TaskGraph { task_id: String },
    /// The lead: its catalog actor.
    Catalog,
    /// The lead: its link to one host.
    PeerLink { role: Role, index: u32 },
    /// The lead: the actor driving one run.
    Run { run_id: String },
}

/// The kinds `antler chaos stop KIND` accepts, in the order it lists them.
pub const ACTOR_KINDS: [&str; 6] = [
    "mcp-server",
    "sandbox",
    "task-graph",
    "catalog",
    "peer-link",
    "run",
];

impl ActorRef {
    /// The kind's name, as `antler chaos stop` takes it.
    pub fn kind(&self) -> &'static str {
        match self {
            ActorRef::McpServer { .. } => "mcp-server",
            ActorRef::Sandbox { .. } => "sandbox",
            ActorRef::TaskGraph { .. } => "task-graph",
            ActorRef::Catalog => "catalog",
            ActorRef::PeerLink { .. } => "peer-link",
            ActorRef::Run { .. } => "run",
        }
    }

    /// The role of the process that owns this actor.
    pub fn owner(&self) -> Role {
        match self {
            ActorRef::McpServer { .. } => Role::McpHost,
            ActorRef::Sandbox { .. } => Role::SandboxHost,
            ActorRef::TaskGraph { .. } => Role::Subagent,
            ActorRef::Catalog | ActorRef::PeerLink { .. } | ActorRef::Run { .. } => Role::Lead,
        }
    }

    /// Parses `KIND NAME` as `antler chaos stop` takes them: `mcp-server NAME`,
    /// `sandbox [USER:]THREAD` (user `default` when absent), `task-graph TASK_ID`,
    /// `catalog`, `peer-link ROLE-INDEX` (e.g. `sandbox-host-0`, `subagent-1`), `run RUN_ID`.
    pub fn parse(kind: &str, name: Option<&str>) -> Result<ActorRef, String> {
        let name = name.map(str::trim).filter(|n| !n.is_empty());
        let need = |what: &str| {
            name.map(str::to_owned)
                .ok_or_else(|| format!("`{kind}` needs {what}"))
        };
        match kind {
            "mcp-server" => Ok(ActorRef::McpServer {
                name: need("the server's name")?,
            }),
            "sandbox" => {
                let name = need("a thread id, or USER:THREAD")?;
                let (user, thread) = match name.split_once(':') {
                    Some((u, t)) => (u.to_owned(), t.to_owned()),
                    None => ("default".to_owned(), name),
                };
                if user.is_empty() || thread.is_empty() {
                    return Err(format!("`sandbox {user}:{thread}`: expected USER:THREAD"));
                }
                Ok(ActorRef::Sandbox { user, thread })
            }
            "task-graph" => Ok(ActorRef::TaskGraph {
                task_id: need("the task's id (its `task` call id)")?,
            }),
            "catalog" => match name {
                None => Ok(ActorRef::Catalog),
                Some(n) => Err(format!("`catalog` takes no name (there is one), not `{n}`")),
            },
            "peer-link" => {
                let name = need("ROLE-INDEX, e.g. sandbox-host-0 or subagent-1")?;
                let parsed = name.rsplit_once('-').and_then(|(role, index)| {
                    let role = Role::parse(role).filter(|r| {
                        matches!(r, Role::McpHost | Role::SandboxHost | Role::Subagent)
                    })?;
                    Some((role, index.parse::<u32>().ok()?))
                });
                let (role, index) = parsed.ok_or_else(|| {
                    format!(
                        "`peer-link {name}`: expected ROLE-INDEX with ROLE mcp-host, sandbox-host \
                         or subagent (e.g. sandbox-host-0)"
                    )
                })?;
                Ok(ActorRef::PeerLink { role, index })
            }
            "run" => Ok(ActorRef::Run {
                run_id: need("the run's id")?,
            }),
            other => Err(format!(
                "unknown actor kind `{other}`: expected one of {}",
                ACTOR_KINDS.join(", ")
            )),
        }
    }
}

impl std::fmt::Display for ActorRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ActorRef::McpServer { name } => write!(f, "the connection of MCP server '{name}'"),
            ActorRef::Sandbox { user, thread } => {
                write!(f, "the sandbox of user '{user}', thread '{thread}'")
            }
            ActorRef::TaskGraph { task_id } => write!(f, "the graph of task '{task_id}'"),
            ActorRef::Catalog => write!(f, "the catalog actor"),
            ActorRef::PeerLink { role, index } => write!(f, "the link to {role}-{index}"),
            ActorRef::Run { run_id } => write!(f, "the actor of run '{run_id}'"),
        }
    }
}

/// Replies to [`ControlRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[strum(prefix = "Control::")]
pub enum ControlReply {
    Pong {
        #[serde(with = "super::bytes")]
        payload: Vec<u8>,
    },
    Health(Health),
    /// How a `ChaosStop` went: how many actors were stopped (0: this process has no such
    /// actor) and what their supervisor does next.
    ChaosStopped {
        stopped: u32,
        detail: String,
    },
}

/// What a process says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub role: Role,
    pub node_id: String,
    pub pid: u32,
    pub uptime_ms: u64,
    /// Requests being handled right now, over all connections.
    pub in_flight: u32,
    /// False while draining.
    pub accepting: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_parses_and_bad_names_say_what_is_expected() {
        assert_eq!(
            ActorRef::parse("sandbox", Some("t1")),
            Ok(ActorRef::Sandbox {
                user: "default".into(),
                thread: "t1".into()
            })
        );
        assert_eq!(
            ActorRef::parse("peer-link", Some("sandbox-host-0")),
            Ok(ActorRef::PeerLink {
                role: Role::SandboxHost,
                index: 0
            })
        );
        assert_eq!(ActorRef::parse("catalog", None), Ok(ActorRef::Catalog));
        assert!(ActorRef::parse("peer-link", Some("lead-0"))
            .unwrap_err()
            .contains("ROLE-INDEX"));
        assert!(ActorRef::parse("run", None)
            .unwrap_err()
            .contains("run's id"));
        assert!(ActorRef::parse("worker", Some("x"))
            .unwrap_err()
            .contains("mcp-server, sandbox"));
        for kind in ACTOR_KINDS {
            let name = (kind != "catalog").then_some("mcp-host-0");
            let parsed = ActorRef::parse(kind, name);
            if kind != "peer-link" {
                assert_eq!(parsed.map(|a| a.kind()), Ok(kind));
            }
        }
    }
}
