//! `antler up`, `status`, `ping`, `workers` and `down`: starting, inspecting, resizing
//! and stopping the local cluster; and `antler cancel`, which cancels a run of the
//! running cluster.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use antler_protocol::{
    calls::{LeadCalls, RunCancelled},
    runtime_dir::RuntimeDir,
    ConnectionConfig, Role,
};
use anyhow::{anyhow, bail, Context};
use clap::Subcommand;

use super::{cluster_spec, Ctx, CLI_TIMEOUT};
use crate::{
    cli,
    cluster::{self, ClusterSpec, RunningCluster},
    host_runtime,
};

/// The cluster commands.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Start the local cluster in the foreground: the lead, mcp-host, sandbox-host and N
    /// subagent workers, supervised. Ctrl-C (or SIGTERM) stops everything.
    Up {
        /// config.yaml (DeerFlow schema plus an `antler:` section).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Subagent workers to start (default: antler.workers from the config, else 2).
        #[arg(long)]
        workers: Option<u32>,
        /// Print the status table once every process is healthy.
        #[arg(long)]
        show_status: bool,
        /// Chaos mode: every process accepts `antler chaos stop`, which stops one actor
        /// as if it had crashed. Off by default; in cluster mode only on loopback.
        #[arg(long, env = antler_protocol::messages::CHAOS_ENV, value_parser = clap::builder::FalseyValueParser::new())]
        chaos: bool,
    },
    /// Show every process of the running cluster.
    Status {
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Ping every host through the lead's links (uses the running cluster, or starts an
    /// ephemeral one for this command).
    Ping {
        /// Only peers of this role: mcp-host, sandbox-host or subagent.
        #[arg(long)]
        role: Option<String>,
        /// Print a JSON array: role, index, address, ok, rtt_us, error.
        #[arg(long)]
        json: bool,
    },
    /// Stop the running cluster (SIGTERM to its lead).
    Down,
    /// Change the number of subagent workers of the running cluster (1 to 64). Removed
    /// workers (highest indexes first) take no new task and are stopped once their tasks
    /// have finished; returns when the change is done and prints the workers.
    Workers {
        /// The number of workers the cluster should have.
        count: u32,
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a run of the running cluster: it ends `error` with "the run was cancelled"
    /// and its subagent tasks are cancelled.
    Cancel {
        /// The run's id (`antler run --detach` prints it).
        run_id: String,
        /// Print one JSON object: run_id, cancelled, status.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(ctx: &Ctx, command: ClusterCommand) -> anyhow::Result<ExitCode> {
    let runtime_dir = ctx.runtime_dir.clone();
    match command {
        ClusterCommand::Up {
            config,
            workers,
            show_status,
            chaos,
        } => {
            let mut spec = cluster_spec(runtime_dir, config.as_deref(), workers)?;
            spec.chaos = chaos;
            actix::System::new().block_on(up(spec, show_status))
        }
        ClusterCommand::Status { json } => actix::System::new().block_on(status(runtime_dir, json)),
        ClusterCommand::Ping { role, json } => {
            let role = match role.as_deref() {
                None => None,
                Some(r) => Some(
                    Role::parse(r)
                        .filter(|r| matches!(r, Role::McpHost | Role::SandboxHost | Role::Subagent))
                        .ok_or_else(|| {
                            anyhow!(
                                "unknown role `{r}`: expected mcp-host, sandbox-host or subagent"
                            )
                        })?,
                ),
            };
            let spec = cluster_spec(runtime_dir, None, None)?;
            actix::System::new().block_on(ping(spec, role, json))
        }
        ClusterCommand::Down => down(runtime_dir),
        ClusterCommand::Workers { count, json } => {
            let max = antler_protocol::config::MAX_WORKERS as u32;
            if !(1..=max).contains(&count) {
                bail!("workers: expected a number from 1 to {max}");
            }
            actix::System::new().block_on(workers(runtime_dir, count, json))
        }
        ClusterCommand::Cancel { run_id, json } => {
            actix::System::new().block_on(cancel(runtime_dir, run_id, json))
        }
    }
}

/// Deadline of `antler workers N`: removed workers get up to 30 minutes to finish their
/// tasks, added ones a minute to come up.
const WORKERS_TIMEOUT: Duration = Duration::from_secs(32 * 60);

/// A connection to the running cluster's lead (never an ephemeral one).
async fn running(runtime_dir: &std::path::Path) -> anyhow::Result<cluster::LeadClient> {
    let connection = cluster::attach(runtime_dir, ConnectionConfig::default()).await?;
    Ok(cluster::LeadClient {
        connection,
        ephemeral: None,
    })
}

async fn workers(runtime_dir: PathBuf, count: u32, json: bool) -> anyhow::Result<ExitCode> {
    let client = running(&runtime_dir).await?;
    if !json {
        eprintln!("antler: changing the cluster to {count} worker(s); removed workers finish their tasks first");
    }
    let reply = client.connection.set_workers(count, WORKERS_TIMEOUT).await;
    client.finish().await;
    let list = reply?;
    if json {
        println!("{}", cli::status_json(&list));
    } else {
        print!("{}", cli::status_table(&list));
    }
    Ok(ExitCode::SUCCESS)
}

async fn cancel(runtime_dir: PathBuf, run_id: String, json: bool) -> anyhow::Result<ExitCode> {
    let client = running(&runtime_dir).await?;
    let reply = client.connection.cancel_run(run_id, CLI_TIMEOUT).await;
    client.finish().await;
    let RunCancelled {
        run_id,
        cancelled,
        status,
    } = reply?;
    if json {
        println!(
            "{}",
            serde_json::json!({"run_id": run_id, "cancelled": cancelled, "status": status})
        );
    } else if cancelled {
        println!("antler: run {run_id} cancelled");
    } else {
        println!("antler: run {run_id} is {status}, not running: nothing to cancel");
    }
    Ok(if cancelled {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn up(spec: ClusterSpec, show_status: bool) -> anyhow::Result<ExitCode> {
    let cluster =
        RunningCluster::start_with(spec, Some(Box::new(crate::gateway::front_door))).await?;
    println!(
        "antler: cluster up in {} (lead pid {}); Ctrl-C to stop",
        cluster.runtime.root().display(),
        std::process::id()
    );
    if show_status {
        let ready = cluster::wait_until_healthy(&cluster.supervisor, Duration::from_secs(10)).await;
        if let Ok(list) = cluster
            .supervisor
            .send(crate::cluster::supervisor::GetStatus)
            .await
        {
            print!("{}", cli::status_table(&list));
        }
        if !ready {
            eprintln!("antler: not every process became healthy within 10 s");
        }
    }
    host_runtime::wait_for_shutdown_signal().await?;
    eprintln!("antler: stopping");
    cluster.stop().await;
    Ok(ExitCode::SUCCESS)
}

async fn status(runtime_dir: PathBuf, json: bool) -> anyhow::Result<ExitCode> {
    let connection = match cluster::attach(&runtime_dir, ConnectionConfig::default()).await {
        Ok(c) => c,
        Err(cluster::ClusterError::NotRunning(dir)) => {
            if json {
                println!("[]");
            } else {
                println!("{}", not_running(&dir));
            }
            return Ok(ExitCode::from(EXIT_NOT_RUNNING));
        }
        Err(e) => return Err(e.into()),
    };
    let client = cluster::LeadClient {
        connection,
        ephemeral: None,
    };
    let reply = client.connection.status(CLI_TIMEOUT).await;
    client.finish().await;
    let list = reply?;
    if json {
        println!("{}", cli::status_json(&list));
    } else {
        print!("{}", cli::status_table(&list));
    }
    Ok(ExitCode::SUCCESS)
}

async fn ping(spec: ClusterSpec, role: Option<Role>, json: bool) -> anyhow::Result<ExitCode> {
    let client = cluster::attach_or_start(spec, Duration::from_secs(10)).await?;
    let reply = client.connection.ping_peers(role, CLI_TIMEOUT).await;
    client.finish().await;
    let list = reply?;
    if json {
        let v: Vec<serde_json::Value> = list
            .iter()
            .map(|p| {
                serde_json::json!({
                    "role": p.role.as_str(), "index": p.index, "address": p.address,
                    "ok": p.result.is_ok(),
                    "rtt_us": p.result.as_ref().ok(),
                    "error": p.result.as_ref().err(),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(v));
    } else {
        print!("{}", cli::pings_table(&list));
    }
    Ok(if list.iter().all(|p| p.result.is_ok()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The exit status of `status` and `down` when no cluster is running.
pub const EXIT_NOT_RUNNING: u8 = 1;

/// What `status` and `down` say when no cluster is running in `dir`.
fn not_running(dir: &std::path::Path) -> String {
    format!(
        "no cluster is running in {} (start one with `antler up`)",
        dir.display()
    )
}

/// How long `antler down` waits for the lead to exit: its drain grace and its children's,
/// with room to spare.
const DOWN_DEADLINE: Duration = Duration::from_secs(40);

/// SIGTERM to the lead, then waits until it has exited (its lock on the runtime directory
/// is free), so an `antler up` right after starts on a clean directory.
fn down(runtime_dir: PathBuf) -> anyhow::Result<ExitCode> {
    // A directory that is not there has no cluster (and is not made by asking).
    if !runtime_dir.is_dir() {
        println!("{}", not_running(&runtime_dir));
        return Ok(ExitCode::from(EXIT_NOT_RUNNING));
    }
    let rd = RuntimeDir::open(&runtime_dir)?;
    let pid = match std::fs::read_to_string(rd.pid_path()) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("{}", not_running(&runtime_dir));
            return Ok(ExitCode::from(EXIT_NOT_RUNNING));
        }
        Err(e) => bail!("cannot read {}: {e}", rd.pid_path().display()),
    };
    let pid: i32 = pid.trim().parse().context("the pid file is damaged")?;
    if cluster::try_lock(&rd)?.is_some() {
        println!("{}", not_running(&runtime_dir));
        return Ok(ExitCode::from(EXIT_NOT_RUNNING));
    }
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        bail!(
            "cannot signal the lead (pid {pid}): {}",
            std::io::Error::last_os_error()
        );
    }
    eprintln!("antler: asked the lead (pid {pid}) to stop; waiting for it to exit");
    let until = std::time::Instant::now() + DOWN_DEADLINE;
    while std::time::Instant::now() < until {
        // The lock is released a moment before the process is gone: wait for both.
        if cluster::try_lock(&rd)?.is_some()
            && !antler_protocol::sys::process_runs(pid.unsigned_abs())
        {
            println!(
                "antler: the cluster in {} has stopped",
                runtime_dir.display()
            );
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!(
        "the lead (pid {pid}) did not exit within {} s; it is still running (kill -9 {pid} stops it and its children)",
        DOWN_DEADLINE.as_secs()
    )
}
