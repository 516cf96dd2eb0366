//! `antler-subagent`: a subagent worker process. It listens on the socket it is given,
//! runs each delegated task in a throwaway `TaskGraph` actor on the agent engine, with
//! its own links to sandbox-host and mcp-host, advertises its task slots, keeps finished
//! results for a lead that restarts, and drains on SIGTERM.

mod graph;
mod hosts;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use antler_protocol::{
    handshake::{Identity, Role},
    host::{self, HostArgs},
    transport::Address,
};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "antler-subagent",
    version,
    about = "a subagent worker process that runs delegated task graphs."
)]
struct Cli {
    #[command(flatten)]
    host: HostArgs,
    /// sandbox-host's address (unix:PATH or tcp:HOST:PORT).
    #[arg(long)]
    sandbox_host: Option<Address>,
    /// mcp-host's address (unix:PATH or tcp:HOST:PORT).
    #[arg(long)]
    mcp_host: Option<Address>,
    /// Seconds a finished task's result is kept for a lead that re-attaches.
    #[arg(long, default_value_t = 600)]
    keep_results_s: u64,
}

/// How long a worker whose lead died waits for a new lead in its runtime directory
/// (which adopts it and collects its results) before it exits.
const ORPHAN_GRACE: Duration = Duration::from_secs(60);

/// Ends the process when its lead is gone and no lead comes back within
/// [`ORPHAN_GRACE`]; while a lead listens on `lead_socket`, the worker stays.
async fn orphan_watch(lead_socket: std::path::PathBuf) {
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    let mut alone_since: Option<std::time::Instant> = None;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        // SAFETY: as above.
        if unsafe { libc::getppid() } == parent {
            continue;
        }
        if tokio::net::UnixStream::connect(&lead_socket).await.is_ok() {
            alone_since = None;
            continue;
        }
        let since = *alone_since.get_or_insert_with(std::time::Instant::now);
        if since.elapsed() >= ORPHAN_GRACE {
            tracing::warn!("the lead is gone and none came back; exiting");
            host::finish_telemetry();
            std::process::exit(0);
        }
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    host::init_tracing();
    host::init_telemetry("subagent", None);
    antler_protocol::sys::start_heap_trimmer();
    let system = actix::System::new();
    let served = system.block_on(async move {
        let token = cli.host.token()?;
        let node_id = cli
            .host
            .node_id
            .clone()
            .unwrap_or_else(|| format!("subagent-{}", cli.host.index));
        let identity = Identity::new(Role::Subagent, node_id.clone(), Some(token))
            .with_tls(cli.host.tls(Role::Subagent)?);
        let hosts = Arc::new(hosts::WorkerHosts::start(
            cli.sandbox_host.clone(),
            cli.mcp_host.clone(),
            identity,
            cli.host.connection_config(),
        ));
        if let Address::Unix(socket) = &cli.host.listen {
            if let Some(dir) = socket.parent() {
                actix::spawn(orphan_watch(dir.join("lead.sock")));
            }
        }
        let handler = Arc::new(worker::Handler::start(
            node_id,
            cli.host.capacity,
            hosts,
            Duration::from_secs(cli.keep_results_s),
        ));
        host::serve(Role::Subagent, cli.host, handler).await
    });
    host::finish_telemetry();
    served?;
    Ok(())
}
