//! [`McpSession`]: the actor behind one MCP session, owning the run its client drives
//! (`RunEnv::start_client_session`). The run is opened on the first request that needs
//! it, on the thread that request names in `_meta` (`antler/thread`) or on a thread of
//! its own; from then on the session is bound to that thread. Its messages run one at a
//! time (a call's result is merged before the next call starts), and its sandbox lease is
//! renewed while the session lives; the run manager keeps the run beside its own (its
//! events and metrics). What the run asks or reports during a call (a downstream
//! elicitation, its own or its subagent's; a subagent's steps; a call's approval ask) goes
//! to the handler as a [`Notice`]. [`End`] releases the sandbox, records the run's end and
//! stops the actor.

use std::sync::Arc;

use actix::prelude::*;
use antler_engine::catalog::builtins::VIEW_IMAGE;
use antler_engine::catalog::ToolSpec;
use antler_engine::{Message as ThreadMessage, RunEvent, RunLoop, TaskEvent, ToolCall};

use antler_protocol::messages::FileContent;

use crate::runs::manager::{
    open_client_run, read_artifact, ArtifactContent, ClientRunEnded, RunManager, MAX_ARTIFACT_BYTES,
};
use crate::runs::prepare::RunEnv;
use crate::runs::store::RunStatus;

/// Who a session acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub user: String,
    pub role: Option<String>,
}

/// Why a session could not answer (the client sees it as an MCP error).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The run could not be opened (a busy or invalid thread, the store, a host).
    #[error("{0}")]
    Open(String),
    #[error("this MCP session works on thread {bound}; it cannot switch to {asked}")]
    OtherThread { bound: String, asked: String },
    /// The run could not go on (its checkpoint store failed).
    #[error("{0}")]
    Run(String),
    #[error("the MCP session has ended")]
    Ended,
    /// Not a file this session's thread presented (or no longer a readable one).
    #[error("Resource not found: {0}")]
    NoResource(String),
    /// The thread's files cannot be reached now.
    #[error("the thread's files are unavailable: {0}")]
    Files(String),
}

/// What one call did.
#[derive(Debug)]
pub struct CallOutcome {
    /// The messages the call added to the thread (its tool message).
    pub messages: Vec<ThreadMessage>,
    /// The tools a client may see changed (`tool_search` promoted some).
    pub tools_changed: bool,
    /// The thread's artifacts the call presented (`present_files`), as [`Artifact`]s.
    pub presented: Vec<Artifact>,
    /// The image a `view_image` call read: its MIME type and bytes.
    pub image: Option<(String, Vec<u8>)>,
}

/// A file the session's thread presented (`present_files`), as the client names it: the
/// resource `uri` (`antler://thread/{thread}{path}`), the sandbox `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub uri: String,
    pub path: String,
}

/// The scheme and prefix of an artifact's resource URI.
const ARTIFACT_URI_PREFIX: &str = "antler://thread/";

impl Artifact {
    fn of(thread: &str, path: &str) -> Artifact {
        Artifact {
            uri: format!("{ARTIFACT_URI_PREFIX}{thread}{path}"),
            path: path.to_owned(),
        }
    }

    /// The file's name (the last part of its path).
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

/// The (thread, sandbox path) a resource URI names, when it names an artifact.
fn artifact_of_uri(uri: &str) -> Option<(&str, &str)> {
    let rest = uri.strip_prefix(ARTIFACT_URI_PREFIX)?;
    let slash = rest.find('/')?;
    Some(rest.split_at(slash))
}

/// An elicitation a call's MCP server asks of the session's user (policy `ask`), for the
/// session's client to answer.
#[derive(Debug, Clone)]
pub struct Ask {
    pub run_id: String,
    pub id: String,
    pub message: String,
    pub requested_schema: serde_json::Value,
}

/// What a session's run tells its client while a call runs.
#[derive(Debug)]
pub enum Notice {
    /// An elicitation a downstream MCP server asks (answered by the client).
    Ask(Ask),
    /// A step of a `task` call's subagent (`progress::message_of`): a progress message.
    Progress(String),
    /// A call an approval rule asks about (`approvals`): answered by the client.
    Approval(super::approvals::ApprovalAsk),
}

/// Where a session sends what its calls tell the client.
pub type Notices = tokio::sync::mpsc::UnboundedSender<Notice>;

/// The actor.
pub struct McpSession {
    env: Arc<RunEnv>,
    /// Keeps the run beside the runs it drives (its events, view and metrics).
    manager: Addr<RunManager>,
    owner: Owner,
    /// The elicitations and task progress of the run's calls go to the client through here.
    notices: Notices,
    /// The run's id; also the thread's when the client names none.
    run_id: String,
    /// The thread the session is bound to, once its run is open.
    thread: Option<String>,
    /// The run, once open; out of the actor while a message works on it.
    run: Option<RunLoop>,
    /// Calls made so far (each call's id is numbered).
    calls: u64,
    renewal: Option<SpawnHandle>,
    ended: bool,
}

impl McpSession {
    /// Starts a session of `owner` on `arbiter` (the one serving the session's requests).
    pub fn start_on(
        arbiter: &ArbiterHandle,
        env: Arc<RunEnv>,
        manager: Addr<RunManager>,
        owner: Owner,
        notices: Notices,
    ) -> Addr<McpSession> {
        let run_id = format!("mcp-{}", uuid::Uuid::new_v4().simple());
        McpSession::start_in_arbiter(arbiter, move |_| McpSession {
            env,
            manager,
            owner,
            notices,
            run_id,
            thread: None,
            run: None,
            calls: 0,
            renewal: None,
            ended: false,
        })
    }

    /// The open run, taken out of the actor (opened on `asked`, or a thread of its own,
    /// when the session has none yet); give it back with [`McpSession::put`].
    fn take_run(
        &mut self,
        asked: Option<String>,
    ) -> ResponseActFuture<Self, Result<RunLoop, SessionError>> {
        if self.ended {
            return Box::pin(actix::fut::ready(Err(SessionError::Ended)));
        }
        if let (Some(bound), Some(asked)) = (&self.thread, &asked) {
            if bound != asked {
                let refused = SessionError::OtherThread {
                    bound: bound.clone(),
                    asked: asked.clone(),
                };
                return Box::pin(actix::fut::ready(Err(refused)));
            }
        }
        if let Some(run) = self.run.take() {
            return Box::pin(actix::fut::ready(Ok(run)));
        }
        let thread = asked.unwrap_or_else(|| self.run_id.clone());
        let (env, owner, run_id) = (self.env.clone(), self.owner.clone(), self.run_id.clone());
        let manager = self.manager.clone();
        let notices = self.notices.clone();
        let opening = {
            let thread = thread.clone();
            async move {
                let (mut run, events) = open_client_run(
                    &env,
                    &manager,
                    &run_id,
                    &owner.user,
                    owner.role.as_deref(),
                    &thread,
                )
                .await
                .map_err(|e| SessionError::Open(e.to_string()))?;
                let asking = run_id.clone();
                run.on_event(move |event: &RunEvent| {
                    let notice = match event {
                        RunEvent::Elicitation {
                            id,
                            message,
                            requested_schema,
                            ..
                        } => Some(Notice::Ask(Ask {
                            run_id: asking.clone(),
                            id: id.clone(),
                            message: message.clone(),
                            requested_schema: requested_schema.clone(),
                        })),
                        // A subagent's downstream server asks too: answered as the run's.
                        RunEvent::Task {
                            task:
                                TaskEvent::TaskElicitation {
                                    id,
                                    message,
                                    requested_schema,
                                    ..
                                },
                            ..
                        } => Some(Notice::Ask(Ask {
                            run_id: asking.clone(),
                            id: id.clone(),
                            message: message.clone(),
                            requested_schema: requested_schema.clone(),
                        })),
                        RunEvent::Task { task, .. } => {
                            super::progress::message_of(task).map(Notice::Progress)
                        }
                        _ => None,
                    };
                    if let Some(notice) = notice {
                        let _ = notices.send(notice);
                    }
                    events(event);
                });
                Ok(run)
            }
        };
        Box::pin(opening.into_actor(self).map(move |opened, actor, ctx| {
            let run = opened?;
            tracing::info!(run = %actor.run_id, user = %actor.owner.user, %thread, "MCP session opened its run");
            actor.thread = Some(thread);
            actor.renewal = Some(ctx.spawn(run.lease_renewal().into_actor(actor)));
            Ok(run)
        }))
    }

    fn put(&mut self, run: RunLoop) {
        self.run = Some(run);
    }
}

impl Actor for McpSession {
    type Context = Context<Self>;
}

/// The tools the client may see now (opening the run on `thread` when it is not open).
#[derive(Message)]
#[rtype(result = "Result<Vec<ToolSpec>, SessionError>")]
pub struct Tools {
    pub thread: Option<String>,
}

impl Handler<Tools> for McpSession {
    type Result = AtomicResponse<Self, Result<Vec<ToolSpec>, SessionError>>;

    fn handle(&mut self, msg: Tools, _: &mut Context<Self>) -> Self::Result {
        AtomicResponse::new(Box::pin(self.take_run(msg.thread).map(
            |taken, actor, _| {
                let run = taken?;
                let tools = run.visible_tools();
                actor.put(run);
                Ok(tools)
            },
        )))
    }
}

/// One call of the client's: tool `name` with `args` (a JSON object). `cancelled` fires
/// when the client cancels it (`notifications/cancelled`): its work is dropped and it
/// ends cancelled (`RunLoop::call_from_client`).
#[derive(Message)]
#[rtype(result = "Result<CallOutcome, SessionError>")]
pub struct Call {
    pub thread: Option<String>,
    pub name: String,
    pub args: serde_json::Value,
    pub cancelled: tokio_util::sync::CancellationToken,
}

impl Handler<Call> for McpSession {
    type Result = AtomicResponse<Self, Result<CallOutcome, SessionError>>;

    fn handle(&mut self, msg: Call, _: &mut Context<Self>) -> Self::Result {
        self.calls += 1;
        let call = ToolCall {
            id: format!("{}-call-{}", self.run_id, self.calls),
            name: msg.name,
            args: msg.args,
        };
        let cancelled = msg.cancelled;
        let working = self.take_run(msg.thread).then(|taken, actor, _| {
            let (notices, env, user) = (
                actor.notices.clone(),
                actor.env.clone(),
                actor.owner.user.clone(),
            );
            async move {
                let mut run = taken?;
                let before = run.visible_tools_digest();
                let artifacts_before = run.state().artifacts.len();
                let (name, args) = (call.name.clone(), call.args.clone());
                // An approval rule's ask is put to the client (`approvals`).
                let result =
                    super::approvals::call(&mut run, call, cancelled, &notices, &env, &user).await;
                let tools_changed = run.visible_tools_digest() != before;
                let presented = run
                    .state()
                    .artifacts
                    .get(artifacts_before..)
                    .unwrap_or_default()
                    .to_vec();
                let image = match &result {
                    Ok(messages) if name == VIEW_IMAGE => viewed_image(&run, &args, messages).await,
                    _ => None,
                };
                Ok::<_, SessionError>((run, result, tools_changed, presented, image))
            }
            .into_actor(actor)
            .map(|done, actor, _| {
                let (run, result, tools_changed, presented, image) = done?;
                actor.put(run);
                let messages = result.map_err(|e| SessionError::Run(e.to_string()))?;
                let thread = actor.thread.clone().unwrap_or_default();
                Ok(CallOutcome {
                    messages,
                    tools_changed,
                    presented: presented.iter().map(|p| Artifact::of(&thread, p)).collect(),
                    image,
                })
            })
        });
        AtomicResponse::new(Box::pin(working))
    }
}

/// The files the session's thread presented (opening the run on `thread` when it is not
/// open), oldest first.
#[derive(Message)]
#[rtype(result = "Result<Vec<Artifact>, SessionError>")]
pub struct Artifacts {
    pub thread: Option<String>,
}

impl Handler<Artifacts> for McpSession {
    type Result = AtomicResponse<Self, Result<Vec<Artifact>, SessionError>>;

    fn handle(&mut self, msg: Artifacts, _: &mut Context<Self>) -> Self::Result {
        AtomicResponse::new(Box::pin(self.take_run(msg.thread).map(
            |taken, actor, _| {
                let run = taken?;
                let thread = actor.thread.clone().unwrap_or_default();
                let artifacts = run
                    .state()
                    .artifacts
                    .iter()
                    .map(|path| Artifact::of(&thread, path))
                    .collect();
                actor.put(run);
                Ok(artifacts)
            },
        )))
    }
}

/// The content of the artifact `uri` names: only a file the session's own thread
/// presented, read as the gateway's artifact route reads it (a regular file inside the
/// thread's outputs once links are resolved).
#[derive(Message)]
#[rtype(result = "Result<(Artifact, Vec<u8>), SessionError>")]
pub struct ReadArtifact {
    pub thread: Option<String>,
    pub uri: String,
}

impl Handler<ReadArtifact> for McpSession {
    type Result = AtomicResponse<Self, Result<(Artifact, Vec<u8>), SessionError>>;

    fn handle(&mut self, msg: ReadArtifact, _: &mut Context<Self>) -> Self::Result {
        let uri = msg.uri;
        let reading = self.take_run(msg.thread).then(move |taken, actor, _| {
            let thread = actor.thread.clone().unwrap_or_default();
            async move {
                let run = taken?;
                let missing = || SessionError::NoResource(uri.clone());
                let presented = match artifact_of_uri(&uri) {
                    Some((of, path)) if of == thread => run
                        .state()
                        .artifacts
                        .iter()
                        .any(|p| p == path)
                        .then(|| Artifact::of(&thread, path)),
                    _ => None,
                };
                let read = match &presented {
                    Some(artifact) => read_artifact(&*run.context.files, &artifact.path)
                        .await
                        .map_err(SessionError::Files),
                    None => Err(missing()),
                };
                let read = match (presented, read) {
                    (Some(artifact), Ok(Some(ArtifactContent::Bytes(bytes)))) => {
                        Ok((artifact, bytes))
                    }
                    (_, Err(e)) => Err(e),
                    _ => Err(missing()),
                };
                Ok::<_, SessionError>((run, read))
            }
            .into_actor(actor)
            .map(|done, actor, _| {
                let (run, read) = done?;
                actor.put(run);
                read
            })
        });
        AtomicResponse::new(Box::pin(reading))
    }
}

/// The image a successful `view_image` call (`args`, its `messages`) read, from the
/// thread's files: its MIME type as the tool checked it, and its bytes.
async fn viewed_image(
    run: &RunLoop,
    args: &serde_json::Value,
    messages: &[ThreadMessage],
) -> Option<(String, Vec<u8>)> {
    let succeeded = messages.iter().any(|m| {
        matches!(m, ThreadMessage::Tool { status, .. } if *status == antler_engine::ToolStatus::Success)
    });
    let path = args.get("image_path").and_then(serde_json::Value::as_str)?;
    let image = run.state().viewed_images.get(path).filter(|_| succeeded)?;
    let read = run
        .context
        .files
        .read(path, MAX_ARTIFACT_BYTES)
        .await
        .ok()?;
    match read.content {
        FileContent::Bytes(bytes) if read.is_file => Some((image.mime_type.clone(), bytes)),
        _ => None,
    }
}

/// The session ended (its client closed it, or it idled out): the sandbox goes back to
/// its pool, the run's end is recorded and the thread is free, then `released` fires;
/// the actor stops.
#[derive(Message)]
#[rtype(result = "()")]
pub struct End {
    pub released: Option<super::lifecycle::Released>,
}

impl Handler<End> for McpSession {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: End, ctx: &mut Context<Self>) -> Self::Result {
        self.ended = true;
        if let Some(renewal) = self.renewal.take() {
            ctx.cancel_future(renewal);
        }
        let run = self.run.take();
        let (manager, run_id) = (self.manager.clone(), self.run_id.clone());
        let ending = async move {
            if let Some(mut run) = run {
                run.end_client_session().await;
                let ended = ClientRunEnded {
                    run_id,
                    status: RunStatus::Success,
                };
                if let Err(e) = manager.send(ended).await {
                    tracing::warn!("the run manager did not take the MCP session's end: {e}");
                }
            }
            msg.released
                .iter()
                .for_each(super::lifecycle::Released::fire);
        };
        AtomicResponse::new(Box::pin(ending.into_actor(self).map(|(), actor, ctx| {
            tracing::info!(run = %actor.run_id, "MCP session ended");
            ctx.stop();
        })))
    }
}
