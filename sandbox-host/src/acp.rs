//! `invoke_acp_agent` (spec F): one prompt to an external ACP agent, run here because
//! sandbox-host owns the thread's directories and the processes of its runs. The agent is
//! one of this host's own `acp_agents` (a lead names it, never a command), started with
//! the trimmed environment plus its configured `env`, in the thread's `acp-workspace`
//! (which sandboxes see read-only at `/mnt/acp-workspace`).
//!
//! The client is the official `agent-client-protocol` crate's. It negotiates the protocol
//! version: draft v2 first, v1 when the agent answers with v1 (on the same process when
//! the two `initialize` requests match). Better than DeerFlow: `initialize` and
//! `session/new` have deadlines too; a call whose caller goes away sends `session/cancel`
//! before the agent is stopped; the agent's tool calls and plan are reported (stream
//! items of the reply), not dropped; its stderr tail is kept for the error text.

use std::{
    collections::{HashMap, VecDeque},
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use agent_client_protocol::{self as acp, v1, v2, Agent, Client, ConnectTo};
use antler_protocol::config::{AcpAgentConfig, AppConfig, AuthorizationConfig, NamedMap};
use antler_protocol::messages::{AcpInvocation, AcpMcpServer, AcpOutcome, SandboxError};
use antler_protocol::Json;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, Notify};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
use tokio_util::sync::CancellationToken;

use crate::{identity, paths::ThreadPaths};

/// How long `initialize` and `session/new` may take each (DeerFlow waits forever).
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(60);

/// After the connection closes: the wait before SIGTERM, then before SIGKILL (spec F.5).
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// After `session/cancel`: how long the prompt gets to end on its own.
const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// The agent's stderr lines kept for an error text, and their byte bound.
const STDERR_TAIL_LINES: usize = 20;
const STDERR_TAIL_BYTES: usize = 4096;

/// The client's name in `initialize` (DeerFlow's is `deerflow`).
const CLIENT_NAME: &str = "antler";
const CLIENT_TITLE: &str = "Antler";

/// F.5: the result when the agent wrote no text.
pub const NO_RESPONSE: &str = "(no response)";

/// F.2.1.
pub fn unknown_agent(agent: &str, names: &[&str]) -> String {
    format!(
        "Error: Unknown agent '{agent}'. Available: {}",
        names.join(", ")
    )
}

/// F.5: the prompt's timeout.
pub fn timed_out(agent: &str, seconds: u64) -> String {
    format!(
        "Error: ACP agent '{agent}' timed out after {seconds} seconds without responding. The \
         agent subprocess has been terminated. If this agent handles long-running tasks, \
         increase acp_agents.{agent}.timeout_seconds in config.yaml."
    )
}

/// F.5: any other failure.
pub fn invoke_failed(agent: &str, error: &str) -> String {
    format!("Error invoking ACP agent '{agent}': {error}")
}

/// F.5: the command is not on PATH, with the hint for the agent.
pub fn command_not_found(agent: &str, command: &str, codex_on_path: bool) -> String {
    let hint = if command == "codex-acp" && codex_on_path {
        " The `codex` CLI found on PATH does not speak ACP: run the ACP adapter instead \
         (`npx @zed-industries/codex-acp`) or update `acp_agents.codex.command`/`args`."
            .to_owned()
    } else if agent == "mcode" {
        " Install it with `npm install --global @minimax-ai/code`, run `mcode login`, and \
         restart DeerFlow so it inherits the updated PATH. If the Gateway runs in Docker, \
         ensure `mcode` is installed and authenticated inside the Gateway container/image."
            .to_owned()
    } else {
        format!(" Install the agent binary or update `acp_agents.{agent}.command` in config.yaml.")
    };
    format!(
        "{}{hint}",
        invoke_failed(
            agent,
            &format!("Command '{command}' was not found on PATH.")
        )
    )
}

/// The agents this host runs, from its config.yaml.
#[derive(Debug, Clone, Default)]
pub struct AcpAgents {
    agents: NamedMap<AcpAgentConfig>,
    authorization: AuthorizationConfig,
}

impl AcpAgents {
    pub fn from_config(config: &AppConfig) -> AcpAgents {
        AcpAgents {
            agents: config.acp_agents.clone(),
            authorization: config.authorization.clone(),
        }
    }
}

/// Runs one invocation to its end: its activity goes to `activity` as ACP JSON, the
/// outcome is returned. `cancel` stops the prompt (`session/cancel`) and the agent.
pub async fn invoke(
    agents: &AcpAgents,
    base_dir: &Path,
    invocation: AcpInvocation,
    activity: mpsc::UnboundedSender<Json>,
    cancel: CancellationToken,
) -> Result<AcpOutcome, SandboxError> {
    identity::validate(&invocation.principal)?;
    identity::authorize(&agents.authorization, &invocation.principal)?;
    let name = invocation.agent.as_str();
    let Some(config) = agents.agents.get(name) else {
        let names: Vec<&str> = agents.agents.keys().collect();
        return Ok(error(unknown_agent(name, &names)));
    };
    let paths = ThreadPaths::new(
        base_dir,
        &invocation.principal.user_id,
        &invocation.principal.thread_id,
    );
    if let Err(e) = paths.create() {
        return Ok(error(invoke_failed(
            name,
            &format!("cannot create the ACP workspace: {}", e.kind()),
        )));
    }
    let mcp_servers: Vec<Value> = invocation
        .mcp_servers
        .iter()
        .map(AcpMcpServer::to_acp_json)
        .collect();
    let job = Arc::new(Job {
        agent: name.to_owned(),
        model: config.model.clone(),
        auto_approve: config.auto_approve_permissions,
        timeout: Duration::from_secs(config.timeout_seconds.max(1)),
        timeout_seconds: config.timeout_seconds.max(1),
        cwd: paths.acp_workspace.clone(),
        prompt: invocation.prompt,
        mcp_servers,
        activity,
        cancel,
        text: Mutex::new(Projection::default()),
        ended: Mutex::new(None),
        idle: Notify::new(),
        active_seen: std::sync::atomic::AtomicBool::new(false),
        idle_seen: std::sync::atomic::AtomicBool::new(false),
        version: Mutex::new(None),
    });
    let processes = Processes::default();
    let first = match processes.spawn(config, &paths.acp_workspace) {
        Ok(transport) => transport,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(error(command_not_found(
                name,
                &config.command,
                on_path("codex"),
            )))
        }
        Err(e) => return Ok(error(invoke_failed(name, &e.to_string()))),
    };
    let mut first = Some(first);
    let spawner = processes.clone();
    let spawn_config = config.clone();
    let cwd = paths.acp_workspace.clone();
    let (v1_job, v2_job) = (Arc::clone(&job), Arc::clone(&job));
    let connected = Client
        .protocol_connector()
        .with_v1(move || V1Client(Arc::clone(&v1_job)))
        .with_v2(move || V2Client(Arc::clone(&v2_job)))
        .connect_to(move || match first.take() {
            Some(transport) => transport,
            // A fallback to v1 on a fresh process (the agent rejected the v2 attempt).
            None => spawner
                .spawn(&spawn_config, &cwd)
                .unwrap_or_else(|_| Transport::closed()),
        })
        .await;
    let spawned = processes.spawned();
    let stderr = processes.stop().await;
    let version = *job.version.lock().unwrap_or_else(|e| e.into_inner());
    let ended = job.ended.lock().unwrap_or_else(|e| e.into_inner()).take();
    let mut outcome = match (ended, connected) {
        (Some(Ended::Text(text)), _) => AcpOutcome {
            text,
            is_error: false,
            protocol_version: None,
        },
        (Some(Ended::Failed(text)), _) => error(text),
        (None, Err(e)) => error(invoke_failed(name, &with_stderr(&e.to_string(), &stderr))),
        (None, Ok(())) => error(invoke_failed(
            name,
            &with_stderr("the agent closed the connection before answering", &stderr),
        )),
    };
    outcome.protocol_version = version;
    tracing::info!(
        agent = name,
        protocol = ?version,
        processes = spawned,
        error = outcome.is_error,
        "an ACP prompt ended"
    );
    Ok(outcome)
}

fn error(text: String) -> AcpOutcome {
    AcpOutcome {
        text,
        is_error: true,
        protocol_version: None,
    }
}

fn with_stderr(message: &str, stderr: &str) -> String {
    if stderr.is_empty() {
        message.to_owned()
    } else {
        format!("{message}\nThe agent's stderr ended with:\n{stderr}")
    }
}

fn on_path(command: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            std::fs::metadata(dir.join(command)).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
    })
}

/// How the prompt ended, as the tool's text.
enum Ended {
    Text(String),
    Failed(String),
}

/// One invocation, shared by the v1 and v2 client implementations and their handlers.
struct Job {
    agent: String,
    model: Option<String>,
    auto_approve: bool,
    timeout: Duration,
    timeout_seconds: u64,
    cwd: PathBuf,
    prompt: String,
    mcp_servers: Vec<Value>,
    activity: mpsc::UnboundedSender<Json>,
    cancel: CancellationToken,
    text: Mutex<Projection>,
    ended: Mutex<Option<Ended>>,
    /// v2: the session went idle after it was active.
    idle: Notify,
    active_seen: std::sync::atomic::AtomicBool,
    idle_seen: std::sync::atomic::AtomicBool,
    version: Mutex<Option<u16>>,
}

impl Job {
    fn end(&self, ended: Ended) {
        let mut slot = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(ended);
        }
    }

    fn finish(&self) {
        let text = self.text.lock().unwrap_or_else(|e| e.into_inner()).text();
        self.end(Ended::Text(if text.is_empty() {
            NO_RESPONSE.to_owned()
        } else {
            text
        }));
    }

    /// `initialize`'s params: the same client in both versions (v1 names it
    /// `clientInfo`, v2 `info`), so a v1 agent answering the v2 attempt keeps its process.
    /// No fs or terminal capability is declared, as in DeerFlow.
    fn initialize_params(&self, version: u16) -> Value {
        let info = json!({
            "name": CLIENT_NAME,
            "title": CLIENT_TITLE,
            "version": env!("CARGO_PKG_VERSION"),
        });
        if version == 1 {
            // What the v2 attempt's parameters read as in v1 (a v2 client supports boolean
            // session options): equal, the crate keeps the agent's first process.
            json!({
                "protocolVersion": 1,
                "clientInfo": info,
                "clientCapabilities": {"session": {"configOptions": {"boolean": {}}}},
            })
        } else {
            json!({ "protocolVersion": 2, "info": info })
        }
    }

    fn new_session_params(&self) -> Value {
        let mut params = json!({
            "cwd": self.cwd,
            "mcpServers": self.mcp_servers,
        });
        if let Some(model) = &self.model {
            params["_meta"] = json!({ "model": model });
        }
        params
    }

    fn prompt_params(&self, session_id: &Value) -> Value {
        json!({
            "sessionId": session_id,
            "prompt": [{"type": "text", "text": self.prompt}],
        })
    }

    /// One `session/update`, as JSON: text is collected, activity reported, v2's state
    /// followed.
    fn update(&self, update: Value) {
        let kind = update
            .get("sessionUpdate")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match kind {
            "agent_message_chunk" | "agent_message" => self
                .text
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .apply(kind, &update),
            "state_update" => {
                let state = update
                    .get("state")
                    .and_then(|s| s.get("state").or(Some(s)))
                    .and_then(|s| s.as_str().or_else(|| s.get("type").and_then(Value::as_str)))
                    .unwrap_or_default();
                if state == "idle" {
                    if self.active_seen.load(std::sync::atomic::Ordering::SeqCst) {
                        self.idle_seen
                            .store(true, std::sync::atomic::Ordering::SeqCst);
                        self.idle.notify_one();
                    }
                } else {
                    self.active_seen
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
            k if k.starts_with("tool_call") || k.starts_with("plan") => {
                let _ = self.activity.send(Json::from(&update));
            }
            _ => {}
        }
    }

    /// The permission answer (spec F.4): with `auto_approve_permissions`, the first
    /// `allow_once` option, else the first `allow_always`; otherwise cancelled.
    fn permission(&self, options: &[(String, String)]) -> Option<String> {
        if !self.auto_approve {
            tracing::warn!(
                agent = %self.agent,
                "an ACP permission request was cancelled: set acp_agents.{}.auto_approve_permissions to approve them",
                self.agent
            );
            return None;
        }
        let chosen = ["allow_once", "allow_always"].iter().find_map(|kind| {
            options
                .iter()
                .find(|(_, k)| k == kind)
                .map(|(id, _)| id.clone())
        });
        if chosen.is_none() {
            tracing::warn!(agent = %self.agent, "an ACP permission request offered no allow option: cancelled");
        }
        chosen
    }

    fn record_version(&self, version: u16) {
        *self.version.lock().unwrap_or_else(|e| e.into_inner()) = Some(version);
    }

    fn handshake_timed_out(&self, step: &str) -> acp::Error {
        let text = invoke_failed(
            &self.agent,
            &format!(
                "the agent did not answer {step} within {} seconds; the agent subprocess has been terminated",
                HANDSHAKE_DEADLINE.as_secs()
            ),
        );
        self.end(Ended::Failed(text.clone()));
        acp::Error::internal_error().data(text)
    }
}

/// Builds a typed request from its JSON params.
fn typed<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, acp::Error> {
    serde_json::from_value(params).map_err(acp::Error::into_internal_error)
}

fn options_of(options: &Value) -> Vec<(String, String)> {
    options
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| {
            Some((
                o.get("optionId")?.as_str()?.to_owned(),
                o.get("kind")?.as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// Waits for `step`, at most the handshake deadline, or fails the job.
async fn within<T>(
    job: &Job,
    step: &str,
    future: impl std::future::Future<Output = Result<T, acp::Error>>,
) -> Result<T, acp::Error> {
    tokio::select! {
        r = tokio::time::timeout(HANDSHAKE_DEADLINE, future) => match r {
            Ok(r) => r,
            Err(_) => Err(job.handshake_timed_out(step)),
        },
        () = job.cancel.cancelled() => Err(cancelled(job)),
    }
}

fn cancelled(job: &Job) -> acp::Error {
    let text = invoke_failed(&job.agent, "the call was cancelled");
    job.end(Ended::Failed(text.clone()));
    acp::Error::internal_error().data(text)
}

/// The protocol v1 client: `session/prompt` returns when the turn ends.
struct V1Client(Arc<Job>);

impl ConnectTo<Agent> for V1Client {
    async fn connect_to(self, agent: impl ConnectTo<Client>) -> Result<(), acp::Error> {
        let job = self.0;
        let (updates, permissions) = (Arc::clone(&job), Arc::clone(&job));
        Client
            .v1()
            .name(CLIENT_NAME)
            .on_receive_notification(
                async move |n: v1::schema::SessionNotification, _cx| {
                    updates.update(serde_json::to_value(&n.update).unwrap_or(Value::Null));
                    Ok(())
                },
                acp::on_receive_notification!(),
            )
            .on_receive_request(
                async move |request: v1::schema::RequestPermissionRequest, responder, _cx| {
                    let options = options_of(&serde_json::to_value(&request.options).unwrap_or_default());
                    let outcome = match permissions.permission(&options) {
                        Some(id) => json!({"outcome": {"outcome": "selected", "optionId": id}}),
                        None => json!({"outcome": {"outcome": "cancelled"}}),
                    };
                    responder.respond(typed::<v1::schema::RequestPermissionResponse>(outcome)?)
                },
                acp::on_receive_request!(),
            )
            .connect_with(agent, async move |cx: v1::ConnectionTo<Agent>| {
                let init: v1::schema::InitializeRequest = typed(job.initialize_params(1))?;
                within(&job, "initialize", cx.send_request(init).block_task()).await?;
                job.record_version(1);
                let new: v1::schema::NewSessionRequest = typed(job.new_session_params())?;
                let session = within(&job, "session/new", cx.send_request(new).block_task()).await?;
                let session_id = serde_json::to_value(&session.session_id).unwrap_or_default();
                let prompt: v1::schema::PromptRequest = typed(job.prompt_params(&session_id))?;
                let turn = cx.send_request(prompt).block_task();
                tokio::pin!(turn);
                tokio::select! {
                    r = tokio::time::timeout(job.timeout, &mut turn) => match r {
                        Ok(Ok(_)) => job.finish(),
                        Ok(Err(e)) => return Err(e),
                        Err(_) => job.end(Ended::Failed(timed_out(&job.agent, job.timeout_seconds))),
                    },
                    () = job.cancel.cancelled() => {
                        let note: v1::schema::CancelNotification = typed(json!({"sessionId": session_id}))?;
                        let _ = cx.send_notification(note);
                        let _ = tokio::time::timeout(CANCEL_GRACE, &mut turn).await;
                        return Err(cancelled(&job));
                    }
                }
                Ok(())
            })
            .await
    }
}

/// The protocol v2 client: `session/prompt` only accepts the prompt; the turn ends when
/// the session reports it is idle.
struct V2Client(Arc<Job>);

impl ConnectTo<Agent> for V2Client {
    async fn connect_to(self, agent: impl ConnectTo<Client>) -> Result<(), acp::Error> {
        let job = self.0;
        let (updates, permissions) = (Arc::clone(&job), Arc::clone(&job));
        Client
            .v2()
            .name(CLIENT_NAME)
            .on_receive_notification(
                async move |n: v2::schema::UpdateSessionNotification, _cx: v2::ConnectionTo<Agent>| {
                    updates.update(serde_json::to_value(&n.update).unwrap_or(Value::Null));
                    Ok(())
                },
                acp::on_receive_notification!(),
            )
            .on_receive_request(
                async move |request: v2::schema::RequestPermissionRequest,
                            responder: v2::Responder<v2::schema::RequestPermissionResponse>,
                            _cx: v2::ConnectionTo<Agent>| {
                    let options = options_of(&serde_json::to_value(&request.options).unwrap_or_default());
                    let outcome = match permissions.permission(&options) {
                        Some(id) => json!({"outcome": {"outcome": "selected", "optionId": id}}),
                        None => json!({"outcome": {"outcome": "cancelled"}}),
                    };
                    responder.respond(typed::<v2::schema::RequestPermissionResponse>(outcome)?)
                },
                acp::on_receive_request!(),
            )
            .connect_with(agent, async move |cx: v2::ConnectionTo<Agent>| {
                let init: v2::schema::InitializeRequest = typed(job.initialize_params(2))?;
                within(&job, "initialize", cx.send_request(init).block_task()).await?;
                job.record_version(2);
                let new: v2::schema::NewSessionRequest = typed(job.new_session_params())?;
                let session = within(&job, "session/new", cx.send_request(new).block_task()).await?;
                let session_id = serde_json::to_value(&session.session_id).unwrap_or_default();
                let prompt: v2::schema::PromptRequest = typed(job.prompt_params(&session_id))?;
                let turn = async {
                    cx.send_request(prompt).block_task().await?;
                    while !job.idle_seen.load(std::sync::atomic::Ordering::SeqCst) {
                        job.idle.notified().await;
                    }
                    Ok::<(), acp::Error>(())
                };
                tokio::pin!(turn);
                tokio::select! {
                    r = tokio::time::timeout(job.timeout, &mut turn) => match r {
                        Ok(Ok(())) => job.finish(),
                        Ok(Err(e)) => return Err(e),
                        Err(_) => job.end(Ended::Failed(timed_out(&job.agent, job.timeout_seconds))),
                    },
                    () = job.cancel.cancelled() => {
                        let note: v2::schema::CancelSessionNotification = typed(json!({"sessionId": session_id}))?;
                        let _ = cx.send_notification(note);
                        let _ = tokio::time::timeout(CANCEL_GRACE, &mut turn).await;
                        return Err(cancelled(&job));
                    }
                }
                if let Ok(close) = typed::<v2::schema::CloseSessionRequest>(json!({"sessionId": session_id})) {
                    let _ = tokio::time::timeout(EXIT_GRACE, cx.send_request(close).block_task()).await;
                }
                Ok(())
            })
            .await
    }
}

/// The agent's message text: chunks appended per message, a v2 `agent_message` snapshot
/// replacing its message's content; only text blocks count (spec F.4).
#[derive(Default)]
struct Projection {
    order: Vec<String>,
    messages: HashMap<String, String>,
}

impl Projection {
    fn apply(&mut self, kind: &str, update: &Value) {
        let id = update
            .get("messageId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if !self.messages.contains_key(&id) {
            self.order.push(id.clone());
        }
        let text = self.messages.entry(id).or_default();
        let block_text = |block: &Value| -> Option<String> {
            (block.get("type")?.as_str()? == "text")
                .then(|| block.get("text")?.as_str().map(str::to_owned))
                .flatten()
        };
        match kind {
            "agent_message_chunk" => {
                if let Some(t) = update.get("content").and_then(block_text) {
                    text.push_str(&t);
                }
            }
            _ => match update.get("content") {
                None => {}
                Some(Value::Null) => text.clear(),
                Some(blocks) => {
                    *text = blocks
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(block_text)
                        .collect();
                }
            },
        }
    }

    fn text(&self) -> String {
        self.order
            .iter()
            .filter_map(|id| self.messages.get(id))
            .map(String::as_str)
            .collect()
    }
}

/// The stdio streams of one agent process, as the crate's transport.
type Transport = acp::ByteStreams<
    tokio_util::compat::Compat<Box<dyn tokio::io::AsyncWrite + Send + Unpin>>,
    tokio_util::compat::Compat<Box<dyn tokio::io::AsyncRead + Send + Unpin>>,
>;

trait Closed {
    fn closed() -> Self;
}

impl Closed for Transport {
    /// A transport to nothing (a fallback process that could not start): the connection
    /// ends at once.
    fn closed() -> Transport {
        let write: Box<dyn tokio::io::AsyncWrite + Send + Unpin> = Box::new(tokio::io::sink());
        let read: Box<dyn tokio::io::AsyncRead + Send + Unpin> = Box::new(tokio::io::empty());
        acp::ByteStreams::new(write.compat_write(), read.compat())
    }
}

/// The agent processes of one invocation (two when a v1 fallback needs a fresh one), and
/// their stderr tails.
#[derive(Clone, Default)]
struct Processes {
    children: Arc<Mutex<Vec<tokio::process::Child>>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

impl Processes {
    /// How many agent processes this invocation started.
    fn spawned(&self) -> usize {
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    fn spawn(&self, config: &AcpAgentConfig, cwd: &Path) -> std::io::Result<Transport> {
        let mut command = tokio::process::Command::new(&config.command);
        command
            .args(&config.args)
            .env_clear()
            // Spec F.2.4: the trimmed environment, then the agent's own.
            .envs(antler_protocol::sys::default_environment(|k| {
                std::env::var(k).ok()
            }))
            .envs(config.env.iter().map(|(k, v)| (k, v.as_str())))
            .current_dir(cwd)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn()?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(std::io::Error::other(
                "the agent's stdio could not be piped",
            ));
        };
        let tail = Arc::clone(&self.stderr);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                tail.push_back(line.chars().take(STDERR_TAIL_BYTES).collect());
                while tail.len() > STDERR_TAIL_LINES
                    || tail.iter().map(String::len).sum::<usize>() > STDERR_TAIL_BYTES
                {
                    tail.pop_front();
                }
            }
        });
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(child);
        let write: Box<dyn tokio::io::AsyncWrite + Send + Unpin> = Box::new(stdin);
        let read: Box<dyn tokio::io::AsyncRead + Send + Unpin> = Box::new(stdout);
        Ok(acp::ByteStreams::new(write.compat_write(), read.compat()))
    }

    /// Spec F.5's shutdown of every process (their stdin is closed with the connection):
    /// a wait, SIGTERM to its process group, a wait, SIGKILL. Returns the stderr tail.
    async fn stop(&self) -> String {
        let children: Vec<_> =
            std::mem::take(&mut *self.children.lock().unwrap_or_else(|e| e.into_inner()));
        for mut child in children {
            let pgid = child.id().and_then(|p| i32::try_from(p).ok());
            if tokio::time::timeout(EXIT_GRACE, child.wait())
                .await
                .is_err()
            {
                if let Some(pgid) = pgid {
                    // SAFETY: killpg has no memory effects; the group is the agent's own.
                    unsafe { libc::killpg(pgid, libc::SIGTERM) };
                }
                if tokio::time::timeout(EXIT_GRACE, child.wait())
                    .await
                    .is_err()
                {
                    let _ = child.kill().await;
                }
            }
            // Whatever the agent left in its group (a launcher's children) goes too.
            if let Some(pgid) = pgid {
                // SAFETY: as above.
                unsafe { libc::killpg(pgid, libc::SIGKILL) };
            }
        }
        // The stderr reader gets a moment for the last lines.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let tail = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn chunks_append_and_v2_snapshots_replace_text_only() {
        let mut p = Projection::default();
        p.apply(
            "agent_message_chunk",
            &json!({"content": {"type": "text", "text": "Hello "}}),
        );
        p.apply(
            "agent_message_chunk",
            &json!({"content": {"type": "image", "data": "aGk=", "mimeType": "image/png"}}),
        );
        p.apply(
            "agent_message_chunk",
            &json!({"content": {"type": "text", "text": "world"}}),
        );
        assert_eq!(p.text(), "Hello world");
        p.apply(
            "agent_message",
            &json!({"messageId": "m2", "content": [{"type": "text", "text": "!"}]}),
        );
        assert_eq!(p.text(), "Hello world!");
        p.apply(
            "agent_message",
            &json!({"messageId": "m2", "content": null}),
        );
        assert_eq!(p.text(), "Hello world");
    }

    #[test]
    fn texts_are_deerflows() {
        assert_eq!(
            unknown_agent("x", &["claude", "codex"]),
            "Error: Unknown agent 'x'. Available: claude, codex"
        );
        assert!(command_not_found("a", "nope", false).ends_with(
            "Command 'nope' was not found on PATH. Install the agent binary or update `acp_agents.a.command` in config.yaml."
        ));
        assert!(timed_out("a", 5)
            .starts_with("Error: ACP agent 'a' timed out after 5 seconds without responding."));
    }
}
