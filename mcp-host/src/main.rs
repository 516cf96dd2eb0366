//! `antler-mcp-host`: the process that owns every MCP server connection.
//! It listens on the socket it is given, answers ping and health, and drains on SIGTERM.

mod registry;

use std::sync::Arc;

use antler_protocol::{
    handshake::Role,
    host::{self, HostArgs},
};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "antler-mcp-host", version, about = "the process that owns every MCP server connection.")]
struct Cli {
    #[command(flatten)]
    host: HostArgs,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    host::init_tracing();
    let system = actix::System::new();
    system.block_on(async move {
        let handler = Arc::new(registry::Handler::start(&cli.host));
        host::serve(Role::McpHost, cli.host, handler).await
    })?;
    Ok(())
}
