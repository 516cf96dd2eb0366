//! `antler-mcp-host`: the process that owns every MCP server connection. It loads the
//! extensions config (`--extensions`, else the usual locations), starts one actor per
//! server, watches the file, and answers the lead's MCP requests; it drains on SIGTERM.
//! config.yaml (`--config`), when given, bounds the stdio session pool (`antler.mcp_pool`)
//! and holds the approval policy every call is decided by again (`approvals`).

mod approvals;
mod ask;
mod client;
mod convert;
mod elicitation;
mod lifecycle;
mod naming;
mod oauth;
mod pool;
mod registry;
mod server;
mod service;
mod transport;
mod watch;

use std::path::PathBuf;

use actix::Actor;
use antler_protocol::{
    approvals::{ApprovalPolicy, PolicyEnv},
    config::{load_app_config, process_env, resolve_extensions_path, AppConfig},
    handshake::Role,
    host::{self, HostArgs},
};
use anyhow::Context;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "antler-mcp-host",
    version,
    about = "the process that owns every MCP server connection."
)]
struct Cli {
    #[command(flatten)]
    host: HostArgs,
    /// The extensions config (DeerFlow's extensions_config.json). Default: the
    /// ANTLER_EXTENSIONS_CONFIG_PATH or DEER_FLOW_EXTENSIONS_CONFIG_PATH file, else
    /// extensions_config.json or mcp_config.json in the working directory.
    #[arg(long)]
    extensions: Option<PathBuf>,
    /// config.yaml (its `antler.mcp_pool` and `approvals` sections).
    #[arg(long, env = "ANTLER_CONFIG")]
    config: Option<PathBuf>,
    /// Where OAuth tokens are kept across restarts (`mcp-oauth.json`, mode 0600); without
    /// it they live in memory only.
    #[arg(long, env = "ANTLER_MCP_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// The key every mcp-host replica of the cluster holds (`antler cluster init` writes
    /// `mcp-oauth.key`): with it, this host's OAuth credentials are sealed and shared
    /// through the lead with the other replicas, and come back to a replica that starts
    /// with an empty disk. The lead cannot open them.
    #[arg(long, env = "ANTLER_MCP_OAUTH_KEY_FILE")]
    oauth_key_file: Option<PathBuf>,
}

/// What mcp-host takes from config.yaml: the pool's bounds and the approval policy.
struct Settings {
    pool: pool::PoolLimits,
    approvals: ApprovalPolicy,
}

/// The settings of config.yaml, the policy compiled once. Without one: the pool's default
/// bounds and the shipped default rules. A config.yaml that does not load is an error, as in
/// sandbox-host: a host that cannot know the operator's rules does not run calls without them.
fn settings(config: Option<&std::path::Path>) -> anyhow::Result<Settings> {
    let app = match config {
        None => AppConfig::default(),
        Some(path) => match load_app_config(path) {
            Ok(loaded) => loaded.value,
            Err(e) => anyhow::bail!("cannot load {}: {e}", path.display()),
        },
    };
    let approvals = ApprovalPolicy::from_config(
        &app.approvals,
        &PolicyEnv::from_sandbox(app.sandbox.as_ref()),
    )
    .context("approvals")?;
    Ok(Settings {
        pool: pool::PoolLimits::from(&app.antler.mcp_pool),
        approvals,
    })
}

fn extensions_path(explicit: Option<PathBuf>) -> Option<PathBuf> {
    if explicit.is_some() {
        return explicit;
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    match resolve_extensions_path(None, &cwd, &process_env) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!("{e}");
            None
        }
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    host::init_tracing();
    host::init_telemetry("mcp-host", None);
    antler_protocol::sys::start_heap_trimmer();
    let path = extensions_path(cli.extensions.clone());
    let settings = settings(cli.config.as_deref())?;
    let sealer = cli
        .oauth_key_file
        .as_deref()
        .map(oauth::share::Sealer::from_file)
        .transpose()?;
    let system = actix::System::new();
    let served = system.block_on(async move {
        let broker = oauth::OAuthBroker::sharing(cli.data_dir.clone(), sealer);
        let registry = registry::McpRegistry::new(path.clone(), broker.clone()).start();
        if let Some(path) = path {
            watch::spawn(path, registry.clone());
        }
        let pool = std::sync::Arc::new(pool::SessionPool::new(settings.pool));
        let sweeper = pool.spawn_sweeper();
        let result = host::serve(
            Role::McpHost,
            cli.host,
            service::McpService::new(
                registry.clone(),
                pool.clone(),
                broker.clone(),
                settings.approvals,
            ),
        )
        .await;
        // Stop every server and pooled session (and their child groups) before exiting.
        sweeper.abort();
        let mut servers = pool.stop_all();
        if let Ok(base) = registry.send(registry::Servers).await {
            servers.extend(base);
        }
        for s in &servers {
            s.stop();
        }
        let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
        while std::time::Instant::now() < until && servers.iter().any(|s| !s.is_stopped()) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        result
    });
    // The spans of the drain and of the servers' stop included.
    host::finish_telemetry();
    served?;
    Ok(())
}
