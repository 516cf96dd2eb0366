//! `antler-subagent`: a subagent worker process that runs delegated task graphs.
//! It listens on the socket it is given, answers ping and health, and drains on SIGTERM.

mod worker;

use std::sync::Arc;

use antler_protocol::{
    handshake::Role,
    host::{self, HostArgs},
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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    host::init_tracing();
    let system = actix::System::new();
    system.block_on(async move {
        let handler = Arc::new(worker::Handler::start(&cli.host));
        host::serve(Role::Subagent, cli.host, handler).await
    })?;
    Ok(())
}
