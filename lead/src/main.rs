//! `antler`: the lead process and the command line. Parses arguments and dispatches to
//! `antler_lead::commands`.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

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
    /// extensions_config.json (MCP servers, skills) for the cluster this command starts
    /// or reads: `up`, `run`, `mcp`, `tool`, `catalog`. Before ANTLER_EXTENSIONS_CONFIG_PATH,
    /// DEER_FLOW_EXTENSIONS_CONFIG_PATH and the working directory's file.
    #[arg(long, global = true, value_name = "FILE")]
    extensions: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    #[command(flatten)]
    Cluster(commands::cluster::ClusterCommand),
    /// Cluster mode's files: `antler cluster init DIR` writes the CA, per-role
    /// certificates and the token.
    #[command(name = "cluster", subcommand)]
    ClusterMode(commands::cluster_init::ClusterModeCommand),
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
    /// Chaos: a seeded schedule of faults (kill -9, SIGTERM, SIGSTOP of every process
    /// kind) under concurrent runs against a local cluster of its own; prints a report and
    /// exits 1 when an invariant breaks. `antler chaos stop KIND NAME` stops one actor of a
    /// cluster started with `antler up --chaos`, as if it had crashed.
    Chaos(commands::chaos_stop::ChaosCli),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let ctx = Ctx {
        runtime_dir: cli
            .runtime_dir
            .clone()
            .unwrap_or_else(RuntimeDir::default_path),
    };
    if matches!(
        cli.command,
        Command::Cluster(commands::cluster::ClusterCommand::Up { .. }) | Command::ClusterMode(_)
    ) {
        // The cluster in the foreground: its log is the terminal (and `cluster init`
        // touches no runtime directory).
        host::init_tracing();
    } else {
        init_command_logs(&ctx.runtime_dir);
    }
    if let Some(path) = &cli.extensions {
        if !path.is_file() {
            eprintln!("antler: --extensions {}: no such file", path.display());
            return ExitCode::from(2);
        }
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        // Read by every part of this process and by the hosts a cluster started here
        // spawns; set before any thread starts.
        std::env::set_var(antler_protocol::config::ANTLER_EXTENSIONS_ENV, path);
    }
    let result = match cli.command {
        Command::Cluster(c) => commands::cluster::run(&ctx, c),
        Command::ClusterMode(c) => commands::cluster_init::run(c),
        Command::Catalog { command } => commands::catalog::run(&ctx, command),
        Command::Config { command } => commands::config::run(command),
        Command::Mcp(c) => commands::mcp::run(&ctx, c),
        Command::Sandbox(c) => commands::sandbox::run(&ctx, c),
        Command::Tool(c) => commands::tool::run(&ctx, c),
        Command::Run(args) => commands::run::run(&ctx, args),
        Command::Chaos(args) => commands::chaos_stop::run(&ctx, args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("antler: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Logs of a command other than `up`: the terminal shows warnings and errors (or what
/// `RUST_LOG` asks for) beside the command's own output; everything from INFO up, the
/// cluster this command may start included, goes to `logs/antler.log` in the runtime
/// directory. OAuth secrets are never logged ([`host::secret_cap`]).
fn init_command_logs(runtime_dir: &Path) {
    use tracing_subscriber::{
        fmt, layer::SubscriberExt, util::SubscriberInitExt, EnvFilter, Layer,
    };
    let terminal = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let file = RuntimeDir::open(runtime_dir).ok().and_then(|rd| {
        let dir = rd.root().join("logs");
        std::fs::create_dir_all(&dir).ok()?;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("antler.log"))
            .ok()
    });
    let file_layer = file.map(|f| {
        fmt::layer()
            .with_writer(std::sync::Mutex::new(f))
            .with_ansi(false)
            .with_target(false)
            .with_filter(EnvFilter::new("info"))
    });
    let _ = tracing_subscriber::registry()
        .with(host::secret_cap())
        .with(
            fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false)
                .with_filter(terminal),
        )
        .with(file_layer)
        .try_init();
}
