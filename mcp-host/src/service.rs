//! The mcp-host side of the wire: routes each `McpRequest` to the registry and the server
//! actors. Calls are run here, outside every actor, on a server's address cloned out of the
//! registry (the actor hands each call its live session).
//! A listing waits for a server's first start only within [`START_GRACE`] of its spawn:
//! one that hangs is reported not ready instead of holding up every run.

use std::{sync::Arc, time::Duration};

use actix::Addr;
use antler_protocol::{
    approvals::ApprovalPolicy,
    config::Transport,
    host::RoleHandler,
    messages::{
        Health, McpCall, McpCallResult, McpDiscovery, McpReply, McpRequest, McpServerStatus, Reply,
        Request,
    },
    Call, Json, RemoteError,
};
use futures::future::BoxFuture;

use crate::{
    approvals,
    ask::{AskingCall, Elicitations},
    naming,
    oauth::{self, share, Authorizer, OAuthBroker},
    pool::SessionPool,
    registry::{McpRegistry, Reload, Servers, Skipped, Subscribe},
    server::{McpServer, Phase},
};

/// A call's deadline when the requester gave none.
const DEFAULT_CALL_DEADLINE: Duration = Duration::from_secs(120);
/// How long a listing may wait when the requester gave no deadline.
const DEFAULT_LIST_WAIT: Duration = Duration::from_secs(60);
/// How long after its spawn a server still in its first start is waited for by a
/// listing; past it, the listing answers without it. A stdio server starts in well under
/// a second on an idle machine, but an `npx` or Python server on a loaded one (the first
/// run after a cluster starts, beside a busy build) was seen to take over 5 s.
const START_GRACE: Duration = Duration::from_secs(10);

/// Routes mcp-host requests.
pub struct McpService {
    registry: Addr<McpRegistry>,
    pool: Arc<SessionPool>,
    /// Kept so the logins' authorizers outlive every server restart; its store is what
    /// the replicas share.
    oauth: Arc<OAuthBroker>,
    /// Elicitations waiting for a run's user (policy `ask`).
    elicitations: Arc<Elicitations>,
    /// The config's approval policy, decided again for every call (`approvals`).
    approvals: ApprovalPolicy,
}

impl McpService {
    pub fn new(
        registry: Addr<McpRegistry>,
        pool: Arc<SessionPool>,
        oauth: Arc<OAuthBroker>,
        approvals: ApprovalPolicy,
    ) -> Arc<Self> {
        Arc::new(Self {
            registry,
            pool,
            oauth,
            elicitations: Arc::default(),
            approvals,
        })
    }
}

/// The sealing key of a host that shares its credentials, or the refusal of one that
/// does not.
fn shared(oauth: &OAuthBroker) -> Result<Arc<share::Sealer>, RemoteError> {
    oauth.sealer().cloned().ok_or_else(|| {
        RemoteError::Unsupported(
            "this mcp-host has no --oauth-key-file: its OAuth credentials are not shared".into(),
        )
    })
}

/// The login authorizer of `server` for `user`, or why there is none.
async fn login_of(
    servers: &[McpServer],
    server: &str,
    user: Option<&str>,
) -> Result<(McpServer, Authorizer), RemoteError> {
    let Some(base) = servers.iter().find(|h| h.name() == server) else {
        return Err(RemoteError::Failed(format!(
            "no MCP server named '{server}'"
        )));
    };
    if base.transport() == Transport::Stdio {
        return Err(RemoteError::Failed(format!(
            "MCP server '{server}' is a stdio server: it has no OAuth login"
        )));
    }
    let user_key = user.unwrap_or(oauth::DEFAULT_USER);
    let authorizer = match user {
        None => base.authorizer().await,
        Some(_) => base.authorizer_for_user(user_key).await,
    };
    match authorizer {
        Some(a) if a.is_login() => Ok((base.clone(), a)),
        _ => Err(RemoteError::Failed(format!(
            "MCP server '{server}' does not log users in: its oauth block configures a \
             client_credentials or refresh_token grant (or OAuth is disabled)"
        ))),
    }
}

fn unavailable(e: impl std::fmt::Display) -> RemoteError {
    RemoteError::Failed(format!("registry unavailable: {e}"))
}

/// Time left before the requester gives up, less a margin for the reply to travel.
fn left(call: &Call, default: Duration) -> Duration {
    call.deadline
        .map(|d| {
            d.saturating_duration_since(std::time::Instant::now())
                .saturating_sub(Duration::from_millis(50))
        })
        .unwrap_or(default)
}

impl RoleHandler for McpService {
    /// Chaos mode: crashes the live session of a server and of its pooled sessions.
    fn chaos_stop(
        &self,
        actor: antler_protocol::messages::ActorRef,
    ) -> BoxFuture<'static, Result<antler_protocol::messages::ControlReply, RemoteError>> {
        use antler_protocol::messages::{ActorRef, ControlReply};
        let registry = self.registry.clone();
        let pool = self.pool.clone();
        Box::pin(async move {
            let ActorRef::McpServer { name } = actor else {
                return Ok(ControlReply::ChaosStopped {
                    stopped: 0,
                    detail: format!("mcp-host owns no {} actor", actor.kind()),
                });
            };
            let servers = registry.send(Servers).await.map_err(unavailable)?;
            let mut of_name: Vec<McpServer> =
                servers.into_iter().filter(|h| h.name() == name).collect();
            if of_name.is_empty() {
                return Err(RemoteError::Failed(format!("no MCP server named '{name}'")));
            }
            of_name.extend(pool.sessions_of(&name));
            let crashed = futures::future::join_all(of_name.iter().map(McpServer::crash)).await;
            let stopped = crashed.into_iter().filter(|c| *c).count() as u32;
            Ok(ControlReply::ChaosStopped {
                stopped,
                detail: if stopped == 0 {
                    format!("MCP server '{name}' has no live session to stop")
                } else {
                    format!(
                        "stopped {stopped} session(s) of MCP server '{name}'; calls in flight got \
                         'connection lost', the server actor reconnects"
                    )
                },
            })
        })
    }

    fn handle(
        &self,
        request: Request,
        call: Call,
        health: Health,
    ) -> BoxFuture<'static, Result<Reply, RemoteError>> {
        let registry = self.registry.clone();
        let pool = self.pool.clone();
        let elicitations = self.elicitations.clone();
        let oauth = self.oauth.clone();
        let approvals = self.approvals.clone();
        Box::pin(async move {
            let Request::Mcp(request) = request else {
                return Err(RemoteError::Unsupported(format!(
                    "mcp-host does not handle {} requests",
                    request.kind()
                )));
            };
            match request {
                McpRequest::Health => {
                    let servers = registry.send(Servers).await.map_err(unavailable)?.len() as u32;
                    Ok(Reply::Mcp(McpReply::Health { health, servers }))
                }
                McpRequest::Status => {
                    let servers = registry.send(Servers).await.map_err(unavailable)?;
                    let mut out = statuses(&servers).await;
                    out.extend(registry.send(Skipped).await.map_err(unavailable)?);
                    Ok(Reply::Mcp(McpReply::Status(out)))
                }
                McpRequest::ListTools { server } => {
                    let servers = registry.send(Servers).await.map_err(unavailable)?;
                    let wanted: Vec<McpServer> = servers
                        .into_iter()
                        .filter(|h| server.as_deref().is_none_or(|s| s == h.name()))
                        .collect();
                    if let Some(name) = &server {
                        if wanted.is_empty() {
                            return Err(RemoteError::Failed(format!(
                                "no MCP server named '{name}'"
                            )));
                        }
                    }
                    settle(&wanted, left(&call, DEFAULT_LIST_WAIT)).await;
                    Ok(Reply::Mcp(McpReply::Tools(tools_of(&wanted).await)))
                }
                McpRequest::Discover => {
                    let servers = registry.send(Servers).await.map_err(unavailable)?;
                    settle(&servers, left(&call, DEFAULT_LIST_WAIT)).await;
                    // A reconnecting server keeps its tool list: calls wait for it.
                    let mut not_ready: Vec<McpServerStatus> = statuses(&servers)
                        .await
                        .into_iter()
                        .filter(|s| {
                            s.state != Phase::Ready.as_str()
                                && s.state != Phase::Reconnecting.as_str()
                        })
                        .collect();
                    not_ready.extend(registry.send(Skipped).await.map_err(unavailable)?);
                    Ok(Reply::Mcp(McpReply::Discovery(McpDiscovery {
                        tools: tools_of(&servers).await,
                        not_ready,
                    })))
                }
                McpRequest::CallTool(c) => {
                    let servers = registry.send(Servers).await.map_err(unavailable)?;
                    let deadline = left(&call, DEFAULT_CALL_DEADLINE);
                    let (items, mut asked) = tokio::sync::mpsc::unbounded_channel();
                    let asking = match (&c.user, &c.run_id, &c.tool_call_id) {
                        (Some(user), Some(run_id), Some(_)) => Some(AskingCall {
                            user: user.clone(),
                            run_id: run_id.clone(),
                            deadline: tokio::time::Instant::now() + deadline,
                            items,
                            elicitations,
                        }),
                        _ => None,
                    };
                    // The call's elicitations are stream items of its reply; the result is
                    // the final reply.
                    let result = call_tool(servers, &pool, &approvals, c, deadline, asking);
                    tokio::pin!(result);
                    loop {
                        tokio::select! {
                            r = &mut result => break Ok(Reply::Mcp(McpReply::CallResult(r))),
                            Some(a) = asked.recv() => {
                                let item = Reply::Mcp(McpReply::Elicitation {
                                    id: a.id,
                                    server: a.server,
                                    message: a.message,
                                    requested_schema: Json::from(&a.requested_schema),
                                });
                                if let Err(e) = call.send_item(item).await {
                                    tracing::warn!("an elicitation could not be told: {e}");
                                }
                            }
                        }
                    }
                }
                McpRequest::AnswerElicitation(answer) => Ok(Reply::Mcp(
                    McpReply::ElicitationAnswered(elicitations.answer(&answer)),
                )),
                McpRequest::Reload => {
                    let summary = registry
                        .send(Reload { force: false })
                        .await
                        .map_err(unavailable)?;
                    Ok(Reply::Mcp(McpReply::Reloaded(summary)))
                }
                McpRequest::WatchTools => {
                    let mut rx = registry.send(Subscribe).await.map_err(unavailable)?;
                    loop {
                        match rx.recv().await {
                            Ok(ch) => {
                                let item = Reply::Mcp(McpReply::ToolsChanged {
                                    server: ch.server,
                                    tools: ch.tools,
                                });
                                if call.send_item(item).await.is_err() {
                                    break;
                                }
                            }
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                            Err(_) => break,
                        }
                    }
                    Ok(Reply::Mcp(McpReply::WatchEnded))
                }
                McpRequest::WatchCredentials => {
                    let sealer = shared(&oauth)?;
                    let store = oauth.store().clone();
                    // Subscribed before the snapshot, so no change falls between them.
                    let mut rx = store.subscribe();
                    let mut pending = store.snapshot();
                    loop {
                        for change in pending.drain(..) {
                            let Some(sealed) = share::seal_change(&sealer, &change) else {
                                continue;
                            };
                            let item = Reply::Mcp(McpReply::Credential(sealed));
                            if call.send_item(item).await.is_err() {
                                return Ok(Reply::Mcp(McpReply::WatchEnded));
                            }
                        }
                        match rx.recv().await {
                            Ok(change) => pending.push(change),
                            // Changes were missed: everything again (the newer wins).
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                                pending = store.snapshot();
                            }
                            Err(_) => return Ok(Reply::Mcp(McpReply::WatchEnded)),
                        }
                    }
                }
                McpRequest::PutCredentials(list) => {
                    let sealer = shared(&oauth)?;
                    let mut taken = 0u32;
                    let mut woken = Vec::new();
                    for sealed in &list {
                        let Some(change) = share::open_sealed(&sealer, sealed) else {
                            continue;
                        };
                        let login = change.entry.credentials.is_some();
                        let (server, user) = (change.server.clone(), change.user.clone());
                        match oauth.store().take(change).await {
                            Ok(true) => {
                                taken += 1;
                                if login {
                                    woken.push((server, user));
                                }
                            }
                            Ok(false) => {}
                            Err(e) => return Err(RemoteError::Failed(e.to_string())),
                        }
                    }
                    if !woken.is_empty() {
                        // A server waiting for a login connects with the shared one.
                        let servers = registry.send(Servers).await.map_err(unavailable)?;
                        for (server, user) in &woken {
                            for h in servers.iter().filter(|h| h.name() == server) {
                                h.wake();
                            }
                            pool.wake(server, user);
                        }
                    }
                    Ok(Reply::Mcp(McpReply::CredentialsTaken(taken)))
                }
                McpRequest::OAuthStart(login) => {
                    let servers = registry.send(Servers).await.map_err(unavailable)?;
                    let (_, d) = login_of(&servers, &login.server, login.user.as_deref()).await?;
                    let url = d
                        .start_login(login.redirect_uri)
                        .await
                        .map_err(|e| RemoteError::Failed(e.to_string()))?;
                    Ok(Reply::Mcp(McpReply::OAuthUrl { url }))
                }
                McpRequest::OAuthComplete {
                    server,
                    user,
                    redirected,
                } => {
                    let servers = registry.send(Servers).await.map_err(unavailable)?;
                    let (base, d) = login_of(&servers, &server, user.as_deref()).await?;
                    d.complete_login(&redirected)
                        .await
                        .map_err(|e| RemoteError::Failed(e.to_string()))?;
                    base.wake();
                    pool.wake(&server, user.as_deref().unwrap_or(oauth::DEFAULT_USER));
                    Ok(Reply::Mcp(McpReply::OAuthDone {
                        server,
                        user: user.unwrap_or_else(|| oauth::DEFAULT_USER.into()),
                    }))
                }
                McpRequest::OAuthWait { server, user } => {
                    let servers = registry.send(Servers).await.map_err(unavailable)?;
                    let (base, d) = login_of(&servers, &server, user.as_deref()).await?;
                    d.wait_login(left(&call, DEFAULT_CALL_DEADLINE))
                        .await
                        .map_err(|e| RemoteError::Failed(e.to_string()))?;
                    base.wake();
                    pool.wake(&server, user.as_deref().unwrap_or(oauth::DEFAULT_USER));
                    Ok(Reply::Mcp(McpReply::OAuthDone {
                        server,
                        user: user.unwrap_or_else(|| oauth::DEFAULT_USER.into()),
                    }))
                }
            }
        })
    }
}

/// Waits for the servers' first starts, within [`START_GRACE`] of each spawn.
async fn settle(servers: &[McpServer], within: Duration) {
    futures::future::join_all(
        servers
            .iter()
            .map(|h| h.settled_within(START_GRACE, within)),
    )
    .await;
}

/// The listed tools of `servers`, in order (a server not ready yet has none).
async fn tools_of(servers: &[McpServer]) -> Vec<antler_protocol::messages::McpTool> {
    futures::future::join_all(servers.iter().map(McpServer::tools))
        .await
        .iter()
        .flat_map(|tools| tools.as_ref().clone())
        .collect()
}

/// The status lines of `servers`, in order.
async fn statuses(servers: &[McpServer]) -> Vec<McpServerStatus> {
    futures::future::join_all(servers.iter().map(McpServer::status)).await
}

async fn call_tool(
    servers: Vec<McpServer>,
    pool: &SessionPool,
    approvals: &ApprovalPolicy,
    c: McpCall,
    deadline: Duration,
    asking: Option<AskingCall>,
) -> McpCallResult {
    let Some(server) = servers.iter().find(|h| h.name() == c.server).cloned() else {
        return McpCallResult::error(format!("no MCP server named '{}'", c.server));
    };
    let args = serde_json::Value::from(c.args.clone());
    if !args.is_object() {
        return McpCallResult::error("tool arguments must be a JSON object");
    }
    // Accept the exposed `{server}_{tool}` name as well as the server's own.
    let prefix = server.config().tool_name_prefix;
    let tools = server.tools().await;
    let tool = if tools.iter().any(|t| t.original_name == c.tool) {
        c.tool.clone()
    } else {
        naming::original_name(&c.server, &c.tool, prefix).to_owned()
    };
    // The second layer of approvals, on the name the model sees: a call the policy denies,
    // or asks about without a person's approval of that rule, never reaches the server.
    if !approvals.is_empty() {
        let exposed = naming::exposed_name(&c.server, &tool, prefix);
        let clearance = c.clearance.as_deref();
        if let Some(refusal) = approvals::refused(approvals, &c.server, &exposed, &args, clearance)
        {
            tracing::warn!(server = %c.server, tool = %tool, "{refusal}");
            return McpCallResult::error(refusal);
        }
    }
    let serde_json::Value::Object(args) = args else {
        return McpCallResult::error("tool arguments must be a JSON object");
    };
    // A stdio call for a user or thread runs on that (user, thread)'s pooled session; a
    // call for a user of a server users log in to, on that user's session.
    let stdio = server.transport() == Transport::Stdio;
    let other_user = match c.user.as_deref() {
        Some(u) if u != oauth::DEFAULT_USER && !stdio && server.logs_users_in().await => Some(u),
        _ => None,
    };
    let session = if stdio && (c.user.is_some() || c.thread.is_some()) {
        pool.retain_current(&servers);
        match pool.session(
            &server,
            c.user.as_deref(),
            c.thread.as_deref(),
            c.workspace.as_deref(),
        ) {
            Ok(s) => s,
            Err(e) => return McpCallResult::error(format!("MCP server '{}': {e}", c.server)),
        }
    } else if let Some(user) = other_user {
        pool.retain_current(&servers);
        match pool.session(&server, Some(user), None, None) {
            Ok(s) => s,
            Err(e) => return McpCallResult::error(format!("MCP server '{}': {e}", c.server)),
        }
    } else {
        server
    };
    session.call(&tool, args, deadline, asking).await
}
