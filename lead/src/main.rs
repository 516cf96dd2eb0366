//! `antler`: the lead process and the command line. Parses arguments and dispatches to
//! `antler_lead::commands`.

use std::{path::PathBuf, process::ExitCode};

use antler_lead::commands::{self, Ctx};
use antler_protocol::{host, runtime_dir::RuntimeDir};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "antler",
    version,
    about = "Antler: the capability layer of an agent harness"
)]
struct Cli {
    /// The runtime directory of the local cluster (sockets, token, logs).
    #[arg(long, global = true, env = "ANTLER_RUNTIME_DIR")]
    runtime_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    #[command(flatten)]
    Cluster(commands::cluster::ClusterCommand),
    /// The tool catalog: show, search, hash.
    Catalog {
        #[command(subcommand)]
        command: commands::catalog::CatalogCommand,
    },
    /// Validate configuration files.
    Config {
        #[command(subcommand)]
        command: commands::config::ConfigCommand,
    },
    /// MCP servers: status, tools, calls.
    #[command(subcommand)]
    Mcp(commands::mcp::McpCommand),
    #[command(subcommand, about = "The sandbox pool of sandbox-host")]
    Sandbox(commands::sandbox::SandboxCommand),
    #[command(subcommand, about = "Run one tool through the real execution path")]
    Tool(commands::tool::ToolCommand),
    /// Run the lead agent on a task.
    Run(commands::run::RunArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    host::init_tracing();
    let ctx = Ctx {
        runtime_dir: cli
            .runtime_dir
            .clone()
            .unwrap_or_else(RuntimeDir::default_path),
    };
    let result = match cli.command {
        Command::Cluster(c) => commands::cluster::run(&ctx, c),
        Command::Catalog { command } => commands::catalog::run(&ctx, command),
        Command::Config { command } => commands::config::run(command),
        Command::Mcp(c) => commands::mcp::run(&ctx, c),
        Command::Sandbox(c) => commands::sandbox::run(&ctx, c),
        Command::Tool(c) => commands::tool::run(&ctx, c),
        Command::Run(args) => commands::run::run(&ctx, args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("antler: {e:#}");
            ExitCode::from(2)
        }
    }
}
