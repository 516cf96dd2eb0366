//! `McpServerActor`: the one owner of a server's session and lifecycle. It connects when
//! started (a future it spawns, so its mailbox stays free), keeps the live session (the
//! rmcp service, the stdio child group, the liveness and listen tasks), its phase, tool
//! list, last error, reconnect count, backoff and calls in flight, and answers the messages
//! below. Calls do not run here: [`Session`] hands a caller the live peer (a cheap handle)
//! and the call runs in the caller's task. A session that ends is replaced after a backoff;
//! [`Stop`] closes it and stops the actor.

use std::{sync::Arc, time::Duration};

use actix::prelude::*;
use antler_protocol::{
    config::Transport,
    messages::{McpServerStatus, McpTool},
};
use rmcp::{service::RunningServiceCancellationToken, Peer, RoleClient};
use tokio::sync::{broadcast, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::{
    connect::{self, Connected, Connector},
    session::{self, AbortOnDrop},
    transport_name, Identity, Phase, ToolsChanged,
};
use crate::{
    lifecycle::Lifecycle,
    oauth::Authorizer,
    transport::{self, stdio::ChildGroup},
};

/// First wait before reconnecting a session that died; doubles up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Longest wait between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a stopping session gets to close before it is dropped.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a live stdio session is pinged (a local child answers in microseconds).
const STDIO_PING_EVERY: Duration = Duration::from_secs(1);
/// How often a live HTTP session is pinged (a remote server is not chattered at).
const REMOTE_PING_EVERY: Duration = Duration::from_secs(15);

/// The live session as a caller gets it: the peer to call on, and what the call needs to
/// know about the session (its token, and a token cancelled when it ends).
#[derive(Clone)]
pub struct Live {
    pub peer: Peer<RoleClient>,
    /// Cancelled when this session ends.
    pub closed: CancellationToken,
    /// The `Authorization` value the session was opened with (OAuth).
    pub authorization: Option<String>,
    /// Identifies this session among the actor's successive sessions.
    pub generation: u64,
    /// The server's OAuth token source now (configured, or asked for by a 401).
    pub token: Option<Authorizer>,
}

/// Why a session ends.
enum SessionEnd {
    Stopped,
    Reopen,
    Died(String),
}

/// The live session the actor owns.
struct Owned {
    live: Live,
    /// The rmcp service's own token: cancelling it closes the session gracefully.
    service: Option<RunningServiceCancellationToken>,
    /// The future waiting for the service's end (dropping it drops the service).
    driver: SpawnHandle,
    /// The stdio child's process group, killed when dropped.
    _child: Option<ChildGroup>,
    _liveness: AbortOnDrop,
    _listen: Option<AbortOnDrop>,
    /// Set when the actor asked the session to close, and why.
    closing: Option<SessionEnd>,
}

/// The actor.
pub struct McpServerActor {
    id: Arc<Identity>,
    changes: broadcast::Sender<ToolsChanged>,
    /// The OAuth token source: the configured one, or the login one a 401 asked for.
    token: Option<Authorizer>,
    /// The session's roots (directories on this host): the session's client answers
    /// `roots/list` from it; a change is told to the server.
    roots: watch::Sender<Vec<String>>,
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
    in_flight: u32,
    /// False until the first attempt to start has ended (ready or failed).
    settled: bool,
    settle_waiters: Vec<oneshot::Sender<()>>,
    /// Callers waiting for a session.
    waiters: Vec<(Want, oneshot::Sender<Result<Live, Unavailable>>)>,
    first: bool,
    ever_ready: bool,
    backoff: Duration,
    /// A wake came while no backoff was being waited out: the next one is cut short.
    woken: bool,
    /// The connect attempt in progress.
    attempt: Option<SpawnHandle>,
    /// The wait before the next attempt.
    pause: Option<SpawnHandle>,
    /// That wait is a failed attempt's backoff (a wake cuts it short).
    backing_off: bool,
    session: Option<Owned>,
    generations: u64,
    /// A tool re-listing runs; `relist_again`: another change came meanwhile.
    relisting: bool,
    relist_again: bool,
    stopping: bool,
}

impl McpServerActor {
    pub(super) fn new(id: Arc<Identity>, changes: broadcast::Sender<ToolsChanged>) -> Self {
        let mut token = None;
        if let (Transport::Sse | Transport::Http, Some(broker), Some(o)) = (
            id.transport,
            id.options.oauth.as_ref(),
            id.config.oauth.as_ref().filter(|o| o.enabled),
        ) {
            let url = id.config.url.clone().unwrap_or_default();
            token = Some(broker.authorizer(&id.name, id.options.user.as_deref(), &url, o));
        }
        Self {
            roots: watch::channel(id.options.roots.clone()).0,
            id,
            changes,
            token,
            phase: Phase::Starting,
            tools: Arc::new(Vec::new()),
            last_error: None,
            reconnects: 0,
            pid: None,
            protocol_version: None,
            lifecycle: None,
            in_flight: 0,
            settled: false,
            settle_waiters: Vec::new(),
            waiters: Vec::new(),
            first: true,
            ever_ready: false,
            backoff: FIRST_BACKOFF,
            woken: false,
            attempt: None,
            pause: None,
            backing_off: false,
            session: None,
            generations: 0,
            relisting: false,
            relist_again: false,
            stopping: false,
        }
    }

    fn init_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.id.config.session_init_timeout.max(0.001))
    }

    fn set_phase(&mut self, phase: Phase, error: Option<String>) {
        self.phase = phase;
        if error.is_some() {
            self.last_error = error;
        }
        if matches!(phase, Phase::Failed | Phase::Stopped) {
            // Callers waiting for any session are answered at once with why not.
            let why = match phase {
                Phase::Stopped => Unavailable::Stopped,
                _ => Unavailable::Failed(self.why_not()),
            };
            let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiters)
                .into_iter()
                .partition(|(want, _)| phase == Phase::Stopped || matches!(want, Want::Any));
            self.waiters = later;
            for (_, tx) in now {
                let _ = tx.send(Err(why.clone()));
            }
        }
    }

    fn why_not(&self) -> String {
        self.last_error
            .clone()
            .unwrap_or_else(|| "no session".into())
    }

    fn settle(&mut self) {
        self.settled = true;
        for tx in self.settle_waiters.drain(..) {
            let _ = tx.send(());
        }
    }

    fn publish_tools(&mut self, tools: Vec<McpTool>) {
        let n = tools.len() as u32;
        self.tools = Arc::new(tools);
        let _ = self.changes.send(ToolsChanged {
            server: self.id.name.clone(),
            tools: n,
        });
    }

    /// The live session as callers get it, unless it is closing.
    fn live(&self) -> Option<Live> {
        let s = self.session.as_ref()?;
        let mut live = s.live.clone();
        live.token = self.token.clone();
        Some(live)
    }

    /// Starts a connect attempt (a spawned future; the mailbox stays free).
    fn attempt_connect(&mut self, ctx: &mut Context<Self>) {
        self.pause = None;
        self.backing_off = false;
        if self.stopping {
            return;
        }
        if self.first {
            self.set_phase(Phase::Starting, None);
        } else {
            self.reconnects += 1;
            if self.ever_ready {
                self.set_phase(Phase::Reconnecting, None);
            }
        }
        let connector = Connector {
            id: self.id.clone(),
            token: self.token.clone(),
            roots: self.roots.subscribe(),
            kept: self.lifecycle,
            tools_changed: ctx.address().recipient(),
            learned: ctx.address().recipient(),
        };
        let attempt = tokio::time::timeout(self.init_timeout(), connector.connect());
        let handle = ctx.spawn(
            attempt
                .into_actor(self)
                .map(|outcome, act, ctx| act.connected(outcome, ctx)),
        );
        self.attempt = Some(handle);
    }

    /// A connect attempt ended.
    fn connected(
        &mut self,
        outcome: Result<Result<Connected, String>, tokio::time::error::Elapsed>,
        ctx: &mut Context<Self>,
    ) {
        self.attempt = None;
        self.first = false;
        if self.stopping {
            return;
        }
        let failure = match outcome {
            Ok(Ok(c)) => return self.serve(c, ctx),
            Ok(Err(e)) => e,
            Err(_) => format!(
                "Skipping MCP server '{}' after tool discovery timed out ({:.1}s)",
                self.id.name,
                self.init_timeout().as_secs_f64()
            ),
        };
        tracing::warn!(server = %self.id.name, "{failure}");
        let phase = if self.ever_ready {
            Phase::Reconnecting
        } else {
            Phase::Failed
        };
        self.set_phase(phase, Some(failure));
        self.settle();
        let wait = if std::mem::take(&mut self.woken) {
            self.backoff = FIRST_BACKOFF;
            Duration::ZERO
        } else {
            self.backoff
        };
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        self.pause = Some(ctx.run_later(wait, |act, ctx| act.attempt_connect(ctx)));
        self.backing_off = true;
    }

    /// Makes a new session the live one.
    fn serve(&mut self, c: Connected, ctx: &mut Context<Self>) {
        let Connected {
            opened,
            tools,
            authorization,
        } = c;
        self.backoff = FIRST_BACKOFF;
        self.ever_ready = true;
        self.publish_tools(tools);
        self.phase = Phase::Ready;
        self.last_error = None;
        self.pid = opened.child.as_ref().map(ChildGroup::pid);
        self.generations += 1;
        let generation = self.generations;
        let transport::Opened { session, child } = opened;
        let peer = session.peer().clone();
        let service = Some(session.cancellation_token());
        let every = match self.id.transport {
            Transport::Stdio => STDIO_PING_EVERY,
            Transport::Sse | Transport::Http => REMOTE_PING_EVERY,
        };
        let liveness = tokio::spawn(session::watch_liveness(
            self.id.name.clone(),
            peer.clone(),
            every,
        ));
        // The stateless era sends list changes only on a `subscriptions/listen` stream; they
        // arrive where the handshake era's notifications do.
        let listen = (!session::has_handshake(&peer)).then(|| {
            let task = tokio::spawn(session::listen_for_changes(
                self.id.name.clone(),
                peer.clone(),
                ctx.address().recipient(),
            ));
            AbortOnDrop(task.abort_handle())
        });
        let driver = ctx.spawn(
            session
                .waiting()
                .into_actor(self)
                .map(move |quit, act, ctx| {
                    let why = format!(
                        "MCP server '{}' connection closed ({})",
                        act.id.name,
                        match quit {
                            Ok(reason) => format!("{reason:?}"),
                            Err(e) => e.to_string(),
                        }
                    );
                    act.session_ended(generation, SessionEnd::Died(why), ctx);
                }),
        );
        self.session = Some(Owned {
            live: Live {
                peer,
                closed: CancellationToken::new(),
                authorization,
                generation,
                token: None,
            },
            service,
            driver,
            _child: child,
            _liveness: AbortOnDrop(liveness.abort_handle()),
            _listen: listen,
            closing: None,
        });
        self.settle();
        if let Some(live) = self.live() {
            let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiters)
                .into_iter()
                .partition(|(want, _)| want.takes(&live));
            self.waiters = later;
            for (_, tx) in now {
                let _ = tx.send(Ok(live.clone()));
            }
        }
        tracing::info!(server = %self.id.name, tools = self.tools.len(), "MCP server ready");
    }

    /// Asks the live session to close (gracefully, within [`CLOSE_TIMEOUT`]) for `why`.
    fn close_session(&mut self, why: SessionEnd, ctx: &mut Context<Self>) {
        let Some(s) = self.session.as_mut() else {
            return;
        };
        if s.closing.is_some() {
            return;
        }
        s.closing = Some(why);
        if let Some(service) = s.service.take() {
            service.cancel();
        }
        let generation = s.live.generation;
        ctx.run_later(CLOSE_TIMEOUT, move |act, ctx| {
            // Not closed in time: dropped.
            let end = match act.session.as_mut() {
                Some(s) if s.live.generation == generation => s.closing.take(),
                _ => None,
            };
            if let Some(end) = end {
                act.session_ended(generation, end, ctx);
            }
        });
    }

    /// The session of `generation` ended (`end`, unless the actor asked it to close).
    fn session_ended(&mut self, generation: u64, end: SessionEnd, ctx: &mut Context<Self>) {
        let Some(mut s) = self.session.take_if(|s| s.live.generation == generation) else {
            return;
        };
        let end = s.closing.take().unwrap_or(end);
        ctx.cancel_future(s.driver);
        s.live.closed.cancel();
        // The child's group is killed and the session's tasks end here.
        drop(s);
        self.pid = None;
        self.relist_again = false;
        match end {
            SessionEnd::Stopped => self.finish_stop(ctx),
            SessionEnd::Reopen => self.attempt_connect(ctx),
            SessionEnd::Died(why) => {
                tracing::warn!(server = %self.id.name, "{why}");
                self.set_phase(Phase::Reconnecting, Some(why));
                // The first reconnect comes quickly; a flapping server backs off.
                self.pause =
                    Some(ctx.run_later(FIRST_BACKOFF, |act, ctx| act.attempt_connect(ctx)));
            }
        }
    }

    fn finish_stop(&mut self, ctx: &mut Context<Self>) {
        self.set_phase(Phase::Stopped, None);
        self.settle();
        ctx.stop();
    }

    /// Lists the tools of the live session again (a `tools/list_changed`).
    fn relist(&mut self, ctx: &mut Context<Self>) {
        let Some(live) = self.live() else {
            self.relisting = false;
            return;
        };
        self.relisting = true;
        let (name, config) = (self.id.name.clone(), self.id.config.clone());
        let listing = tokio::time::timeout(self.init_timeout(), async move {
            connect::list_tools(&name, &config, &live.peer).await
        });
        let generation = live.generation;
        ctx.spawn(listing.into_actor(self).map(move |listed, act, ctx| {
            let current = act
                .session
                .as_ref()
                .is_some_and(|s| s.live.generation == generation);
            match listed {
                Ok(Ok(tools)) if current => {
                    tracing::info!(server = %act.id.name, tools = tools.len(), "tool list changed");
                    act.publish_tools(tools);
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(server = %act.id.name, "re-listing tools failed: {e}"),
                Err(_) => tracing::warn!(server = %act.id.name, "re-listing tools timed out"),
            }
            if std::mem::take(&mut act.relist_again) {
                act.relist(ctx);
            } else {
                act.relisting = false;
            }
        }));
    }

    /// How the server's calls are authorized now, for the status: `none`, a client
    /// credentials token held or not yet, or how many users have logged in (never a token).
    fn auth_state(&self) -> String {
        let id = &self.id;
        let Some(a) = &self.token else {
            return if id.config.oauth.as_ref().is_some_and(|o| o.enabled) {
                "oauth: no token yet".into()
            } else {
                "none".into()
            };
        };
        match a.is_login() {
            true => {
                match id
                    .options
                    .oauth
                    .as_ref()
                    .map(|b| b.logged_in(&id.name))
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
}

impl Actor for McpServerActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Calls ask for the session concurrently; the mailbox is not their bottleneck.
        ctx.set_mailbox_capacity(1024);
        self.attempt_connect(ctx);
    }
}

/// Which session a caller waits for. (No `Debug`: it may carry a token.)
#[derive(Clone)]
pub enum Want {
    /// The live one; a failed or stopped server answers at once.
    Any,
    /// One opened with another `Authorization` than this.
    OtherAuthorization(Option<String>),
    /// One after the session of this generation.
    After(u64),
}

impl Want {
    fn takes(&self, live: &Live) -> bool {
        match self {
            Want::Any => true,
            Want::OtherAuthorization(a) => live.authorization != *a,
            Want::After(g) => live.generation != *g,
        }
    }
}

/// Why no session was given.
#[derive(Debug, Clone)]
pub enum Unavailable {
    /// The actor stopped (or is gone).
    Stopped,
    /// The server failed to start; the last error.
    Failed(String),
}

/// The live session a caller wants, waiting while the server starts or reconnects (the
/// caller bounds the wait); a failed or stopped server answers at once with why.
#[derive(Message)]
#[rtype(result = "Result<Live, Unavailable>")]
pub struct Session(pub Want);

impl Handler<Session> for McpServerActor {
    type Result = ResponseFuture<Result<Live, Unavailable>>;

    fn handle(&mut self, Session(want): Session, _: &mut Context<Self>) -> Self::Result {
        if let Some(live) = self.live().filter(|l| want.takes(l)) {
            return Box::pin(async move { Ok(live) });
        }
        if matches!(want, Want::Any) {
            match self.phase {
                Phase::Stopped => return Box::pin(async { Err(Unavailable::Stopped) }),
                Phase::Failed => {
                    let why = self.why_not();
                    return Box::pin(async move { Err(Unavailable::Failed(why)) });
                }
                _ => {}
            }
        }
        let (tx, rx) = oneshot::channel();
        self.waiters.retain(|(_, w)| !w.is_closed());
        self.waiters.push((want, tx));
        Box::pin(async move { rx.await.unwrap_or(Err(Unavailable::Stopped)) })
    }
}

/// The last error of the server (why it is not connected), for a caller whose wait for a
/// session ran out.
#[derive(Debug, Message)]
#[rtype(result = "String")]
pub struct WhyNot;

impl Handler<WhyNot> for McpServerActor {
    type Result = String;

    fn handle(&mut self, _: WhyNot, _: &mut Context<Self>) -> String {
        self.why_not()
    }
}

/// Close the session opened with `stale` and open one with a fresh token (a 401, or a
/// token refreshed since it opened); a session already reopened is left alone. (No
/// `Debug`: it carries a token.)
#[derive(Message)]
#[rtype(result = "()")]
pub struct Reopen {
    pub stale: Option<String>,
}

impl Handler<Reopen> for McpServerActor {
    type Result = ();

    fn handle(&mut self, msg: Reopen, ctx: &mut Context<Self>) {
        if self
            .session
            .as_ref()
            .is_some_and(|s| s.live.authorization == msg.stale)
        {
            self.close_session(SessionEnd::Reopen, ctx);
        }
    }
}

/// Stop: the session closes, a stdio child group is killed, the actor ends.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Stop;

impl Handler<Stop> for McpServerActor {
    type Result = ();

    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        if let Some(a) = self.attempt.take() {
            ctx.cancel_future(a);
        }
        if let Some(p) = self.pause.take() {
            ctx.cancel_future(p);
        }
        if self.session.is_some() {
            self.close_session(SessionEnd::Stopped, ctx);
        } else {
            self.finish_stop(ctx);
        }
    }
}

/// Chaos mode: the live session dies as if it crashed (no close handshake; a stdio child's
/// group is killed). The reply: whether a session was live.
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct Crash;

impl Handler<Crash> for McpServerActor {
    type Result = bool;

    fn handle(&mut self, _: Crash, ctx: &mut Context<Self>) -> bool {
        let Some(generation) = self.session.as_ref().map(|s| s.live.generation) else {
            return false;
        };
        let why = format!(
            "MCP server '{}' connection stopped by chaos (as if it crashed); reconnecting",
            self.id.name
        );
        self.session_ended(generation, SessionEnd::Died(why), ctx);
        true
    }
}

/// Answered once the first attempt to start has ended (ready or failed).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Settled;

impl Handler<Settled> for McpServerActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Settled, _: &mut Context<Self>) -> Self::Result {
        if self.settled {
            return Box::pin(async {});
        }
        let (tx, rx) = oneshot::channel();
        self.settle_waiters.push(tx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

/// The server's status line.
#[derive(Debug, Message)]
#[rtype(result = "McpServerStatus")]
pub struct Status;

impl Handler<Status> for McpServerActor {
    type Result = MessageResult<Status>;

    fn handle(&mut self, _: Status, _: &mut Context<Self>) -> Self::Result {
        MessageResult(McpServerStatus {
            name: self.id.name.clone(),
            transport: transport_name(self.id.transport).into(),
            state: self.phase.as_str().into(),
            tools: self.tools.len() as u32,
            last_error: self.last_error.clone(),
            reconnects: self.reconnects,
            in_flight: self.in_flight,
            protocol_version: self.protocol_version.clone(),
            lifecycle: self.lifecycle.map(|l| l.as_str().to_owned()),
            auth: Some(self.auth_state()),
        })
    }
}

/// What the pool's sweep reads of a session.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// The stdio child of the live session.
    pub pid: Option<u32>,
    /// Calls run on it now, or it is starting (for a call that waits): never evicted.
    pub busy: bool,
}

/// The session's [`Usage`].
#[derive(Debug, Message)]
#[rtype(result = "Usage")]
pub struct Occupancy;

impl Handler<Occupancy> for McpServerActor {
    type Result = MessageResult<Occupancy>;

    fn handle(&mut self, _: Occupancy, _: &mut Context<Self>) -> Self::Result {
        MessageResult(Usage {
            pid: self.pid,
            busy: self.in_flight > 0 || self.phase == Phase::Starting,
        })
    }
}

/// The listed tools.
#[derive(Debug, Message)]
#[rtype(result = "Arc<Vec<McpTool>>")]
pub struct Tools;

impl Handler<Tools> for McpServerActor {
    type Result = MessageResult<Tools>;

    fn handle(&mut self, _: Tools, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.tools.clone())
    }
}

/// The server's token source, created (a login) for an HTTP server with no `oauth` block.
#[derive(Debug, Message)]
#[rtype(result = "Option<Authorizer>")]
pub struct AuthorizerFor;

impl Handler<AuthorizerFor> for McpServerActor {
    type Result = Option<Authorizer>;

    fn handle(&mut self, _: AuthorizerFor, _: &mut Context<Self>) -> Self::Result {
        if self.token.is_none() {
            self.token = connect::login_authorizer(&self.id);
        }
        self.token.clone()
    }
}

/// Reconnect now if a backoff is being waited out (a login just completed); else the next
/// backoff is cut short.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Wake;

impl Handler<Wake> for McpServerActor {
    type Result = ();

    fn handle(&mut self, _: Wake, ctx: &mut Context<Self>) {
        // A session that died reconnects after FIRST_BACKOFF whatever: only a failed
        // attempt's backoff is cut.
        match self.pause.take() {
            Some(p) if self.backing_off => {
                ctx.cancel_future(p);
                self.backoff = (FIRST_BACKOFF * 2).min(MAX_BACKOFF);
                self.attempt_connect(ctx);
            }
            other => {
                self.pause = other;
                self.woken = true;
            }
        }
    }
}

/// Replace the session's roots; a live session's server is told they changed.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct SetRoots(pub Vec<String>);

impl Handler<SetRoots> for McpServerActor {
    type Result = ();

    fn handle(&mut self, SetRoots(roots): SetRoots, ctx: &mut Context<Self>) {
        let changed = self.roots.send_if_modified(|now| {
            let changed = *now != roots;
            *now = roots;
            changed
        });
        let Some(live) = self.live().filter(|_| changed) else {
            return;
        };
        if !session::has_handshake(&live.peer) {
            // The stateless lifecycle has no roots: nothing to tell.
            return;
        }
        // The server asks `roots/list` again when it wants the new ones.
        let name = self.id.name.clone();
        let within = self.init_timeout();
        ctx.spawn(
            async move {
                match tokio::time::timeout(within, live.peer.notify_roots_list_changed()).await {
                    Ok(Ok(())) => tracing::info!(server = %name, "roots changed; told the server"),
                    Ok(Err(e)) => tracing::warn!(server = %name, "telling the server its roots changed failed: {e}"),
                    Err(_) => tracing::warn!(server = %name, "telling the server its roots changed timed out"),
                }
            }
            .into_actor(self),
        );
    }
}

/// The server said its tool list changed (`notifications/tools/list_changed`, or on a
/// `subscriptions/listen` stream): the tools are listed again.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ToolListChanged;

impl Handler<ToolListChanged> for McpServerActor {
    type Result = ();

    fn handle(&mut self, _: ToolListChanged, ctx: &mut Context<Self>) {
        if self.relisting {
            self.relist_again = true;
        } else {
            self.relist(ctx);
        }
    }
}

/// What a connect attempt learned as it went (kept even when the attempt then fails).
#[derive(Debug, Message, Default)]
#[rtype(result = "()")]
pub struct Learned {
    pub lifecycle: Option<Lifecycle>,
    pub protocol_version: Option<Option<String>>,
    pub token: Option<Authorizer>,
}

impl Handler<Learned> for McpServerActor {
    type Result = ();

    fn handle(&mut self, msg: Learned, _: &mut Context<Self>) {
        if let Some(l) = msg.lifecycle {
            self.lifecycle = Some(l);
        }
        if let Some(v) = msg.protocol_version {
            self.protocol_version = v;
        }
        if self.token.is_none() {
            self.token = msg.token;
        }
    }
}

/// A call starts (`true`) or ends (`false`) on the session: the status counts them.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct InFlight(pub bool);

impl Handler<InFlight> for McpServerActor {
    type Result = ();

    fn handle(&mut self, InFlight(started): InFlight, _: &mut Context<Self>) {
        if started {
            self.in_flight += 1;
        } else {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
    }
}
