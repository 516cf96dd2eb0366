//! The `antler` subcommands, one module per group; `main.rs` only parses and dispatches.

pub mod catalog;
pub mod chaos;
pub mod cluster;
pub mod cluster_init;
pub mod config;
pub mod extensions;
mod interrupt;
pub mod mcp;
mod mcp_serve;
pub mod run;
mod run_approvals;
pub mod sandbox;
pub mod threads;
pub mod tool;

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use antler_protocol::{
    calls::Forwarder,
    config::{load_app_config, process_env, resolve_app_config_path, AntlerSection},
    Connection, ConnectionConfig, Role, RpcError,
};

use crate::cluster::{supervisor::RestartPolicy, ClusterSpec, LeadClient};

/// How long a CLI request to the lead may take.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(10);

/// What every subcommand gets: the global options.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub runtime_dir: PathBuf,
}

/// The cluster to start (or attach to) for a command. Settings come from the `antler:`
/// section of `config` (or of `config.yaml` as found by the usual rules), else defaults;
/// `workers` overrides the config.
pub fn cluster_spec(
    runtime_dir: PathBuf,
    config: Option<&Path>,
    workers: Option<u32>,
) -> anyhow::Result<ClusterSpec> {
    let cwd = std::env::current_dir()?;
    let config_path = resolve_app_config_path(config, &cwd, &process_env)?;
    let antler = match &config_path {
        Some(path) => {
            let loaded = load_app_config(path)?;
            for w in &loaded.warnings {
                tracing::warn!("{w}");
            }
            loaded.value.antler
        }
        None => AntlerSection::default(),
    };
    let config_path = config_path.map(|path| std::fs::canonicalize(&path).unwrap_or(path));
    let tls = config_path
        .as_deref()
        .and_then(|path| antler.tls.files(path.parent().unwrap_or(Path::new("."))));
    if let Some(path) = &config_path {
        // The hosts this cluster starts read the same file.
        std::env::set_var("ANTLER_CONFIG", path);
    }
    // Traces (docs/telemetry.md): this process exports its own, and the hosts it starts
    // read the same endpoint and service name from the environment.
    if let Some(settings) = antler_protocol::telemetry::Settings::resolve(&antler.telemetry) {
        for (name, value) in settings.child_env() {
            std::env::set_var(name, value);
        }
        if let Err(e) = antler_protocol::telemetry::init(Some(&settings), None) {
            tracing::warn!("traces are not exported: {e}");
        }
    }
    // And the same extensions file: the one beside the config when none is named.
    extensions::pin(config_path.as_deref());
    let runtime_dir = antler.runtime_dir.clone().unwrap_or(runtime_dir);
    let max = antler_protocol::config::MAX_WORKERS as u32;
    if workers.is_some_and(|n| n > max) {
        anyhow::bail!("--workers: expected a number from 0 to {max}");
    }
    Ok(ClusterSpec {
        store_path: runtime_dir.join(crate::commands::run::CHECKPOINT_FILE),
        store_dsn: match crate::runs::store::StoreLocation::resolve(
            antler.store.postgres_dsn(),
            PathBuf::new(),
        ) {
            crate::runs::store::StoreLocation::Postgres(dsn) => Some(dsn),
            crate::runs::store::StoreLocation::Sqlite(_) => None,
        },
        config: config_path,
        ephemeral: false,
        runtime_dir,
        workers: workers.unwrap_or(antler.workers as u32),
        worker_slots: antler.worker_slots,
        bin_dir: crate::cluster::default_bin_dir(),
        connection: ConnectionConfig {
            max_frame_bytes: antler.max_frame_bytes,
            heartbeat_interval: antler.heartbeat_interval(),
            heartbeat_misses: antler.heartbeat_misses,
            ..ConnectionConfig::default()
        },
        restart: RestartPolicy {
            max_crashes: antler.restart_max,
            window: antler.restart_window(),
            ..RestartPolicy::default()
        },
        drain_grace: antler.drain_grace(),
        ha: antler.ha.clone(),
        gateway: antler.gateway.clone(),
        tls,
        cluster: antler.cluster.hosts(),
        cluster_token: antler
            .cluster_token()
            .map(str::to_owned)
            .or_else(|| std::env::var(antler_protocol::runtime_dir::TOKEN_ENV).ok())
            .filter(|t| !t.trim().is_empty()),
        chaos: false,
    })
}

/// The runtime directory a cluster started with `config` uses: the config's
/// `antler.runtime_dir`, else `runtime_dir` (as [`cluster_spec`] decides, before logging
/// starts: a config that does not load leaves it to `cluster_spec` to report).
pub fn runtime_dir_of(runtime_dir: &Path, config: Option<&Path>) -> PathBuf {
    let configured = std::env::current_dir()
        .ok()
        .and_then(|cwd| resolve_app_config_path(config, &cwd, &process_env).ok())
        .flatten()
        .and_then(|path| load_app_config(&path).ok())
        .and_then(|loaded| loaded.value.antler.runtime_dir);
    configured.unwrap_or_else(|| runtime_dir.to_path_buf())
}

/// Extra time the lead's own answer gets over the deadline of a request it forwards.
const FORWARD_MARGIN: Duration = Duration::from_secs(1);

/// Runs `call` on the peer of `role` (worker `index`) through the lead of the running
/// cluster (or of an ephemeral one started for this command, stopped after it): the
/// typed calls of `antler_protocol::calls` on the forwarder reach the host.
pub async fn on_host<T>(
    ctx: &Ctx,
    role: Role,
    index: u32,
    call: impl AsyncFnOnce(&Forwarder<'_, Connection>) -> Result<T, RpcError>,
) -> anyhow::Result<T> {
    let spec = cluster_spec(ctx.runtime_dir.clone(), None, None)?;
    let client = crate::cluster::attach_or_start(spec, Duration::from_secs(15)).await?;
    let outcome = call(&host(&client, role, index)).await;
    client.finish().await;
    Ok(outcome?)
}

/// The peer of `role` (worker `index`) reached through an open connection to the lead.
pub fn host(client: &LeadClient, role: Role, index: u32) -> Forwarder<'_, Connection> {
    Forwarder::new(&client.connection, role, index, FORWARD_MARGIN)
}
