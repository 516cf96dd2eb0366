//! `McpServerActor`: owns one server's connection (a task owns the rmcp session), its
//! lifecycle and reconnects, and its tool list. Others hold a clone of the `McpServerActor`
//! handle (the actor is a tokio task, addressed through it): calls clone
//! the live peer out of the state and run with no lock held, so many calls run at once.
//! When the session dies every call in flight on it gets an error result at once; the actor
//! reconnects with backoff and re-lists its tools. In chaos mode [`McpServerActor::crash`]
//! kills the live session the way a crash would (no close handshake, the stdio child's
//! group killed), and the same reconnect path brings a new one up.

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use antler_protocol::{
    config::{McpServerConfig, Transport},
    messages::{McpCallResult, McpServerStatus, McpTool},
};
use rmcp::{
    model::{CallToolRequestParams, ClientRequest, PaginatedRequestParams},
    service::ServiceError,
    Peer, RoleClient,
};
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::{
    ask::{AskingCall, AskingCalls},
    client::{self, Client},
    convert,
    lifecycle::{self, Lifecycle, Plan},
    naming,
    oauth::{self, login, Authorizer, OAuthError},
    transport::{self, OpenOptions},
};

/// First wait before reconnecting a session that died; doubles up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Longest wait between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a stopping session gets to close before it is dropped.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a new session with roots waits for the server to ask for them.
const ROOTS_ASK_WINDOW: Duration = Duration::from_millis(200);
/// How long a server that asked gets to apply the answer before the session is used.
const ROOTS_APPLY_GRACE: Duration = Duration::from_millis(100);
/// Pages of `tools/list` followed at most.
const MAX_PAGES: usize = 1000;
/// How often a live stdio session is pinged (a local child answers in microseconds).
const STDIO_PING_EVERY: Duration = Duration::from_secs(1);
/// How often a live HTTP session is pinged (a remote server is not chattered at).
const REMOTE_PING_EVERY: Duration = Duration::from_secs(15);
/// A ping not answered within this says the server is paused, hung or saturated.
const PING_DEADLINE: Duration = Duration::from_secs(1);

/// A tool list change, told to subscribers (the catalog rebuilds).
#[derive(Debug, Clone)]
pub struct ToolsChanged {
    pub server: String,
    pub tools: u32,
}

/// Where a server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Starting,
    Ready,
    Reconnecting,
    Failed,
    Stopped,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Ready => "ready",
            Phase::Reconnecting => "reconnecting",
            Phase::Failed => "failed",
            Phase::Stopped => "stopped",
        }
    }
}

/// The live session calls go through.
#[derive(Clone)]
struct Live {
    peer: Peer<RoleClient>,
    /// Cancelled when this session ends.
    closed: CancellationToken,
    /// The `Authorization` value the session was opened with (OAuth).
    authorization: Option<String>,
    /// Identifies this session among the actor's successive sessions.
    generation: Arc<()>,
}

struct State {
    phase: Phase,
    tools: Arc<Vec<McpTool>>,
    last_error: Option<String>,
    reconnects: u32,
    /// The stdio child (its process group's leader) of the live session.
    pid: Option<u32>,
    /// The protocol version the live (or last) session agreed on.
    protocol_version: Option<String>,
    /// The lifecycle that opened the live (or last) session; kept for the next one.
    lifecycle: Option<Lifecycle>,
}

struct Shared {
    name: String,
    config: McpServerConfig,
    transport: Transport,
    state: Mutex<State>,
    live: watch::Sender<Option<Live>>,
    /// False until the first attempt to start has ended (ready or failed).
    settled: watch::Sender<bool>,
    /// When the actor was spawned.
    spawned_at: tokio::time::Instant,
    in_flight: AtomicU32,
    stop: CancellationToken,
    changes: broadcast::Sender<ToolsChanged>,
    /// The OAuth token source: the configured one, or the login one a 401 asked for.
    token: std::sync::OnceLock<Authorizer>,
    options: OpenOptions,
    /// Cuts a reconnect's backoff short (a login just completed).
    wake: tokio::sync::Notify,
    /// Ask the actor to reopen its session if it still uses this `Authorization` (a 401,
    /// or a token refreshed since the session opened).
    reopen: mpsc::UnboundedSender<Option<String>>,
    /// The session's roots (directories on this host): `roots/list` answers with them,
    /// and a change is told to the server with `notifications/roots/list_changed`.
    roots: watch::Sender<Vec<String>>,
    /// Bumped by [`McpServerActor::crash`]: the live session dies at once.
    crash: watch::Sender<u64>,
    /// The calls made for runs in flight on this session (policy `ask`).
    asking: Arc<AskingCalls>,
}

/// The handle of one server's actor (its task). Dropping handles does not stop it: `stop` does.
#[derive(Clone)]
pub struct McpServerActor {
    shared: Arc<Shared>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding this lock would be a bug in this module; the state stays usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl McpServerActor {
    /// Starts the actor for `name`: it connects at once and keeps reconnecting until stopped.
    pub fn spawn(
        name: String,
        config: McpServerConfig,
        transport: Transport,
        changes: broadcast::Sender<ToolsChanged>,
        options: OpenOptions,
    ) -> McpServerActor {
        let token = std::sync::OnceLock::new();
        if let (Transport::Sse | Transport::Http, Some(broker), Some(o)) = (
            transport,
            options.oauth.as_ref(),
            config.oauth.as_ref().filter(|o| o.enabled),
        ) {
            let url = config.url.clone().unwrap_or_default();
            let _ = token.set(broker.authorizer(&name, options.user.as_deref(), &url, o));
        }
        let (reopen, reopen_rx) = mpsc::unbounded_channel();
        let roots = watch::channel(options.roots.clone()).0;
        let shared = Arc::new(Shared {
            name,
            config,
            transport,
            state: Mutex::new(State {
                phase: Phase::Starting,
                tools: Arc::new(Vec::new()),
                last_error: None,
                reconnects: 0,
                pid: None,
                protocol_version: None,
                lifecycle: None,
            }),
            live: watch::channel(None).0,
            settled: watch::channel(false).0,
            spawned_at: tokio::time::Instant::now(),
            in_flight: AtomicU32::new(0),
            stop: CancellationToken::new(),
            changes,
            token,
            options,
            wake: tokio::sync::Notify::new(),
            reopen,
            roots,
            crash: watch::channel(0).0,
            asking: Arc::default(),
        });
        tokio::spawn(run(shared.clone(), reopen_rx));
        McpServerActor { shared }
    }

    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub fn config(&self) -> &McpServerConfig {
        &self.shared.config
    }

    pub fn transport(&self) -> Transport {
        self.shared.transport
    }

    /// Stops the actor: the session closes, a stdio child group is killed.
    pub fn stop(&self) {
        self.shared.stop.cancel();
    }

    /// Waits until the first start attempt has ended, but no later than `grace` after the
    /// actor was spawned (nor `within` from now): a server that hangs in its start is not
    /// waited on for its whole start timeout.
    pub async fn settled_within(&self, grace: Duration, within: Duration) {
        let until = (self.shared.spawned_at + grace).min(tokio::time::Instant::now() + within);
        let mut rx = self.shared.settled.subscribe();
        let _ = tokio::time::timeout_at(until, rx.wait_for(|s| *s)).await;
    }

    /// Chaos mode: the live session dies as if it crashed (no close handshake; a stdio
    /// child's group is killed); calls in flight on it get the connection-lost error and
    /// the actor reconnects. False when no session was live.
    pub fn crash(&self) -> bool {
        let live = self.shared.live.borrow().is_some();
        if live {
            self.shared.crash.send_modify(|n| *n += 1);
        }
        live
    }

    /// Where the server is in its life.
    pub fn phase(&self) -> Phase {
        lock(&self.shared.state).phase
    }

    /// The stdio child of the live session, if any.
    pub fn pid(&self) -> Option<u32> {
        lock(&self.shared.state).pid
    }

    /// Whether both handles name the same actor.
    pub fn same(&self, other: &McpServerActor) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    pub fn status(&self) -> McpServerStatus {
        let st = lock(&self.shared.state);
        McpServerStatus {
            name: self.shared.name.clone(),
            transport: match self.shared.transport {
                Transport::Stdio => "stdio",
                Transport::Sse => "sse",
                Transport::Http => "http",
            }
            .into(),
            state: st.phase.as_str().into(),
            tools: st.tools.len() as u32,
            last_error: st.last_error.clone(),
            reconnects: st.reconnects,
            in_flight: self.shared.in_flight.load(Ordering::SeqCst),
            protocol_version: st.protocol_version.clone(),
            lifecycle: st.lifecycle.map(|l| l.as_str().to_owned()),
            auth: Some(self.auth_state()),
        }
    }

    /// How the server's calls are authorized now, for the status: `none`, a client
    /// credentials token held or not yet, or how many users have logged in (never a token).
    fn auth_state(&self) -> String {
        let s = &self.shared;
        let Some(a) = s.token.get() else {
            return if s.config.oauth.as_ref().is_some_and(|o| o.enabled) {
                "oauth: no token yet".into()
            } else {
                "none".into()
            };
        };
        match a.discovered() {
            Some(d) if d.is_login() => {
                match s
                    .options
                    .oauth
                    .as_ref()
                    .map(|b| b.logged_in(&s.name))
                    .unwrap_or(0)
                {
                    0 => "login required".into(),
                    1 => "logged in: 1 user".into(),
                    n => format!("logged in: {n} users"),
                }
            }
            _ if a.fresh().is_some() => "client credentials: token held".into(),
            _ => "client credentials: no token yet".into(),
        }
    }

    /// The OAuth token source of this server (configured, or asked for by a 401).
    pub fn authorizer(&self) -> Option<Authorizer> {
        authorizer_for(&self.shared)
    }

    /// The token source of this server for `user` (a login for another user than the
    /// session's: its token is stored for that user's sessions).
    pub fn authorizer_for_user(&self, user: &str) -> Option<Authorizer> {
        let s = &self.shared;
        if s.options.user.as_deref().unwrap_or(oauth::DEFAULT_USER) == user {
            return self.authorizer();
        }
        let broker = s.options.oauth.as_ref()?;
        let o = match &s.config.oauth {
            Some(o) if o.enabled => o.clone(),
            Some(_) => return None,
            None => antler_protocol::config::McpOAuthConfig::login_default(),
        };
        let url = s.config.url.clone().unwrap_or_default();
        Some(broker.authorizer(&s.name, Some(user), &url, &o))
    }

    /// Whether users log in to this server (its token source is an authorization-code
    /// login): each user's calls then need that user's session.
    pub fn logs_users_in(&self) -> bool {
        self.authorizer()
            .and_then(|a| a.discovered().cloned())
            .is_some_and(|d| d.is_login())
    }

    /// The host's OAuth authorizers this server's sessions use.
    pub fn oauth_broker(&self) -> Option<Arc<oauth::OAuthBroker>> {
        self.shared.options.oauth.clone()
    }

    /// Reconnects now if the actor is waiting out a backoff (a login just completed).
    pub fn wake(&self) {
        self.shared.wake.notify_one();
    }

    /// Replaces the session's roots; a live session's server is told they changed.
    pub fn set_roots(&self, roots: Vec<String>) {
        self.shared.roots.send_if_modified(|now| {
            let changed = *now != roots;
            *now = roots;
            changed
        });
    }

    pub fn tools(&self) -> Arc<Vec<McpTool>> {
        lock(&self.shared.state).tools.clone()
    }

    /// Calls `tool` (the server's own name) with `args`. Every failure is an error result:
    /// the model sees it as an error tool message and the run goes on. A call made for a
    /// run (`asking`) lets the server's elicitations reach its user until it ends.
    pub async fn call(
        &self,
        tool: &str,
        args: serde_json::Map<String, serde_json::Value>,
        deadline: Duration,
        asking: Option<AskingCall>,
    ) -> McpCallResult {
        let s = &self.shared;
        let timeout = s
            .config
            .tool_call_timeout
            .filter(|t| *t > 0.0)
            .map(Duration::from_secs_f64)
            .map_or(deadline, |t| t.min(deadline));
        let started = tokio::time::Instant::now();
        let _asking = asking.map(|mut call| {
            call.deadline = started + timeout;
            s.asking.enter(call)
        });
        let mut retried_auth = false;
        let mut refreshes = 0;
        loop {
            let live = match self
                .live_session(timeout.saturating_sub(started.elapsed()))
                .await
            {
                Ok(l) => l,
                Err(e) => return McpCallResult::error(e),
            };
            if let Some(token) = s.token.get() {
                // A token refreshed since the session opened: reopen with it first. A
                // fresh cached token is compared without any await or request.
                let current = match token.fresh() {
                    Some(h) => Ok(Some(h)),
                    None => token.authorization().await,
                };
                match current {
                    Ok(Some(current))
                        if live.authorization.as_deref() != Some(current.as_str())
                            && refreshes < 2 =>
                    {
                        refreshes += 1;
                        self.reopen_and_wait(&live, timeout.saturating_sub(started.elapsed()))
                            .await;
                        continue;
                    }
                    Ok(_) => {}
                    Err(e @ OAuthError::LoginNeeded { .. }) => {
                        return McpCallResult::error(e.to_string())
                    }
                    Err(e) => return McpCallResult::error(format!("MCP server '{}': {e}", s.name)),
                }
            }
            let mut params = CallToolRequestParams::new(tool.to_owned());
            params.arguments = Some(args.clone());
            let _guard = InFlight::enter(&s.in_flight);
            let left = timeout.saturating_sub(started.elapsed());
            // Dropping the call future (timeout, lost session) makes rmcp send
            // `notifications/cancelled` for it.
            let outcome = tokio::select! {
                r = live.peer.call_tool(params) => r,
                _ = live.closed.cancelled() => Err(ServiceError::TransportClosed),
                _ = tokio::time::sleep(left) => {
                    return McpCallResult::error(format!(
                        "MCP tool '{tool}' on server '{}' timed out after {:.1}s",
                        s.name,
                        timeout.as_secs_f64()
                    ));
                }
            };
            match outcome {
                Ok(result) => {
                    let json = serde_json::to_value(&result).unwrap_or_default();
                    return convert::call_result(&json);
                }
                Err(e)
                    if is_forbidden(&e.to_string())
                        && !retried_auth
                        && e.auth_challenge().is_some() =>
                {
                    // Too narrow a scope for this tool (403 `insufficient_scope`): the
                    // token is stepped up to what the challenge names (a new login, within
                    // the step-up limit), and the call is sent once more.
                    retried_auth = true;
                    let stepped = match (
                        s.token.get().and_then(|t| t.discovered()),
                        e.auth_challenge(),
                    ) {
                        (Some(d), Some(c)) => d.step_up(c).await,
                        _ => false,
                    };
                    if !stepped {
                        return McpCallResult::error(format!(
                            "MCP tool '{tool}' on server '{}' failed: {e}",
                            s.name
                        ));
                    }
                    if let (Some(t), Some(a)) = (s.token.get(), &live.authorization) {
                        t.invalidate(a);
                    }
                    self.reopen_and_wait(&live, timeout.saturating_sub(started.elapsed()))
                        .await;
                }
                Err(e) if is_unauthorized(&e) && !retried_auth && s.token.get().is_some() => {
                    // One refresh and one retry: forget the rejected token, reopen.
                    retried_auth = true;
                    if let (Some(t), Some(a)) = (s.token.get(), &live.authorization) {
                        t.invalidate(a);
                    }
                    self.reopen_and_wait(&live, timeout.saturating_sub(started.elapsed()))
                        .await;
                }
                Err(ServiceError::TransportClosed) => {
                    // An OAuth server that refused the token ends the HTTP session; the
                    // request was refused, not run, so it is sent once more if the new
                    // session carries a new token.
                    if s.token.get().is_some() && !retried_auth {
                        retried_auth = true;
                        let within = timeout.saturating_sub(started.elapsed());
                        if self.reconnected_with_new_token(&live, within).await {
                            continue;
                        }
                    }
                    return self.connection_lost(tool);
                }
                Err(e) => {
                    return McpCallResult::error(format!(
                        "MCP tool '{tool}' on server '{}' failed: {e}",
                        s.name
                    ));
                }
            }
        }
    }

    /// Asks for a session with a fresh token in place of `live`'s, and waits for it.
    async fn reopen_and_wait(&self, live: &Live, within: Duration) {
        let s = &self.shared;
        let _ = s.reopen.send(live.authorization.clone());
        let mut rx = s.live.subscribe();
        let _ = tokio::time::timeout(
            within,
            rx.wait_for(|l| {
                l.as_ref()
                    .is_some_and(|l| l.authorization != live.authorization)
            }),
        )
        .await;
    }

    /// Waits (up to `within` and the session start timeout) for the session after `live`;
    /// true when it was opened with another token than `live`'s.
    async fn reconnected_with_new_token(&self, live: &Live, within: Duration) -> bool {
        let s = &self.shared;
        let init = Duration::from_secs_f64(s.config.session_init_timeout.max(0.001));
        let mut rx = s.live.subscribe();
        let next = tokio::time::timeout(
            within.min(init),
            rx.wait_for(|l| {
                l.as_ref().is_some_and(|l| {
                    !l.closed.is_cancelled() && !Arc::ptr_eq(&l.generation, &live.generation)
                })
            }),
        )
        .await;
        matches!(next, Ok(Ok(l)) if l.as_ref().is_some_and(|l| l.authorization != live.authorization))
    }

    fn connection_lost(&self, tool: &str) -> McpCallResult {
        McpCallResult::error(format!(
            "MCP server '{}' connection lost during the call to '{tool}'; it is reconnecting",
            self.shared.name
        ))
    }

    /// The live session, waiting (up to `within`) while the server is starting or
    /// reconnecting; a failed or stopped server answers at once with why.
    async fn live_session(&self, within: Duration) -> Result<Live, String> {
        let s = &self.shared;
        let mut rx = s.live.subscribe();
        let ready = tokio::time::timeout(within, async {
            loop {
                if let Some(l) = rx.borrow_and_update().clone() {
                    return Ok(l);
                }
                let phase = lock(&s.state).phase;
                if matches!(phase, Phase::Failed | Phase::Stopped) {
                    return Err(phase);
                }
                // Wake on a new session, or poll the phase now and then.
                let _ = tokio::time::timeout(Duration::from_millis(200), rx.changed()).await;
            }
        })
        .await;
        let why = || {
            lock(&s.state)
                .last_error
                .clone()
                .unwrap_or_else(|| "no session".into())
        };
        match ready {
            Ok(Ok(l)) => Ok(l),
            Ok(Err(Phase::Stopped)) => Err(format!("MCP server '{}' is stopped", s.name)),
            Ok(Err(_)) => Err(format!("MCP server '{}' is unavailable: {}", s.name, why())),
            Err(_) => Err(format!(
                "MCP server '{}' is not connected: {}",
                s.name,
                why()
            )),
        }
    }
}

/// A 403, as rmcp says it: `HTTP 403`, `Forbidden`, or its `Insufficient scope` error
/// (a 403 `insufficient_scope` challenge).
fn is_forbidden(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("http 403")
        || lower.contains("insufficient scope")
        || lower.contains("forbidden")
}

/// The server's token source, created on a 401 for an HTTP server with no `oauth` block.
fn authorizer_for(s: &Shared) -> Option<Authorizer> {
    if let Some(t) = s.token.get() {
        return Some(t.clone());
    }
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
    Some(s.token.get_or_init(|| a).clone())
}

/// No usable token and only a login gets one: with `$BROWSER` set, the login runs now
/// (the URL goes to the browser, the redirect comes back to a loopback listener) and its
/// token is returned; without one, the error names the command to run.
async fn login_now(
    s: &Shared,
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
    let Some(d) = token.discovered().filter(|d| d.is_login()) else {
        return Ok(None);
    };
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
    let _gate = match d.login_gate.try_lock() {
        Ok(gate) => gate,
        Err(_) => {
            let gate = d.login_gate.lock().await;
            if let Ok(Some(header)) = token.authorization().await {
                return Ok(Some(header));
            }
            gate
        }
    };
    let url = d.start_login(None).await?;
    if let Err(e) = login::open_in(&browser, &url) {
        return Err(needed(format!(
            "{status}; $BROWSER could not be started: {e}"
        )));
    }
    let within = Duration::from_secs_f64(s.config.session_init_timeout.max(1.0));
    d.wait_login(within).await?;
    token.authorization().await
}

fn is_unauthorized(e: &ServiceError) -> bool {
    e.is_authorization_required() || {
        let t = e.to_string();
        t.contains("401") || t.contains("Unauthorized")
    }
}

struct InFlight<'a>(&'a AtomicU32);

impl<'a> InFlight<'a> {
    fn enter(c: &'a AtomicU32) -> Self {
        c.fetch_add(1, Ordering::SeqCst);
        Self(c)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn set_phase(s: &Shared, phase: Phase, error: Option<String>) {
    let mut st = lock(&s.state);
    st.phase = phase;
    if error.is_some() {
        st.last_error = error;
    }
}

fn publish_tools(s: &Shared, tools: Vec<McpTool>) {
    let n = tools.len() as u32;
    lock(&s.state).tools = Arc::new(tools);
    let _ = s.changes.send(ToolsChanged {
        server: s.name.clone(),
        tools: n,
    });
}

/// The actor's task: connect, serve, and reconnect until stopped.
async fn run(s: Arc<Shared>, mut reopen: mpsc::UnboundedReceiver<Option<String>>) {
    let init_timeout = Duration::from_secs_f64(s.config.session_init_timeout.max(0.001));
    let mut backoff = FIRST_BACKOFF;
    let mut first = true;
    let mut ever_ready = false;
    loop {
        if s.stop.is_cancelled() {
            break;
        }
        if first {
            set_phase(&s, Phase::Starting, None);
        } else {
            lock(&s.state).reconnects += 1;
            if ever_ready {
                set_phase(&s, Phase::Reconnecting, None);
            }
        }
        let (changed_tx, mut changed_rx) = mpsc::unbounded_channel();
        let attempt = tokio::time::timeout(init_timeout, connect(&s, changed_tx.clone()));
        let outcome = tokio::select! {
            r = attempt => r,
            _ = s.stop.cancelled() => break,
        };
        first = false;
        let failure = match outcome {
            Ok(Ok((opened, tools, authorization))) => {
                backoff = FIRST_BACKOFF;
                ever_ready = true;
                let closed = CancellationToken::new();
                let peer = opened.session.peer().clone();
                let opened_with = authorization.clone();
                publish_tools(&s, tools);
                {
                    let mut st = lock(&s.state);
                    st.phase = Phase::Ready;
                    st.last_error = None;
                    st.pid = opened.child.as_ref().map(transport::stdio::ChildGroup::pid);
                }
                s.live.send_replace(Some(Live {
                    peer: peer.clone(),
                    closed: closed.clone(),
                    authorization,
                    generation: Arc::new(()),
                }));
                s.settled.send_replace(true);
                tracing::info!(server = %s.name, tools = lock(&s.state).tools.len(), "MCP server ready");
                let end = serve(
                    &s,
                    opened,
                    &peer,
                    opened_with,
                    (&changed_tx, &mut changed_rx),
                    &mut reopen,
                    init_timeout,
                )
                .await;
                s.live.send_replace(None);
                lock(&s.state).pid = None;
                closed.cancel();
                match end {
                    SessionEnd::Stopped => break,
                    SessionEnd::Reopen => continue,
                    SessionEnd::Died(why) => {
                        tracing::warn!(server = %s.name, "{why}");
                        set_phase(&s, Phase::Reconnecting, Some(why));
                        // The first reconnect comes quickly; a flapping server backs off.
                        tokio::select! {
                            _ = tokio::time::sleep(FIRST_BACKOFF) => {}
                            _ = s.stop.cancelled() => break,
                        }
                        continue;
                    }
                }
            }
            Ok(Err(e)) => e,
            Err(_) => format!(
                "Skipping MCP server '{}' after tool discovery timed out ({:.1}s)",
                s.name,
                init_timeout.as_secs_f64()
            ),
        };
        tracing::warn!(server = %s.name, "{failure}");
        set_phase(
            &s,
            if ever_ready {
                Phase::Reconnecting
            } else {
                Phase::Failed
            },
            Some(failure),
        );
        s.settled.send_replace(true);
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = s.wake.notified() => backoff = FIRST_BACKOFF,
            _ = s.stop.cancelled() => break,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    s.live.send_replace(None);
    set_phase(&s, Phase::Stopped, None);
    s.settled.send_replace(true);
}

enum SessionEnd {
    Stopped,
    Reopen,
    Died(String),
}

/// Serves one live session until it dies, the actor stops, or a reopen is asked for.
async fn serve(
    s: &Shared,
    opened: transport::Opened,
    peer: &Peer<RoleClient>,
    authorization: Option<String>,
    (changes, changed): (&mpsc::UnboundedSender<()>, &mut mpsc::UnboundedReceiver<()>),
    reopen: &mut mpsc::UnboundedReceiver<Option<String>>,
    list_timeout: Duration,
) -> SessionEnd {
    let transport::Opened { session, child } = opened;
    let ct = session.cancellation_token();
    let mut roots = s.roots.subscribe();
    roots.mark_unchanged();
    let mut crash = s.crash.subscribe();
    crash.mark_unchanged();
    let mut waiting = Box::pin(session.waiting());
    let every = match s.transport {
        Transport::Stdio => STDIO_PING_EVERY,
        Transport::Sse | Transport::Http => REMOTE_PING_EVERY,
    };
    let liveness = tokio::spawn(watch_liveness(s.name.clone(), peer.clone(), every));
    let _liveness = abort_on_drop(liveness.abort_handle());
    // The stateless era sends list changes only on a `subscriptions/listen` stream; they
    // arrive where the handshake era's notifications do.
    let _listen = (!has_handshake(peer)).then(|| {
        let task = tokio::spawn(listen_for_changes(
            s.name.clone(),
            peer.clone(),
            changes.clone(),
        ));
        abort_on_drop(task.abort_handle())
    });
    let end = loop {
        tokio::select! {
            Ok(()) = crash.changed() => {
                // No close handshake: the session and the child go as a crash takes them.
                break SessionEnd::Died(format!(
                    "MCP server '{}' connection stopped by chaos (as if it crashed); reconnecting",
                    s.name
                ));
            }
            q = &mut waiting => {
                break SessionEnd::Died(format!("MCP server '{}' connection closed ({})", s.name, match q {
                    Ok(reason) => format!("{reason:?}"),
                    Err(e) => e.to_string(),
                }));
            }
            _ = s.stop.cancelled() => {
                ct.cancel();
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, &mut waiting).await;
                break SessionEnd::Stopped;
            }
            Some(stale) = reopen.recv() => {
                if stale != authorization {
                    // Already reopened since that request was made.
                    continue;
                }
                ct.cancel();
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, &mut waiting).await;
                break SessionEnd::Reopen;
            }
            Ok(()) = roots.changed() => {
                roots.mark_unchanged();
                if !has_handshake(peer) {
                    // The stateless lifecycle has no roots: nothing to tell.
                    continue;
                }
                // The server asks `roots/list` again when it wants the new ones.
                match tokio::time::timeout(list_timeout, peer.notify_roots_list_changed()).await {
                    Ok(Ok(())) => tracing::info!(server = %s.name, "roots changed; told the server"),
                    Ok(Err(e)) => tracing::warn!(server = %s.name, "telling the server its roots changed failed: {e}"),
                    Err(_) => tracing::warn!(server = %s.name, "telling the server its roots changed timed out"),
                }
            }
            Some(()) = changed.recv() => {
                while changed.try_recv().is_ok() {}
                match tokio::time::timeout(list_timeout, list_tools(&s.name, &s.config, peer)).await {
                    Ok(Ok(tools)) => {
                        tracing::info!(server = %s.name, tools = tools.len(), "tool list changed");
                        publish_tools(s, tools);
                    }
                    Ok(Err(e)) => tracing::warn!(server = %s.name, "re-listing tools failed: {e}"),
                    Err(_) => tracing::warn!(server = %s.name, "re-listing tools timed out"),
                }
            }
        }
    };
    drop(child);
    end
}

/// Aborts a task of the session (its liveness watch, its listen stream) when the session
/// ends.
fn abort_on_drop(handle: tokio::task::AbortHandle) -> impl Drop {
    struct Guard(tokio::task::AbortHandle);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    Guard(handle)
}

/// Pings the session's server every `every`: a server that stops answering (paused,
/// hung, or too busy to answer a ping) is logged once with how long it has been silent,
/// and again when it answers. Nothing is torn down: calls wait for it as before (their
/// own deadlines apply), and a server that died ends the session by itself.
async fn watch_liveness(server: String, peer: Peer<RoleClient>, every: Duration) {
    let mut silent_since: Option<std::time::Instant> = None;
    loop {
        tokio::time::sleep(every).await;
        let asked = std::time::Instant::now();
        let ping = peer.send_request(ClientRequest::PingRequest(Default::default()));
        match tokio::time::timeout(PING_DEADLINE, ping).await {
            Ok(Ok(_)) => {
                if let Some(since) = silent_since.take() {
                    tracing::info!(server = %server, silent_ms = since.elapsed().as_millis() as u64, "MCP server answers pings again");
                }
            }
            // The session is ending: its end is reported there.
            Ok(Err(_)) => return,
            Err(_) => {
                if silent_since.is_none() {
                    silent_since = Some(asked);
                    tracing::warn!(server = %server, deadline_ms = PING_DEADLINE.as_millis() as u64, "MCP server did not answer a ping within the deadline (paused, hung or busy); calls to it wait");
                }
            }
        }
    }
}

/// A stateless-era session's `subscriptions/listen` stream for tool list changes: each
/// `notifications/tools/list_changed` on it is told to the session (which re-lists). A
/// server that does not offer the stream, or ends it, is logged; its tools are listed
/// again when the session reconnects.
async fn listen_for_changes(
    server: String,
    peer: Peer<RoleClient>,
    changed: mpsc::UnboundedSender<()>,
) {
    let filter = rmcp::model::SubscriptionFilter::builder()
        .tools_list_changed()
        .build();
    let mut subscription = match peer.listen(filter).await {
        Ok(s) => s,
        Err(e) => {
            tracing::info!(server = %server, "no subscriptions/listen stream for tool list changes: {e}");
            return;
        }
    };
    if subscription.acknowledged().tools_list_changed != Some(true) {
        tracing::info!(server = %server, "the server does not send tool list changes on subscriptions/listen");
        return;
    }
    loop {
        match subscription.next().await {
            Ok(Some(rmcp::model::ServerNotification::ToolListChangedNotification(_))) => {
                if changed.send(()).is_err() {
                    return;
                }
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                tracing::info!(server = %server, end = ?subscription.end(), "the subscriptions/listen stream ended");
                return;
            }
            Err(e) => {
                tracing::warn!(server = %server, "the subscriptions/listen stream failed: {e}");
                return;
            }
        }
    }
}

/// Whether the session started with `initialize` (roots and notifications to the server
/// exist only there).
fn has_handshake(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info()
        .is_none_or(|info| info.protocol_version.has_initialize())
}

/// Opens a session and lists its tools.
async fn connect(
    s: &Shared,
    changed: mpsc::UnboundedSender<()>,
) -> Result<(transport::Opened, Vec<McpTool>, Option<String>), String> {
    let mut options = s.options.clone();
    let said = |e: OAuthError| match e {
        e @ OAuthError::LoginNeeded { .. } => e.to_string(),
        e => format!("MCP server '{}': {e}", s.name),
    };
    if let Some(token) = s.token.get() {
        options.authorization = token.authorization().await.map_err(said)?;
    }
    let server: Arc<str> = Arc::from(s.name.as_str());
    let client = || {
        Client::new(
            changed.clone(),
            s.roots.subscribe(),
            s.config.elicitation,
            server.clone(),
            s.asking.clone(),
        )
    };
    let mut attempt = open_and_list(s, client(), &options).await;
    // A refused token (401), a missing one, or too narrow a scope (403), at `initialize`
    // or at the first `tools/list` (a server may let a session start unauthenticated): at
    // most a few more tries, each with what the server's challenge asked for.
    for _ in 0..3 {
        let Err(failure) = &attempt else { break };
        if !failure.unauthorized && !failure.forbidden {
            break;
        }
        let Some(token) = authorizer_for(s) else {
            break;
        };
        let challenge = match &failure.challenge {
            Some(c) => Some(c.clone()),
            None => {
                let url = s.config.url.clone().unwrap_or_default();
                transport::challenge(&url, &s.config, &options).await
            }
        };
        token.set_challenge(challenge.clone());
        if failure.forbidden {
            let stepped = match (token.discovered(), challenge.as_deref()) {
                (Some(d), Some(c)) => d.step_up(c).await,
                _ => false,
            };
            if !stepped {
                break;
            }
        } else if let Some(rejected) = &options.authorization {
            token.invalidate(rejected);
        }
        let mut next = token.authorization().await.map_err(said)?;
        if next.is_none() {
            next = login_now(s, &token, &failure.text).await.map_err(said)?;
        }
        if next.is_none() || next == options.authorization {
            break;
        }
        options.authorization = next;
        attempt = open_and_list(s, client(), &options).await;
    }
    let (opened, tools, roots_asked) = attempt.map_err(|f| f.message)?;
    if !s.roots.borrow().is_empty() && has_handshake(opened.session.peer()) {
        settle_roots(opened.session.peer(), roots_asked).await;
    }
    Ok((opened, tools, options.authorization))
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

/// Opens a session with `client`, checks its protocol version and lists its tools.
async fn open_and_list(
    s: &Shared,
    client: Client,
    options: &OpenOptions,
) -> Result<(transport::Opened, Vec<McpTool>, watch::Receiver<u32>), Failure> {
    let roots_asked = client.roots_asked();
    let opened = match open_session(s, client, options).await {
        Ok((o, used)) => {
            lock(&s.state).lifecycle = Some(used);
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
    lock(&s.state).protocol_version = version.map(|v| v.to_string());
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
    s: &Shared,
    client: Client,
    options: &OpenOptions,
) -> Result<(transport::Opened, Lifecycle), transport::OpenError> {
    let kept = lock(&s.state).lifecycle;
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
                input_schema_json: serde_json::to_string(&*tool.input_schema)
                    .unwrap_or_else(|_| "{}".into()),
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
