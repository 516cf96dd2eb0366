//! The cluster: the lead's control socket plus its hosts. In local mode (the default) the
//! hosts are supervised children, all on Unix sockets in one runtime directory. In
//! cluster mode (`antler.cluster`) the hosts run elsewhere (Kubernetes pods): the lead
//! dials them over mutual TLS, follows the replicas its names resolve to, and starts no
//! process. `antler up` runs one in the foreground; any other command that needs the
//! hosts attaches to a running one or starts an ephemeral one.
//!
//! The room holds what runs the cluster: `supervisor` (the `Supervisor` actor: the local
//! children and the links to every host), `discovery` (the replicas a cluster-mode name
//! resolves to), `control` (the lead's control socket), `scaling` (the number of workers
//! of a running cluster), `mcp_credentials` (the relay of the mcp-host replicas' OAuth
//! credentials) and `chaos_actors` (chaos mode's actor faults).

pub(crate) mod chaos_actors;
pub(crate) mod control;
pub(crate) mod discovery;
pub(crate) mod mcp_credentials;
pub(crate) mod scaling;
pub(crate) mod supervisor;

pub use supervisor::{ChildSpec, GetStatus, RestartPolicy, StopAll, Supervisor};

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use actix::prelude::*;
use antler_protocol::{
    handshake::{Identity, Role},
    link::dial,
    runtime_dir::{self, RuntimeDir},
    server::Server,
    tls::{ClusterTls, TlsFiles},
    transport::Address,
    Connection, ConnectionConfig, InFlight,
};

use antler_protocol::config;
use control::LeadService;

/// Everything needed to start a local cluster.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    pub runtime_dir: PathBuf,
    pub workers: u32,
    /// Task slots of each worker (`antler.worker_slots`).
    pub worker_slots: u32,
    /// Where the host binaries are (`antler-mcp-host`, ...).
    pub bin_dir: PathBuf,
    pub connection: ConnectionConfig,
    pub restart: RestartPolicy,
    pub drain_grace: Duration,
    /// config.yaml (absolute), read by runs; `None`: defaults.
    pub config: Option<PathBuf>,
    /// The runs' checkpoint store (`runs.sqlite` of the cluster's runtime directory; an
    /// ephemeral cluster keeps its parent's, so its runs can be resumed later).
    pub store_path: PathBuf,
    /// The PostgreSQL store that replaces `store_path` (`ANTLER_STORE_DSN`, else
    /// `antler.store.postgres.dsn`): several leads share it.
    pub store_dsn: Option<crate::runs::store::Dsn>,
    /// A cluster started for one command: it does not resume the store's unfinished runs.
    pub ephemeral: bool,
    /// Who may use the HTTP gateway (`antler.gateway`).
    pub gateway: antler_protocol::config::GatewaySection,
    /// The lead's TLS files (`antler.tls`), for its TCP connections; the local cluster's
    /// Unix sockets carry no TLS.
    pub tls: Option<TlsFiles>,
    /// Cluster mode: the hosts to dial instead of starting them.
    pub cluster: Option<antler_protocol::config::ClusterHosts>,
    /// The cluster token (`antler.cluster_token`, else `ANTLER_CLUSTER_TOKEN`); cluster
    /// mode needs it, since the hosts were given it by their orchestrator.
    pub cluster_token: Option<String>,
    /// Chaos mode (`antler up --chaos`): every process takes `ChaosStop` requests. In
    /// cluster mode only when every address is loopback.
    pub chaos: bool,
    /// Run leases shared with other leads (`antler.ha`; off without a DSN).
    pub ha: antler_protocol::config::HaSection,
}

impl ClusterSpec {
    /// Where the runs store lives: the PostgreSQL DSN if one is given, else the SQLite file.
    pub fn store_location(&self) -> crate::runs::store::StoreLocation {
        match &self.store_dsn {
            Some(dsn) => crate::runs::store::StoreLocation::Postgres(dsn.clone()),
            None => crate::runs::store::StoreLocation::Sqlite(self.store_path.clone()),
        }
    }
}

/// Why a cluster could not start or be reached.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("runtime directory {path}: {source}")]
    RuntimeDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("a cluster is already running in {0} (use `antler status`, or stop it first)")]
    AlreadyRunning(PathBuf),
    #[error("host binary {0} not found: build the workspace (cargo build --workspace) or set ANTLER_BIN_DIR")]
    MissingBinary(PathBuf),
    #[error("cannot listen on the control socket {path}: {source}")]
    Listen {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no cluster is running in {0}")]
    NotRunning(PathBuf),
    #[error("cannot reach the lead: {0}")]
    Unreachable(String),
    #[error(transparent)]
    Store(#[from] crate::runs::store::CheckpointError),
    /// The front door (the HTTP gateway) could not start.
    #[error(transparent)]
    FrontDoor(#[from] FrontDoorError),
    #[error("antler.tls: {0}")]
    Tls(#[from] antler_protocol::tls::TlsError),
    #[error(
        "cluster mode needs the hosts' cluster token: set antler.cluster_token or {}",
        antler_protocol::runtime_dir::TOKEN_ENV
    )]
    NoClusterToken,
    #[error("--chaos is refused in cluster mode off loopback ({0}): chaos mode stops actors on purpose and is for test clusters only")]
    ChaosOffLoopback(String),
    #[error("in cluster mode the orchestrator starts the workers (for Kubernetes: kubectl scale deployment/antler-subagent --replicas=N); the lead finds them through antler.cluster.workers")]
    ScaledElsewhere,
    /// `antler.ha.leases_dsn` is set and its database cannot be used.
    #[error("run leases (antler.ha.leases_dsn): {0}")]
    Leases(#[from] crate::ha::HaError),
}

/// The lock file in the runtime directory a running lead holds (`flock`, exclusive).
pub const LOCK_FILE: &str = "lead.lock";

/// Takes the runtime directory's lock without waiting: `None` when a lead holds it. The
/// lock lasts as long as the returned file is open (the kernel drops it when the holder
/// dies, however it dies).
pub fn try_lock(runtime: &RuntimeDir) -> std::io::Result<Option<std::fs::File>> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(runtime.root().join(LOCK_FILE))?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(Some(file));
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(None)
    } else {
        Err(e)
    }
}

/// The directory holding the host binaries: `ANTLER_BIN_DIR`, else beside this executable.
pub fn default_bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("ANTLER_BIN_DIR") {
        return PathBuf::from(d);
    }
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."))
}

fn binary_for(role: Role) -> &'static str {
    match role {
        Role::McpHost => "antler-mcp-host",
        Role::SandboxHost => "antler-sandbox-host",
        Role::Subagent => "antler-subagent",
        Role::Lead | Role::Cli => "antler",
    }
}

/// How this cluster starts a child: the same binary, socket, log and arguments at start
/// and when `antler workers N` adds a worker later.
#[derive(Debug, Clone)]
pub struct ChildPlan {
    pub runtime: RuntimeDir,
    pub bin_dir: PathBuf,
    pub connection: ConnectionConfig,
    pub worker_slots: u32,
    /// SIGTERM to SIGKILL when a child is stopped.
    pub drain_grace: Duration,
    pub extensions: PathBuf,
    /// mcp-host's data directory (its OAuth token store): beside the run store, so an
    /// ephemeral cluster uses its parent's tokens.
    pub mcp_data_dir: Option<PathBuf>,
    /// Cluster mode: this lead starts no process.
    pub cluster_mode: bool,
    /// Chaos mode: the children get `--chaos`.
    pub chaos: bool,
}

impl ChildPlan {
    /// The spec of child `index` of `role`.
    pub fn child(&self, role: Role, index: u32) -> Result<ChildSpec, ClusterError> {
        if self.cluster_mode {
            return Err(ClusterError::ScaledElsewhere);
        }
        let binary = self.bin_dir.join(binary_for(role));
        if !binary.exists() {
            return Err(ClusterError::MissingBinary(binary));
        }
        let mut args = vec![
            "--heartbeat-ms".into(),
            self.connection.heartbeat_interval.as_millis().to_string(),
            "--heartbeat-misses".into(),
            self.connection.heartbeat_misses.to_string(),
            "--max-frame-bytes".into(),
            self.connection.max_frame_bytes.to_string(),
        ];
        if self.chaos {
            args.push("--chaos".into());
        }
        match role {
            Role::McpHost => {
                args.push("--extensions".into());
                args.push(self.extensions.display().to_string());
                if let Some(dir) = &self.mcp_data_dir {
                    args.push("--data-dir".into());
                    args.push(dir.display().to_string());
                }
            }
            Role::SandboxHost => {
                // For `skills.{name}.enabled`: `ls` of a disabled skill is refused there.
                args.push("--extensions".into());
                args.push(self.extensions.display().to_string());
            }
            Role::Subagent => args.extend(worker_args(&self.runtime, self.worker_slots)),
            _ => {}
        }
        Ok(ChildSpec {
            role,
            index,
            binary,
            socket: self.runtime.socket(role, index),
            log: self.runtime.log(role, index),
            token_file: self.runtime.token_path(),
            survives_lead: role == Role::Subagent,
            remote: None,
            args,
        })
    }
}

/// A running cluster owned by this process.
pub struct RunningCluster {
    pub runtime: RuntimeDir,
    pub supervisor: Addr<Supervisor>,
    /// The lead's run side (`antler mcp serve` serves an ephemeral cluster's runs in
    /// process).
    pub runs: Runs,
    control: Server,
    drain_grace: Duration,
    /// The front door (the HTTP gateway), when it could listen.
    front_door: Option<Box<dyn FrontDoor>>,
    /// Cluster mode's replica discovery, running as long as the cluster.
    _discovery: Option<Addr<crate::cluster::discovery::Discovery>>,
    /// The runtime directory's lock, held until the cluster has stopped.
    _lock: std::fs::File,
}

impl RunningCluster {
    /// Starts the cluster: runtime directory, token, control socket, children; no front
    /// door. Call inside an actix `System`.
    pub async fn start(spec: ClusterSpec) -> Result<RunningCluster, ClusterError> {
        RunningCluster::start_with(spec, None).await
    }

    /// [`RunningCluster::start`], with `front_door` started once the runs can be served
    /// and before the control socket listens (an ephemeral cluster starts none).
    pub async fn start_with(
        spec: ClusterSpec,
        front_door: Option<StartFrontDoor>,
    ) -> Result<RunningCluster, ClusterError> {
        antler_protocol::sys::start_heap_trimmer();
        let (runtime, lock) = claim_runtime_dir(&spec).await?;
        let lead_sock = runtime.socket(Role::Lead, 0);
        let extensions = extensions_path();
        let plan = ChildPlan {
            runtime: runtime.clone(),
            bin_dir: spec.bin_dir.clone(),
            connection: spec.connection.clone(),
            worker_slots: spec.worker_slots,
            drain_grace: spec.drain_grace,
            extensions: extensions.clone(),
            mcp_data_dir: spec.store_path.parent().map(std::path::Path::to_path_buf),
            cluster_mode: spec.cluster.is_some(),
            chaos: spec.chaos,
        };
        check_chaos(&spec).await?;
        // The runs store first: a PostgreSQL that does not answer stops the lead before
        // any child starts. Opened on a blocking thread (the connect waits on the network).
        let location = spec.store_location();
        let store = tokio::task::spawn_blocking(move || {
            crate::runs::store::CheckpointStore::open_at(&location)
        })
        .await
        .map_err(|_| crate::runs::store::CheckpointError::ThreadGone)??;
        let ownership = open_ownership(&spec).await?;
        let children = children(&spec, &plan)?;
        let token = cluster_token(&spec, &runtime)?;
        let tls = match &spec.tls {
            Some(files) => Some(Arc::new(ClusterTls::load(files, Role::Lead)?)),
            None => None,
        };
        let identity = Identity::new(Role::Lead, "lead", Some(token)).with_tls(tls);
        let supervisor = Supervisor::new(
            children,
            identity.clone(),
            spec.connection.clone(),
            spec.restart.clone(),
        );
        let links = supervisor.link_table();
        let supervisor = supervisor.start();
        let discovery = start_discovery(&spec, &supervisor);
        let dispatcher =
            crate::subagents::dispatcher::SubagentDispatcher::new(supervisor.clone()).start();
        let runs = start_runs(
            &spec,
            store,
            &supervisor,
            &dispatcher,
            extensions.clone(),
            ownership,
        )?;
        // An ephemeral cluster serves one command: it has no HTTP gateway.
        let front_door = match front_door.filter(|_| !spec.ephemeral) {
            None => None,
            Some(start) => {
                let parts = FrontDoorParts {
                    runtime_root: runtime.root(),
                    extensions,
                    supervisor: supervisor.clone(),
                    runs: runs.clone(),
                    spec: &spec,
                };
                start_front_door(start, parts).await?
            }
        };
        let in_flight = Arc::new(InFlight::default());
        let service = Arc::new(LeadService::new(
            supervisor.clone(),
            links,
            runs.manager.clone(),
            lead_sock.clone(),
            in_flight.clone(),
            crate::cluster::scaling::WorkerScaling::new(
                plan,
                supervisor.clone(),
                dispatcher.clone(),
            ),
            crate::cluster::chaos_actors::ChaosActors::new(
                spec.chaos,
                supervisor.clone(),
                runs.manager.clone(),
                runs.catalog.clone(),
            ),
        ));
        let control = Server::bind(
            &Address::Unix(lead_sock.clone()),
            identity,
            spec.connection.clone(),
            service,
            in_flight,
        )
        .await
        .map_err(|source| ClusterError::Listen {
            path: lead_sock.clone(),
            source,
        })?;
        let _ = runtime_dir::write_private(
            &runtime.pid_path(),
            std::process::id().to_string().as_bytes(),
        );
        tracing::info!(runtime_dir = %runtime.root().display(), workers = spec.workers, "cluster started");
        Ok(RunningCluster {
            runtime,
            supervisor,
            runs,
            control,
            drain_grace: spec.drain_grace,
            front_door,
            _discovery: discovery,
            _lock: lock,
        })
    }

    /// Stops accepting on the control socket, stops every child, removes the pid file.
    pub async fn stop(self) {
        let _ = self.control.drain(Duration::from_millis(500)).await;
        if let Some(door) = self.front_door {
            door.stop().await;
        }
        let _ = self
            .supervisor
            .send(StopAll {
                grace: self.drain_grace,
            })
            .await;
        let _ = std::fs::remove_file(self.runtime.pid_path());
        let _ = std::fs::remove_file(self.runtime.socket(Role::Lead, 0));
    }
}

/// What the running cluster starts beside its control socket, and stops first: the HTTP
/// gateway, given by the caller (`antler up`), so the cluster never depends on it.
pub trait FrontDoor {
    /// Stops serving (requests in flight finish).
    fn stop(self: Box<Self>) -> futures::future::LocalBoxFuture<'static, ()>;
}

/// Why a front door could not start (it fails the cluster's start).
pub type FrontDoorError = Box<dyn std::error::Error + Send + Sync>;

/// What a front door is started with.
pub struct FrontDoorParts<'a> {
    pub runtime_root: &'a Path,
    /// The cluster's extensions file.
    pub extensions: PathBuf,
    pub supervisor: Addr<Supervisor>,
    pub runs: Runs,
    pub spec: &'a ClusterSpec,
}

/// Starts a front door (`Ok(None)`: it is off).
pub type StartFrontDoor =
    Box<dyn FnOnce(FrontDoorParts<'_>) -> Result<Option<Box<dyn FrontDoor>>, FrontDoorError>>;

/// The extensions file of this cluster: the one found by DeerFlow's rules (the env
/// variables, then the working directory), else `extensions_config.json` in the working
/// directory (where a first `PUT` creates it). Absolute, so children agree on it.
pub fn extensions_path() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let found = match config::resolve_extensions_path(None, &cwd, &config::process_env) {
        Ok(Some(p)) => p,
        Ok(None) => cwd.join(config::EXTENSIONS_FILE_NAMES[0]),
        // A variable naming a file that does not exist yet: that is the file.
        Err(_) => [
            config::ANTLER_EXTENSIONS_ENV,
            config::DEERFLOW_EXTENSIONS_ENV,
        ]
        .iter()
        .find_map(|v| std::env::var_os(v).filter(|s| !s.is_empty()))
        .map(PathBuf::from)
        .unwrap_or_else(|| cwd.join(config::EXTENSIONS_FILE_NAMES[0])),
    };
    if found.is_absolute() {
        found
    } else {
        cwd.join(found)
    }
}

/// The lead's run side: the manager and the metrics it feeds.
#[derive(Clone)]
pub struct Runs {
    pub manager: Addr<crate::runs::manager::RunManager>,
    pub metrics: Arc<crate::runs::metrics::Metrics>,
    /// The workers' slots, for the gateway's cluster view.
    pub dispatcher: Addr<crate::subagents::dispatcher::SubagentDispatcher>,
    /// The catalog actor the runs' catalogs come from.
    pub catalog: Addr<antler_engine::catalog::CatalogActor>,
    /// The runs store (the gateway's threads are read and written through its thread).
    pub store: crate::runs::store::CheckpointStore,
    /// What runs are prepared with (the gateway's uploads reach the thread directories,
    /// the config and sandbox-host through it; the memory routes the store and config).
    pub env: Arc<crate::runs::prepare::RunEnv>,
    /// This lead's run leases (`None`: one lead): the gateway forwards a write to a run
    /// another lead holds to that lead's gateway.
    pub ownership: Option<Arc<crate::ha::Ownership>>,
}

/// Opens the checkpoint store and starts the catalog actor and the run manager (which
/// resumes unfinished runs unless the cluster is ephemeral).
/// What a worker is told beyond the common arguments: its slots, where the hosts are,
/// and a drain grace long enough for its tasks (a removed worker finishes them first).
pub fn worker_args(runtime: &RuntimeDir, slots: u32) -> Vec<String> {
    vec![
        "--capacity".into(),
        slots.max(1).to_string(),
        "--sandbox-host".into(),
        format!("unix:{}", runtime.socket(Role::SandboxHost, 0).display()),
        "--mcp-host".into(),
        format!("unix:{}", runtime.socket(Role::McpHost, 0).display()),
        "--drain-grace-s".into(),
        "1800".into(),
    ]
}

/// The runtime directory, opened and locked for this lead: `AlreadyRunning` when another
/// lead holds its lock or answers on its control socket.
async fn claim_runtime_dir(
    spec: &ClusterSpec,
) -> Result<(RuntimeDir, std::fs::File), ClusterError> {
    let runtime =
        RuntimeDir::open(&spec.runtime_dir).map_err(|source| ClusterError::RuntimeDir {
            path: spec.runtime_dir.clone(),
            source,
        })?;
    let lock = try_lock(&runtime)
        .map_err(|source| ClusterError::RuntimeDir {
            path: runtime.root().join(LOCK_FILE),
            source,
        })?
        .ok_or_else(|| ClusterError::AlreadyRunning(runtime.root().to_path_buf()))?;
    if let Ok(token) = runtime.read_token() {
        let probe = Identity::new(Role::Cli, "probe", Some(token));
        let lead_sock = runtime.socket(Role::Lead, 0);
        if dial(
            &Address::Unix(lead_sock),
            &probe,
            spec.connection.clone(),
            None,
        )
        .await
        .is_ok()
        {
            return Err(ClusterError::AlreadyRunning(runtime.root().to_path_buf()));
        }
    }
    Ok((runtime, lock))
}

/// Starts the front door; when it cannot start, the children already started are stopped
/// before the error is returned.
async fn start_front_door(
    start: StartFrontDoor,
    parts: FrontDoorParts<'_>,
) -> Result<Option<Box<dyn FrontDoor>>, ClusterError> {
    let (supervisor, grace) = (parts.supervisor.clone(), parts.spec.drain_grace);
    match start(parts) {
        Ok(front_door) => Ok(front_door),
        Err(e) => {
            let _ = supervisor.send(StopAll { grace }).await;
            Err(e.into())
        }
    }
}

/// Chaos mode: refused in cluster mode with a host off loopback; said in the log.
async fn check_chaos(spec: &ClusterSpec) -> Result<(), ClusterError> {
    if let (true, Some(hosts)) = (spec.chaos, &spec.cluster) {
        let all: Vec<Address> = hosts
            .sandbox_hosts
            .iter()
            .chain(&hosts.mcp_hosts)
            .chain(&hosts.workers)
            .cloned()
            .collect();
        crate::cluster::chaos_actors::check_loopback(&all)
            .await
            .map_err(ClusterError::ChaosOffLoopback)?;
    }
    if spec.chaos {
        tracing::warn!("chaos mode: actors may be stopped on purpose (antler chaos stop)");
    }
    Ok(())
}

/// The children the supervisor starts (one mcp-host, one sandbox-host and the workers),
/// or in cluster mode the named sandbox-host replicas (the others are discovered).
fn children(spec: &ClusterSpec, plan: &ChildPlan) -> Result<Vec<ChildSpec>, ClusterError> {
    match &spec.cluster {
        None => {
            let mut roles = vec![(Role::McpHost, 0), (Role::SandboxHost, 0)];
            roles.extend((0..spec.workers).map(|i| (Role::Subagent, i)));
            roles
                .into_iter()
                .map(|(role, index)| plan.child(role, index))
                .collect()
        }
        Some(hosts) => Ok(hosts
            .sandbox_hosts
            .iter()
            .enumerate()
            .map(|(i, a)| ChildSpec::remote(Role::SandboxHost, i as u32, a.clone()))
            .collect()),
    }
}

/// The lead's token: in cluster mode the orchestrator's (written to the runtime directory
/// for local commands), else the previous lead's, or a new one.
fn cluster_token(spec: &ClusterSpec, runtime: &RuntimeDir) -> Result<String, ClusterError> {
    match (&spec.cluster, &spec.cluster_token) {
        // The hosts know the token their orchestrator gave them; local commands
        // (`antler status`) read it from the runtime directory.
        (Some(_), Some(token)) => {
            runtime_dir::write_private(&runtime.token_path(), token.as_bytes())
                .map(|()| token.clone())
        }
        (Some(_), None) => return Err(ClusterError::NoClusterToken),
        // The token of the lead before this one is kept: workers it left running
        // are adopted, and they know only that token.
        (None, _) => runtime.read_token().or_else(|_| runtime.generate_token()),
    }
    .map_err(|source| ClusterError::RuntimeDir {
        path: runtime.token_path(),
        source,
    })
}

/// Cluster mode's discovery of the mcp-host and worker replicas, running as long as the
/// cluster.
fn start_discovery(
    spec: &ClusterSpec,
    supervisor: &Addr<Supervisor>,
) -> Option<Addr<crate::cluster::discovery::Discovery>> {
    spec.cluster.as_ref().map(|hosts| {
        let mut entries: Vec<(Role, Address)> = Vec::new();
        entries.extend(hosts.mcp_hosts.iter().map(|a| (Role::McpHost, a.clone())));
        entries.extend(hosts.workers.iter().map(|a| (Role::Subagent, a.clone())));
        crate::cluster::discovery::Discovery::new(
            supervisor.clone(),
            entries,
            hosts.resolve_interval,
        )
        .start()
    })
}

/// This lead's run leases, when `antler.ha` names a database (else `None`: one lead).
async fn open_ownership(
    spec: &ClusterSpec,
) -> Result<Option<Arc<crate::ha::Ownership>>, ClusterError> {
    // Leases live beside the runs when the store is on PostgreSQL, unless named apart.
    let Some(dsn) = spec
        .ha
        .leases_dsn()
        .or_else(|| spec.store_dsn.as_ref().map(|d| d.expose().to_owned()))
    else {
        return Ok(None);
    };
    let ownership =
        crate::ha::Ownership::open(&dsn, spec.ha.lease_ttl(), spec.ha.lease_retention()).await?;
    tracing::info!(lead = %ownership.lead(), "run leases on");
    Ok(Some(ownership))
}

fn start_runs(
    spec: &ClusterSpec,
    store: crate::runs::store::CheckpointStore,
    supervisor: &Addr<Supervisor>,
    dispatcher: &Addr<crate::subagents::dispatcher::SubagentDispatcher>,
    extensions: PathBuf,
    ownership: Option<Arc<crate::ha::Ownership>>,
) -> Result<Runs, ClusterError> {
    use crate::runs::{hosts::LinkHosts, manager::RunManager, metrics::Metrics, prepare::RunEnv};
    use antler_engine::catalog::{CatalogActor, Sources};
    actix::spawn(crate::runs::store::probe_writes(store.clone()));
    actix::spawn(crate::cluster::mcp_credentials::relay(
        supervisor.clone(),
        store.clone(),
    ));
    let catalog = CatalogActor::new(Sources {
        config: Arc::default(),
        extensions: None,
        mcp: Default::default(),
    })
    .supervised();
    let mut env = RunEnv::new(
        store.clone(),
        Arc::new(LinkHosts::new(supervisor.clone())),
        catalog.clone(),
        spec.config.clone(),
        extensions,
    );
    env.dispatcher = Some(dispatcher.clone());
    if spec.cluster.is_some() {
        // The lead has no share of sandbox-host's volumes: the thread's files are reached
        // through the replica that owns the thread.
        env.thread_files_through_sandbox_host();
    }
    let env = Arc::new(env);
    if !spec.ephemeral {
        // A long-lived lead learns; an ephemeral one only queues (the store keeps it).
        let worker = crate::memory::worker::MemoryWorker::new(Arc::clone(&env)).start();
        let _ = env.memory_worker.set(worker);
    }
    let metrics = Arc::new(Metrics::default());
    let manager = RunManager::new(Arc::clone(&env), metrics.clone(), !spec.ephemeral)
        .with_ownership(ownership.clone())
        .start();
    Ok(Runs {
        ownership,
        env,
        manager,
        metrics,
        dispatcher: dispatcher.clone(),
        catalog,
        store,
    })
}

/// A connection to the lead of a cluster, attached or ephemeral.
pub struct LeadClient {
    pub connection: Connection,
    /// Set when this command started the cluster itself.
    pub ephemeral: Option<RunningCluster>,
}

/// Connects to the lead of the cluster running in `runtime_dir`.
pub async fn attach(
    runtime_dir: &Path,
    config: ConnectionConfig,
) -> Result<Connection, ClusterError> {
    let runtime = RuntimeDir::open(runtime_dir).map_err(|source| ClusterError::RuntimeDir {
        path: runtime_dir.to_path_buf(),
        source,
    })?;
    let lead_sock = runtime.socket(Role::Lead, 0);
    if !lead_sock.exists() {
        return Err(ClusterError::NotRunning(runtime_dir.to_path_buf()));
    }
    let token = runtime
        .read_token()
        .map_err(|_| ClusterError::NotRunning(runtime_dir.to_path_buf()))?;
    let me = Identity::new(
        Role::Cli,
        format!("cli-{}", std::process::id()),
        Some(token),
    );
    dial(&Address::Unix(lead_sock), &me, config, None)
        .await
        .map_err(|e| match e {
            antler_protocol::link::DialError::Unreachable { .. } => {
                ClusterError::NotRunning(runtime_dir.to_path_buf())
            }
            other => ClusterError::Unreachable(other.to_string()),
        })
}

/// Attaches to the running cluster in `spec.runtime_dir`, or starts an ephemeral one in a
/// private directory beside it and waits (up to `ready_within`) for its children.
pub async fn attach_or_start(
    spec: ClusterSpec,
    ready_within: Duration,
) -> Result<LeadClient, ClusterError> {
    match attach(&spec.runtime_dir, spec.connection.clone()).await {
        Ok(connection) => Ok(LeadClient {
            connection,
            ephemeral: None,
        }),
        Err(ClusterError::NotRunning(_)) => {
            let mut eph = spec.clone();
            eph.ephemeral = true;
            eph.runtime_dir = spec
                .runtime_dir
                .join(format!("ephemeral-{}", std::process::id()));
            let cluster = RunningCluster::start(eph.clone()).await?;
            wait_until_healthy(&cluster.supervisor, ready_within).await;
            let connection = attach(&eph.runtime_dir, spec.connection.clone()).await?;
            Ok(LeadClient {
                connection,
                ephemeral: Some(cluster),
            })
        }
        Err(e) => Err(e),
    }
}

/// Waits until every child reports healthy, or the time is up.
pub async fn wait_until_healthy(supervisor: &Addr<Supervisor>, within: Duration) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if let Ok(st) = supervisor.send(crate::cluster::supervisor::GetStatus).await {
            if st.iter().all(|s| s.healthy) {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

impl LeadClient {
    /// Stops the ephemeral cluster, if this command started one.
    pub async fn finish(self) {
        self.connection.close("command done");
        if let Some(c) = self.ephemeral {
            let root = c.runtime.root().to_path_buf();
            c.stop().await;
            let _ = std::fs::remove_dir_all(root);
        }
    }
}
