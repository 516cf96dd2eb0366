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

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    host::init_tracing();
    let system = actix::System::new();
    system.block_on(async move {
        let token = cli.host.token()?;
        let node_id = cli
            .host
            .node_id
            .clone()
            .unwrap_or_else(|| format!("subagent-{}", cli.host.index));
        let identity = Identity::new(Role::Subagent, node_id.clone(), Some(token));
        let hosts = Arc::new(hosts::WorkerHosts::start(
            cli.sandbox_host.clone(),
            cli.mcp_host.clone(),
            identity,
            cli.host.connection_config(),
        ));
        let handler = Arc::new(worker::Handler::start(
            node_id,
            cli.host.capacity,
            hosts,
            Duration::from_secs(cli.keep_results_s),
        ));
        host::serve(Role::Subagent, cli.host, handler).await
    })?;
    Ok(())
}
