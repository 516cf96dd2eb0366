//! The lead's HTTP gateway (actix-web): `/health`; `GET`/`PUT /api/mcp/config` for the
//! MCP servers of `extensions_config.json` (secrets redacted); a principal's MCP login
//! (`POST /api/mcp/{server}/oauth/start`, `GET /api/mcp/oauth/callback`, see `oauth`); runs (`POST /api/runs`,
//! `GET /api/runs/{id}`, `GET /api/runs/{id}/events` as server-sent events,
//! `POST /api/runs/{id}/answer`, `POST /api/runs/{id}/cancel`, an MCP elicitation's
//! answer `POST /api/runs/{id}/elicitations/{eid}`, see `elicitation`); and `GET /metrics` in Prometheus' text format. A `PUT` of
//! the MCP config is validated with the same loader mcp-host uses, written atomically
//! (temporary file, fsync, rename), and applied at once by asking mcp-host to reload.
//! Owns one HTTP server that `stop` ends. The address comes from `ANTLER_GATEWAY_ADDR`
//! (`off` disables it; default 127.0.0.1:8001) and is written to `gateway.addr` in the
//! runtime directory; an address that was asked for and cannot be bound fails start-up.
//! Every request passes [`guard::Guard`] first: every route but `/health` needs
//! `Authorization: Bearer TOKEN` naming a principal: the operator's token
//! (`ANTLER_GATEWAY_TOKEN` or, on loopback, the one written to `gateway.token` (0600) in the
//! runtime directory), or a user's (`antler.gateway`: static tokens and JWTs). A user's
//! runs are its own: it starts them as itself, and another user's run is 404 to it, as if
//! it did not exist; the operator sees every run (`GET /api/runs` lists them).

mod elicitation;
mod guard;
mod oauth;
mod principal;
mod quota;
pub(crate) mod routes;
mod secrets;
mod ui;

pub use guard::{Guard, Refusal, BODY_DEADLINE, GATEWAY_HOSTS_ENV};
pub use principal::{Authenticator, Principal, PrincipalsError};
pub use routes::{Access, ROUTES};

use std::{
    io::Write,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, OnceLock},
    time::Duration,
};

use actix_web::dev::Service;
use futures::future::{Either, TryFutureExt};

use actix::Addr;
use actix_web::{web, App, HttpResponse, HttpServer};
use antler_protocol::{
    config::{self, WarningKind},
    envelope::TraceContext,
    link::Call as LinkCall,
    messages::{McpReply, McpRequest, Reply, Request},
    Role,
};
use serde_json::{json, Value};

use crate::cluster::supervisor::{GetLinks, Supervisor};
use crate::cluster::{FrontDoor, FrontDoorError, FrontDoorParts, Runs};
use crate::runs::manager;
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
        let state = State {
            started: std::time::Instant::now(),
            extensions,
            supervisor,
            runs,
            logins: Arc::default(),
            settings: Arc::new(principals.clone()),
            quotas: Arc::new(quota::Quotas::new(&principals.limits)),
        };
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
                        Err(refusal) => Either::Left(futures::future::ready(Ok(req
                            .into_response(refusal.response())
                            .map_into_right_body()))),
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
        Ok(Some(Gateway { handle, address }))
    }

    /// Stops the HTTP server.
    pub async fn stop(self) {
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
    let gateway = Gateway::start(
        parts.runtime_root,
        parts.extensions,
        parts.supervisor,
        parts.runs,
        &parts.spec.gateway,
        &config_dir,
    )?;
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

/// The file as JSON (`{}` when it does not exist yet).
fn read_file(path: &Path) -> Result<Value, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            format!(
                "Extensions config file at {} is not valid JSON: {e}",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(json!({})),
        Err(e) => Err(format!("{}: cannot read the file: {e}", path.display())),
    }
}

/// `GET /api/mcp/config`: `{"mcp_servers": {...}}` as written in the file (`$VAR`s
/// unresolved), every secret value shown as `[redacted]`.
async fn get_config(state: web::Data<State>) -> HttpResponse {
    match read_file(&state.extensions) {
        Ok(v) => {
            let servers = v.get("mcpServers").cloned().unwrap_or(json!({}));
            HttpResponse::Ok().json(json!({"mcp_servers": secrets::redacted(&servers)}))
        }
        Err(e) => error(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// `PUT /api/mcp/config` with `{"mcp_servers": {...}}`: replaces `mcpServers`, keeps the
/// file's other keys, validates, writes atomically, and has mcp-host apply it.
async fn put_config(state: web::Data<State>, payload: web::Payload) -> HttpResponse {
    use actix_web::http::StatusCode;
    let body = match guard::read_body(payload, MAX_CONFIG_BODY).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the body is not valid JSON: {e}"),
            )
        }
    };
    let Some(mut servers) = body.get("mcp_servers").filter(|v| v.is_object()).cloned() else {
        return error(
            StatusCode::BAD_REQUEST,
            "the body must be an object with an `mcp_servers` object",
        );
    };
    let mut file = match read_file(&state.extensions) {
        Ok(Value::Object(m)) => m,
        Ok(_) => serde_json::Map::new(),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    let stored = file
        .get("mcpServers")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Err(e) = secrets::restore(&mut servers, &stored) {
        return error(StatusCode::UNPROCESSABLE_ENTITY, e);
    }
    file.insert("mcpServers".into(), servers.clone());
    let text = match serde_json::to_string_pretty(&Value::Object(file)) {
        Ok(t) => t + "\n",
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    match config::parse_extensions_config(&state.extensions, &text, &config::process_env) {
        Ok(loaded) => {
            let invalid: Vec<String> = loaded
                .warnings
                .iter()
                .filter(|w| w.kind == WarningKind::ServerSkipped)
                .map(|w| w.message.clone())
                .collect();
            if !invalid.is_empty() {
                return HttpResponse::UnprocessableEntity()
                    .json(json!({"detail": invalid.join("; "), "errors": invalid}));
            }
        }
        Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
    }
    if !state.settings.allow_stdio_mcp {
        let changed = stdio_changes(&servers, &stored);
        if !changed.is_empty() {
            return error(
                StatusCode::FORBIDDEN,
                format!("{STDIO_REFUSED} ({})", changed.join(", ")),
            );
        }
    }
    if let Err(e) = write_atomically(&state.extensions, text.as_bytes()) {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{}: cannot write: {e}", state.extensions.display()),
        );
    }
    let applied = reload_mcp_host(&state.supervisor).await;
    let servers = secrets::redacted(&servers);
    match applied {
        Ok(summary) => HttpResponse::Ok().json(json!({"mcp_servers": servers, "applied": summary})),
        // Written; mcp-host's watcher applies it when it is back.
        Err(e) => {
            HttpResponse::Ok().json(json!({"mcp_servers": servers, "applied": null, "warning": e}))
        }
    }
}

/// Why a `PUT /api/mcp/config` that adds or changes a stdio server is refused.
pub const STDIO_REFUSED: &str = "stdio MCP servers run a command on the host as the operator's user: they are added and changed only in the extensions file (or set antler.gateway.allow_stdio_mcp: true)";

/// The keys of a server entry that say what command runs.
const STDIO_KEYS: &[&str] = &["type", "transport", "command", "args", "env", "cwd"];

/// The names of the stdio servers of `servers` that are new or whose command differs
/// from `stored`'s entry.
fn stdio_changes(servers: &Value, stored: &serde_json::Map<String, Value>) -> Vec<String> {
    let is_stdio = |entry: &Value| {
        let transport = entry
            .get("type")
            .or_else(|| entry.get("transport"))
            .and_then(Value::as_str)
            .unwrap_or("stdio");
        transport.eq_ignore_ascii_case("stdio") || entry.get("command").is_some()
    };
    let command = |entry: Option<&Value>| -> Vec<Option<Value>> {
        STDIO_KEYS
            .iter()
            .map(|k| entry.and_then(|e| e.get(*k)).cloned())
            .collect()
    };
    servers
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(name, entry)| {
            is_stdio(entry)
                && (stored.get(*name).is_none_or(|old| !is_stdio(old))
                    || command(Some(entry)) != command(stored.get(*name)))
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, and renames it over `path`.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Reloads every mcp-host replica; the first one's summary (they read the same file),
/// or the first failure.
async fn reload_mcp_host(supervisor: &Addr<Supervisor>) -> Result<Value, String> {
    let replies = host_calls(
        supervisor,
        Role::McpHost,
        Request::Mcp(McpRequest::Reload),
        RELOAD_TIMEOUT,
    )
    .await?;
    let mut first = None;
    for (address, reply) in replies {
        match reply {
            Err(e) => return Err(format!("{address}: {e}")),
            Ok(r) => {
                first.get_or_insert(r);
            }
        }
    }
    let reply = first.ok_or_else(|| "no mcp-host in this cluster".to_owned())?;
    match reply {
        Reply::Mcp(McpReply::Reloaded(s)) => Ok(json!({
            "started": s.started,
            "stopped": s.stopped,
            "restarted": s.restarted,
            "unchanged": s.unchanged,
            "error": s.error,
        })),
        other => Err(format!("unexpected reply from mcp-host: {other:?}")),
    }
}

/// One request to every replica of `role` (one in a local cluster) through the
/// supervisor's links, at once: each replica's address and reply.
async fn host_calls(
    supervisor: &Addr<Supervisor>,
    role: Role,
    request: Request,
    timeout: Duration,
) -> Result<Vec<(String, Result<Reply, String>)>, String> {
    let mut links = supervisor.send(GetLinks).await.map_err(|e| e.to_string())?;
    links.retain(|(r, ..)| *r == role);
    links.sort_by_key(|(_, i, ..)| *i);
    if links.is_empty() {
        return Err(format!("no {} in this cluster", role.as_str()));
    }
    let calls = links.into_iter().map(|(_, _, address, link)| {
        let request = request.clone();
        async move {
            let reply = link
                .send(LinkCall {
                    request,
                    trace: TraceContext::new_root(),
                    timeout,
                })
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()));
            (address, reply)
        }
    });
    Ok(futures::future::join_all(calls).await)
}

/// How long the cluster view waits for each host.
const CLUSTER_TIMEOUT: Duration = Duration::from_millis(2000);

/// `GET /api/cluster` (the operator's): `processes` (as `antler status --json`, workers
/// with their slots), `sandboxes` (sandbox-host's pool) and `mcp_servers` (mcp-host's
/// servers); a host that does not answer is `null` with an `errors` entry.
async fn cluster_view(state: web::Data<State>) -> HttpResponse {
    use antler_protocol::messages::{SandboxReply, SandboxRequest};
    let mut processes = match state
        .supervisor
        .send(crate::cluster::supervisor::GetStatus)
        .await
    {
        Ok(list) => list,
        Err(e) => {
            return error(
                actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
                e.to_string(),
            )
        }
    };
    crate::cluster::scaling::with_slots(&mut processes, &state.runs.dispatcher).await;
    // The lead is unhealthy while its runs database cannot be written.
    let unwritable = crate::runs::store::unwritable();
    processes.insert(
        0,
        antler_protocol::messages::ProcessStatus {
            role: Role::Lead,
            index: 0,
            pid: Some(std::process::id()),
            address: "lead".into(),
            healthy: unwritable.is_none(),
            restarts: 0,
            uptime_s: state.started.elapsed().as_secs_f64(),
            last_heartbeat_ms: Some(0),
            state: "running".into(),
            reason: unwritable,
            slots: None,
            in_use: None,
        },
    );
    let (pools, mcp) = futures::join!(
        host_calls(
            &state.supervisor,
            Role::SandboxHost,
            Request::Sandbox(SandboxRequest::Status),
            CLUSTER_TIMEOUT,
        ),
        host_calls(
            &state.supervisor,
            Role::McpHost,
            Request::Mcp(McpRequest::Status),
            CLUSTER_TIMEOUT,
        ),
    );
    let mut errors = Vec::new();
    // The pool of every sandbox-host replica as one: the first replica's settings, every
    // replica's sandboxes (each with its replica's address when there are several).
    let mut sandboxes = Value::Null;
    let several = pools.as_ref().is_ok_and(|p| p.len() > 1);
    for (address, reply) in pools.unwrap_or_else(|e| vec![(String::new(), Err(e))]) {
        match reply {
            Ok(Reply::Sandbox(SandboxReply::Status(status))) => {
                let mut listed = json!(status.sandboxes);
                if several {
                    for sandbox in listed.as_array_mut().into_iter().flatten() {
                        sandbox["replica"] = json!(address);
                    }
                }
                // Each replica's volume: a full one is where sandbox writes fail.
                let mut volume = json!(status.volume);
                if !volume.is_null() {
                    volume["replica"] = json!(address);
                }
                if sandboxes.is_null() {
                    sandboxes = json!(status);
                    sandboxes["sandboxes"] = listed;
                    sandboxes["volumes"] = json!([]);
                } else if let (Some(all), Some(more)) =
                    (sandboxes["sandboxes"].as_array_mut(), listed.as_array())
                {
                    all.extend(more.iter().cloned());
                }
                if let Some(volumes) = sandboxes["volumes"].as_array_mut() {
                    if !volume.is_null() {
                        volumes.push(volume);
                    }
                }
            }
            Ok(other) => errors.push(format!(
                "sandbox-host {address}: unexpected reply {other:?}"
            )),
            Err(e) => errors.push(format!("sandbox-host {address}: {e}").replace("  ", " ")),
        }
    }
    // Every replica connects to every server: each server once per replica.
    let mut mcp_servers = Value::Null;
    let several = mcp.as_ref().is_ok_and(|p| p.len() > 1);
    for (address, reply) in mcp.unwrap_or_else(|e| vec![(String::new(), Err(e))]) {
        match reply {
            Ok(Reply::Mcp(McpReply::Status(list))) => {
                let mut listed = json!(list);
                if several {
                    for server in listed.as_array_mut().into_iter().flatten() {
                        server["replica"] = json!(address);
                    }
                }
                match (mcp_servers.as_array_mut(), listed) {
                    (Some(all), Value::Array(more)) => all.extend(more),
                    (_, listed) => mcp_servers = listed,
                }
            }
            Ok(other) => errors.push(format!("mcp-host {address}: unexpected reply {other:?}")),
            Err(e) => errors.push(format!("mcp-host {address}: {e}").replace("  ", " ")),
        }
    }
    HttpResponse::Ok().json(json!({
        "processes": crate::cli::status_json(&processes),
        "sandboxes": sandboxes,
        "mcp_servers": mcp_servers,
        "errors": errors,
    }))
}

/// The header that makes a run's submission safe to repeat.
const IDEMPOTENCY_KEY: &str = "Idempotency-Key";
/// The longest idempotency key.
const MAX_IDEMPOTENCY_KEY: usize = 200;

/// `POST /api/runs` with `{"task", "user"?, "thread"?, "playbook"?, "model"?,
/// "clarification"?}`: starts a run in the lead; 201 with `{"run_id", "status"}`. With an
/// `Idempotency-Key` header, a repeat by the same user is answered the first one's run.
async fn post_run(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    use actix_web::http::StatusCode;
    let Some(principal) = principal_of(&req) else {
        return Refusal::Credential.response();
    };
    let body = match guard::read_body(payload, MAX_RUN_BODY).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        task: String,
        #[serde(default)]
        user: Option<String>,
        #[serde(default)]
        thread: Option<String>,
        /// A file of `antler.playbook_dirs`, by its relative name.
        #[serde(default)]
        playbook: Option<String>,
        /// The playbook's YAML.
        #[serde(default)]
        playbook_yaml: Option<String>,
        #[serde(default)]
        model: Option<String>,
        #[serde(default)]
        clarification: bool,
        #[serde(default)]
        agent: Option<String>,
        #[serde(default)]
        bootstrap: bool,
        /// `false`: nobody talks to the run, so `ask_clarification` is not offered.
        #[serde(default)]
        interactive: Option<bool>,
        /// `true`: the run is offered `task` (subagents on the cluster's workers).
        #[serde(default)]
        subagents: Option<bool>,
    }
    let body: Body = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the body must be a JSON object with a `task` string: {e}"),
            )
        }
    };
    if body.task.trim().is_empty() {
        return error(StatusCode::BAD_REQUEST, "the task is empty");
    }
    use antler_protocol::messages::PlaybookSource;
    let playbook = match (body.playbook, body.playbook_yaml) {
        (Some(_), Some(_)) => return error(
            StatusCode::BAD_REQUEST,
            "send either `playbook` (a name in antler.playbook_dirs) or `playbook_yaml`, not both",
        ),
        (Some(name), None) => Some(PlaybookSource::Named(name)),
        (None, Some(yaml)) => Some(PlaybookSource::Inline(yaml)),
        (None, None) => None,
    };
    // A user's runs are its own; the operator names the user (else `default`).
    let user = match (&principal.user, body.user) {
        (_, Some(asked)) if principal.operator => asked,
        (None, None) => "default".to_owned(),
        (Some(own), None) => own.clone(),
        (Some(own), Some(asked)) if &asked == own => asked,
        (Some(own), Some(_)) => {
            return error(
                StatusCode::FORBIDDEN,
                format!("this token acts as user {own}: a run's user is its principal's"),
            )
        }
        (None, Some(asked)) => asked,
    };
    // A scripted model scripts every call of the run: a test and demo facility, the
    // operator's unless the operator opened it to everyone.
    if playbook.is_some() && !principal.operator && !state.settings.allow_scripted_models {
        return error(StatusCode::FORBIDDEN, SCRIPTED_REFUSED);
    }
    if !principal.operator {
        if let Err(over) = state.quotas.submit(&user) {
            return over_limit(&over);
        }
        let running = state
            .runs
            .manager
            .send(manager::CountRunning { user: user.clone() })
            .await;
        match running {
            Ok(Ok(running)) => {
                if let Err(over) = state.quotas.concurrent(&user, running) {
                    return over_limit(&over);
                }
            }
            Ok(Err(e)) => return manager_error(e),
            Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        }
    }
    // A client that repeats a submission whose reply it lost (a timeout, a lead restart)
    // sends the same key, and is answered the first one's run.
    let idempotency_key = match req.headers().get(IDEMPOTENCY_KEY) {
        None => None,
        Some(value) => match value.to_str() {
            Ok(key)
                if (1..=MAX_IDEMPOTENCY_KEY).contains(&key.len())
                    && key.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                Some(key.to_owned())
            }
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("the {IDEMPOTENCY_KEY} header must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"),
                )
            }
        },
    };
    let submission = antler_protocol::messages::RunSubmission {
        task: body.task,
        user,
        thread: body.thread,
        playbook,
        model: body.model,
        clarification: body.clarification,
        config: None,
        agent: body.agent,
        bootstrap: body.bootstrap,
        interactive: body.interactive.unwrap_or(true),
        subagents: body.subagents,
        role: principal
            .role
            .clone()
            .filter(|_| !principal.operator || principal.user.is_some()),
        idempotency_key,
    };
    match state
        .runs
        .manager
        .send(manager::SubmitRun(submission))
        .await
    {
        Ok(Ok(run_id)) => HttpResponse::Created()
            .insert_header(("Location", format!("/api/runs/{run_id}")))
            .json(json!({"run_id": run_id, "status": "running"})),
        Ok(Err(
            e @ (crate::runs::prepare::PrepareError::InvalidId { .. }
            | crate::runs::prepare::PrepareError::Playbook(_)),
        )) => error(StatusCode::BAD_REQUEST, e.to_string()),
        // The lead's own load (a host away, busy or slow, the store locked): come back.
        Ok(Err(e)) if e.is_overload() => {
            let mut busy = error(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
            busy.headers_mut().insert(
                actix_web::http::header::RETRY_AFTER,
                crate::runs::prepare::RETRY_AFTER_S.into(),
            );
            busy
        }
        Ok(Err(e)) => error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
        Err(e) => {
            let mut busy = error(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
            busy.headers_mut().insert(
                actix_web::http::header::RETRY_AFTER,
                crate::runs::prepare::RETRY_AFTER_S.into(),
            );
            busy
        }
    }
}

/// Why a member's run with a playbook is refused.
pub const SCRIPTED_REFUSED: &str = "scripted models (playbook, playbook_yaml) are the operator's: a test and demo facility (set antler.gateway.allow_scripted_models: true to open them)";

/// 429 with `Retry-After` for a user over its own limit; 503 when the gateway as a whole
/// is full.
fn over_limit(over: &quota::OverLimit) -> HttpResponse {
    use actix_web::http::StatusCode;
    let status = if over.is_cluster_wide() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let mut response = error(status, over.to_string());
    if let Ok(value) = over.retry_after_s().to_string().parse() {
        response
            .headers_mut()
            .insert(actix_web::http::header::RETRY_AFTER, value);
    }
    response
}

async fn view_of(state: &State, run_id: String) -> HttpResponse {
    use actix_web::http::StatusCode;
    match state.runs.manager.send(manager::GetRun(run_id)).await {
        Ok(Ok(view)) => HttpResponse::Ok().json(view),
        Ok(Err(e @ crate::runs::prepare::PrepareError::UnknownRun(_))) => {
            error(StatusCode::NOT_FOUND, e.to_string())
        }
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// The principal the guard found for `req`.
fn principal_of(req: &actix_web::HttpRequest) -> Option<Principal> {
    actix_web::HttpMessage::extensions(req)
        .get::<Principal>()
        .cloned()
}

/// `Ok` when `req`'s principal may see run `run_id`; otherwise the response: 404 for a run
/// that does not exist and for another user's alike, so ids say nothing.
async fn visible(
    state: &State,
    req: &actix_web::HttpRequest,
    run_id: &str,
) -> Result<(), HttpResponse> {
    use actix_web::http::StatusCode;
    let Some(principal) = principal_of(req) else {
        return Err(Refusal::Credential.response());
    };
    let unknown = || {
        error(
            StatusCode::NOT_FOUND,
            crate::runs::prepare::PrepareError::UnknownRun(run_id.to_owned()).to_string(),
        )
    };
    match state
        .runs
        .manager
        .send(manager::RunOwner(run_id.to_owned()))
        .await
    {
        Ok(Ok(Some(owner))) if principal.may_see(&owner) => Ok(()),
        Ok(Ok(_)) => Err(unknown()),
        Ok(Err(e)) => Err(manager_error(e)),
        Err(e) => Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    }
}

/// The response to a run manager's failure: 503 for the lead's own load, 500 otherwise.
fn manager_error(e: crate::runs::prepare::PrepareError) -> HttpResponse {
    use actix_web::http::StatusCode;
    if e.is_overload() {
        error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
    } else {
        error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

/// The `{id}` of a run route whose principal may see that run: extracting it answers
/// the request with [`visible`]'s refusal otherwise, before any body is read.
struct VisibleRun(String);

impl actix_web::FromRequest for VisibleRun {
    type Error = actix_web::Error;
    type Future = futures::future::LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &actix_web::HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let refused = |response| {
                actix_web::Error::from(actix_web::error::InternalError::from_response(
                    "run not visible",
                    response,
                ))
            };
            let (Some(state), Some(run_id)) = (
                req.app_data::<web::Data<State>>().cloned(),
                req.match_info().get("id").map(str::to_owned),
            ) else {
                return Err(refused(error(
                    actix_web::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "a run route without its run",
                )));
            };
            visible(&state, &req, &run_id).await.map_err(refused)?;
            Ok(VisibleRun(run_id))
        })
    }
}

/// `GET /api/runs/{id}`: the run's view.
async fn get_run(state: web::Data<State>, VisibleRun(run_id): VisibleRun) -> HttpResponse {
    view_of(&state, run_id).await
}

/// `GET /api/runs/{id}/messages`: the run's messages (its last checkpoint), tool-call
/// arguments that hold secrets redacted and texts cut at 16 KiB.
async fn run_messages(state: web::Data<State>, VisibleRun(run_id): VisibleRun) -> HttpResponse {
    match state.runs.manager.send(manager::RunMessages(run_id)).await {
        Ok(Ok(messages)) => {
            HttpResponse::Ok().json(json!({"messages": secrets::shown_messages(&messages)}))
        }
        Ok(Err(e @ crate::runs::prepare::PrepareError::UnknownRun(_))) => {
            error(actix_web::http::StatusCode::NOT_FOUND, e.to_string())
        }
        Ok(Err(e)) => manager_error(e),
        Err(e) => error(
            actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
            e.to_string(),
        ),
    }
}

/// `GET /api/runs/{id}/catalog`: the tools the run sees, by source, deferred or not, and
/// the catalog's hash; 404 when the lead no longer holds the run (after a restart).
async fn run_catalog(state: web::Data<State>, VisibleRun(run_id): VisibleRun) -> HttpResponse {
    use actix_web::http::StatusCode;
    match state
        .runs
        .manager
        .send(manager::RunCatalog(run_id.clone()))
        .await
    {
        Ok(Some(catalog)) => HttpResponse::Ok().json(catalog),
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            format!("the lead no longer holds the catalog of run {run_id}"),
        ),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// `GET /api/runs/{id}/artifact?path=/mnt/user-data/outputs/F`: a file the run presented,
/// as an attachment (`nosniff`, a sandbox CSP: an HTML artifact never runs as the
/// gateway's page). 404 for a file the run did not present, one outside the thread's
/// outputs, or another user's run.
async fn download_artifact(
    state: web::Data<State>,
    VisibleRun(run_id): VisibleRun,
    query: web::Query<std::collections::HashMap<String, String>>,
) -> HttpResponse {
    use actix_web::http::StatusCode;
    let Some(path) = query.get("path").cloned() else {
        return error(
            StatusCode::BAD_REQUEST,
            "path: the artifact's path is required",
        );
    };
    let bytes = match state
        .runs
        .manager
        .send(manager::RunArtifact {
            run_id,
            path: path.clone(),
        })
        .await
    {
        Ok(Ok(manager::ArtifactContent::Bytes(bytes))) => bytes,
        Ok(Ok(manager::ArtifactContent::TooLarge)) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the artifact is larger than {} bytes",
                    manager::MAX_ARTIFACT_BYTES
                ),
            )
        }
        Ok(Err(e @ crate::runs::prepare::PrepareError::NoArtifact { .. })) => {
            return error(StatusCode::NOT_FOUND, e.to_string())
        }
        Ok(Err(e)) => return manager_error(e),
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    let name: String = path
        .rsplit('/')
        .next()
        .unwrap_or("artifact")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    HttpResponse::Ok()
        .content_type("application/octet-stream")
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename=\"{name}\""),
        ))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("Content-Security-Policy", "sandbox; default-src 'none'"))
        .body(bytes)
}

/// The largest `limit` of `GET /api/runs`.
const MAX_LIST: usize = 1000;

/// `GET /api/runs[?status=S][&limit=N]`: the principal's runs, newest first (the
/// operator's: every user's, or one user's with `user=U`); `limit` 100 by default.
async fn list_runs(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    query: web::Query<std::collections::HashMap<String, String>>,
) -> HttpResponse {
    use actix_web::http::StatusCode;
    let Some(principal) = principal_of(&req) else {
        return Refusal::Credential.response();
    };
    let limit = match query.get("limit").map(|l| l.parse::<usize>()) {
        None => 100,
        Some(Ok(n)) if (1..=MAX_LIST).contains(&n) => n,
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("limit: expected an integer from 1 to {MAX_LIST}"),
            )
        }
    };
    let status = match query.get("status") {
        None => None,
        Some(s) => match crate::runs::store::RunStatus::parse(s) {
            Some(status) => Some(status),
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "status: expected running, success, error or interrupted",
                )
            }
        },
    };
    let user = if principal.operator {
        query.get("user").cloned()
    } else {
        principal.user.clone()
    };
    match state
        .runs
        .manager
        .send(manager::ListRuns {
            user,
            status,
            limit,
        })
        .await
    {
        Ok(Ok(runs)) => HttpResponse::Ok().json(json!({"runs": runs})),
        Ok(Err(e)) => manager_error(e),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// `POST /api/runs/{id}/answer` with `{"answer"}`: answers an interrupted run's question
/// and drives it again.
async fn answer_run(
    state: web::Data<State>,
    VisibleRun(run_id): VisibleRun,
    payload: web::Payload,
) -> HttpResponse {
    use actix_web::http::StatusCode;
    let body = match guard::read_body(payload, MAX_ANSWER_BODY).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let answer = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("answer").and_then(Value::as_str).map(str::to_owned));
    let Some(answer) = answer else {
        return error(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object with an `answer` string",
        );
    };
    let resume = manager::ResumeRun {
        run_id,
        answer: Some(answer),
        playbook: None,
    };
    match state.runs.manager.send(resume).await {
        Ok(Ok(run_id)) => {
            HttpResponse::Accepted().json(json!({"run_id": run_id, "status": "running"}))
        }
        Ok(Err(e @ crate::runs::prepare::PrepareError::UnknownRun(_))) => {
            error(StatusCode::NOT_FOUND, e.to_string())
        }
        Ok(Err(e @ crate::runs::prepare::PrepareError::NotWaiting { .. })) => {
            error(StatusCode::CONFLICT, e.to_string())
        }
        Ok(Err(e)) => error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// `POST /api/runs/{id}/cancel`: cancels a running run (or one waiting for an answer);
/// 202 with `{"run_id", "status": "error", "cancelled": true}`, 404 for an unknown run,
/// 409 for one that has ended.
async fn cancel_run(state: web::Data<State>, VisibleRun(run_id): VisibleRun) -> HttpResponse {
    use actix_web::http::StatusCode;
    match state
        .runs
        .manager
        .send(manager::CancelRun(run_id.clone()))
        .await
    {
        Ok(Ok(manager::CancelOutcome::Cancelled)) => HttpResponse::Accepted()
            .json(json!({"run_id": run_id, "status": "error", "cancelled": true})),
        Ok(Err(e @ crate::runs::prepare::PrepareError::UnknownRun(_))) => {
            error(StatusCode::NOT_FOUND, e.to_string())
        }
        Ok(Err(e @ crate::runs::prepare::PrepareError::NotRunning { .. })) => {
            error(StatusCode::CONFLICT, e.to_string())
        }
        Ok(Err(e)) => manager_error(e),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// One server-sent event.
/// How long a run's event stream waits for this lead to resume a run a lead before it
/// left `running`.
const RESUME_FOLLOW_WAIT: Duration = Duration::from_secs(60);

/// Sends a held run's events, then `end` with its view when its drive stops.
async fn follow_log(
    log: std::sync::Arc<crate::runs::events::EventLog>,
    tx: tokio::sync::mpsc::Sender<web::Bytes>,
) {
    let view = log
        .follow(|event| {
            let tx = tx.clone();
            async move { tx.send(sse("run", &event)).await.is_ok() }
        })
        .await;
    if let Some(view) = view {
        let _ = tx.send(sse("end", &view)).await;
    }
}

fn sse(event: &str, data: &str) -> web::Bytes {
    // `data` is one line of JSON (serde_json never writes a raw newline).
    web::Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

/// `GET /api/runs/{id}/events`: the run's events as server-sent events (`event: run`,
/// the events so far first), then `event: end` with the run's view when its drive stops.
async fn run_events(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    VisibleRun(run_id): VisibleRun,
) -> HttpResponse {
    let user = principal_of(&req)
        .filter(|p| !p.operator)
        .and_then(|p| p.user);
    // Held by the stream until it ends, however it ends.
    let slot = match state.quotas.open_stream(user.as_deref()) {
        Ok(slot) => slot,
        Err(over) => return over_limit(&over),
    };
    let log = match state
        .runs
        .manager
        .send(manager::WatchRun(run_id.clone()))
        .await
    {
        Ok(log) => log,
        Err(e) => {
            return error(
                actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
                e.to_string(),
            )
        }
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<web::Bytes>(64);
    match log {
        Some(log) => {
            actix_rt::spawn(follow_log(log, tx));
        }
        None => {
            let response = view_of(&state, run_id.clone()).await;
            if !response.status().is_success() {
                return response;
            }
            let body = actix_web::body::to_bytes(response.into_body())
                .await
                .unwrap_or_default();
            let text = String::from_utf8_lossy(&body).into_owned();
            let left_running =
                serde_json::from_str::<Value>(&text).is_ok_and(|v| v["status"] == "running");
            if left_running {
                // Left `running` by a lead before this one and not resumed yet: the stream
                // waits for this lead to take it up (then follows it) instead of ending a
                // run that is not over.
                let state = state.clone();
                actix_rt::spawn(async move {
                    let until = std::time::Instant::now() + RESUME_FOLLOW_WAIT;
                    while std::time::Instant::now() < until && !tx.is_closed() {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        let held = state
                            .runs
                            .manager
                            .send(manager::WatchRun(run_id.clone()))
                            .await;
                        if let Ok(Some(log)) = held {
                            return follow_log(log, tx).await;
                        }
                    }
                    let _ = tx.send(sse("end", &text)).await;
                });
            } else {
                let _ = tx.try_send(sse("end", &text));
            }
        }
    }
    let stream = futures::stream::unfold((rx, slot), |(mut rx, slot)| async move {
        rx.recv()
            .await
            .map(|bytes| (Ok::<_, actix_web::Error>(bytes), (rx, slot)))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .streaming(stream)
}

/// `GET /metrics`: Prometheus text format.
async fn metrics(state: web::Data<State>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.runs.metrics.render())
}
