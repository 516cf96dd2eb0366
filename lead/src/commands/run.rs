//! `antler run "TASK" --playbook FILE [--user U] [--thread T] [--trace] [--json]` and
//! `antler run --resume RUN_ID [--answer TEXT]`: one lead-agent run against the running cluster (or an
//! ephemeral one started for it). The run's catalog is assembled from config.yaml and
//! mcp-host's tools; sandbox and MCP tools run through the lead on their hosts;
//! checkpoints go to `{runtime_dir}/runs.sqlite`. Progress goes to stderr, the answer,
//! artifacts (and with `--json` one object) to stdout.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use actix::Actor;
use antler_protocol::config::{
    load_app_config, load_extensions_config, process_env, resolve_app_config_path,
    resolve_extensions_path, AppConfig,
};
use antler_protocol::messages::{
    McpReply, McpRequest, Reply, Request, SandboxReply, SandboxRequest,
};
use antler_protocol::Role;
use anyhow::{bail, Context};
use serde_json::json;

use super::{cluster_spec, Ctx};
use crate::catalog::assembly::{assemble, AssemblyRequest, McpSourceTool, McpTools, Sources};
use crate::catalog::Catalog;
use crate::run::actor::{Answer, Drive, RunActor, RunEvent, RunLoop, RunOutcome, RunSettings};
use crate::run::checkpoint::{CheckpointStore, RunStatus};
use crate::run::context::{RunContext, ThreadPaths};
use crate::run::hosts::{LeadConnectionHosts, ToolHosts};
use crate::run::middleware::guardrail::Guardrail;
use crate::run::model::{ChatModel, ScriptedModel};

/// The checkpoint file under the runtime directory.
pub const CHECKPOINT_FILE: &str = "runs.sqlite";
/// How the run records a scripted model, to resume it with the same playbook.
const SCRIPTED_PREFIX: &str = "scripted:";
/// Deadline of the set-up requests (tool listing, pool status).
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

/// `antler run`'s arguments.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The task for the lead agent.
    #[arg(required_unless_present = "resume")]
    pub task: Option<String>,
    /// A YAML playbook of turns for the scripted model (tests and demos, offline).
    #[arg(long)]
    pub playbook: Option<PathBuf>,
    /// The user the run belongs to.
    #[arg(long, default_value = "default")]
    pub user: String,
    /// The thread (its sandbox and files); defaults to the run id.
    #[arg(long)]
    pub thread: Option<String>,
    /// Continue the run RUN_ID from its last checkpoint.
    #[arg(long, conflicts_with = "task")]
    pub resume: Option<String>,
    /// With --resume: the answer to the run's clarification question.
    #[arg(long, requires = "resume")]
    pub answer: Option<String>,
    /// config.yaml (default: found as `antler up` finds it).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print every event, each tool's six lifecycle states included, as JSON lines on
    /// stderr.
    #[arg(long)]
    pub trace: bool,
    /// Print one JSON object: run_id, status, final_answer, artifacts, delivery.
    #[arg(long)]
    pub json: bool,
}

pub fn run(ctx: &Ctx, args: RunArgs) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir()?;
    let config_path = resolve_app_config_path(args.config.as_deref(), &cwd, &process_env)?;
    let app = match &config_path {
        Some(path) => {
            let loaded = load_app_config(path)?;
            for warning in &loaded.warnings {
                tracing::warn!("{warning}");
            }
            // The cluster this command starts (if none runs) hands it to its hosts.
            std::env::set_var("ANTLER_CONFIG", std::fs::canonicalize(path)?);
            loaded.value
        }
        None => AppConfig::default(),
    };
    let store_path = ctx.runtime_dir.join(CHECKPOINT_FILE);
    let store = CheckpointStore::open(&store_path)?;
    let (run_id, user, thread, task, playbook) = match &args.resume {
        Some(run_id) => {
            let record = store
                .run(run_id)?
                .with_context(|| format!("no run {run_id} in {}", store_path.display()))?;
            let playbook = match (&args.playbook, record.model.strip_prefix(SCRIPTED_PREFIX)) {
                (Some(path), _) => path.clone(),
                (None, Some(path)) => PathBuf::from(path),
                (None, None) => bail!(
                    "run {run_id} used model {:?}; pass --playbook FILE",
                    record.model
                ),
            };
            (
                record.run_id,
                record.user_id,
                record.thread_id,
                None,
                playbook,
            )
        }
        None => {
            let Some(playbook) = args.playbook.clone() else {
                bail!("no model to run with: pass --playbook FILE (the scripted model); the OpenAI-compatible client is not built yet");
            };
            let run_id = format!("run-{}", uuid::Uuid::new_v4().simple());
            let thread = args.thread.clone().unwrap_or_else(|| run_id.clone());
            (
                run_id,
                args.user.clone(),
                thread,
                args.task.clone(),
                playbook,
            )
        }
    };
    let playbook = std::fs::canonicalize(&playbook)
        .with_context(|| format!("cannot read playbook {}", playbook.display()))?;
    let model: Arc<dyn ChatModel> = Arc::new(ScriptedModel::from_file(&playbook)?);
    // Someone can answer a clarification when the terminal is ours (asked right here) or
    // a program reads --json (it answers with --resume RUN_ID --answer TEXT); otherwise
    // the tool returns DeerFlow's "proceed with your best judgment" text.
    let interactive = !args.json && std::io::stdin().is_terminal();
    let clarification_enabled = interactive || args.json;
    let spec = cluster_spec(ctx.runtime_dir.clone(), config_path.as_deref(), None)?;
    actix::System::new().block_on(async move {
        let client = crate::cluster::attach_or_start(spec, Duration::from_secs(15)).await?;
        let hosts = Arc::new(LeadConnectionHosts::new(client.connection.clone()));
        let result = async {
            let catalog = Arc::new(run_catalog(&app, &cwd, hosts.as_ref()).await?);
            let base = sandbox_base_dir(hosts.as_ref()).await?;
            let paths = ThreadPaths::new(&base, &user, &thread);
            paths
                .create()
                .with_context(|| format!("cannot create {}", paths.user_data().display()))?;
            let context = RunContext {
                run_id: run_id.clone(),
                user_id: user.clone(),
                thread_id: thread.clone(),
                paths,
                clarification_enabled,
            };
            let settings = RunSettings {
                auto_promote_top_k: app.tool_search.top_k(),
                guardrail: Guardrail::from_config(&app.guardrails)?,
                ..RunSettings::default()
            };
            let mut run = match &task {
                Some(task) => RunLoop::start(
                    context,
                    task,
                    model,
                    &format!("{SCRIPTED_PREFIX}{}", playbook.display()),
                    catalog,
                    hosts.clone(),
                    store,
                    settings,
                )?,
                None => RunLoop::resume(context, model, catalog, hosts.clone(), store, settings)?,
            };
            if args.trace {
                let traced = run_id.clone();
                run.on_event(move |event| {
                    eprintln!("{}", json!({"run_id": traced, "event": event}));
                });
            } else if !args.json {
                eprintln!("run {run_id} (thread {thread}, user {user})");
                run.on_event(print_event);
            }
            if let Some(answer) = &args.answer {
                run.answer(answer)?;
            }
            let actor = RunActor::new(run).start();
            let mut outcome = actor.send(Drive).await??;
            while interactive && outcome.status == RunStatus::Interrupted {
                let answer = ask(outcome.question.as_deref().unwrap_or_default())?;
                actor.send(Answer(answer)).await??;
                outcome = actor.send(Drive).await??;
            }
            anyhow::Ok(outcome)
        }
        .await;
        client.finish().await;
        let outcome = result?;
        print_outcome(&outcome, args.json)?;
        Ok(match outcome.status {
            RunStatus::Success | RunStatus::Interrupted => ExitCode::SUCCESS,
            RunStatus::Error | RunStatus::Running => ExitCode::from(1),
        })
    })
}

/// The run's catalog: config tools, builtins and (when servers are configured) the MCP
/// tools mcp-host lists.
async fn run_catalog(
    app: &AppConfig,
    cwd: &Path,
    hosts: &dyn ToolHosts,
) -> anyhow::Result<Catalog> {
    let extensions = match resolve_extensions_path(None, cwd, &process_env)? {
        Some(path) => Some(Arc::new(load_extensions_config(&path)?.value)),
        None => None,
    };
    let mcp = if extensions
        .as_ref()
        .is_some_and(|e| e.mcp_servers.values().any(|s| s.enabled))
    {
        wait_for_mcp_servers(hosts).await;
        mcp_tools(hosts).await?
    } else {
        Vec::new()
    };
    let sources = Sources {
        config: Arc::new(app.clone()),
        extensions,
        mcp: McpTools::new(mcp),
    };
    let assembled = assemble(&sources, &AssemblyRequest::lead())?;
    for warning in &assembled.warnings {
        tracing::warn!("{warning}");
    }
    Ok(assembled.catalog)
}

/// How long a run waits for MCP servers still starting before it lists their tools.
const MCP_START_WAIT: Duration = Duration::from_secs(30);

/// Waits until no MCP server is `starting` (each is ready or has failed), or the time
/// is up; the run then uses the tools of the servers that are ready.
async fn wait_for_mcp_servers(hosts: &dyn ToolHosts) {
    let until = std::time::Instant::now() + MCP_START_WAIT;
    while std::time::Instant::now() < until {
        let request = Request::Mcp(McpRequest::Status);
        match hosts.request(Role::McpHost, request, SETUP_TIMEOUT).await {
            Ok(Reply::Mcp(McpReply::Status(servers)))
                if servers.iter().all(|s| s.state != "starting") =>
            {
                return
            }
            Ok(_) | Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    tracing::warn!(
        "MCP servers still starting after {MCP_START_WAIT:?}; running with the tools listed now"
    );
}

async fn mcp_tools(hosts: &dyn ToolHosts) -> anyhow::Result<Vec<McpSourceTool>> {
    let request = Request::Mcp(McpRequest::ListTools { server: None });
    let reply = hosts.request(Role::McpHost, request, SETUP_TIMEOUT).await?;
    let Reply::Mcp(McpReply::Tools(tools)) = reply else {
        bail!("unexpected reply from mcp-host: {reply:?}");
    };
    let mut positions = std::collections::HashMap::<String, u32>::new();
    tools
        .into_iter()
        .map(|tool| {
            let position = positions.entry(tool.server.clone()).or_default();
            let source = McpSourceTool {
                input_schema: serde_json::from_str(&tool.input_schema_json).with_context(|| {
                    format!(
                        "tool {} of {} has a schema that is not JSON",
                        tool.name, tool.server
                    )
                })?,
                server: tool.server,
                name: tool.name,
                original_name: tool.original_name,
                description: tool.description,
                position: *position,
            };
            *position += 1;
            Ok(source)
        })
        .collect()
}

/// Where sandbox-host keeps thread directories (the run's outputs live there).
async fn sandbox_base_dir(hosts: &dyn ToolHosts) -> anyhow::Result<PathBuf> {
    let reply = hosts
        .request(
            Role::SandboxHost,
            Request::Sandbox(SandboxRequest::Status),
            SETUP_TIMEOUT,
        )
        .await?;
    match reply {
        Reply::Sandbox(SandboxReply::Status(status)) => Ok(PathBuf::from(status.base_dir)),
        other => bail!("unexpected reply from sandbox-host: {other:?}"),
    }
}

fn print_event(event: &RunEvent) {
    match event {
        RunEvent::ModelStarted { turn } => eprintln!("· model turn {turn}"),
        RunEvent::ToolStarted { name, tool_call_id } => eprintln!("  → {name} [{tool_call_id}]"),
        RunEvent::ToolFinished {
            name,
            tool_call_id,
            error,
        } => eprintln!(
            "  {} {name} [{tool_call_id}]",
            if *error { "✗" } else { "✓" }
        ),
        RunEvent::Lifecycle { .. } => {}
    }
}

/// Shows the clarification question and reads the answer from the terminal.
fn ask(question: &str) -> anyhow::Result<String> {
    eprintln!("\n{question}\n");
    eprint!("> ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(answer.trim().to_owned())
}

fn print_outcome(outcome: &RunOutcome, as_json: bool) -> anyhow::Result<()> {
    if as_json {
        let object = json!({
            "run_id": outcome.run_id,
            "status": outcome.status,
            "final_answer": outcome.final_answer,
            "artifacts": outcome.artifacts,
            "delivery": outcome.delivery,
            "question": outcome.question,
            "error": outcome.error,
            "stop_reason": outcome.stop_reason,
        });
        println!("{}", serde_json::to_string(&object)?);
        return Ok(());
    }
    match outcome.status {
        RunStatus::Success => println!("{}", outcome.final_answer.as_deref().unwrap_or_default()),
        RunStatus::Interrupted => println!(
            "{}\n\n(the run waits for an answer: antler run --resume {})",
            outcome.question.as_deref().unwrap_or_default(),
            outcome.run_id
        ),
        RunStatus::Error | RunStatus::Running => {
            println!(
                "run failed: {}",
                outcome.error.as_deref().unwrap_or("unknown error")
            )
        }
    }
    for artifact in &outcome.artifacts {
        println!("artifact: {artifact}");
    }
    if let Some(delivery) = &outcome.delivery {
        println!("delivery: {}", serde_json::to_string(delivery)?);
    }
    Ok(())
}
