//! [`AntlerTools`]: the rmcp server handler of one MCP session. It answers `tools/list`
//! with the tools the session's run would offer a model (the principal's authorized
//! catalog, deferred MCP tools behind `tool_search`, promotions, skill policy) and
//! `tools/call` by the run's own call path (a call the client cancels is dropped and ends
//! cancelled), and sends `notifications/tools/list_changed` when a call changed what the
//! client may see. The files the thread presented are its resources (`resources/list`,
//! `resources/read`; a `present_files` result links them, and
//! `notifications/resources/list_changed` tells the client). A downstream server's
//! elicitation during a call is asked of the client and its answer sent back down, as is a
//! call's approval ask (`approvals`); a `task` call's subagent steps are
//! `notifications/progress` when the call carries a `progressToken`. Who it acts for is given (stdio) or read
//! from the HTTP request the gateway authenticated ([`Owner`] in the request's
//! extensions). The session's thread is bound by its first `tools/list` or `tools/call`:
//! the one that request names in its `_meta` under [`THREAD_META_KEY`], else a new thread
//! of its own. Dropping the handler (the session closed or idled out) ends the session,
//! firing its [`Released`] once the run is released (given at its start over stdio, by
//! the gateway's requests over HTTP).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use actix::{Addr, ArbiterHandle};
use antler_engine::catalog::ToolSpec;
use antler_engine::{Message, ToolStatus};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::model::{CancelledNotificationParam, RequestId};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::direct::DirectCalls;
use super::lifecycle::Released;
use super::session::{
    Artifact, Artifacts, Ask, Call, CallOutcome, End, McpSession, Notice, Notices, Owner,
    ReadArtifact, SessionError, Tools,
};
use crate::runs::manager::RunManager;
use crate::runs::prepare::RunEnv;

/// The `_meta` key naming the Antler thread a session works on.
pub const THREAD_META_KEY: &str = "antler/thread";
/// What the server tells its clients at `initialize`.
const INSTRUCTIONS: &str = "Antler's tools for one thread: sandbox tools run in the thread's sandbox, MCP tools on their servers with your credentials. Deferred MCP tools are found with tool_search; the tools it promotes appear in the next tools/list.";
/// The error of a request that reaches a session without a principal (never, through the
/// gateway).
const NO_PRINCIPAL: &str = "this MCP session has no principal";

/// The handler of one MCP session.
pub struct AntlerTools {
    env: Arc<RunEnv>,
    manager: Addr<RunManager>,
    /// Where the session's actor runs when its first request is not served on an
    /// arbiter's thread (never, in practice: see [`AntlerTools::session`]).
    arbiter: ArbiterHandle,
    /// Who the session acts for: set at its start (stdio) or by its first request.
    owner: Mutex<Option<Owner>>,
    session: Mutex<Option<Addr<McpSession>>>,
    /// Fired once the session's run is released, for who waits on its close.
    released: Mutex<Option<Released>>,
    /// The elicitations and task progress of the session's calls, forwarded to the
    /// client while a call waits (the sender is the session's).
    notices: (
        Notices,
        tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Notice>>,
    ),
    /// Over HTTP: where the gateway finds this session's handler for its direct calls
    /// (`direct`), this handler itself, and what it learns of its session.
    direct: Option<(Arc<DirectCalls>, Weak<AntlerTools>)>,
    session_id: OnceLock<String>,
    peer: OnceLock<Peer<RoleServer>>,
    /// The direct calls running, by request id (a cancellation stops them).
    running: Mutex<HashMap<RequestId, CancellationToken>>,
}

impl AntlerTools {
    /// A session acting for `owner` that fires `released` once its run is released
    /// (`None`: the ones the gateway puts in the first request's extensions).
    pub fn new(
        env: Arc<RunEnv>,
        manager: Addr<RunManager>,
        arbiter: ArbiterHandle,
        owner: Option<Owner>,
        released: Option<Released>,
    ) -> AntlerTools {
        Self::build(env, manager, arbiter, owner, released, None)
    }

    fn build(
        env: Arc<RunEnv>,
        manager: Addr<RunManager>,
        arbiter: ArbiterHandle,
        owner: Option<Owner>,
        released: Option<Released>,
        direct: Option<(Arc<DirectCalls>, Weak<AntlerTools>)>,
    ) -> AntlerTools {
        let (notices, noticed) = tokio::sync::mpsc::unbounded_channel();
        AntlerTools {
            env,
            manager,
            arbiter,
            owner: Mutex::new(owner),
            session: Mutex::new(None),
            released: Mutex::new(released),
            notices: (notices, tokio::sync::Mutex::new(noticed)),
            direct,
            session_id: OnceLock::new(),
            peer: OnceLock::new(),
            running: Mutex::new(HashMap::new()),
        }
    }

    /// A session of the gateway's (its principal read from its first request), shared
    /// so the gateway can hand it direct calls once it registered in `direct`.
    pub fn shared(
        env: Arc<RunEnv>,
        manager: Addr<RunManager>,
        arbiter: ArbiterHandle,
        direct: Arc<DirectCalls>,
    ) -> Arc<AntlerTools> {
        Arc::new_cyclic(|me| {
            let direct = Some((direct, me.clone()));
            AntlerTools::build(env, manager, arbiter, None, None, direct)
        })
    }

    /// The session's peer, once its client initialized.
    pub(super) fn peer(&self) -> Option<Peer<RoleServer>> {
        self.peer.get().cloned()
    }

    /// Learns the session's id (from the HTTP request the gateway handed over) and its
    /// peer, and registers for direct calls; once.
    fn note(&self, extensions: &rmcp::model::Extensions, peer: &Peer<RoleServer>) {
        if self.peer.get().is_some() {
            return;
        }
        let Some((direct, me)) = &self.direct else {
            return;
        };
        let id = extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.headers.get(SESSION_HEADER))
            .and_then(|v| v.to_str().ok());
        let Some(id) = id else {
            return;
        };
        if self.session_id.set(id.to_owned()).is_ok() {
            direct.register(id, me.clone());
        }
        let _ = self.peer.set(peer.clone());
    }

    /// A direct call (`direct::call`): [`ServerHandler::call_tool`] with the context rmcp
    /// would have given it, cancelled by a `notifications/cancelled` naming `id`; its
    /// answer, and whether it was cancelled.
    pub(super) async fn call_direct(
        &self,
        id: RequestId,
        params: CallToolRequestParams,
        meta: rmcp::model::RequestMetaObject,
        peer: Peer<RoleServer>,
        parts: http::request::Parts,
    ) -> (Result<CallToolResponse, McpError>, bool) {
        let mut context = RequestContext::new(id.clone(), peer);
        context.meta = meta;
        context.extensions.insert(parts);
        let cancelled = context.ct.clone();
        self.lock_running().insert(id.clone(), cancelled.clone());
        let _done = RunningCall { tools: self, id };
        let answer = self.call_tool(params, context).await;
        (answer, cancelled.is_cancelled())
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, CancellationToken>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The session's actor, started on its first use by the request of `context`, on the
    /// arbiter whose thread serves the session (the gateway's worker, where rmcp runs the
    /// session and this handler; the lead's own over stdio): a request then reaches it and
    /// its run without a hop to another thread and back.
    fn session(&self, context: &RequestContext<RoleServer>) -> Result<Addr<McpSession>, McpError> {
        let owner = {
            let mut owner = self.owner.lock().unwrap_or_else(PoisonError::into_inner);
            let parts = context.extensions.get::<http::request::Parts>();
            if owner.is_none() {
                *owner = parts.and_then(|p| p.extensions.get::<Owner>()).cloned();
            }
            let mut released = self.released.lock().unwrap_or_else(PoisonError::into_inner);
            if released.is_none() {
                *released = parts
                    .and_then(|p| p.extensions.get::<Released>())
                    .map(Released::claim);
            }
            owner
                .clone()
                .ok_or_else(|| McpError::invalid_request(NO_PRINCIPAL, None))?
        };
        let mut session = self.session.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(session
            .get_or_insert_with(|| {
                McpSession::start_on(
                    &actix::Arbiter::try_current().unwrap_or_else(|| self.arbiter.clone()),
                    self.env.clone(),
                    self.manager.clone(),
                    owner,
                    self.notices.0.clone(),
                )
            })
            .clone())
    }
}

/// A direct call's entry in the running calls, removed when it ends (or is dropped).
struct RunningCall<'a> {
    tools: &'a AntlerTools,
    id: RequestId,
}

impl Drop for RunningCall<'_> {
    fn drop(&mut self) {
        self.tools.lock_running().remove(&self.id);
    }
}

/// The header naming a streamable-HTTP session.
const SESSION_HEADER: &str = "mcp-session-id";

impl Drop for AntlerTools {
    fn drop(&mut self) {
        if let (Some((direct, _)), Some(id)) = (&self.direct, self.session_id.get()) {
            direct.forget(id);
        }
        let session = self
            .session
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let released = self
            .released
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match session {
            Some(session) => session.do_send(End { released }),
            None => released.iter().for_each(Released::fire),
        }
    }
}

impl ServerHandler for AntlerTools {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("antler", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    /// One MCP session is one thread: the stateless revisions (2026-07-28 on) have no
    /// session to hold it, so the session revisions are the ones served.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.note(&context.extensions, &context.peer);
    }

    /// A cancellation of a direct call (rmcp cancels the calls it runs itself).
    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        _: NotificationContext<RoleServer>,
    ) {
        let running = notification
            .request_id
            .and_then(|id| self.lock_running().get(&id).cloned());
        if let Some(ct) = running {
            ct.cancel();
        }
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.note(&context.extensions, &context.peer);
        let session = self.session(&context)?;
        let meta = request.as_ref().and_then(|r| r.meta.as_deref());
        let thread = thread_of(meta, &context);
        let tools = session
            .send(Tools { thread })
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?
            .map_err(refused)?;
        Ok(ListToolsResult::with_all_items(
            tools.iter().filter_map(tool_of).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.note(&context.extensions, &context.peer);
        let session = self.session(&context)?;
        let thread = thread_of(request.meta.as_deref(), &context);
        let progress_token = request
            .meta
            .as_ref()
            .and_then(|m| m.get_progress_token())
            .or_else(|| context.meta.get_progress_token());
        let args = Value::Object(request.arguments.unwrap_or_default());
        let call = session.send(Call {
            thread,
            name: request.name.into_owned(),
            args,
            cancelled: context.ct.clone(),
        });
        futures::pin_mut!(call);
        // The session's calls run one at a time: while this one runs, what its MCP servers
        // ask goes to the client, and its answers back down; its task's steps are its
        // progress. What the call told goes out before its result (`biased`: it is in the
        // channel before the call ends).
        let mut noticed = self.notices.1.lock().await;
        let mut progress = Progress {
            token: progress_token,
            sent: 0,
        };
        let outcome = loop {
            tokio::select! {
                biased;
                Some(notice) = noticed.recv() => match notice {
                    Notice::Ask(ask) => self.forward(ask, &context).await,
                    Notice::Progress(message) => progress.send(message, &context).await,
                    Notice::Approval(ask) => super::approvals::put_to_client(ask, &context).await,
                },
                done = &mut call => break done,
            }
        };
        drop(noticed);
        let outcome = outcome
            .map_err(|e| McpError::internal_error(e.to_string(), None))?
            .map_err(refused)?;
        if outcome.tools_changed {
            if let Err(e) = context.peer.notify_tool_list_changed().await {
                tracing::debug!("tools/list_changed not sent: {e}");
            }
        }
        if !outcome.presented.is_empty() {
            if let Err(e) = context.peer.notify_resource_list_changed().await {
                tracing::debug!("resources/list_changed not sent: {e}");
            }
        }
        Ok(result_of(&outcome)?.into())
    }

    /// The files the session's thread presented (`present_files`).
    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let session = self.session(&context)?;
        let meta = request.as_ref().and_then(|r| r.meta.as_deref());
        let thread = thread_of(meta, &context);
        let artifacts = session
            .send(Artifacts { thread })
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?
            .map_err(refused)?;
        let resources: Vec<Value> = artifacts
            .iter()
            .map(|a| json!({"uri": a.uri, "name": a.name(), "mimeType": mime_of(&a.path)}))
            .collect();
        serde_json::from_value(json!({"resources": resources}))
            .map_err(|e| McpError::internal_error(e.to_string(), None))
    }

    /// A file the session's own thread presented: text when it is UTF-8, else a blob.
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let session = self.session(&context)?;
        let thread = thread_of(request.meta.as_deref(), &context);
        let (artifact, bytes) = session
            .send(ReadArtifact {
                thread,
                uri: request.uri,
            })
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?
            .map_err(refused)?;
        let result: ReadResourceResult =
            serde_json::from_value(json!({"contents": [contents_of(&artifact, bytes)]}))
                .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(result.into())
    }
}

/// A presented file's resource contents: its text when it is UTF-8, else base64.
fn contents_of(artifact: &Artifact, bytes: Vec<u8>) -> Value {
    use base64::Engine as _;
    let mime = mime_of(&artifact.path);
    match String::from_utf8(bytes) {
        Ok(text) => json!({"uri": artifact.uri, "mimeType": mime, "text": text}),
        Err(e) => json!({
            "uri": artifact.uri,
            "mimeType": mime,
            "blob": base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
        }),
    }
}

/// The MIME type of a file by its extension (`application/octet-stream` when unknown).
fn mime_of(path: &str) -> &'static str {
    let extension = path
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match extension.as_str() {
        "txt" | "log" => "text/plain",
        "md" => "text/markdown",
        "csv" => "text/csv",
        "html" | "htm" => "text/html",
        "json" => "application/json",
        "pdf" => "application/pdf",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

impl AntlerTools {
    /// Asks the client `ask` (`elicitation/create`, form mode) and hands its answer to the
    /// MCP server that asked, as the gateway's answer route does. A client that cannot
    /// answer forms is not asked: the elicitation stays pending for the run's user (the
    /// run view, `antler run`) until its deadline.
    async fn forward(&self, ask: Ask, context: &RequestContext<RoleServer>) {
        use super::elicit::{elicit, Elicited};
        use antler_protocol::messages::ElicitationAction as Answer;
        let (action, content) = match elicit(context, &ask.message, &ask.requested_schema).await {
            Elicited::Unsupported => return,
            Elicited::Accepted(content) => (Answer::Accept, Some(content)),
            Elicited::Declined => (Answer::Decline, None),
            Elicited::Cancelled => (Answer::Cancel, None),
            Elicited::Failed(e) => {
                tracing::info!(id = %ask.id, "the MCP client did not answer an elicitation: {e}");
                (Answer::Cancel, None)
            }
            Elicited::BadSchema(e) => {
                tracing::info!(id = %ask.id, "an elicitation's schema is not one MCP carries: {e}");
                (Answer::Decline, None)
            }
        };
        let content = content.as_ref().map(antler_protocol::Json::from);
        let answered = crate::runs::manager::answer_through(
            &self.manager,
            &*self.env.hosts,
            &ask.run_id,
            &ask.id,
            action,
            content,
        )
        .await;
        if let Err(e) = answered {
            tracing::info!(id = %ask.id, "the client's elicitation answer was not taken: {e}");
        }
    }
}

/// The progress of one call the client asked to follow (`_meta.progressToken`): each
/// message sent as the next step.
struct Progress {
    token: Option<ProgressToken>,
    sent: u32,
}

impl Progress {
    /// Sends `message` as the call's next `notifications/progress` (none without a token).
    async fn send(&mut self, message: String, context: &RequestContext<RoleServer>) {
        let Some(token) = &self.token else {
            return;
        };
        self.sent += 1;
        let mut params = ProgressNotificationParam::new(token.clone(), f64::from(self.sent));
        params.message = Some(message);
        if let Err(e) = context.peer.notify_progress(params).await {
            tracing::debug!("notifications/progress not sent: {e}");
        }
    }
}

/// The thread a request names in its `_meta` (the call's own, else the request's).
fn thread_of(
    meta: Option<&rmcp::model::MetaObject>,
    context: &RequestContext<RoleServer>,
) -> Option<String> {
    meta.and_then(|m| m.get(THREAD_META_KEY))
        .or_else(|| context.meta.get(THREAD_META_KEY))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn refused(error: SessionError) -> McpError {
    match error {
        SessionError::Run(_) | SessionError::Files(_) => {
            McpError::internal_error(error.to_string(), None)
        }
        SessionError::NoResource(uri) => {
            McpError::resource_not_found(format!("Resource not found: {uri}"), None)
        }
        _ => McpError::invalid_request(error.to_string(), None),
    }
}

/// A catalog tool as MCP lists it (`None`: a schema MCP cannot carry, never in practice:
/// the catalog's parameters are JSON schema objects).
fn tool_of(spec: &ToolSpec) -> Option<Tool> {
    let mut schema = spec.parameters.value().clone();
    if let Some(object) = schema.as_object_mut() {
        object
            .entry("type")
            .or_insert_with(|| Value::String("object".to_owned()));
    }
    serde_json::from_value(json!({
        "name": spec.name,
        "description": spec.description,
        "inputSchema": schema,
    }))
    .ok()
}

/// The MCP result of a call from the tool messages it added: their text, an error when
/// the tool failed (the model's error message, as a run's model would read it); a link
/// to each file it presented (a resource of the session), the image `view_image` read.
/// Built as rmcp's types directly (no JSON in between: this is every call's answer).
fn result_of(outcome: &CallOutcome) -> Result<CallToolResult, McpError> {
    use base64::Engine as _;
    use rmcp::model::{ContentBlock, Resource};
    let mut content = Vec::new();
    let mut failed = false;
    for message in &outcome.messages {
        if let Message::Tool {
            content: text,
            status,
            ..
        } = message
        {
            failed |= *status == ToolStatus::Error;
            content.push(ContentBlock::text(text.clone()));
        }
    }
    for artifact in &outcome.presented {
        content.push(ContentBlock::resource_link(
            Resource::new(artifact.uri.clone(), artifact.name())
                .with_mime_type(mime_of(&artifact.path)),
        ));
    }
    if let Some((mime, bytes)) = &outcome.image {
        content.push(ContentBlock::image(
            base64::engine::general_purpose::STANDARD.encode(bytes),
            mime.clone(),
        ));
    }
    Ok(if failed {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    })
}
