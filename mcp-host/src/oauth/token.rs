//! `TokenActor`: the one owner of one (server, user)'s OAuth tokens: the grant's changing
//! state (a rotated refresh token; or the discovered grant's manager, refused token,
//! challenge, step-up scopes and logins waiting for their redirect), the cached
//! `Authorization` value, and the refresh in flight. Refreshes are single-flight: a call
//! that needs a token while one is being fetched waits for that one, never starts another.
//! [`Authorizer`] is its address; the actor publishes the cached value so a call compares
//! it with no message and no request. Nothing here logs a token.

use std::time::{Duration, Instant};

use actix::prelude::*;
use std::sync::Arc;
use tokio::sync::{oneshot, watch};

use super::{
    discovered::{self, Ask, DiscoveredGrant, DiscoveredState, LoginState},
    fixed::FixedGrant,
    OAuthError,
};

/// The cached `Authorization` value and until when it is used without a refresh.
#[derive(Clone)]
struct Cached {
    header: String,
    fresh_until: Instant,
}

/// The grant of one (server, user) and what of it changes.
enum Grant {
    Fixed {
        grant: Arc<FixedGrant>,
        /// The configured one, then the one the endpoint rotated to.
        refresh_token: Option<String>,
    },
    Discovered {
        grant: Arc<DiscoveredGrant>,
        state: Box<DiscoveredState>,
    },
}

type Reply = Result<Option<String>, OAuthError>;

/// The actor.
pub struct TokenActor {
    grant: Grant,
    /// Published for [`Authorizer::fresh`]; only the actor writes it.
    cached: watch::Sender<Option<Cached>>,
    /// Callers waiting for the refresh in flight (`None`: none runs).
    refresh: Option<Vec<oneshot::Sender<Reply>>>,
    /// Where a login of this (server, user) is.
    login: watch::Sender<LoginState>,
    /// A login a call started with `$BROWSER` runs: the calls waiting for it to end.
    browser_login: Option<Vec<oneshot::Sender<()>>>,
}

impl TokenActor {
    /// Starts the token actor of a fixed grant (call on the actix system's thread); its address.
    pub fn fixed(grant: Arc<FixedGrant>) -> Authorizer {
        let refresh_token = grant.configured_refresh_token();
        Self::start_with(Grant::Fixed {
            grant,
            refresh_token,
        })
    }

    /// Starts the token actor of a discovered grant (call on the actix system's thread); its
    /// address.
    pub fn discovered(grant: Arc<DiscoveredGrant>) -> Authorizer {
        Self::start_with(Grant::Discovered {
            grant,
            state: Box::default(),
        })
    }

    fn start_with(grant: Grant) -> Authorizer {
        let kind = match &grant {
            Grant::Fixed { .. } => Kind::Fixed,
            Grant::Discovered { grant, .. } if grant.is_login() => Kind::Login,
            Grant::Discovered { .. } => Kind::Discovered,
        };
        let cached = watch::channel(None).0;
        let published = cached.subscribe();
        let actor = TokenActor {
            grant,
            cached,
            refresh: None,
            login: watch::channel(LoginState::Idle).0,
            browser_login: None,
        };
        // Requests are served on tasks outside the system's arbiter: the actor is started
        // there, where every actor of this host runs.
        let addr = TokenActor::start_in_arbiter(&Arbiter::current(), move |_| actor);
        Authorizer {
            addr,
            published,
            kind,
        }
    }

    fn fresh(&self) -> Option<String> {
        fresh(&self.cached.borrow())
    }

    fn cache(&mut self, header: &str, fresh_until: Instant) {
        self.cached.send_replace(Some(Cached {
            header: header.to_owned(),
            fresh_until,
        }));
    }

    /// Answers every caller waiting for the refresh that ended.
    fn refreshed(&mut self, reply: Reply) {
        for tx in self.refresh.take().unwrap_or_default() {
            let _ = tx.send(reply.clone());
        }
    }

    /// Starts the one refresh (a spawned future: the mailbox stays free meanwhile).
    fn start_refresh(&mut self, ctx: &mut Context<Self>) {
        match &mut self.grant {
            Grant::Fixed {
                grant,
                refresh_token,
            } => {
                let (grant, refresh_token) = (grant.clone(), refresh_token.clone());
                let fetch = async move { grant.fetch(refresh_token).await };
                ctx.spawn(fetch.into_actor(self).map(|got, act, _| {
                    let reply = match got {
                        Ok(f) => {
                            if let (Some(r), Grant::Fixed { refresh_token, .. }) =
                                (f.rotated, &mut act.grant)
                            {
                                *refresh_token = Some(r);
                            }
                            act.cache(&f.header, f.fresh_until);
                            Ok(Some(f.header))
                        }
                        Err(e) => Err(e),
                    };
                    act.refreshed(reply);
                }));
            }
            Grant::Discovered { grant, state } => {
                let ask = Ask {
                    rejected: state.rejected.clone(),
                    challenge: state.challenge.clone(),
                    scopes: grant.scopes(&state.extra_scopes),
                    manager: state.manager.take(),
                };
                let fetch = grant.clone().fetch(ask);
                ctx.spawn(fetch.into_actor(self).map(|(got, manager), act, _| {
                    let reply = match got {
                        Ok(Some(f)) => {
                            act.cache(&f.header, f.fresh_until);
                            if let Grant::Discovered { state, .. } = &mut act.grant {
                                if f.from_endpoint {
                                    state.rejected = None;
                                }
                            }
                            Ok(Some(f.header))
                        }
                        Ok(None) => Ok(None),
                        Err(e) => Err(e),
                    };
                    if let Grant::Discovered { state, .. } = &mut act.grant {
                        // A login that completed meanwhile configured its own.
                        if state.manager.is_none() {
                            state.manager = manager;
                        }
                    }
                    act.refreshed(reply);
                }));
            }
        }
    }
}

impl Actor for TokenActor {
    type Context = Context<Self>;
}

fn fresh(cached: &Option<Cached>) -> Option<String> {
    cached
        .as_ref()
        .filter(|c| c.fresh_until > Instant::now())
        .map(|c| c.header.clone())
}

/// The `Authorization` value: the cached one while fresh, else the one the refresh in
/// flight (started now if none runs) gets. `Ok(None)`: none until a user logs in.
#[derive(Debug, Message)]
#[rtype(result = "Result<Option<String>, OAuthError>")]
pub struct Authorization;

impl Handler<Authorization> for TokenActor {
    type Result = ResponseFuture<Reply>;

    fn handle(&mut self, _: Authorization, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(h) = self.fresh() {
            return Box::pin(async move { Ok(Some(h)) });
        }
        let (tx, rx) = oneshot::channel();
        match &mut self.refresh {
            Some(waiting) => waiting.push(tx),
            None => {
                self.refresh = Some(vec![tx]);
                self.start_refresh(ctx);
            }
        }
        Box::pin(async move { rx.await.unwrap_or_else(|_| Err(stopped())) })
    }
}

fn stopped() -> OAuthError {
    OAuthError::Config("the OAuth token holder stopped".into())
}

/// Forget `rejected` (the server answered 401 with it): the next token is a new one.
/// (No `Debug`: it carries a token.)
#[derive(Message)]
#[rtype(result = "()")]
pub struct Invalidate(pub String);

impl Handler<Invalidate> for TokenActor {
    type Result = ();

    fn handle(&mut self, Invalidate(rejected): Invalidate, _: &mut Context<Self>) {
        self.cached
            .send_if_modified(|c| match c.as_ref().is_some_and(|t| t.header == rejected) {
                true => {
                    *c = None;
                    true
                }
                false => false,
            });
        if let Grant::Discovered { state, .. } = &mut self.grant {
            state.rejected = Some(rejected);
        }
    }
}

/// Record the server's challenge (`WWW-Authenticate` of a 401 or 403).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct SetChallenge(pub Option<String>);

impl Handler<SetChallenge> for TokenActor {
    type Result = ();

    fn handle(&mut self, SetChallenge(challenge): SetChallenge, _: &mut Context<Self>) {
        if let (Grant::Discovered { state, .. }, Some(c)) = (&mut self.grant, challenge) {
            state.challenge = Some(c);
        }
    }
}

/// A 403 `insufficient_scope` with this challenge: widen the scopes and drop the token
/// held (at most [`discovered::MAX_STEP_UPS`] times). The reply: whether to try again.
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct StepUp(pub String);

impl Handler<StepUp> for TokenActor {
    type Result = bool;

    fn handle(&mut self, StepUp(challenge): StepUp, _: &mut Context<Self>) -> bool {
        let Grant::Discovered { grant, state } = &mut self.grant else {
            return false;
        };
        if !grant.step_up(state, &challenge) {
            return false;
        }
        self.cached.send_replace(None);
        true
    }
}

/// Start a login: the authorization URL to open. With no `redirect_uri` a loopback
/// listener takes the redirect and completes the login.
#[derive(Debug, Message)]
#[rtype(result = "Result<String, OAuthError>")]
pub struct StartLogin {
    pub redirect_uri: Option<String>,
}

impl Handler<StartLogin> for TokenActor {
    type Result = ResponseActFuture<Self, Result<String, OAuthError>>;

    fn handle(&mut self, msg: StartLogin, _: &mut Context<Self>) -> Self::Result {
        let Grant::Discovered { grant, state } = &self.grant else {
            return Box::pin(fut::ready(Err(not_a_login())));
        };
        let start = grant.clone().start_login(
            msg.redirect_uri,
            state.challenge.clone(),
            grant.scopes(&state.extra_scopes),
        );
        Box::pin(start.into_actor(self).map(|started, act, ctx| {
            let started = started?;
            if let Grant::Discovered { state, .. } = &mut act.grant {
                // Logins abandoned in a browser are not kept for ever.
                if state.sessions.len() >= discovered::MAX_PENDING_LOGINS {
                    state.sessions.clear();
                }
                state.sessions.insert(started.state, started.session);
            }
            act.login.send_replace(LoginState::Pending);
            if let Some(rx) = started.callback {
                ctx.spawn(
                    rx.into_actor(act)
                        .map(|redirected, act, ctx| match redirected {
                            Ok(redirected) => ctx.notify(CompleteLogin { redirected }),
                            Err(_) => {
                                act.login.send_replace(LoginState::Failed(
                                    "no redirect came before the login's deadline".into(),
                                ));
                            }
                        }),
                );
            }
            Ok(started.url)
        }))
    }
}

fn not_a_login() -> OAuthError {
    OAuthError::Login("this server's OAuth grant has no login".into())
}

/// Complete the login that sent this redirect (the URL the browser was sent to). (No
/// `Debug`: the redirect carries the authorization code.)
#[derive(Message)]
#[rtype(result = "Result<(), OAuthError>")]
pub struct CompleteLogin {
    pub redirected: String,
}

impl Handler<CompleteLogin> for TokenActor {
    type Result = ResponseActFuture<Self, Result<(), OAuthError>>;

    fn handle(&mut self, msg: CompleteLogin, _: &mut Context<Self>) -> Self::Result {
        let Grant::Discovered { grant, state } = &mut self.grant else {
            return Box::pin(fut::ready(Err(not_a_login())));
        };
        let key = discovered::query_param(&msg.redirected, "state").unwrap_or_default();
        let Some(session) = state.sessions.remove(&key) else {
            return Box::pin(fut::ready(Err(OAuthError::Login(
                "no login in progress sent this redirect (its state is unknown or expired)".into(),
            ))));
        };
        let grant = grant.clone();
        let complete = DiscoveredGrant::complete_login(session, msg.redirected);
        Box::pin(complete.into_actor(self).map(move |done, act, _| match done {
            Ok((t, manager)) => {
                let f = grant.fetched(&t);
                act.cache(&f.header, f.fresh_until);
                if let Grant::Discovered { state, .. } = &mut act.grant {
                    state.rejected = None;
                    state.step_ups = 0;
                    state.manager = Some(manager);
                }
                tracing::info!(server = %grant.server(), user = %grant.user(), "OAuth login complete");
                act.login.send_replace(LoginState::Done);
                Ok(())
            }
            Err(e) => {
                if let OAuthError::Login(why) = &e {
                    act.login.send_replace(LoginState::Failed(why.clone()));
                }
                Err(e)
            }
        }))
    }
}

/// Where the login is now, watched: a caller waits for it to end.
#[derive(Debug, Message)]
#[rtype(result = "watch::Receiver<LoginState>")]
pub struct WatchLogin;

impl Handler<WatchLogin> for TokenActor {
    type Result = MessageResult<WatchLogin>;

    fn handle(&mut self, _: WatchLogin, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.login.subscribe())
    }
}

/// Take the turn to run a login with `$BROWSER` (so calls meeting a 401 together open one
/// browser, not one each). The reply: `true` at once when no such login runs; `false`
/// after the one running ended (the turn is then the caller's).
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct BrowserLoginTurn;

impl Handler<BrowserLoginTurn> for TokenActor {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, _: BrowserLoginTurn, _: &mut Context<Self>) -> Self::Result {
        match &mut self.browser_login {
            None => {
                self.browser_login = Some(Vec::new());
                Box::pin(async { true })
            }
            Some(waiting) => {
                let (tx, rx) = oneshot::channel();
                waiting.push(tx);
                Box::pin(async move {
                    let _ = rx.await;
                    false
                })
            }
        }
    }
}

/// The browser login's turn ends: the next waiting caller gets it.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct EndBrowserLoginTurn;

impl Handler<EndBrowserLoginTurn> for TokenActor {
    type Result = ();

    fn handle(&mut self, _: EndBrowserLoginTurn, _: &mut Context<Self>) {
        let Some(waiting) = self.browser_login.as_mut() else {
            return;
        };
        // Handed to the first caller still waiting; with none, no login runs.
        while !waiting.is_empty() {
            if waiting.remove(0).send(()).is_ok() {
                return;
            }
        }
        self.browser_login = None;
    }
}

/// What kind of grant a token actor holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Fixed,
    Discovered,
    Login,
}

/// The address of one (server, user)'s [`TokenActor`], with the token it publishes.
#[derive(Clone)]
pub struct Authorizer {
    addr: Addr<TokenActor>,
    published: watch::Receiver<Option<Cached>>,
    kind: Kind,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Authorizer")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl Authorizer {
    /// The cached `Authorization` value while fresh (no await, no request).
    pub fn fresh(&self) -> Option<String> {
        fresh(&self.published.borrow())
    }

    /// The `Authorization` value; `Ok(None)`: none until a user logs in.
    pub async fn authorization(&self) -> Result<Option<String>, OAuthError> {
        self.addr
            .send(Authorization)
            .await
            .unwrap_or_else(|_| Err(stopped()))
    }

    /// Forgets `rejected` (the server answered 401 with it).
    pub async fn invalidate(&self, rejected: &str) {
        let _ = self.addr.send(Invalidate(rejected.to_owned())).await;
    }

    /// Records the server's challenge (`WWW-Authenticate` of a 401 or 403).
    pub async fn set_challenge(&self, challenge: Option<String>) {
        let _ = self.addr.send(SetChallenge(challenge)).await;
    }

    /// A 403 `insufficient_scope`: the challenged scopes are added and a new token is
    /// fetched next (discovered grants, at most [`discovered::MAX_STEP_UPS`] times).
    /// True: try again.
    pub async fn step_up(&self, challenge: &str) -> bool {
        self.kind != Kind::Fixed
            && self
                .addr
                .send(StepUp(challenge.to_owned()))
                .await
                .unwrap_or(false)
    }

    /// Whether users log in (authorization code) to get the token.
    pub fn is_login(&self) -> bool {
        self.kind == Kind::Login
    }

    /// Starts a login: the authorization URL to open.
    pub async fn start_login(&self, redirect_uri: Option<String>) -> Result<String, OAuthError> {
        self.addr
            .send(StartLogin { redirect_uri })
            .await
            .unwrap_or_else(|_| Err(stopped()))
    }

    /// Completes the login in progress with the redirect URL the browser was sent to.
    pub async fn complete_login(&self, redirected: &str) -> Result<(), OAuthError> {
        self.addr
            .send(CompleteLogin {
                redirected: redirected.to_owned(),
            })
            .await
            .unwrap_or_else(|_| Err(stopped()))
    }

    /// Waits (up to `within`) for the login in progress to end.
    pub async fn wait_login(&self, within: Duration) -> Result<(), OAuthError> {
        let Ok(mut rx) = self.addr.send(WatchLogin).await else {
            return Err(stopped());
        };
        let end = tokio::time::timeout(
            within,
            rx.wait_for(|s| {
                matches!(
                    s,
                    LoginState::Done | LoginState::Failed(_) | LoginState::Idle
                )
            }),
        )
        .await;
        match end {
            Ok(Ok(s)) => match &*s {
                LoginState::Done => Ok(()),
                LoginState::Failed(why) => Err(OAuthError::Login(why.clone())),
                _ => Err(OAuthError::Login("no login is in progress".into())),
            },
            _ => Err(OAuthError::Login(format!(
                "the login did not complete within {}s",
                within.as_secs()
            ))),
        }
    }

    /// Waits for the turn to run a login with `$BROWSER`; the turn ends when the guard
    /// drops. `first`: no other such login ran meanwhile.
    pub async fn browser_login_turn(&self) -> BrowserLogin {
        let first = self.addr.send(BrowserLoginTurn).await.unwrap_or(true);
        BrowserLogin {
            addr: self.addr.clone(),
            first,
        }
    }
}

/// The turn to run a login with `$BROWSER`, held until dropped.
pub struct BrowserLogin {
    addr: Addr<TokenActor>,
    /// No other login ran while this caller waited for the turn.
    pub first: bool,
}

impl Drop for BrowserLogin {
    fn drop(&mut self) {
        self.addr.do_send(EndBrowserLoginTurn);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::{
        atomic::{AtomicU32, Ordering},
        Arc,
    };

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A token endpoint that answers each request after `delay`, counting them.
    async fn token_endpoint(delay: Duration) -> (String, Arc<AtomicU32>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/token", listener.local_addr().unwrap());
        let count = Arc::new(AtomicU32::new(0));
        let counted = count.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let _ = stream.read(&mut buf).await;
                    tokio::time::sleep(delay).await;
                    let body = format!(r#"{{"access_token": "t{n}", "expires_in": 3600}}"#);
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(reply.as_bytes()).await;
                });
            }
        });
        (url, count)
    }

    /// Calls that need a token while it is being fetched wait for that one fetch.
    #[actix::test]
    async fn concurrent_callers_share_one_refresh() {
        let (url, count) = token_endpoint(Duration::from_millis(200)).await;
        let config = serde_json::json!({
            "token_url": url, "client_id": "id", "client_secret": "s"
        });
        let a = TokenActor::fixed(FixedGrant::new(serde_json::from_value(config).unwrap()));
        assert_eq!(a.fresh(), None);
        let got = futures::future::join_all((0..8).map(|_| a.authorization())).await;
        for g in &got {
            assert_eq!(g, &Ok(Some("Bearer t1".to_owned())));
        }
        assert_eq!(count.load(Ordering::SeqCst), 1);
        // Cached: no request, no message.
        assert_eq!(a.fresh().as_deref(), Some("Bearer t1"));
        // A refused token is forgotten: the next caller fetches a new one.
        a.invalidate("Bearer t1").await;
        assert_eq!(a.fresh(), None);
        assert_eq!(a.authorization().await, Ok(Some("Bearer t2".to_owned())));
        assert_eq!(count.load(Ordering::SeqCst), 2);
    }
}
