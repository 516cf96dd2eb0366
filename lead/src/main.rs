//! `antler`: the lead process and the command line. Parses arguments and dispatches to
//! `antler_lead::commands`.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use antler_lead::commands::{self, Ctx};
use antler_protocol::{
    config::{load_app_config, process_env, resolve_app_config_path, LogLevel},
    host,
    runtime_dir::RuntimeDir,
};
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
    /// DEER_FLOW_EXTENSIONS_CONFIG_PATH, the file beside --config's and the working
    /// directory's.
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
    /// A user's threads (conversations): list, show, delete.
    Threads(commands::threads::ThreadsArgs),
    /// Chaos: a seeded schedule of faults (kill -9, SIGTERM, SIGSTOP of every process
    /// kind) under concurrent runs against a local cluster of its own; prints a report and
    /// exits 1 when an invariant breaks (the suite is the antler-chaos binary beside
    /// antler). `antler chaos stop KIND NAME` stops one actor of a cluster started with
    /// `antler up --chaos`, as if it had crashed.
    Chaos(commands::chaos::ChaosCli),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let ctx = Ctx {
        runtime_dir: cli
            .runtime_dir
            .clone()
            .unwrap_or_else(RuntimeDir::default_path),
    };
    // Before any thread starts: the hosts a cluster started here inherit the level.
    adopt_log_level(cli.command.config());
    match cli.command {
        // `cluster init` touches no runtime directory.
        Command::ClusterMode(_) => host::init_tracing(),
        // The cluster in the foreground: its INFO log is on the terminal as well as in
        // logs/antler.log.
        Command::Cluster(commands::cluster::ClusterCommand::Up { ref config, .. }) => {
            let runtime_dir = commands::runtime_dir_of(&ctx.runtime_dir, config.as_deref());
            init_command_logs(&runtime_dir, FOREGROUND_TERMINAL_LOG, host::log_level())
        }
        _ => init_command_logs(
            &ctx.runtime_dir,
            COMMAND_TERMINAL_LOG,
            host::log_level().max(LogLevel::Warning),
        ),
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
        Command::Threads(args) => commands::threads::run(&ctx, args),
        Command::Chaos(args) => commands::chaos::run(&ctx, args),
    };
    // Every command's way out (a run's end, `up` after SIGTERM or ctrl-c): the spans
    // of this process (an ephemeral cluster's lead, `up`'s) not exported yet go now.
    host::finish_telemetry();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("antler: {e:#}");
            ExitCode::from(2)
        }
    }
}

impl Command {
    /// The config.yaml this command names with `--config`, if it takes one.
    fn config(&self) -> Option<&Path> {
        match self {
            Command::Cluster(commands::cluster::ClusterCommand::Up { config, .. }) => {
                config.as_deref()
            }
            Command::Run(args) => args.config.as_deref(),
            Command::Threads(args) => args.config.as_deref(),
            _ => None,
        }
    }
}

/// config.yaml's `log_level` (the file `config` names, else the one the usual rules
/// find) becomes this process's and its hosts' ([`host::LOG_LEVEL_ENV`]). A config that
/// does not load is left to the command to report.
fn adopt_log_level(config: Option<&Path>) {
    let Some(level) = std::env::current_dir()
        .ok()
        .and_then(|cwd| resolve_app_config_path(config, &cwd, &process_env).ok())
        .flatten()
        .and_then(|path| load_app_config(&path).ok())
        .filter(|loaded| loaded.value.other.contains_key("log_level"))
        .map(|loaded| loaded.value.log_level())
    else {
        return;
    };
    std::env::set_var(host::LOG_LEVEL_ENV, level.directive());
}

/// What a command shows on the terminal unless `RUST_LOG` says otherwise: warnings and
/// errors beside its own output (errors only with `log_level: error`).
const COMMAND_TERMINAL_LOG: &str = "warn";
/// What `antler up` in the foreground shows: its INFO log (actix-server's count of HTTP
/// threads, which reads like a count of subagent workers, left out).
const FOREGROUND_TERMINAL_LOG: &str = "info,actix_server=warn";
/// What goes to `logs/antler.log`.
const FILE_LOG: &str = "info,actix_server=warn";

/// Logs of a command: the terminal shows `terminal_default` with Antler's own lines at
/// `terminal_level` (or what `RUST_LOG` asks for); everything from INFO up (Antler's own
/// lines from `log_level` up, whatever `RUST_LOG` says), the cluster this command may
/// start (or `up` runs) included, goes to `logs/antler.log` in the runtime directory.
/// OAuth secrets are never logged ([`host::secret_cap`]).
fn init_command_logs(runtime_dir: &Path, terminal_default: &str, terminal_level: LogLevel) {
    use tracing_subscriber::{layer::SubscriberExt, util::SubscriberInitExt};
    let terminal = host::log_filter(terminal_default, terminal_level);
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
        host::log_layer(
            std::sync::Mutex::new(f),
            false,
            host::level_filter(FILE_LOG, host::log_level()),
        )
    });
    let _ = tracing_subscriber::registry()
        .with(host::secret_cap())
        .with(host::log_layer(
            std::io::stderr,
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            terminal,
        ))
        .with(file_layer)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every argument of every subcommand, as `antler … --help` lists it, says what it
    /// is: (command path, argument id) of those that do not.
    fn arguments_without_help(command: &clap::Command, path: &str, out: &mut Vec<String>) {
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                out.push(format!("{path} {id}"));
            }
        }
        for sub in command.get_subcommands() {
            let path = format!("{path} {}", sub.get_name());
            if sub.get_about().is_none() && sub.get_long_about().is_none() {
                out.push(format!("{path} (the command itself)"));
            }
            arguments_without_help(sub, &path, out);
        }
    }

    #[test]
    fn every_argument_of_every_subcommand_has_help() {
        let mut missing = Vec::new();
        arguments_without_help(&Cli::command(), "antler", &mut missing);
        assert!(missing.is_empty(), "without help text: {missing:#?}");
    }
}
