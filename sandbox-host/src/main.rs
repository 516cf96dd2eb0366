//! `antler-sandbox-host`: the process that owns every sandbox.
//! It listens on the socket it is given, answers ping and health, and drains on SIGTERM.

mod pool;

use std::sync::Arc;

use antler_protocol::{
    handshake::Role,
    host::{self, HostArgs},
};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "antler-sandbox-host", version, about = "the process that owns every sandbox.")]
struct Cli {
    #[command(flatten)]
    host: HostArgs,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    host::init_tracing();
    let system = actix::System::new();
    system.block_on(async move {
        let handler = Arc::new(pool::Handler::start(&cli.host));
        host::serve(Role::SandboxHost, cli.host, handler).await
    })?;
    Ok(())
}
