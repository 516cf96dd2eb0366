//! `HostLink`: the actor that owns one outgoing connection to a peer. It dials, keeps the
//! connection, reconnects with exponential backoff and jitter when it dies, and forwards
//! `Call`s. A call made while the peer is away fails at once with `PeerUnavailable`.
//! For [`FAST_REDIAL_FOR`] after a connection is lost it redials at least every
//! [`FAST_REDIAL_CAP`] (a restarted host is found as soon as it listens), and each of its
//! dials gives up after [`DIAL_ATTEMPT`] (a dial into a cut link does not outlive the cut).
//! TCP uses the identity's TLS ([`crate::tls`]); without it, TCP dials loopback only.
//! Started under an actix `Supervisor` ([`HostLink::supervised`]), a link that stops
//! (chaos mode's [`CrashLink`]) is restarted in place, under the same address, and redials.

use std::{sync::Arc, time::Duration};

use actix::prelude::*;

use crate::{
    connection::{Connection, ConnectionConfig, InFlight, RpcError, Service},
    envelope::TraceContext,
    handshake::{self, HandshakeError, Identity, PeerInfo, Role, HANDSHAKE_TIMEOUT},
    messages::{Reply, Request},
    transport::{Address, Stream},
};

/// Why dialing a peer failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DialError {
    #[error("cannot reach {address}: {reason}")]
    Unreachable { address: String, reason: String },
    #[error("{address}: {source}")]
    Handshake {
        address: String,
        source: HandshakeError,
    },
    /// TLS refused the connection, or this side refused the peer's certificate.
    #[error("{address}: TLS refused: {reason}")]
    Tls { address: String, reason: String },
    /// Plaintext TCP to an address off loopback (this process has no TLS settings).
    #[error("{address}: {reason}")]
    Insecure { address: String, reason: String },
}

impl DialError {
    /// Whether the peer (or this side) refused the connection, as opposed to not being
    /// reachable: a refusal is a configuration problem worth a warning.
    pub fn is_refusal(&self) -> bool {
        !matches!(self, DialError::Unreachable { .. })
    }
}

/// Dials `address`, completes the handshake, and starts the connection. The socket is
/// made and driven on the I/O thread; `service` serves the peer's requests on the
/// caller's runtime. Over TLS the peer's certificate may name any role (the one its
/// hello claims); [`dial_expecting`] insists on one.
pub async fn dial(
    address: &Address,
    identity: &Identity,
    config: ConnectionConfig,
    service: Option<Arc<dyn Service>>,
) -> Result<Connection, DialError> {
    dial_peer(address, None, identity, config, service, HANDSHAKE_TIMEOUT).await
}

/// [`dial`] a peer of a known role: over TLS its certificate must name `role`.
pub async fn dial_expecting(
    address: &Address,
    role: Role,
    identity: &Identity,
    config: ConnectionConfig,
    service: Option<Arc<dyn Service>>,
) -> Result<Connection, DialError> {
    dial_peer(
        address,
        Some(role),
        identity,
        config,
        service,
        HANDSHAKE_TIMEOUT,
    )
    .await
}

async fn dial_peer(
    address: &Address,
    expect: Option<Role>,
    identity: &Identity,
    config: ConnectionConfig,
    service: Option<Arc<dyn Service>>,
    within: Duration,
) -> Result<Connection, DialError> {
    let home = tokio::runtime::Handle::current();
    let (address, identity) = (address.clone(), identity.clone());
    let addr_s = address.to_string();
    crate::io::run(async move {
        // The whole dial (connect, TLS, hello) is bounded here, on the I/O thread, before
        // the connection starts: a connection is never started for a caller that gave up.
        let attempt = dial_here(&address, expect, &identity, config, service, home);
        tokio::time::timeout(within, attempt)
            .await
            .unwrap_or_else(|_| {
                Err(DialError::Unreachable {
                    address: address.to_string(),
                    reason: format!("no connection within the dial deadline of {within:?}"),
                })
            })
    })
    .await
    .unwrap_or_else(|| {
        Err(DialError::Unreachable {
            address: addr_s,
            reason: "the I/O thread is gone".into(),
        })
    })
}

async fn dial_here(
    address: &Address,
    expect: Option<Role>,
    identity: &Identity,
    config: ConnectionConfig,
    service: Option<Arc<dyn Service>>,
    home: tokio::runtime::Handle,
) -> Result<Connection, DialError> {
    let addr_s = address.to_string();
    if let (Address::Tcp(a), None) = (address, &identity.tls) {
        crate::tls::check_plaintext(a)
            .await
            .map_err(|e| DialError::Insecure {
                address: addr_s.clone(),
                reason: e.to_string(),
            })?;
    }
    let stream = tokio::time::timeout(handshake::HANDSHAKE_TIMEOUT, Stream::connect(address))
        .await
        .map_err(|_| DialError::Unreachable {
            address: addr_s.clone(),
            reason: "connect timed out".into(),
        })?
        .map_err(|e| DialError::Unreachable {
            address: addr_s.clone(),
            reason: e.to_string(),
        })?;
    let tls = match (&stream, &identity.tls) {
        (Stream::Tcp(_), Some(tls)) => Some(tls.clone()),
        _ => None,
    };
    let sock = stream.into_sock().map_err(|e| DialError::Unreachable {
        address: addr_s.clone(),
        reason: e.to_string(),
    })?;
    let (r, w, certified) = match tls {
        Some(tls) => {
            let (r, w, role) =
                tls.connect(sock.clone(), expect)
                    .await
                    .map_err(|reason| DialError::Tls {
                        address: addr_s.clone(),
                        reason,
                    })?;
            (r, w, Some(role))
        }
        None => {
            let (r, w) = sock.halves();
            (r, w, None)
        }
    };
    let (mut fr, mut fw) = handshake::framed(r, w, config.max_frame_bytes);
    let me = Identity {
        heartbeat: config.heartbeat_interval,
        ..identity.clone()
    };
    let peer = handshake::connect(&mut fr, &mut fw, &me, &addr_s)
        .await
        .map_err(|source| match source {
            HandshakeError::Tls(reason) => DialError::Tls {
                address: addr_s.clone(),
                reason,
            },
            source => DialError::Handshake {
                address: addr_s.clone(),
                source,
            },
        })?;
    if let Some(certified) = certified.filter(|r| *r != peer.role) {
        return Err(DialError::Tls {
            address: addr_s,
            reason: format!(
                "the peer's hello claims role {} but its certificate names {certified}",
                peer.role
            ),
        });
    }
    Ok(Connection::start(
        fr,
        fw,
        peer,
        config,
        service,
        Arc::new(InFlight::default()),
        home,
        Some(sock),
    ))
}

/// Exponential backoff with full jitter between half and all of the current step.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    attempt: u32,
}

impl Backoff {
    pub fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            attempt: 0,
        }
    }

    /// The next delay; grows until the cap.
    pub fn next_delay(&mut self) -> Duration {
        let step = self
            .base
            .saturating_mul(1u32 << self.attempt.min(16))
            .min(self.cap);
        self.attempt = self.attempt.saturating_add(1);
        let half = step / 2;
        half + half.mul_f64(fastrand::f64())
    }

    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// How long after losing its connection a link redials at least every [`FAST_REDIAL_CAP`]
/// (then its backoff grows to two seconds): a host that restarts is listening again well
/// within this, and a refused connect costs the peer nothing.
pub const FAST_REDIAL_FOR: Duration = Duration::from_secs(30);

/// The longest wait between two dials while the loss is recent.
pub const FAST_REDIAL_CAP: Duration = Duration::from_millis(300);

/// How long one dial of a link may take, connect, TLS and hello together. Inside a
/// cluster these take milliseconds; a dial still pending after this went into a cut link
/// or a peer that hangs, and the next dial (after the backoff) finds the link restored.
pub const DIAL_ATTEMPT: Duration = Duration::from_secs(2);

/// What a link knows about its peer, for `antler status`.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkSnapshot {
    pub address: Address,
    pub connected: bool,
    pub peer: Option<PeerInfo>,
    /// Time since the peer was last heard from on the current connection.
    pub since_last_heard: Option<Duration>,
    pub reconnects: u32,
    pub last_error: Option<String>,
}

/// The link actor.
pub struct HostLink {
    address: Address,
    /// The role the peer must have (its certificate must name it over TLS).
    expect: Option<Role>,
    identity: Identity,
    config: ConnectionConfig,
    conn: Option<Connection>,
    dialing: bool,
    backoff: Backoff,
    reconnects: u32,
    ever_connected: bool,
    last_error: Option<String>,
    /// Refusals warned of, so one that repeats at every redial is not logged each time.
    refusals: crate::quiet::Quieter,
    retry: Option<SpawnHandle>,
    /// When the last connection was lost (the fast redial phase runs from here).
    lost_at: Option<std::time::Instant>,
    /// Stopped for good ([`StopLink`]): a supervised restart does not dial again.
    retired: bool,
    /// `conn`, for callers that reach the peer without a message to this actor.
    published: Published,
}

/// A link's current connection, readable from any thread without a message to the link
/// (a relay on the I/O thread). It may have closed a moment before the link learns it:
/// check [`Connection::is_closed`], and ask the link itself for why it is down.
pub type Published = Arc<std::sync::RwLock<Option<Connection>>>;

impl HostLink {
    pub fn new(address: Address, identity: Identity, config: ConnectionConfig) -> Self {
        Self {
            address,
            expect: None,
            identity,
            config,
            conn: None,
            dialing: false,
            backoff: Backoff::new(Duration::from_millis(50), Duration::from_secs(2)),
            reconnects: 0,
            ever_connected: false,
            last_error: None,
            refusals: crate::quiet::Quieter::default(),
            retry: None,
            lost_at: None,
            retired: false,
            published: Published::default(),
        }
    }

    /// The slot this link publishes its current connection in (take it before starting).
    pub fn published(&self) -> Published {
        self.published.clone()
    }

    /// Sets the current connection and publishes it; returns the one it replaces.
    fn set_conn(&mut self, conn: Option<Connection>) -> Option<Connection> {
        if let Ok(mut slot) = self.published.write() {
            slot.clone_from(&conn);
        }
        std::mem::replace(&mut self.conn, conn)
    }

    /// Starts the link under an actix `Supervisor`: if it stops (crashes), it is restarted
    /// with its address, identity and reconnect count, and dials again.
    pub fn supervised(self) -> Addr<HostLink> {
        actix::Supervisor::start(move |_| self)
    }

    /// The link dials a peer of `role`: over TLS, a certificate naming another role is
    /// refused.
    pub fn expecting(mut self, role: Role) -> Self {
        self.expect = Some(role);
        self
    }

    fn dial(&mut self, ctx: &mut Context<Self>) {
        if self.dialing || self.conn.as_ref().is_some_and(|c| !c.is_closed()) {
            return;
        }
        self.dialing = true;
        let address = self.address.clone();
        let identity = self.identity.clone();
        let config = self.config.clone();
        let expect = self.expect;
        async move { dial_peer(&address, expect, &identity, config, None, DIAL_ATTEMPT).await }
            .into_actor(self)
            .map(|result, act, ctx| {
                act.dialing = false;
                match result {
                    Ok(conn) => {
                        if act.ever_connected {
                            act.reconnects += 1;
                        }
                        act.ever_connected = true;
                        act.backoff.reset();
                        act.last_error = None;
                        act.refusals.clear();
                        tracing::debug!(address = %act.address, "link connected");
                        let watch = conn.clone();
                        act.set_conn(Some(conn));
                        async move { watch.closed().await }
                            .into_actor(act)
                            .map(|reason, act, ctx| {
                                tracing::info!(address = %act.address, %reason, "link lost; reconnecting");
                                act.last_error = Some(reason);
                                act.set_conn(None);
                                act.lost_at = Some(std::time::Instant::now());
                                act.schedule(ctx);
                            })
                            .spawn(ctx);
                    }
                    Err(e) => {
                        tracing::debug!(address = %act.address, error = %e, "dial failed");
                        if e.is_refusal() {
                            // Once a minute while the same refusal lasts, not at every redial.
                            if let Some(quieted) = act.refusals.admit(&e.to_string()) {
                                tracing::warn!(address = %act.address, reason = %e, quieted, "peer refused the link");
                            }
                        }
                        act.last_error = Some(e.to_string());
                        act.schedule(ctx);
                    }
                }
            })
            .spawn(ctx);
    }

    fn schedule(&mut self, ctx: &mut Context<Self>) {
        let mut delay = self.backoff.next_delay();
        if self.lost_at.is_some_and(|t| t.elapsed() < FAST_REDIAL_FOR) {
            delay = delay.min(FAST_REDIAL_CAP);
        }
        if let Some(h) = self.retry.take() {
            ctx.cancel_future(h);
        }
        self.retry = Some(ctx.run_later(delay, |act, ctx| {
            act.retry = None;
            act.dial(ctx);
        }));
    }
}

impl Actor for HostLink {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if !self.retired {
            self.dial(ctx);
        }
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        if let Some(c) = self.set_conn(None) {
            c.close("link stopped");
        }
    }
}

impl actix::Supervised for HostLink {
    /// A restart after a crash: what the dead instance had in flight is gone (its
    /// futures were dropped with it); the new one dials at once.
    fn restarting(&mut self, _: &mut Context<Self>) {
        self.set_conn(None);
        self.dialing = false;
        self.retry = None;
        self.lost_at = Some(std::time::Instant::now());
        self.backoff.reset();
        if !self.retired {
            self.reconnects += 1;
            tracing::warn!(address = %self.address, "link restarted after it stopped; redialing");
        }
    }
}

/// The reason a link's calls fail after chaos mode stopped it.
pub const LINK_CRASHED: &str = "the link actor stopped (chaos: as if it crashed); redialing";

/// Chaos mode: the link stops as if it crashed: its connection is dropped (calls in
/// flight on it fail with [`LINK_CRASHED`]) and, when supervised, it restarts and redials.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct CrashLink;

impl Handler<CrashLink> for HostLink {
    type Result = ();

    fn handle(&mut self, _: CrashLink, ctx: &mut Context<Self>) {
        self.last_error = Some(LINK_CRASHED.to_owned());
        if let Some(c) = self.set_conn(None) {
            c.close(LINK_CRASHED);
        }
        ctx.stop();
    }
}

/// Sends a request through the link and waits for the reply, at most `timeout`.
#[derive(Debug, Message)]
#[rtype(result = "Result<Reply, RpcError>")]
pub struct Call {
    pub request: Request,
    pub trace: TraceContext,
    pub timeout: Duration,
}

impl Handler<Call> for HostLink {
    type Result = ResponseFuture<Result<Reply, RpcError>>;

    fn handle(&mut self, msg: Call, _: &mut Context<Self>) -> Self::Result {
        match self.conn.clone().filter(|c| !c.is_closed()) {
            Some(conn) => {
                Box::pin(async move { conn.request(msg.request, msg.trace, msg.timeout).await })
            }
            None => {
                let reason = self
                    .last_error
                    .clone()
                    .unwrap_or_else(|| format!("not connected to {}", self.address));
                Box::pin(async move { Err(RpcError::PeerUnavailable(reason)) })
            }
        }
    }
}

/// The link's current connection, to call it without going through the actor.
#[derive(Debug, Message)]
#[rtype(result = "Option<Connection>")]
pub struct CurrentConnection;

impl Handler<CurrentConnection> for HostLink {
    type Result = Option<Connection>;

    fn handle(&mut self, _: CurrentConnection, _: &mut Context<Self>) -> Self::Result {
        self.conn.clone().filter(|c| !c.is_closed())
    }
}

/// What the link knows about its peer.
#[derive(Debug, Message)]
#[rtype(result = "LinkSnapshot")]
pub struct Snapshot;

impl Handler<Snapshot> for HostLink {
    type Result = MessageResult<Snapshot>;

    fn handle(&mut self, _: Snapshot, _: &mut Context<Self>) -> Self::Result {
        let live = self.conn.as_ref().filter(|c| !c.is_closed());
        MessageResult(LinkSnapshot {
            address: self.address.clone(),
            connected: live.is_some(),
            peer: live.map(|c| c.peer().clone()),
            since_last_heard: live.map(|c| c.since_last_heard()),
            reconnects: self.reconnects,
            last_error: self.last_error.clone(),
        })
    }
}

/// Dial now instead of waiting for the backoff (the peer is known to be back).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RedialNow;

impl Handler<RedialNow> for HostLink {
    type Result = ();

    fn handle(&mut self, _: RedialNow, ctx: &mut Context<Self>) {
        if self.retired {
            return;
        }
        self.backoff.reset();
        if let Some(h) = self.retry.take() {
            ctx.cancel_future(h);
        }
        self.dial(ctx);
    }
}

/// Stop the link for good: its connection is closed and it dials no more (the peer was
/// removed from the cluster).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StopLink;

impl Handler<StopLink> for HostLink {
    type Result = ();

    fn handle(&mut self, _: StopLink, ctx: &mut Context<Self>) {
        self.retired = true;
        self.last_error = Some(format!("the link to {} was stopped", self.address));
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_its_cap_with_jitter() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let d: Vec<Duration> = (0..8).map(|_| b.next_delay()).collect();
        assert!(d[0] >= Duration::from_millis(50) && d[0] <= Duration::from_millis(100));
        assert!(d[3] >= Duration::from_millis(400) && d[3] <= Duration::from_millis(800));
        assert!(d.iter().all(|x| *x <= Duration::from_secs(1)));
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
