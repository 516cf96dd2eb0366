//! Opening a session for [`McpServerActor`](super::McpServerActor): a [`Connector`] holds
//! what one attempt needs (a copy, so the attempt runs outside the actor) and opens the
//! transport with the lifecycle the plan gives, checks the protocol version, lists the
//! tools, and on a 401 or 403 gets a token (a refresh, a step-up, or a login) and tries
//! again. What it learns on the way is told to the actor as it goes.

use std::{collections::HashSet, sync::Arc, time::Duration};

use actix::Recipient;
use antler_protocol::{
    config::{McpServerConfig, Transport},
    messages::McpTool,
    Json,
};
use rmcp::{
    model::{ClientRequest, PaginatedRequestParams},
    service::ServiceError,
    Peer, RoleClient,
};
use tokio::sync::watch;

use super::{
    actor::{Learned, ToolListChanged},
    session::has_handshake,
    Identity,
};
use crate::{
    client::{self, Client},
    lifecycle::{self, Lifecycle, Plan},
    naming,
    oauth::{self, login, Authorizer, OAuthError},
    transport::{self, OpenOptions},
};

/// How long a new session with roots waits for the server to ask for them.
const ROOTS_ASK_WINDOW: Duration = Duration::from_millis(200);
/// How long a server that asked gets to apply the answer before the session is used.
const ROOTS_APPLY_GRACE: Duration = Duration::from_millis(100);
/// Pages of `tools/list` followed at most.
const MAX_PAGES: usize = 1000;

/// What one connect attempt needs, copied out of the actor.
pub(super) struct Connector {
    pub id: Arc<Identity>,
    /// The server's token source, if it has one yet.
    pub token: Option<Authorizer>,
    /// The session's roots (the actor changes them).
    pub roots: watch::Receiver<Vec<String>>,
    /// The lifecycle the last session used.
    pub kept: Option<Lifecycle>,
    pub tools_changed: Recipient<ToolListChanged>,
    pub learned: Recipient<Learned>,
}

/// A session opened and listed.
pub(super) struct Connected {
    pub opened: transport::Opened,
    pub tools: Vec<McpTool>,
    /// The `Authorization` value it was opened with.
    pub authorization: Option<String>,
}

/// Why a session could not be opened and listed.
struct Failure {
    /// What the operator is told.
    message: String,
    /// The transport's own words.
    text: String,
    /// The server refused the token or asked for one (401).
    unauthorized: bool,
    /// The server refused the token's scope (403).
    forbidden: bool,
    /// The `WWW-Authenticate` challenge of that refusal, when the transport kept it.
    challenge: Option<String>,
}

impl Connector {
    /// Opens a session and lists its tools.
    pub(super) async fn connect(mut self) -> Result<Connected, String> {
        let s = self.id.clone();
        let s = &*s;
        let mut options = s.options.clone();
        let said = |e: OAuthError| match e {
            e @ OAuthError::LoginNeeded { .. } => e.to_string(),
            e => format!("MCP server '{}': {e}", s.name),
        };
        if let Some(token) = &self.token {
            options.authorization = token.authorization().await.map_err(said)?;
        }
        let server: Arc<str> = Arc::from(s.name.as_str());
        let client = || {
            Client::new(
                self.tools_changed.clone(),
                self.roots.clone(),
                s.config.elicitation,
                server.clone(),
                s.asking.clone(),
            )
        };
        let mut attempt = self.open_and_list(client(), &options).await;
        // A refused token (401), a missing one, or too narrow a scope (403), at `initialize`
        // or at the first `tools/list` (a server may let a session start unauthenticated): at
        // most a few more tries, each with what the server's challenge asked for.
        for _ in 0..3 {
            let Err(failure) = &attempt else { break };
            if !failure.unauthorized && !failure.forbidden {
                break;
            }
            let Some(token) = self.token.clone().or_else(|| login_authorizer(s)) else {
                break;
            };
            if self.token.is_none() {
                self.token = Some(token.clone());
                self.learned.do_send(Learned {
                    token: Some(token.clone()),
                    ..Learned::default()
                });
            }
            let challenge = match &failure.challenge {
                Some(c) => Some(c.clone()),
                None => {
                    let url = s.config.url.clone().unwrap_or_default();
                    transport::challenge(&url, &s.config, &options).await
                }
            };
            token.set_challenge(challenge.clone()).await;
            if failure.forbidden {
                let stepped = match challenge.as_deref() {
                    Some(c) => token.step_up(c).await,
                    None => false,
                };
                if !stepped {
                    break;
                }
            } else if let Some(rejected) = &options.authorization {
                token.invalidate(rejected).await;
            }
            let mut next = token.authorization().await.map_err(said)?;
            if next.is_none() {
                next = login_now(s, &token, &failure.text).await.map_err(said)?;
            }
            if next.is_none() || next == options.authorization {
                break;
            }
            options.authorization = next;
            attempt = self.open_and_list(client(), &options).await;
        }
        let (opened, tools, roots_asked) = attempt.map_err(|f| f.message)?;
        if !self.roots.borrow().is_empty() && has_handshake(opened.session.peer()) {
            settle_roots(opened.session.peer(), roots_asked).await;
        }
        Ok(Connected {
            opened,
            tools,
            authorization: options.authorization,
        })
    }

    /// Opens a session with `client`, checks its protocol version and lists its tools.
    async fn open_and_list(
        &self,
        client: Client,
        options: &OpenOptions,
    ) -> Result<(transport::Opened, Vec<McpTool>, watch::Receiver<u32>), Failure> {
        let s = &*self.id;
        let roots_asked = client.roots_asked();
        let opened = match self.open_session(client, options).await {
            Ok((o, used)) => {
                self.learned.do_send(Learned {
                    lifecycle: Some(used),
                    ..Learned::default()
                });
                o
            }
            Err(e) => {
                let text = e.to_string();
                return Err(Failure {
                    message: format!("MCP server '{}' failed to start: {e}", s.name),
                    unauthorized: text.contains("HTTP 401"),
                    forbidden: is_forbidden(&text),
                    challenge: None,
                    text,
                });
            }
        };
        // rmcp takes any version the server answers: one Antler does not speak ends here.
        let version = opened
            .session
            .peer()
            .peer_info()
            .map(|info| info.protocol_version.clone());
        if let Some(v) = &version {
            if !client::speaks(v) {
                let message = format!(
                "MCP server '{}' answered protocol version {v}, which Antler does not speak ({})",
                s.name,
                client::spoken_versions()
            );
                return Err(Failure {
                    text: message.clone(),
                    message,
                    unauthorized: false,
                    forbidden: false,
                    challenge: None,
                });
            }
        }
        self.learned.do_send(Learned {
            protocol_version: Some(version.map(|v| v.to_string())),
            ..Learned::default()
        });
        match list_tools(&s.name, &s.config, opened.session.peer()).await {
            Ok(tools) => Ok((opened, tools, roots_asked)),
            Err(e) => {
                let text = e.to_string();
                Err(Failure {
                    message: format!("MCP server '{}' failed to list tools: {e}", s.name),
                    unauthorized: is_unauthorized(&e) && !is_forbidden(&text),
                    forbidden: is_forbidden(&text),
                    challenge: e.auth_challenge().map(str::to_owned),
                    text,
                })
            }
        }
    }

    /// Opens a session with the lifecycle [`lifecycle::plan`] gives: under a probe, a server
    /// that does not take `server/discover` within the window (an error, HTTP 400, -32601, no
    /// answer) gets `initialize` on a fresh connection (a new child, a new HTTP session).
    async fn open_session(
        &self,
        client: Client,
        options: &OpenOptions,
    ) -> Result<(transport::Opened, Lifecycle), transport::OpenError> {
        let s = &*self.id;
        let kept = self.kept;
        let open = |lifecycle, client| {
            transport::open(&s.name, &s.config, s.transport, lifecycle, client, options)
        };
        match lifecycle::plan(s.config.protocol, s.transport, kept) {
            Plan::Use(lifecycle) => Ok((open(lifecycle, client).await?, lifecycle)),
            Plan::Probe => {
                let probe = tokio::time::timeout(
                    lifecycle::PROBE_WINDOW,
                    open(Lifecycle::Discover, client.clone()),
                )
                .await;
                let why = match probe {
                    Ok(Ok(opened)) => return Ok((opened, Lifecycle::Discover)),
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => format!("no answer within {}s", lifecycle::PROBE_WINDOW.as_secs()),
                };
                tracing::info!(server = %s.name, "server/discover not taken ({why}); using initialize");
                Ok((
                    open(Lifecycle::Initialize, client).await?,
                    Lifecycle::Initialize,
                ))
            }
        }
    }
}

/// A server that asks for its roots as it starts (the filesystem server does, once
/// initialized) applies them while it already serves: the session waits up to
/// [`ROOTS_ASK_WINDOW`] for that request, and when it came, [`ROOTS_APPLY_GRACE`] and a
/// ping more, so a first call does not meet the roots of the server's command line.
async fn settle_roots(peer: &Peer<RoleClient>, mut asked: watch::Receiver<u32>) {
    let was_asked = tokio::time::timeout(ROOTS_ASK_WINDOW, asked.wait_for(|n| *n > 0))
        .await
        .is_ok_and(|r| r.is_ok());
    if was_asked {
        tokio::time::sleep(ROOTS_APPLY_GRACE).await;
        let request = ClientRequest::PingRequest(Default::default());
        let _ = tokio::time::timeout(ROOTS_ASK_WINDOW * 10, peer.send_request(request)).await;
    }
}

/// `tools/list` with pagination, stopping at a cursor seen before; names validated.
pub async fn list_tools(
    server: &str,
    config: &McpServerConfig,
    peer: &Peer<RoleClient>,
) -> Result<Vec<McpTool>, ServiceError> {
    let mut cursor: Option<String> = None;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for _ in 0..MAX_PAGES {
        let params = cursor
            .clone()
            .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let page = peer.list_tools(params).await?;
        for tool in page.tools {
            let original = tool.name.to_string();
            let name = naming::exposed_name(server, &original, config.tool_name_prefix);
            if !naming::is_valid_tool_name(&name) {
                tracing::warn!(server, tool = %name.escape_debug(), "dropping a tool whose name is not ^[A-Za-z0-9_-]+$");
                continue;
            }
            out.push(McpTool {
                server: server.to_owned(),
                routing: format!("{:?}", config.effective_routing(&original).mode).to_lowercase(),
                name,
                original_name: original,
                description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
                input_schema: Json::from(serde_json::Map::clone(&tool.input_schema)),
            });
        }
        match page.next_cursor {
            Some(next) if !next.is_empty() => {
                if !seen.insert(next.clone()) {
                    tracing::warn!(server, "tools/list repeated a cursor; stopping pagination");
                    break;
                }
                cursor = Some(next);
            }
            _ => break,
        }
    }
    Ok(out)
}

/// A 403, as rmcp says it: `HTTP 403`, `Forbidden`, or its `Insufficient scope` error
/// (a 403 `insufficient_scope` challenge).
pub(super) fn is_forbidden(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("http 403")
        || lower.contains("insufficient scope")
        || lower.contains("forbidden")
}

/// A login token source for an HTTP server with no `oauth` block (asked for by a 401).
pub(super) fn login_authorizer(s: &Identity) -> Option<Authorizer> {
    if s.transport == Transport::Stdio {
        return None;
    }
    let broker = s.options.oauth.as_ref()?;
    if s.config.oauth.is_some() {
        // Configured but disabled.
        return None;
    }
    let o = antler_protocol::config::McpOAuthConfig::login_default();
    let url = s.config.url.clone().unwrap_or_default();
    let a = broker.authorizer(&s.name, s.options.user.as_deref(), &url, &o);
    Some(a)
}

/// No usable token and only a login gets one: with `$BROWSER` set, the login runs now
/// (the URL goes to the browser, the redirect comes back to a loopback listener) and its
/// token is returned; without one, the error names the command to run.
async fn login_now(
    s: &Identity,
    token: &Authorizer,
    why: &str,
) -> Result<Option<String>, OAuthError> {
    let user = s
        .options
        .user
        .clone()
        .unwrap_or_else(|| oauth::DEFAULT_USER.into());
    let needed = |reason: String| OAuthError::LoginNeeded {
        server: s.name.clone(),
        user: user.clone(),
        reason,
    };
    if !token.is_login() {
        return Ok(None);
    }
    let status = if is_forbidden(why) {
        "HTTP 403"
    } else {
        "HTTP 401 Unauthorized"
    };
    let Some(browser) = login::browser() else {
        return Err(needed(format!(
            "{status}, no token, and no $BROWSER to log in with"
        )));
    };
    // One login at a time: a call that waited here for another's gets its token.
    let turn = token.browser_login_turn().await;
    if !turn.first {
        if let Ok(Some(header)) = token.authorization().await {
            return Ok(Some(header));
        }
    }
    let url = token.start_login(None).await?;
    if let Err(e) = login::open_in(&browser, &url) {
        return Err(needed(format!(
            "{status}; $BROWSER could not be started: {e}"
        )));
    }
    let within = Duration::from_secs_f64(s.config.session_init_timeout.max(1.0));
    token.wait_login(within).await?;
    let header = token.authorization().await;
    drop(turn);
    header
}

pub(super) fn is_unauthorized(e: &ServiceError) -> bool {
    e.is_authorization_required() || {
        let t = e.to_string();
        t.contains("401") || t.contains("Unauthorized")
    }
}
