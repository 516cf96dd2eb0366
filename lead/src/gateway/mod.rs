//! The lead's HTTP gateway (actix-web): `/health`; `GET`/`PUT /api/mcp/config` for the
//! MCP servers of `extensions_config.json` (secrets redacted); a principal's MCP login
//! (`POST /api/mcp/{server}/oauth/start`, `GET /api/mcp/oauth/callback`, see `oauth`); runs (`POST /api/runs`,
//! `GET /api/runs/{id}`, `GET /api/runs/{id}/events` as server-sent events,
//! `POST /api/runs/{id}/answer`, `POST /api/runs/{id}/cancel`, an MCP elicitation's
//! answer `POST /api/runs/{id}/elicitations/{eid}`, see `elicitation`); a thread's uploads
//! (`/api/threads/{tid}/uploads…`, see `uploads`); a principal's own
//! memory (`/api/memory`, see `memory`); `GET /metrics` in Prometheus' text format; and the API's
//! OpenAPI 3.1 document at `GET /api/openapi.json` (see `openapi`). A `PUT` of
//! the MCP config is validated with the same loader mcp-host uses, written atomically
//! (temporary file, fsync, rename), and applied at once by asking mcp-host to reload.
//! Owns one HTTP server that `stop` ends. The address comes from `ANTLER_GATEWAY_ADDR`
//! (`off` disables it; default 127.0.0.1:8001) and is written to `gateway.addr` in the
//! runtime directory; an address that was asked for and cannot be bound fails start-up.
//! Every request passes [`guard::Guard`] first: every route but `/health` needs
//! `Authorization: Bearer TOKEN` naming a principal: the operator's token
//! (`ANTLER_GATEWAY_TOKEN` or, on loopback, the one written to `gateway.token` (0600) in the
//! runtime directory), or a user's (`antler.gateway`: static tokens and JWTs). Antler's MCP
//! server is at `/mcp` (streamable HTTP, see `mcp_endpoint`), an OAuth protected resource
//! whose metadata is at `/.well-known/oauth-protected-resource`. A user's
//! runs are its own: it starts them as itself, and another user's run is 404 to it, as if
//! it did not exist; the operator sees every run (`GET /api/runs` lists them).

mod approvals;
mod body;
mod caller;
mod cluster_view;
mod compact;
mod elicitation;
mod events;
mod forward;
mod goal;
mod guard;
mod langgraph;
mod langgraph_approvals;
mod langgraph_branches;
mod langgraph_checkpoints;
mod langgraph_debug;
mod langgraph_reads;
mod langgraph_regenerate;
mod langgraph_runs;
mod langgraph_stream;
mod langgraph_threads;
mod langgraph_turns;
mod mcp_config;
mod mcp_endpoint;
mod mcp_reply;
mod mcp_sessions;
mod memory;
mod oauth;
mod openapi;
mod openapi_mcp;
mod principal;
mod quota;
pub(crate) mod routes;
mod runs_api;
mod secrets;
mod suggestions;
mod thread_artifacts;
mod thread_feed;
mod ui;
mod uploads;
mod workspace_changes;

pub use body::BODY_DEADLINE;
pub use forward::FORWARDED_HEADER;
pub use guard::{Guard, Refusal, GATEWAY_HOSTS_ENV};
pub use mcp_endpoint::{ACT_AS_HEADER, MCP_PATH};
pub use principal::{Authenticator, Principal, PrincipalsError};
pub use routes::{Access, ROUTES};

use runs_api::principal_of;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, OnceLock},
    time::Duration,
};

use actix_web::dev::Service;
use futures::future::{Either, TryFutureExt};

use actix::Addr;
use actix_web::{web, App, HttpResponse, HttpServer};
use antler_protocol::config;
use serde_json::json;

use crate::cluster::supervisor::Supervisor;
use crate::cluster::{FrontDoor, FrontDoorError, FrontDoorParts, Runs};
use futures::future::LocalBoxFuture;

/// The variable holding the gateway's bearer token (required beyond loopback; on
/// loopback, without it, the gateway makes one and writes it to `gateway.token`).
pub const GATEWAY_TOKEN_ENV: &str = "ANTLER_GATEWAY_TOKEN";
/// The largest `POST /api/runs` body.
const MAX_RUN_BODY: usize = 1 << 20;

/// The variable naming the gateway's listen address.
pub const GATEWAY_ADDR_ENV: &str = "ANTLER_GATEWAY_ADDR";
/// Where the gateway listens by default.
pub const DEFAULT_GATEWAY_ADDR: &str = "127.0.0.1:8001";
/// The file in the runtime directory holding the bound address.
pub const GATEWAY_ADDR_FILE: &str = "gateway.addr";
/// The file in the runtime directory holding the loopback gateway's bearer token.
pub const GATEWAY_TOKEN_FILE: &str = "gateway.token";
/// The largest `PUT /api/mcp/config` body.
const MAX_CONFIG_BODY: usize = 4 << 20;
/// The largest `POST /api/runs/{id}/answer` body.
const MAX_ANSWER_BODY: usize = 256 << 10;
/// How long a reload of mcp-host may take.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(10);

/// The running gateway.
pub struct Gateway {
    handle: actix_web::dev::ServerHandle,
    pub address: SocketAddr,
    /// `/mcp`'s sessions, ended when the gateway stops.
    mcp: Arc<mcp_endpoint::McpEndpoint>,
}

#[derive(Clone)]
struct State {
    /// When the gateway (and so the lead) started.
    started: std::time::Instant,
    extensions: PathBuf,
    supervisor: Addr<Supervisor>,
    runs: Runs,
    /// Logins started through `POST /api/mcp/{server}/oauth/start`, by their `state`.
    logins: Arc<oauth::LoginStates>,
    /// `antler.gateway`: what the operator opened, and the per-user limits.
    settings: Arc<antler_protocol::config::GatewaySection>,
    /// What each user holds now (runs submitted, streams open), against `settings.limits`.
    quotas: Arc<quota::Quotas>,
    /// `/mcp`: the MCP sessions and whose each is.
    mcp: Arc<mcp_endpoint::McpEndpoint>,
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("the HTTP gateway listens on {addr}, beyond this machine, only with a bearer token: set {GATEWAY_TOKEN_ENV} (or {GATEWAY_ADDR_ENV}=off)")]
    NoToken { addr: String },
    #[error("the HTTP gateway cannot listen on {addr} ({source}): free the address, or set {GATEWAY_ADDR_ENV} to another (or off)")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot write the gateway's token {path}: {source}")]
    Token {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Principals(#[from] PrincipalsError),
}

impl Gateway {
    /// Starts the gateway unless `ANTLER_GATEWAY_ADDR=off`. An address set in
    /// `ANTLER_GATEWAY_ADDR` that cannot be bound is an error; the default one, taken by
    /// another cluster, is a warning and the cluster runs without a gateway. Call inside an
    /// actix `System`.
    pub fn start(
        runtime_root: &Path,
        extensions: PathBuf,
        supervisor: Addr<Supervisor>,
        runs: Runs,
        principals: &antler_protocol::config::GatewaySection,
        config_dir: &Path,
    ) -> Result<Option<Gateway>, GatewayError> {
        let asked = std::env::var(GATEWAY_ADDR_ENV)
            .ok()
            .filter(|a| !a.is_empty());
        let addr = asked.clone().unwrap_or_else(|| DEFAULT_GATEWAY_ADDR.into());
        if addr.eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        raise_descriptor_limit();
        let given = std::env::var(GATEWAY_TOKEN_ENV)
            .ok()
            .filter(|t| !t.is_empty());
        if !is_loopback(&addr) && given.is_none() {
            return Err(GatewayError::NoToken { addr });
        }
        // With PostgreSQL, a stream of a run another lead drives waits for the run's
        // notices: listen from the start, so the first such stream does not wait for it.
        let _ = runs.store.notices();
        let state = State {
            started: std::time::Instant::now(),
            extensions,
            supervisor,
            runs: runs.clone(),
            logins: Arc::default(),
            settings: Arc::new(principals.clone()),
            quotas: Arc::new(quota::Quotas::new(&principals.limits)),
            mcp: Arc::new(mcp_endpoint::McpEndpoint::new(&runs, principals)),
        };
        let mcp = state.mcp.clone();
        // The guard needs the bound port (the address may ask for port 0): set once bound,
        // refusing everything until then.
        let guard = Arc::new(OnceLock::<Guard>::new());
        let factory_guard = guard.clone();
        let server = HttpServer::new(move || {
            let guard = factory_guard.clone();
            let mut app = App::new()
                .app_data(web::Data::new(state.clone()))
                .app_data(web::Data::new(guard.clone()))
                .default_service(web::to(unrouted));
            for path in routes::paths() {
                let guard = guard.clone();
                let mut resource = web::resource(path);
                for spec in routes::ROUTES.iter().filter(|r| r.path == path) {
                    let method = actix_web::http::Method::from_bytes(spec.method.as_bytes())
                        .unwrap_or(actix_web::http::Method::GET);
                    resource = resource.route((spec.handler)().method(method));
                }
                app = app.service(resource.wrap_fn(move |req, srv| {
                    let access = routes::access_of(path, req.method());
                    let checked = match guard.get() {
                        Some(g) => g.check(req.request(), access),
                        None => Err(Refusal::Credential),
                    };
                    match checked {
                        Err(refusal) => {
                            // The MCP resource's 401 names its metadata (RFC 9728).
                            let response = if refusal == Refusal::Credential
                                && mcp_endpoint::is_protected(path)
                            {
                                mcp_endpoint::unauthorized(req.request())
                            } else {
                                refusal.response()
                            };
                            Either::Left(futures::future::ready(Ok(req
                                .into_response(response)
                                .map_into_right_body())))
                        }
                        Ok(principal) => {
                            if let Some(principal) = principal {
                                actix_web::HttpMessage::extensions_mut(&req).insert(principal);
                            }
                            Either::Right(srv.call(req).map_ok(|r| r.map_into_left_body()))
                        }
                    }
                }));
            }
            app
        })
        .workers(1)
        // Beyond this many connections, new ones wait in the kernel's backlog.
        .max_connections(principals.limits.connections as usize)
        // A response's body must not wait for the client's delayed ACK (Nagle): an
        // `/events` stream followed on a kept-alive connection got its body 40 ms late.
        .on_connect(|conn, _| {
            if let Some(tcp) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() {
                let _ = tcp.set_nodelay(true);
            }
        })
        .disable_signals()
        .client_request_timeout(Duration::from_secs(5))
        .shutdown_timeout(2);
        let server = match server.bind(&addr) {
            Ok(s) => s,
            Err(source) if asked.is_some() => return Err(GatewayError::Bind { addr, source }),
            Err(e) => {
                tracing::warn!(%addr, "the HTTP gateway cannot listen ({e}); running without it (set {GATEWAY_ADDR_ENV} to choose another address)");
                return Ok(None);
            }
        };
        let Some(address) = server.addrs().first().copied() else {
            return Ok(None);
        };
        let token = match given {
            Some(token) => token,
            None => {
                let token = format!(
                    "{}{}",
                    uuid::Uuid::new_v4().simple(),
                    uuid::Uuid::new_v4().simple()
                );
                let path = runtime_root.join(GATEWAY_TOKEN_FILE);
                antler_protocol::runtime_dir::write_private(&path, token.as_bytes()).map_err(
                    |source| GatewayError::Token {
                        path: path.display().to_string(),
                        source,
                    },
                )?;
                token
            }
        };
        let hosts: Vec<String> = std::env::var(GATEWAY_HOSTS_ENV)
            .unwrap_or_default()
            .split(',')
            .map(str::to_owned)
            .collect();
        let principals = Arc::new(Authenticator::new(token, principals, config_dir)?);
        let _ = guard.set(Guard::new(address, principals, &hosts));
        let running = server.run();
        let handle = running.handle();
        actix_rt::spawn(running);
        let _ = antler_protocol::runtime_dir::write_private(
            &runtime_root.join(GATEWAY_ADDR_FILE),
            address.to_string().as_bytes(),
        );
        tracing::info!(%address, "HTTP gateway listening");
        Ok(Some(Gateway {
            handle,
            address,
            mcp,
        }))
    }

    /// Stops the HTTP server.
    pub async fn stop(self) {
        self.mcp.stop().await;
        self.handle.stop(true).await;
    }
}

impl FrontDoor for Gateway {
    fn stop(self: Box<Self>) -> LocalBoxFuture<'static, ()> {
        Box::pin(Gateway::stop(*self))
    }
}

/// Starts the gateway as the running cluster's front door (`antler up`; an ephemeral
/// cluster has none). `Ok(None)`: the gateway is off.
pub fn front_door(parts: FrontDoorParts<'_>) -> Result<Option<Box<dyn FrontDoor>>, FrontDoorError> {
    // A relative JWKS file is relative to config.yaml's directory.
    let config_dir = parts
        .spec
        .config
        .as_deref()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| std::env::current_dir().unwrap_or_default());
    let ownership = parts.runs.ownership.clone();
    let gateway = Gateway::start(
        parts.runtime_root,
        parts.extensions,
        parts.supervisor,
        parts.runs,
        &parts.spec.gateway,
        &config_dir,
    )?;
    if let (Some(gateway), Some(ownership)) = (&gateway, ownership) {
        // Other leads forward writes to the runs this lead drives to this address.
        let url = parts
            .spec
            .ha
            .advertise_url()
            .unwrap_or_else(|| format!("http://{}", gateway.address));
        actix_rt::spawn(async move {
            match ownership.advertise(&url).await {
                Ok(()) => tracing::info!(%url, "advertised this lead's gateway to the other leads"),
                Err(e) => {
                    tracing::warn!(%url, "cannot advertise this lead's gateway (retried at the next renewal): {e}")
                }
            }
        });
    }
    Ok(gateway.map(|g| Box::new(g) as Box<dyn FrontDoor>))
}

/// A request no route matched: it still needs a principal (an unknown path says nothing
/// to a caller without one), then 404.
async fn unrouted(req: actix_web::HttpRequest) -> HttpResponse {
    let guard = req
        .app_data::<web::Data<Arc<OnceLock<Guard>>>>()
        .and_then(|g| g.get().cloned());
    match guard.map(|g| g.check(&req, routes::Access::Member)) {
        Some(Ok(_)) => error(actix_web::http::StatusCode::NOT_FOUND, "no such route"),
        Some(Err(refusal)) => refusal.response(),
        None => Refusal::Credential.response(),
    }
}

/// `GET /api/whoami`: the principal the token acts as (the inspector shows it).
async fn whoami(req: actix_web::HttpRequest) -> HttpResponse {
    match principal_of(&req) {
        Some(p) => HttpResponse::Ok().json(json!({
            "user": p.user.as_deref().unwrap_or(config::OPERATOR_USER),
            "role": p.role,
            "operator": p.operator,
        })),
        None => Refusal::Credential.response(),
    }
}

/// `GET /ready`: 200 once a healthy replica of each host is linked and the runs store
/// takes writes (runs can be prepared), 503 with what it waits for until then; `/health`
/// is liveness only.
async fn ready(state: web::Data<State>) -> HttpResponse {
    let readiness = crate::runs::readiness::readiness(&state.supervisor).await;
    if readiness.is_ready() {
        HttpResponse::Ok().json(json!({"status": "ready"}))
    } else {
        HttpResponse::ServiceUnavailable()
            .insert_header((actix_web::http::header::RETRY_AFTER, "1"))
            .json(json!({"status": "starting", "waiting_for": readiness.waiting_for}))
    }
}

/// Raises this process's open-file limit to its hard limit: every connection and event
/// stream is a descriptor, and the soft default (often 1,024) is what ran out.
fn raise_descriptor_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            let before = limit.rlim_cur;
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                tracing::info!(before, after = limit.rlim_max, "raised the open-file limit");
            }
        }
    }
}

/// Whether `addr` (`host:port`) is a loopback address (names other than `localhost`
/// count as not).
fn is_loopback(addr: &str) -> bool {
    match addr.parse::<SocketAddr>() {
        Ok(a) => a.ip().is_loopback(),
        Err(_) => addr
            .rsplit_once(':')
            .is_some_and(|(host, _)| host.eq_ignore_ascii_case("localhost")),
    }
}

async fn health() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

pub(crate) fn error(
    status: actix_web::http::StatusCode,
    detail: impl Into<String>,
) -> HttpResponse {
    HttpResponse::build(status).json(json!({"detail": detail.into()}))
}

/// `GET /metrics`: Prometheus text format.
async fn metrics(state: web::Data<State>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.runs.metrics.render())
}
