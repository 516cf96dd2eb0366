//! One MCP server connection. [`McpServerActor`] (in `actor`) owns the server's rmcp
//! session, its lifecycle (start, backoff, reconnect, stop), its liveness pings and its
//! tool list; nothing else touches them. [`McpServer`] is what others hold: the actor's
//! address beside the server's immutable name, config and transport. A call asks the actor
//! for the live session (a cheap peer handle) and runs on it in the caller's task, with no
//! lock held and the actor's mailbox free: many calls run at once. When the session dies
//! every call in flight on it gets an error result at once; the actor reconnects with
//! backoff and re-lists its tools. In chaos mode [`McpServer::crash`] kills the live
//! session the way a crash would, and the same reconnect path brings a new one up.

mod actor;
mod call;
mod connect;
mod session;

use std::{sync::Arc, time::Duration};

use actix::{Actor, Addr};
use antler_protocol::{
    config::{McpServerConfig, Transport},
    messages::{McpServerStatus, McpTool},
};
use tokio::sync::broadcast;

use actor::{AuthorizerFor, Crash, Occupancy, SetRoots, Settled, Status, Stop, Tools, Usage, Wake};
pub use actor::{McpServerActor, ToolListChanged};

use crate::{
    ask::AskingCalls,
    oauth::{self, Authorizer},
    transport::OpenOptions,
};

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

/// What never changes for one server actor: its name, config and transport, and the
/// options its sessions open with.
struct Identity {
    name: String,
    config: McpServerConfig,
    transport: Transport,
    options: OpenOptions,
    /// When the actor was started.
    started_at: tokio::time::Instant,
    /// The calls made for runs in flight on this server's sessions (policy `ask`): each
    /// call enters itself, the session's elicitation handler reads them.
    asking: Arc<AskingCalls>,
}

/// The address of one server's actor, with what never changes about it. Cloning it is
/// cheap; dropping the clones does not stop the actor: [`McpServer::stop`] does.
#[derive(Clone)]
pub struct McpServer {
    addr: Addr<McpServerActor>,
    id: Arc<Identity>,
}

impl McpServer {
    /// Starts the actor for `name`: it connects at once and keeps reconnecting until stopped.
    /// Call on the actix system's thread.
    pub fn spawn(
        name: String,
        config: McpServerConfig,
        transport: Transport,
        changes: broadcast::Sender<ToolsChanged>,
        options: OpenOptions,
    ) -> McpServer {
        let id = Arc::new(Identity {
            name,
            config,
            transport,
            options,
            started_at: tokio::time::Instant::now(),
            asking: Arc::default(),
        });
        let actor = McpServerActor::new(id.clone(), changes);
        // Requests are served on tasks outside the system's arbiter: the actor is started
        // there, where every actor of this host runs.
        let addr = McpServerActor::start_in_arbiter(&actix::Arbiter::current(), move |_| actor);
        McpServer { addr, id }
    }

    pub fn name(&self) -> &str {
        &self.id.name
    }

    pub fn config(&self) -> &McpServerConfig {
        &self.id.config
    }

    pub fn transport(&self) -> Transport {
        self.id.transport
    }

    /// Stops the actor: the session closes, a stdio child group is killed.
    pub fn stop(&self) {
        self.addr.do_send(Stop);
    }

    /// Whether the actor has stopped (or is gone).
    pub fn is_stopped(&self) -> bool {
        !self.addr.connected()
    }

    /// Waits until the first start attempt has ended, but no later than `grace` after the
    /// actor was spawned (nor `within` from now): a server that hangs in its start is not
    /// waited on for its whole start timeout.
    pub async fn settled_within(&self, grace: Duration, within: Duration) {
        let until = (self.id.started_at + grace).min(tokio::time::Instant::now() + within);
        let _ = tokio::time::timeout_at(until, self.addr.send(Settled)).await;
    }

    /// Chaos mode: the live session dies as if it crashed (no close handshake; a stdio
    /// child's group is killed); calls in flight on it get the connection-lost error and
    /// the actor reconnects. False when no session was live.
    pub async fn crash(&self) -> bool {
        self.addr.send(Crash).await.unwrap_or(false)
    }

    /// Whether both name the same actor.
    pub fn same(&self, other: &McpServer) -> bool {
        self.addr == other.addr
    }

    /// The status line of the server (a gone actor reads as stopped).
    pub async fn status(&self) -> McpServerStatus {
        match self.addr.send(Status).await {
            Ok(s) => s,
            Err(_) => McpServerStatus {
                name: self.id.name.clone(),
                transport: transport_name(self.id.transport).into(),
                state: Phase::Stopped.as_str().into(),
                tools: 0,
                last_error: None,
                reconnects: 0,
                in_flight: 0,
                protocol_version: None,
                lifecycle: None,
                auth: None,
            },
        }
    }

    /// The stdio child of the live session, and whether the session is busy (calls in
    /// flight, or still starting for one): what the pool's sweep needs.
    pub async fn occupancy(&self) -> Usage {
        self.addr.send(Occupancy).await.unwrap_or(Usage {
            pid: None,
            busy: false,
        })
    }

    /// The OAuth token source of this server (configured, or asked for by a 401).
    pub async fn authorizer(&self) -> Option<Authorizer> {
        self.addr.send(AuthorizerFor).await.ok().flatten()
    }

    /// The token source of this server for `user` (a login for another user than the
    /// session's: its token is stored for that user's sessions).
    pub async fn authorizer_for_user(&self, user: &str) -> Option<Authorizer> {
        let id = &self.id;
        if id.options.user.as_deref().unwrap_or(oauth::DEFAULT_USER) == user {
            return self.authorizer().await;
        }
        let broker = id.options.oauth.as_ref()?;
        let o = match &id.config.oauth {
            Some(o) if o.enabled => o.clone(),
            Some(_) => return None,
            None => antler_protocol::config::McpOAuthConfig::login_default(),
        };
        let url = id.config.url.clone().unwrap_or_default();
        Some(broker.authorizer(&id.name, Some(user), &url, &o))
    }

    /// Whether users log in to this server (its token source is an authorization-code
    /// login): each user's calls then need that user's session.
    pub async fn logs_users_in(&self) -> bool {
        self.authorizer().await.is_some_and(|a| a.is_login())
    }

    /// The host's OAuth authorizers this server's sessions use.
    pub fn oauth_broker(&self) -> Option<Arc<oauth::OAuthBroker>> {
        self.id.options.oauth.clone()
    }

    /// Reconnects now if the actor is waiting out a backoff (a login just completed).
    pub fn wake(&self) {
        self.addr.do_send(Wake);
    }

    /// Replaces the session's roots; a live session's server is told they changed.
    pub fn set_roots(&self, roots: Vec<String>) {
        self.addr.do_send(SetRoots(roots));
    }

    /// The server's listed tools (none while it never started).
    pub async fn tools(&self) -> Arc<Vec<McpTool>> {
        self.addr.send(Tools).await.unwrap_or_default()
    }
}

/// The transport as a status line names it.
fn transport_name(t: Transport) -> &'static str {
    match t {
        Transport::Stdio => "stdio",
        Transport::Sse => "sse",
        Transport::Http => "http",
    }
}
