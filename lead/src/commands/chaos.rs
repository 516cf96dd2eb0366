//! `antler chaos`: the command's two halves. `antler chaos stop KIND [NAME]` is the lead's
//! control client: it asks the lead of the running cluster (started with `antler up
//! --chaos`) to stop one actor as if it had crashed, and prints what happened;
//! [`stop_actor`] is the same request for code (the chaos suite). `antler chaos <suite
//! flags>` is the chaos suite, which is a binary of its own (`antler-chaos`, crate
//! `chaos/`): this process becomes it, with the same arguments, exit status and help.

use std::{ffi::OsString, path::Path, process::ExitCode, time::Duration};

use antler_protocol::{
    calls::ControlCalls,
    messages::{ActorRef, ACTOR_KINDS},
    ConnectionConfig, RpcError,
};
use anyhow::{anyhow, bail};
use clap::{Args, Subcommand};

use super::Ctx;

/// How long the lead may take to stop an actor (a routed stop waits for its host).
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The chaos suite's binary, beside `antler`.
pub const SUITE_BINARY: &str = "antler-chaos";

/// `antler chaos`: the suite (its own flags, read by `antler-chaos`), or `stop`. The help
/// flag goes to the suite too: `antler chaos --help` is the suite's help.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, disable_help_flag = true)]
pub struct ChaosCli {
    #[command(subcommand)]
    pub command: Option<ChaosCommand>,
    /// The suite's flags (--seed, --runs, --minutes, --faults, --mode, ...; `antler chaos
    /// --help` lists them), passed to antler-chaos as they are.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "SUITE_FLAGS"
    )]
    pub suite: Vec<OsString>,
}

#[derive(Debug, Subcommand)]
pub enum ChaosCommand {
    /// Stop one actor of the running cluster as if it had crashed (the cluster must run
    /// with `antler up --chaos`). KIND: mcp-server NAME, sandbox [USER:]THREAD,
    /// task-graph TASK_ID, catalog, peer-link ROLE-INDEX (e.g. sandbox-host-0), run RUN_ID.
    Stop {
        /// What kind of actor: mcp-server, sandbox, task-graph, catalog, peer-link or run.
        kind: String,
        /// Which one (none for `catalog`).
        name: Option<String>,
        /// Print one JSON object: actor, stopped, detail.
        #[arg(long)]
        json: bool,
        // `antler chaos` hands its own help flag to the suite, which clap's setting takes
        // from its subcommands too: `stop` declares its own.
        /// Print help
        #[arg(short = 'h', long, action = clap::ArgAction::Help)]
        help: Option<bool>,
    },
}

/// What a stop did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped {
    /// Actors stopped (a server's pooled sessions count one each).
    pub stopped: u32,
    /// What their supervisors do next.
    pub detail: String,
}

/// Stops `actor` in the cluster running in `runtime_dir`, through its lead.
pub async fn stop_actor(runtime_dir: &Path, actor: ActorRef) -> anyhow::Result<Stopped> {
    let connection = crate::cluster::attach(runtime_dir, ConnectionConfig::default()).await?;
    let reply = connection.chaos_stop(actor, STOP_TIMEOUT).await;
    connection.close("chaos stop done");
    match reply {
        Ok((stopped, detail)) => Ok(Stopped { stopped, detail }),
        Err(RpcError::Remote(e)) => Err(anyhow!("{}", remote_text(&e))),
        Err(e) => Err(e.into()),
    }
}

fn remote_text(e: &antler_protocol::RemoteError) -> String {
    match e {
        antler_protocol::RemoteError::Failed(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Runs `antler chaos ...`.
pub fn run(ctx: &Ctx, cli: ChaosCli) -> anyhow::Result<ExitCode> {
    let Some(ChaosCommand::Stop {
        kind, name, json, ..
    }) = cli.command
    else {
        return run_suite(cli.suite);
    };
    let actor = ActorRef::parse(&kind, name.as_deref())
        .map_err(|e| anyhow!("{e} (kinds: {})", ACTOR_KINDS.join(", ")))?;
    let runtime_dir = ctx.runtime_dir.clone();
    let shown = actor.to_string();
    let kind = actor.kind();
    match actix::System::new().block_on(stop_actor(&runtime_dir, actor)) {
        Ok(s) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({"actor": kind, "stopped": s.stopped, "detail": s.detail})
                );
            } else {
                println!("stopped {shown}: {}", s.detail);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("antler: chaos stop {kind}: {e:#}");
            Ok(ExitCode::from(1))
        }
    }
}

/// Becomes `antler-chaos` (found beside this executable) with the suite's arguments: the
/// same process, so the same exit status and signals. Returns only when it cannot.
fn run_suite(args: Vec<OsString>) -> anyhow::Result<ExitCode> {
    use std::os::unix::process::CommandExt as _;
    let exe = std::env::current_exe()?;
    let suite = exe
        .parent()
        .map(|dir| dir.join(SUITE_BINARY))
        .ok_or_else(|| anyhow!("the antler binary has no directory"))?;
    if !suite.is_file() {
        bail!(
            "the chaos suite is a binary of its own, {SUITE_BINARY}, and it is not beside antler ({}): build it with `cargo build --workspace --bins` (scripts/chaos.sh does)",
            suite.display()
        );
    }
    // Its help and errors name the command as it was typed.
    let e = std::process::Command::new(&suite)
        .arg0("antler chaos")
        .args(args)
        .exec();
    Err(anyhow!("cannot run {}: {e}", suite.display()))
}
