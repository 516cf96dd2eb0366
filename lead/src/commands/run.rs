//! `antler run "TASK" [--playbook FILE | --model NAME] [--user U] [--thread T] [--trace]
//! [--json] [--detach]` and `antler run --resume RUN_ID [--answer TEXT | --approve CALL |
//! --approve-for-thread CALL | --deny CALL [--reason TEXT]]`: submits a run to
//! the lead of the running cluster (or of an ephemeral one started for it) and follows
//! its events until it stops. The run itself lives in the lead (see `crate::runs`): it
//! survives this command, and a lead that restarts resumes it. Progress goes to stderr;
//! the answer, artifacts and receipt (with `--json`, one object) to stdout. A
//! clarification is asked in the terminal and the run resumed with the answer; so are the
//! calls a run waits on for approval (`run_approvals`). Ctrl-c or SIGTERM stops following
//! (an ephemeral cluster, and its run, stop with the command) and exits 130 once every
//! process's spans are exported (`interrupt`).

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use antler_protocol::calls::{watch_run, LeadCalls, RunWatchItem, SandboxCalls};
use antler_protocol::config::{process_env, resolve_app_config_path};
use antler_protocol::messages::{PlaybookSource, RunSubmission};
use antler_protocol::{Json, Role, RpcError};
use anyhow::{bail, Context};
use serde_json::{json, Value};

use super::{cluster_spec, extensions::RUNNING_CLUSTER_EXTENSIONS, run_approvals, Ctx};
use crate::cluster::LeadClient;

/// The checkpoint file under the runtime directory.
pub const CHECKPOINT_FILE: &str = "runs.sqlite";
/// Deadline of a submission (preparing a run lists MCP tools and may wait for servers).
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(120);
/// Deadline of asking sandbox-host where the thread directories are.
const BASE_DIR_TIMEOUT: Duration = Duration::from_secs(5);
/// Deadline of following one run (heartbeats notice a lead that died long before).
const WATCH_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// `antler run`'s arguments.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The task for the lead agent.
    #[arg(required_unless_present = "resume")]
    pub task: Option<String>,
    /// A YAML playbook of turns for the scripted model (tests and demos, offline).
    #[arg(long, conflicts_with = "model")]
    pub playbook: Option<PathBuf>,
    /// A model of config.yaml's `models:` (default: the first); any OpenAI-compatible
    /// endpoint.
    #[arg(long)]
    pub model: Option<String>,
    /// The user the run belongs to.
    #[arg(long, default_value = "default")]
    pub user: String,
    /// The thread to run on: its conversation continues (the run starts from its
    /// messages, title, artifacts and promoted tools) and its sandbox and files are
    /// shared; defaults to a new thread named by the run id.
    #[arg(long)]
    pub thread: Option<String>,
    /// Continue the run RUN_ID from its last checkpoint (or follow it, if the lead is
    /// driving it).
    #[arg(long, conflicts_with = "task")]
    pub resume: Option<String>,
    /// With --resume: the answer to the run's clarification question; with --elicitation,
    /// the answer to that MCP elicitation (`decline`, `cancel`, or a JSON object of the
    /// requested fields).
    #[arg(long, requires = "resume")]
    pub answer: Option<String>,
    /// With --resume and --answer: the id of the MCP elicitation the run waits on (shown
    /// by `antler run`, and in the run's view) that --answer answers.
    #[arg(long, requires = "answer")]
    pub elicitation: Option<String>,
    /// With --resume: approve the call CALL the run waits on (repeatable).
    #[arg(long, value_name = "CALL", requires = "resume")]
    pub approve: Vec<String>,
    /// With --resume: approve the call CALL, and its rule for the rest of the thread.
    #[arg(long, value_name = "CALL", requires = "resume")]
    pub approve_for_thread: Vec<String>,
    /// With --resume: deny the call CALL (the model is told; --reason says why).
    #[arg(long, value_name = "CALL", requires = "resume")]
    pub deny: Vec<String>,
    /// With --deny: why, shown to the model.
    #[arg(long, requires = "deny")]
    pub reason: Option<String>,
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
    /// Print the model's reply on stderr as it is written (the default when stderr is a
    /// terminal; not with --json or --trace).
    #[arg(long)]
    pub stream: bool,
    /// Talk as this custom agent (`update_agent` can edit it); with --bootstrap, the
    /// agent to create.
    #[arg(long)]
    pub agent: Option<String>,
    /// A bootstrap run: `setup_agent` is offered to create the agent.
    #[arg(long)]
    pub bootstrap: bool,
    /// Submit the run and print its id alone (with --json, `{"run_id", "status"}`) at
    /// once (needs a running cluster).
    #[arg(long)]
    pub detach: bool,
    /// Nobody will answer: `ask_clarification` is not offered to the model.
    #[arg(long)]
    pub no_input: bool,
    /// Offer the model `task`: it may delegate work to subagents on the workers.
    #[arg(long)]
    pub subagents: bool,
}

pub fn run(ctx: &Ctx, args: RunArgs) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir()?;
    let config_path = resolve_app_config_path(args.config.as_deref(), &cwd, &process_env)?;
    let config_path = match config_path {
        Some(path) => Some(
            std::fs::canonicalize(&path)
                .with_context(|| format!("cannot read config {}", path.display()))?,
        ),
        None => None,
    };
    let playbook = match &args.playbook {
        Some(path) => Some(
            std::fs::canonicalize(path)
                .with_context(|| format!("cannot read playbook {}", path.display()))?
                .display()
                .to_string(),
        ),
        None => None,
    };
    // Someone can answer a clarification when the terminal is ours (asked right here) or
    // a program reads --json or --detach's id (it answers with --resume RUN_ID --answer
    // TEXT); otherwise nobody can, and the model is not offered `ask_clarification` at
    // all, as with --no-input.
    let interactive = !args.json && !args.detach && std::io::stdin().is_terminal();
    let clarification = !args.no_input && (interactive || args.json || args.detach);
    let extensions = super::extensions::pin(config_path.as_deref());
    let spec = cluster_spec(ctx.runtime_dir.clone(), config_path.as_deref(), None)?;
    actix::System::new().block_on(async move {
        let client = crate::cluster::attach_or_start(spec, Duration::from_secs(15)).await?;
        if args.detach && client.ephemeral.is_some() {
            client.finish().await;
            bail!("--detach needs a running cluster (antler up): an ephemeral one ends with this command");
        }
        // The MCP servers this run can use, before anything else: a run without them
        // must not look like one with them.
        if client.ephemeral.is_some() {
            eprintln!("{extensions}");
        } else {
            eprintln!("{RUNNING_CLUSTER_EXTENSIONS}");
        }
        // The run being followed, once known: an interruption names it.
        let followed_run = std::cell::RefCell::new(args.resume.clone());
        let following = async {
            if let (Some(run_id), Some(id), Some(text)) =
                (&args.resume, &args.elicitation, &args.answer)
            {
                answer_elicitation(&client.connection, run_id, id, text).await?;
            }
            // An elicitation's answer is not the clarification's.
            let mut answer = args.answer.clone().filter(|_| args.elicitation.is_none());
            let mut approvals = run_approvals::from_args(&args);
            if let (Some(run_id), None, None, true) =
                (&args.resume, &answer, &args.elicitation, approvals.is_empty())
            {
                // A run waiting for an answer is never carried on without one: the
                // question is asked here, or the command says an answer is needed.
                let view = run_view(&client, run_id).await?;
                if view["status"] == "interrupted" {
                    if !interactive {
                        return anyhow::Ok(Followed::Stopped(view));
                    }
                    if run_approvals::waits(&view) {
                        approvals = run_approvals::ask(&view)?;
                    } else {
                        answer = Some(ask(view["question"].as_str().unwrap_or_default())?);
                    }
                }
            }
            let lead = &client.connection;
            let started = match &args.resume {
                // The lead resumes the run once every call it waits on is answered.
                Some(run_id) if !approvals.is_empty() => {
                    let waiting = run_approvals::give(lead, run_id, approvals).await?;
                    if !waiting.is_empty() {
                        return anyhow::Ok(Followed::Stopped(run_view(&client, run_id).await?));
                    }
                    Ok(run_id.clone())
                }
                Some(run_id) => {
                    lead.resume_run(run_id.clone(), answer, playbook.clone(), SUBMIT_TIMEOUT)
                        .await
                }
                None => lead.submit_run(RunSubmission {
                    task: args.task.clone().unwrap_or_default(),
                    user: args.user.clone(),
                    thread: args.thread.clone(),
                    playbook: playbook.clone().map(PlaybookSource::File),
                    model: args.model.clone(),
                    clarification,
                    // The cluster reads its own config unless this command names one.
                    config: args
                        .config
                        .as_ref()
                        .and(config_path.as_ref())
                        .map(|p| p.display().to_string()),
                    agent: args.agent.clone(),
                    bootstrap: args.bootstrap,
                    // Nobody to answer: `ask_clarification` is left out of the catalog.
                    interactive: clarification,
                    subagents: args.subagents.then_some(true),
                    role: None,
                    idempotency_key: None,
                    files: Vec::new(),
                }, SUBMIT_TIMEOUT).await,
            };
            let run_id = started.map_err(|e| anyhow::anyhow!("{e}"))?;
            followed_run.replace(Some(run_id.clone()));
            if args.detach {
                return Ok(Followed::Detached(run_id));
            }
            if !args.json && !args.trace {
                eprintln!("run {run_id}");
            }
            loop {
                let stream = !args.json
                    && !args.trace
                    && (args.stream || std::io::stderr().is_terminal());
                let view = follow(&client, &run_id, args.trace, args.json, interactive, stream)
                    .await?;
                if view["status"] == "running" {
                    // The lead is still preparing the run (a resume after its restart):
                    // its events are not there yet.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                if interactive && run_approvals::waits(&view) {
                    let answers = run_approvals::ask(&view)?;
                    run_approvals::give(lead, &run_id, answers).await?;
                    continue;
                }
                if interactive && view["status"] == "interrupted" {
                    let answer = ask(view["question"].as_str().unwrap_or_default())?;
                    lead.resume_run(run_id.clone(), Some(answer), None, SUBMIT_TIMEOUT)
                        .await
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                    continue;
                }
                return anyhow::Ok(Followed::Stopped(view));
            }
        };
        // Ctrl-c or SIGTERM: stop following, stop an ephemeral cluster in order (its
        // hosts drain and export their spans), and return, so `main` exports this
        // process's spans (the run's, ended as its drive is dropped) before it exits.
        let result = tokio::select! {
            result = following => result,
            () = super::interrupt::signalled() => Ok(Followed::Interrupted),
        };
        let followed = match result {
            Ok(followed) => followed,
            Err(e) => {
                client.finish().await;
                return Err(e);
            }
        };
        let view = match followed {
            Followed::Detached(run_id) => {
                client.finish().await;
                if args.json {
                    println!("{}", json!({"run_id": run_id, "status": "running"}));
                } else {
                    println!("{run_id}");
                }
                return Ok(ExitCode::SUCCESS);
            }
            Followed::Stopped(view) => view,
            Followed::Interrupted => {
                super::interrupt::exit_on_second();
                let run = followed_run.borrow().clone();
                eprintln!("{}", interrupted_text(run.as_deref(), client.ephemeral.is_some()));
                client.finish().await;
                return Ok(ExitCode::from(super::interrupt::EXIT_INTERRUPTED));
            }
        };
        // Where the artifacts are on this machine: asked of sandbox-host before an
        // ephemeral cluster goes.
        let base_dir = if args.json { None } else { sandbox_base_dir(&client).await };
        client.finish().await;
        if args.json {
            println!("{}", serde_json::to_string(&view)?);
        } else {
            print!("{}", outcome_text(&view, base_dir.as_deref()));
        }
        Ok(exit_code(&view))
    })
}

/// The exit status of `antler run` when the run waits for an answer to its clarification
/// (`antler run --resume RUN_ID --answer TEXT` gives it). 0 is success (or, with
/// --detach, submitted), 1 a failed run, 2 a command that could not be carried out, 130
/// a command interrupted by ctrl-c or SIGTERM (`interrupt::EXIT_INTERRUPTED`).
pub const EXIT_NEEDS_ANSWER: u8 = 3;

/// How following a run ended.
enum Followed {
    /// `--detach`: submitted, not followed.
    Detached(String),
    /// The run stopped (or waits for an answer); its view.
    Stopped(Value),
    /// The command was interrupted (SIGINT or SIGTERM) before the run stopped.
    Interrupted,
}

/// What `antler run` says when it is interrupted: an ephemeral cluster's run stops with
/// the command (at its last checkpoint); a running cluster's goes on.
fn interrupted_text(run_id: Option<&str>, ephemeral: bool) -> String {
    match (run_id, ephemeral) {
        (None, _) => "antler: interrupted".to_owned(),
        (Some(run), true) => format!(
            "antler: interrupted: run {run} stops at its last checkpoint (antler run --resume {run} continues it)"
        ),
        (Some(run), false) => format!(
            "antler: interrupted: run {run} goes on in the cluster (antler run --resume {run} follows it)"
        ),
    }
}

/// The command's exit status for a run's view.
fn exit_code(view: &Value) -> ExitCode {
    match view["status"].as_str() {
        Some("success" | "running") => ExitCode::SUCCESS,
        Some("interrupted") => ExitCode::from(EXIT_NEEDS_ANSWER),
        _ => ExitCode::from(1),
    }
}

/// The run's view now.
async fn run_view(client: &LeadClient, run_id: &str) -> anyhow::Result<Value> {
    let view = client
        .connection
        .get_run(run_id.to_owned(), super::CLI_TIMEOUT)
        .await?;
    Ok(view.into())
}

/// Where sandbox-host keeps thread directories on this machine, when it answers.
async fn sandbox_base_dir(client: &LeadClient) -> Option<PathBuf> {
    let sandbox_host = super::host(client, Role::SandboxHost, 0);
    let status = sandbox_host.sandbox_status(BASE_DIR_TIMEOUT).await.ok()?;
    Some(PathBuf::from(status.base_dir))
}

/// Prints the run's events until its drive stops (with `print_replies`, each reply as it
/// is written); the run's view.
async fn follow(
    client: &LeadClient,
    run_id: &str,
    trace: bool,
    quiet: bool,
    interactive: bool,
    print_replies: bool,
) -> anyhow::Result<Value> {
    let mut streamed = StreamedReply::default();
    let mut stream = watch_run(&client.connection, run_id.to_owned(), WATCH_TIMEOUT).await?;
    // A spinner while the model thinks, on a terminal only.
    let spin = !trace && !quiet && std::io::stderr().is_terminal();
    let mut thinking = false;
    let mut frame = 0usize;
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    loop {
        let item = tokio::select! {
            item = stream.next() => item,
            _ = ticks.tick(), if spin && thinking => {
                const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
                frame = frame.wrapping_add(1);
                eprint!("\r{} thinking…", FRAMES[frame % FRAMES.len()]);
                continue;
            }
        };
        let Some(item) = item else { break };
        if spin && thinking {
            eprint!("\r\x1b[2K");
            thinking = false;
        }
        if let Ok(RunWatchItem::Event(event)) = &item {
            thinking = event.get("event") == Some(&Json::String("model_started".into()));
        }
        match item {
            Ok(RunWatchItem::Event(event)) => {
                let event = Value::from(event);
                if trace {
                    eprintln!("{}", json!({"run_id": run_id, "event": event}));
                } else if event["event"] == "model_delta" {
                    if print_replies {
                        streamed.print(&event);
                    }
                } else if !quiet && !event.is_string() {
                    streamed.end();
                    print_event(&event);
                    let asks = event["event"] == "elicitation"
                        || (event["event"] == "task" && event["type"] == "task_elicitation");
                    if asks {
                        elicited(&client.connection, run_id, &event, interactive);
                    }
                    // A subagent's call waits for this run's user while the run goes on.
                    if event["event"] == "approval_requested" && event["subagent"].is_object() {
                        run_approvals::asked_live(&client.connection, run_id, &event, interactive);
                    }
                }
            }
            Ok(RunWatchItem::Ended(view)) => {
                streamed.end();
                return Ok(view.into());
            }
            Err(RpcError::Unexpected(unexpected)) => bail!("{unexpected}"),
            Err(e) => bail!(
                "lost the run's events ({e}); the run goes on in the lead: antler run --resume {run_id}"
            ),
        }
    }
    bail!("the lead ended the run's events without its outcome; antler run --resume {run_id}")
}

/// The reply being printed as it streams: a line is open on stderr until the turn's next
/// event.
#[derive(Default)]
struct StreamedReply {
    open: bool,
}

impl StreamedReply {
    /// Prints a `model_delta`'s text (control characters but newlines and tabs dropped).
    fn print(&mut self, event: &Value) {
        let text: String = event["text"]
            .as_str()
            .unwrap_or_default()
            .chars()
            .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
            .collect();
        if text.is_empty() {
            return;
        }
        if !self.open {
            eprint!("  ");
            self.open = true;
        }
        eprint!("{}", text.replace('\n', "\n  "));
        let _ = std::io::stderr().flush();
    }

    /// Ends the open line before the next event is printed.
    fn end(&mut self) {
        if std::mem::take(&mut self.open) {
            eprintln!();
        }
    }
}

fn print_event(event: &Value) {
    let text = |key: &str| event[key].as_str().unwrap_or_default().to_owned();
    match event["event"].as_str() {
        Some("model_started") => eprintln!("· model turn {}", event["turn"]),
        Some("tool_started") => eprintln!("  → {} [{}]", text("name"), text("tool_call_id")),
        Some("tool_finished") if event["error"] == true => eprintln!(
            "  ✗ {} [{}]: {}",
            text("name"),
            text("tool_call_id"),
            text("message")
        ),
        Some("tool_finished") => eprintln!("  ✓ {} [{}]", text("name"), text("tool_call_id")),
        Some("warning") => eprintln!("! {}", text("message")),
        Some("context_summarized") => eprintln!(
            "· context: {} messages summarized, {} kept",
            event["removed"], event["kept"]
        ),
        Some("context_trimmed") => eprintln!(
            "· context: {} oldest messages dropped to fit the window, {} kept",
            event["removed"], event["kept"]
        ),
        Some("title_set") => eprintln!("· title: {}", printable(&event["title"], 200)),
        Some("task") => print_task_event(event),
        Some("acp_activity") => print_acp_activity(event),
        Some("elicitation") => {
            let clean = |key: &str| printable(&event[key], 300);
            eprintln!(
                "  ? [{}] {} asks: {} (elicitation {})",
                clean("tool_call_id"),
                clean("server"),
                clean("message"),
                clean("id")
            );
        }
        _ => {}
    }
}

/// Text another party wrote (an MCP server, an ACP agent), fit for the terminal: control
/// characters dropped so it cannot rewrite the screen, at most `max` characters.
fn printable(value: &Value, max: usize) -> String {
    value
        .as_str()
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .take(max)
        .collect()
}

/// An ACP agent's tool call or plan, nested under its `invoke_acp_agent` call. The text is
/// the agent's: control characters are dropped so it cannot rewrite the terminal.
fn print_acp_activity(event: &Value) {
    let clean = |value: &Value| printable(value, 120);
    let update = &event["update"];
    let id = clean(&event["tool_call_id"]);
    let agent = clean(&event["agent"]);
    match update["sessionUpdate"].as_str() {
        Some(kind) if kind.starts_with("plan") => {
            let steps = update["entries"].as_array().map_or(0, Vec::len);
            eprintln!("    ↳ [{id}] {agent}: a plan of {steps} steps");
        }
        Some(_) => {
            let title = clean(&update["title"]);
            let status = clean(&update["status"]);
            let call = clean(&update["toolCallId"]);
            match (title.is_empty(), status.is_empty()) {
                (false, false) => eprintln!("    ↳ [{id}] {agent}: {title} ({status})"),
                (false, true) => eprintln!("    ↳ [{id}] {agent}: {title}"),
                (true, false) => eprintln!("    ↳ [{id}] {agent}: {call} {status}"),
                (true, true) => {}
            }
        }
        None => {}
    }
}

/// A subagent task's event, nested under its `task` call.
fn print_task_event(event: &Value) {
    let text = |key: &str| event[key].as_str().unwrap_or_default().to_owned();
    let first_line = |value: &Value| {
        let line = value
            .as_str()
            .unwrap_or_default()
            .lines()
            .next()
            .unwrap_or_default();
        line.chars().take(120).collect::<String>()
    };
    let id = text("tool_call_id");
    match event["type"].as_str() {
        Some("task_started") => eprintln!(
            "    ↳ [{id}] {} on {}",
            text("description"),
            event["worker"].as_str().unwrap_or("a worker")
        ),
        Some("task_waiting") => eprintln!("    ↳ [{id}] waiting for a free worker slot"),
        Some("task_elicitation") => {
            let clean = |key: &str| printable(&event[key], 300);
            eprintln!(
                "    ↳ [{id}] ? {} asks: {} (elicitation {})",
                clean("server"),
                clean("message"),
                clean("id")
            );
        }
        Some("task_tool") if event["error"] == true => eprintln!(
            "    ↳ [{id}] ✗ {}: {}",
            text("name"),
            first_line(&event["message"])
        ),
        Some("task_tool") => eprintln!("    ↳ [{id}] ✓ {}", text("name")),
        Some("task_running") => {
            let message = first_line(&event["message"]);
            if !message.is_empty() {
                eprintln!("    ↳ [{id}] {message}");
            }
        }
        Some(kind @ ("task_completed" | "task_failed" | "task_cancelled" | "task_timed_out")) => {
            let result = &event["result"];
            let detail = match kind {
                "task_completed" => first_line(&result["result"]),
                _ => first_line(&result["error"]),
            };
            eprintln!("    ↳ [{id}] {} {detail}", kind.trim_start_matches("task_"));
        }
        _ => {}
    }
}

/// Sends the answer `text` to elicitation `id` of `run_id`.
async fn answer_elicitation(
    connection: &antler_protocol::Connection,
    run_id: &str,
    id: &str,
    text: &str,
) -> anyhow::Result<()> {
    let (action, content) = crate::runs::elicitations::parse_answer(text)
        .map_err(|e| anyhow::anyhow!("--answer: {e}"))?;
    let answered = connection
        .answer_run_elicitation(
            run_id.to_owned(),
            id.to_owned(),
            action,
            content,
            SUBMIT_TIMEOUT,
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    match answered {
        Ok(()) => Ok(()),
        Err(why) => bail!("{why}"),
    }
}

/// An MCP server asks the run's user (policy `ask`): on a terminal the questions are asked
/// here, one per requested field, off the events' task (the run's events keep coming);
/// otherwise the command that answers is printed.
fn elicited(
    connection: &antler_protocol::Connection,
    run_id: &str,
    event: &Value,
    interactive: bool,
) {
    let id = event["id"].as_str().unwrap_or_default().to_owned();
    if !interactive {
        eprintln!(
            "    (answer with: antler run --resume {run_id} --elicitation {id} --answer '{{...}}' | decline | cancel)"
        );
        return;
    }
    let (connection, run_id, event) = (connection.clone(), run_id.to_owned(), event.clone());
    actix::spawn(async move {
        let asked = tokio::task::spawn_blocking(move || ask_fields(&event)).await;
        let text = match asked {
            Ok(Ok(text)) => text,
            _ => return,
        };
        match answer_elicitation(&connection, &run_id, &id, &text).await {
            Ok(()) => eprintln!("    (answered)"),
            Err(e) => eprintln!(
                "    ({e}; answer again with: antler run --resume {run_id} --elicitation {id} --answer '{{...}}')"
            ),
        }
    });
}

/// Asks for each field of an elicitation's requested schema on the terminal; the answer
/// as `--answer` takes it.
fn ask_fields(event: &Value) -> anyhow::Result<String> {
    let clean = |v: &Value| printable(v, 2000);
    let read = || -> anyhow::Result<String> {
        std::io::stderr().flush()?;
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        Ok(line.trim().to_owned())
    };
    eprintln!(
        "\n{} asks: {}",
        clean(&event["server"]),
        clean(&event["message"])
    );
    eprint!("answer it? [Enter: yes, d: decline, c: cancel] ");
    match read()?.as_str() {
        "d" | "decline" => return Ok("decline".into()),
        "c" | "cancel" => return Ok("cancel".into()),
        _ => {}
    }
    let schema = &event["requested_schema"];
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut content = serde_json::Map::new();
    if let Some(properties) = schema["properties"].as_object() {
        for (name, property) in properties {
            let title = property["title"].as_str().unwrap_or(name);
            let kind = property["type"].as_str().unwrap_or("string");
            let default = &property["default"];
            let mut label = format!("  {}", clean(&Value::String(title.to_owned())));
            if let Some(options) = property["enum"].as_array() {
                let options: Vec<String> = options.iter().map(&clean).collect();
                label.push_str(&format!(" [{}]", options.join("/")));
            } else {
                label.push_str(&format!(" ({kind})"));
            }
            if !default.is_null() {
                label.push_str(&format!(", default {default}"));
            }
            if required.contains(&name.as_str()) {
                label.push('*');
            }
            eprint!("{label}: ");
            let line = read()?;
            if line.is_empty() {
                continue;
            }
            let value = match kind {
                "integer" => line.parse::<i64>().map(Value::from).ok(),
                "number" => line.parse::<f64>().ok().map(Value::from),
                "boolean" => Some(Value::Bool(matches!(
                    line.to_ascii_lowercase().as_str(),
                    "y" | "yes" | "true" | "1"
                ))),
                _ => Some(Value::String(line.clone())),
            };
            content.insert(name.clone(), value.unwrap_or(Value::String(line)));
        }
    }
    Ok(Value::Object(content).to_string())
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

/// What `antler run` prints on stdout when the run stops: the answer (or the question,
/// or the error), each artifact with its file on this machine, and the delivery receipt
/// in words.
fn outcome_text(view: &Value, base_dir: Option<&Path>) -> String {
    let text = |key: &str| view[key].as_str().unwrap_or_default().to_owned();
    let mut out = match view["status"].as_str() {
        Some("success") => format!("{}\n", text("final_answer")),
        Some("interrupted") if super::run_approvals::waits(view) => {
            format!(
                "{}\n\n{}",
                text("question"),
                super::run_approvals::hint(view)
            )
        }
        Some("interrupted") => format!(
            "{}\n\n(the run waits for an answer: antler run --resume {} --answer TEXT)\n",
            text("question"),
            text("run_id")
        ),
        Some("running") => format!("run {} is running\n", text("run_id")),
        _ => format!(
            "run failed: {}\n",
            view["error"].as_str().unwrap_or("unknown error")
        ),
    };
    for artifact in view["artifacts"].as_array().into_iter().flatten() {
        let sandbox_path = artifact.as_str().unwrap_or_default();
        let on_host = base_dir.and_then(|base| host_path(base, view, sandbox_path));
        match on_host {
            Some(path) => out.push_str(&format!(
                "artifact: {sandbox_path} (on this machine: {})\n",
                path.display()
            )),
            None => out.push_str(&format!("artifact: {sandbox_path}\n")),
        }
    }
    if let Some(delivery) = delivery_text(&view["delivery"]) {
        out.push_str(&format!("delivery: {delivery}\n"));
    }
    out
}

/// The file behind a sandbox path of the run's thread:
/// `BASE/users/USER/threads/THREAD/user-data/...`.
fn host_path(base_dir: &Path, view: &Value, sandbox_path: &str) -> Option<PathBuf> {
    let user = view["user"].as_str()?;
    let thread = view["thread"].as_str()?;
    let relative = antler_protocol::thread_dir::relative(sandbox_path).ok()?;
    Some(
        base_dir
            .join("users")
            .join(user)
            .join("threads")
            .join(thread)
            .join("user-data")
            .join(relative),
    )
}

/// The delivery receipt in words: its stage, what was produced and presented.
fn delivery_text(receipt: &Value) -> Option<String> {
    if receipt.is_null() {
        return None;
    }
    let count = |key: &str| receipt[key].as_array().map_or(0, Vec::len);
    let presented = receipt["presented"].as_u64().unwrap_or(0);
    let produced = count("produced_paths");
    let matched = count("matched_paths");
    Some(match receipt["stage"].as_str() {
        Some("presented") => format!(
            "delivered: {matched} of {produced} output(s) the run produced presented ({presented} file(s) presented)"
        ),
        Some("mismatched") => format!(
            "NOT delivered: {presented} file(s) presented, none of the {produced} output(s) the run produced"
        ),
        Some("not_started") => format!(
            "NOT delivered: the run produced {produced} output(s) and presented none"
        ),
        Some(other) => format!("{other}: {presented} file(s) presented, {produced} output(s) produced"),
        None => format!("{presented} file(s) presented; the run produced no outputs"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_waiting_for_an_answer_has_its_own_exit_status() {
        let status = |s: &str| exit_code(&json!({"status": s}));
        assert_eq!(status("success"), ExitCode::SUCCESS);
        assert_eq!(status("interrupted"), ExitCode::from(EXIT_NEEDS_ANSWER));
        assert_eq!(status("error"), ExitCode::from(1));
    }

    #[test]
    fn the_outcome_names_each_artifacts_file_and_the_receipt_in_words() {
        let view = json!({
            "status": "success", "final_answer": "Done.", "user": "alice", "thread": "t1",
            "artifacts": ["/mnt/user-data/outputs/report.md"],
            "delivery": {"presented": 1, "paths": [], "produced_paths": ["/mnt/user-data/outputs/report.md"],
                "matched_paths": ["/mnt/user-data/outputs/report.md"], "stage": "presented"},
        });
        assert_eq!(
            outcome_text(&view, Some(Path::new("/b"))),
            "Done.\n\
             artifact: /mnt/user-data/outputs/report.md (on this machine: /b/users/alice/threads/t1/user-data/outputs/report.md)\n\
             delivery: delivered: 1 of 1 output(s) the run produced presented (1 file(s) presented)\n"
        );
        let not = json!({"presented": 0, "produced_paths": ["/mnt/user-data/outputs/a"], "stage": "not_started"});
        assert_eq!(
            delivery_text(&not).as_deref(),
            Some("NOT delivered: the run produced 1 output(s) and presented none")
        );
    }
}
