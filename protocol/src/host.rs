//! The runtime every host process shares (mcp-host, sandbox-host, subagent worker): its
//! command-line arguments, the control requests every peer answers (ping, health), the
//! listener (with TLS for TCP when `--tls-ca`, `--tls-cert`, `--tls-key` are given), and
//! drain on SIGTERM: stop accepting, finish in-flight work within the grace period, exit.
//! With `--chaos` a host also takes `ChaosStop` for the actors its role owns; without it
//! that request is refused with [`CHAOS_OFF`]. A role's request from a stale lease epoch
//! of its run is refused before the role sees it ([`crate::fencing`]).

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::future::BoxFuture;

use crate::{
    config::LogLevel,
    connection::{Call, ConnectionConfig, InFlight, Service},
    envelope::RemoteError,
    fencing::Fences,
    handshake::{Identity, Role},
    messages::{ActorRef, ControlReply, ControlRequest, Health, Reply, Request, CHAOS_OFF},
    runtime_dir::{self, TOKEN_ENV},
    server::Server,
    tls::{ClusterTls, TlsError, TlsFiles},
    transport::Address,
};

/// Arguments every host binary takes.
#[derive(Debug, Clone, clap::Args)]
pub struct HostArgs {
    /// Where to listen: unix:PATH or tcp:HOST:PORT.
    #[arg(long)]
    pub listen: Address,
    /// A file holding the cluster token (else the ANTLER_CLUSTER_TOKEN variable).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// This process's id in the cluster (defaults to role and pid).
    #[arg(long)]
    pub node_id: Option<String>,
    /// Index of this process among processes of its role.
    #[arg(long, default_value_t = 0)]
    pub index: u32,
    /// Largest frame accepted or sent, in bytes.
    #[arg(long, default_value_t = crate::frame::DEFAULT_MAX_FRAME_BYTES)]
    pub max_frame_bytes: usize,
    /// Heartbeat interval in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub heartbeat_ms: u64,
    /// Missed heartbeats after which a peer is dead.
    #[arg(long, default_value_t = 3)]
    pub heartbeat_misses: u32,
    /// Seconds in-flight requests get to finish after SIGTERM.
    #[arg(long, default_value_t = 10)]
    pub drain_grace_s: u64,
    /// Work this process takes at once (advertised in the handshake).
    #[arg(long, default_value_t = 4)]
    pub capacity: u32,
    /// The cluster CA certificate (PEM) TCP peers must be signed by; with --tls-cert and
    /// --tls-key, TCP is mutual TLS 1.3.
    #[arg(long, env = crate::tls::TLS_CA_ENV, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// This process's certificate (PEM), signed by the CA and naming its role
    /// (`antler cluster init` writes one per role).
    #[arg(long, env = crate::tls::TLS_CERT_ENV, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = crate::tls::TLS_KEY_ENV, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Chaos mode: accept `ChaosStop` control requests, which stop one of this process's
    /// actors as if it had crashed (for chaos tests; off by default).
    #[arg(long, env = crate::messages::CHAOS_ENV, value_parser = clap::builder::FalseyValueParser::new())]
    pub chaos: bool,
}

/// Why a host could not start.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("no cluster token: pass --token-file or set {TOKEN_ENV}")]
    NoToken,
    #[error("cannot read the token file {path}: {source}")]
    TokenFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: Address,
        source: std::io::Error,
    },
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    #[error("TLS needs --tls-ca, --tls-cert and --tls-key together; missing {0}")]
    TlsIncomplete(&'static str),
    #[error(transparent)]
    Tls(#[from] TlsError),
}

impl HostArgs {
    /// The token from the file, else from the environment.
    pub fn token(&self) -> Result<String, HostError> {
        if let Some(path) = &self.token_file {
            return runtime_dir::read_token_file(path).map_err(|source| HostError::TokenFile {
                path: path.clone(),
                source,
            });
        }
        match std::env::var(TOKEN_ENV) {
            Ok(t) if !t.trim().is_empty() => Ok(t.trim().to_string()),
            _ => Err(HostError::NoToken),
        }
    }

    /// The TLS files given, if any: all three or none.
    pub fn tls_files(&self) -> Result<Option<TlsFiles>, HostError> {
        match (&self.tls_ca, &self.tls_cert, &self.tls_key) {
            (None, None, None) => Ok(None),
            (Some(ca), Some(cert), Some(key)) => Ok(Some(TlsFiles {
                ca: ca.clone(),
                cert: cert.clone(),
                key: key.clone(),
            })),
            (ca, cert, _) => Err(HostError::TlsIncomplete(if ca.is_none() {
                "--tls-ca"
            } else if cert.is_none() {
                "--tls-cert"
            } else {
                "--tls-key"
            })),
        }
    }

    /// This process's TLS, loaded and checked for `role`, if TLS files are given.
    pub fn tls(&self, role: Role) -> Result<Option<Arc<ClusterTls>>, HostError> {
        match self.tls_files()? {
            Some(files) => Ok(Some(Arc::new(ClusterTls::load(&files, role)?))),
            None => Ok(None),
        }
    }

    pub fn connection_config(&self) -> ConnectionConfig {
        ConnectionConfig {
            max_frame_bytes: self.max_frame_bytes,
            heartbeat_interval: Duration::from_millis(self.heartbeat_ms.max(10)),
            heartbeat_misses: self.heartbeat_misses.max(1),
            ..ConnectionConfig::default()
        }
    }
}

/// What a host does beyond ping and health: its role's requests.
pub trait RoleHandler: Send + Sync + 'static {
    fn handle(
        &self,
        request: Request,
        call: Call,
        health: Health,
    ) -> BoxFuture<'static, Result<Reply, RemoteError>>;

    /// Chaos mode: stop `actor` as if it had crashed, when this process owns it. The
    /// default owns none: the reply says 0 were stopped.
    fn chaos_stop(&self, actor: ActorRef) -> BoxFuture<'static, Result<ControlReply, RemoteError>> {
        Box::pin(async move {
            Ok(ControlReply::ChaosStopped {
                stopped: 0,
                detail: format!("this process owns no {} actor", actor.kind()),
            })
        })
    }
}

/// The service of a host: answers control requests itself, hands the rest to its role.
pub struct HostService {
    role: Role,
    node_id: String,
    started: Instant,
    in_flight: Arc<InFlight>,
    handler: Arc<dyn RoleHandler>,
    /// Chaos mode: `ChaosStop` is handed to the role.
    chaos: bool,
    /// The highest lease epoch seen per run: a role's request below it is refused.
    fences: Arc<Fences>,
}

impl HostService {
    pub fn new(
        role: Role,
        node_id: String,
        in_flight: Arc<InFlight>,
        handler: Arc<dyn RoleHandler>,
    ) -> Self {
        Self {
            role,
            node_id,
            started: Instant::now(),
            in_flight,
            handler,
            chaos: false,
            fences: Arc::new(Fences::default()),
        }
    }

    /// Takes `ChaosStop` requests (`--chaos`).
    pub fn with_chaos(mut self, chaos: bool) -> Self {
        self.chaos = chaos;
        self
    }

    pub fn health(&self) -> Health {
        Health {
            role: self.role,
            node_id: self.node_id.clone(),
            pid: std::process::id(),
            uptime_ms: self.started.elapsed().as_millis() as u64,
            // This request itself is in flight; report the others.
            in_flight: self.in_flight.current().saturating_sub(1) as u32,
            accepting: !self.in_flight.is_draining(),
        }
    }
}

impl Service for HostService {
    fn call(&self, request: Request, call: Call) -> BoxFuture<'static, Result<Reply, RemoteError>> {
        match request {
            Request::Control(ControlRequest::Ping { payload }) => {
                Box::pin(async move { Ok(Reply::Control(ControlReply::Pong { payload })) })
            }
            Request::Control(ControlRequest::Health) => {
                let h = self.health();
                Box::pin(async move { Ok(Reply::Control(ControlReply::Health(h))) })
            }
            Request::Control(ControlRequest::ChaosStop { actor }) => {
                if !self.chaos {
                    return Box::pin(async { Err(RemoteError::Failed(CHAOS_OFF.to_owned())) });
                }
                tracing::warn!(role = %self.role, %actor, "chaos: stopping {actor} as if it crashed");
                let stop = self.handler.chaos_stop(actor);
                Box::pin(async move { Ok(Reply::Control(stop.await?)) })
            }
            other => match self.fences.admit(&call.trace) {
                Ok(()) => self.handler.handle(other, call, self.health()),
                Err(fenced) => {
                    tracing::warn!(role = %self.role, kind = other.kind(), "refused: {fenced}");
                    Box::pin(async move { Err(fenced) })
                }
            },
        }
    }

    /// A ping and a health check are answered on the I/O thread, with no hop.
    fn answers_now(&self, request: &Request) -> bool {
        matches!(
            request,
            Request::Control(ControlRequest::Ping { .. } | ControlRequest::Health)
        )
    }
}

/// Runs a host until SIGTERM or SIGINT, then drains. Call inside an actix `System`.
pub async fn serve(
    role: Role,
    args: HostArgs,
    handler: Arc<dyn RoleHandler>,
) -> Result<(), HostError> {
    let token = args.token()?;
    crate::sys::start_heap_trimmer();
    let node_id = args
        .node_id
        .clone()
        .unwrap_or_else(|| format!("{}-{}", role.as_str(), std::process::id()));
    let mut identity = Identity::new(role, node_id.clone(), Some(token)).with_tls(args.tls(role)?);
    identity.capacity = args.capacity;
    let identity_tls = identity.tls.is_some() && matches!(args.listen, Address::Tcp(_));
    let in_flight = Arc::new(InFlight::default());
    let service = Arc::new(
        HostService::new(role, node_id.clone(), in_flight.clone(), handler).with_chaos(args.chaos),
    );
    let server = Server::bind(
        &args.listen,
        identity,
        args.connection_config(),
        service,
        in_flight,
    )
    .await
    .map_err(|source| HostError::Listen {
        address: args.listen.clone(),
        source,
    })?;
    tracing::info!(role = %role, node = %node_id, address = %server.address(), tls = identity_tls, chaos = args.chaos, "listening");
    wait_for_shutdown_signal()
        .await
        .map_err(HostError::Signals)?;
    tracing::info!(role = %role, in_flight = server.in_flight(), "draining");
    let left = server.drain(Duration::from_secs(args.drain_grace_s)).await;
    if left > 0 {
        tracing::warn!(
            left,
            "grace period over; abandoning requests still in flight"
        );
    }
    tracing::info!(role = %role, "stopped");
    Ok(())
}

/// Resolves on the first SIGTERM or SIGINT.
pub async fn wait_for_shutdown_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

/// Log targets that carry OAuth secrets below INFO: rmcp's auth module logs the
/// authorization code and token responses at DEBUG, and `oauth2` is the client under it.
pub const SECRET_LOG_TARGETS: &[&str] = &["rmcp::transport::auth", "oauth2"];

/// A global filter that drops every event and span of [`SECRET_LOG_TARGETS`] below INFO,
/// whatever `RUST_LOG` asks for (a more specific directive cannot lift it): no code, token,
/// client secret or PKCE verifier reaches a log. Every process's subscriber has it.
pub fn secret_cap() -> tracing_subscriber::filter::FilterFn<fn(&tracing::Metadata<'_>) -> bool> {
    tracing_subscriber::filter::filter_fn(may_log)
}

/// Whether an event or span of `meta` may be logged under [`secret_cap`].
fn may_log(meta: &tracing::Metadata<'_>) -> bool {
    *meta.level() <= tracing::Level::INFO
        || !SECRET_LOG_TARGETS.iter().any(|t| {
            meta.target()
                .strip_prefix(t)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
        })
}

/// The most a process's exit waits for its last spans to be exported (a dead or slow
/// collector costs at most this).
pub const TELEMETRY_FLUSH_DEADLINE: Duration = Duration::from_secs(3);

/// Exports this process's spans not sent yet, within [`TELEMETRY_FLUSH_DEADLINE`]: every
/// process calls it on its way out.
pub fn finish_telemetry() {
    if !crate::telemetry::shutdown(TELEMETRY_FLUSH_DEADLINE) {
        tracing::warn!(
            deadline_s = TELEMETRY_FLUSH_DEADLINE.as_secs(),
            "the last spans were not exported in time"
        );
    }
}

/// Starts exporting this host's spans as `{service}-{role}` when an OTLP endpoint is
/// configured (`antler.telemetry` of `section`, else the environment the lead gave it);
/// nothing otherwise (docs/telemetry.md).
pub fn init_telemetry(role: &str, section: Option<&crate::config::TelemetrySection>) {
    let settings = crate::telemetry::Settings::resolve(section.unwrap_or(&Default::default()));
    if let Err(e) = crate::telemetry::init(settings.as_ref(), Some(role)) {
        tracing::warn!("traces are not exported: {e}");
    }
}

/// The variable that chooses the log format: `json` writes one JSON object a line
/// (`timestamp`, `level`, `fields.message`, the other fields, the spans), else text. The
/// hosts a lead starts inherit it.
pub const LOG_FORMAT_ENV: &str = "ANTLER_LOG_FORMAT";

/// Whether logs are JSON lines ([`LOG_FORMAT_ENV`]).
pub fn json_logs() -> bool {
    std::env::var(LOG_FORMAT_ENV).is_ok_and(|v| v.trim().eq_ignore_ascii_case("json"))
}

/// A log layer writing to `writer`: JSON lines when [`json_logs`], else text (colours when
/// `ansi`); filtered by `filter`.
pub fn log_layer<S, W>(
    writer: W,
    ansi: bool,
    filter: tracing_subscriber::EnvFilter,
) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    format_layer(json_logs(), writer, ansi, filter)
}

/// [`log_layer`] with the format given.
fn format_layer<S, W>(
    json: bool,
    writer: W,
    ansi: bool,
    filter: tracing_subscriber::EnvFilter,
) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::Layer;
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_target(false);
    if json {
        layer.json().with_filter(filter).boxed()
    } else {
        layer.with_ansi(ansi).with_filter(filter).boxed()
    }
}

/// The variable that carries config.yaml's `log_level` from the lead to the hosts it
/// starts (any DeerFlow level name; [`log_level`]).
pub const LOG_LEVEL_ENV: &str = "ANTLER_LOG_LEVEL";

/// The target prefix of every Antler crate (`antler`, `antler_lead`, `antler_engine`,
/// `antler_protocol`, the hosts'): what `log_level` sets.
const OWN_TARGETS: &str = "antler";

/// The `log_level` this process logs at: [`LOG_LEVEL_ENV`], else DeerFlow's `info`.
pub fn log_level() -> LogLevel {
    std::env::var(LOG_LEVEL_ENV)
        .ok()
        .and_then(|v| LogLevel::parse(&v))
        .unwrap_or_default()
}

/// The filter of a log: `RUST_LOG` when it is set (it wins), else `base` with Antler's
/// own lines at `level` (other libraries keep `base`, as DeerFlow's `log_level` sets only
/// its own loggers).
pub fn log_filter(base: &str, level: LogLevel) -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| level_filter(base, level))
}

/// `base` with Antler's own lines at `level`, whatever `RUST_LOG` says (the lead's
/// `logs/antler.log`).
pub fn level_filter(base: &str, level: LogLevel) -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::new(format!("{base},{OWN_TARGETS}={}", level.directive()))
}

/// Whether `name` is a variable that configures Antler's own processes (`OTEL_*` of
/// telemetry, `RUST_LOG`, [`LOG_FORMAT_ENV`], [`LOG_LEVEL_ENV`]): a command or server a
/// host starts never inherits one; only its own configured environment can set it.
pub fn is_own_variable(name: &str) -> bool {
    name.starts_with("OTEL_") || [LOG_FORMAT_ENV, LOG_LEVEL_ENV, "RUST_LOG"].contains(&name)
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`, Antler's own lines at
/// [`log_level`]) under [`secret_cap`]; colours only on a terminal, so a log file reads
/// as plain text; JSON lines when [`json_logs`].
pub fn init_tracing() {
    use std::io::IsTerminal;
    use tracing_subscriber::{layer::SubscriberExt, util::SubscriberInitExt};
    let filter = log_filter("info", log_level());
    let _ = tracing_subscriber::registry()
        .with(secret_cap())
        .with(log_layer(
            std::io::stderr,
            std::io::stderr().is_terminal(),
            filter,
        ))
        .try_init();
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::{layer::SubscriberExt, EnvFilter, Layer};

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn json_logs_are_one_json_object_a_line() {
        let out = Buffer::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::registry().with(super::format_layer(
            true,
            move || writer.clone(),
            false,
            EnvFilter::new("info"),
        ));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(run = "r-1", "task started");
            tracing::warn!("second");
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["level"], "INFO");
        assert_eq!(lines[0]["fields"]["message"], "task started");
        assert_eq!(lines[0]["fields"]["run"], "r-1");
        assert!(lines[0]["timestamp"].is_string());
    }

    #[test]
    fn log_level_sets_antlers_own_lines_and_leaves_the_libraries_at_the_base() {
        use super::LogLevel;
        let logged = |level: LogLevel| {
            let out = Buffer::default();
            let writer = out.clone();
            let subscriber = tracing_subscriber::registry().with(
                tracing_subscriber::fmt::layer()
                    .with_writer(move || writer.clone())
                    .with_filter(super::level_filter("info", level)),
            );
            tracing::subscriber::with_default(subscriber, || {
                tracing::debug!(target: "antler_lead::run", "own-debug");
                tracing::info!(target: "antler_protocol", "own-info");
                tracing::error!(target: "antler", "own-error");
                tracing::debug!(target: "hyper", "lib-debug");
                tracing::info!(target: "rmcp", "lib-info");
            });
            let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
            [
                "own-debug",
                "own-info",
                "own-error",
                "lib-debug",
                "lib-info",
            ]
            .into_iter()
            .filter(|line| text.contains(line))
            .collect::<Vec<_>>()
        };
        assert_eq!(
            logged(LogLevel::Debug),
            ["own-debug", "own-info", "own-error", "lib-info"]
        );
        assert_eq!(
            logged(LogLevel::Info),
            ["own-info", "own-error", "lib-info"]
        );
        assert_eq!(logged(LogLevel::Error), ["own-error", "lib-info"]);
    }

    #[test]
    fn the_processes_own_variables_are_told_apart() {
        for own in [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_BSP_SCHEDULE_DELAY",
            "ANTLER_LOG_FORMAT",
            "ANTLER_LOG_LEVEL",
            "RUST_LOG",
        ] {
            assert!(super::is_own_variable(own), "{own}");
        }
        for other in [
            "PATH",
            "HOME",
            "OPENAI_API_KEY",
            "ANTLER_CONFIG",
            "MY_OTEL_X",
        ] {
            assert!(!super::is_own_variable(other), "{other}");
        }
    }

    #[test]
    fn the_oauth_targets_are_capped_at_info_whatever_rust_log_asks() {
        let out = Buffer::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::registry()
            .with(super::secret_cap())
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(move || writer.clone())
                    .with_filter(EnvFilter::new("trace,rmcp::transport::auth=trace")),
            );
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(target: "rmcp::transport::auth", "code secret-code-1");
            tracing::trace!(target: "rmcp::transport::auth::metadata_resolver", "secret-2");
            tracing::debug!(target: "oauth2", "secret-3");
            tracing::info!(target: "rmcp::transport::auth", "Refreshed access token.");
            tracing::debug!(target: "rmcp::transport::authority", "kept-1");
            tracing::debug!(target: "antler_mcp_host", "kept-2");
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        for secret in ["secret-code-1", "secret-2", "secret-3"] {
            assert!(!text.contains(secret), "{text}");
        }
        for kept in ["Refreshed access token.", "kept-1", "kept-2"] {
            assert!(text.contains(kept), "{text}");
        }
    }
}
