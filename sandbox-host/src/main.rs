//! `antler-sandbox-host`: the process that owns every sandbox. It loads the sandbox
//! settings, probes bubblewrap, listens on the socket it is given, and drains on SIGTERM.
//! Run as `antler-sandbox-host __supervise ...` it is the supervisor inside a sandbox.

use std::{path::PathBuf, sync::Arc};

use actix::Actor;
use antler_protocol::{
    config::{load_app_config, AppConfig},
    handshake::Role,
    host::{self, HostArgs},
};
use antler_sandbox_host::{
    cgroup::Cgroups,
    pool::{SandboxPool, Shutdown},
    provider::{self, bwrap::SUPERVISE_ARG, ProviderVerdict},
    service::SandboxService,
    settings::{ProviderKind, SandboxSettings},
    supervisor,
    user_volume::UserVolumes,
};
use anyhow::Context as _;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "antler-sandbox-host",
    version,
    about = "the process that owns every sandbox."
)]
struct Cli {
    #[command(flatten)]
    host: HostArgs,
    /// config.yaml (its `sandbox` and `authorization` sections).
    #[arg(long, env = "ANTLER_CONFIG")]
    config: Option<PathBuf>,
    /// Where thread directories live (overrides `sandbox.base_dir`).
    #[arg(long, env = "ANTLER_SANDBOX_BASE_DIR")]
    base_dir: Option<PathBuf>,
    /// extensions_config.json, for its `skills.{name}.enabled` (`ls` of a disabled
    /// skill is refused); without it every skill counts as enabled.
    #[arg(long, env = "ANTLER_EXTENSIONS_CONFIG_PATH")]
    extensions: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(SUPERVISE_ARG) {
        std::process::exit(supervisor::main(&args[2..]));
    }
    let cli = Cli::parse();
    host::init_tracing();
    antler_protocol::sys::start_heap_trimmer();
    let config = match &cli.config {
        Some(path) => {
            let loaded =
                load_app_config(path).with_context(|| format!("cannot load {}", path.display()))?;
            for w in &loaded.warnings {
                tracing::warn!("{w}");
            }
            loaded.value
        }
        None => AppConfig::default(),
    };
    host::init_telemetry("sandbox-host", Some(&config.antler.telemetry));
    let mut settings = SandboxSettings::from_config(&config, cli.base_dir.clone());
    settings.extensions_path = cli.extensions.clone();
    let acp_agents = antler_sandbox_host::acp::AcpAgents::from_config(&config);
    // The config's approval policy, decided again for every call (`approvals`).
    let approvals = antler_protocol::approvals::ApprovalPolicy::from_config(
        &config.approvals,
        &antler_protocol::approvals::PolicyEnv::from_sandbox(config.sandbox.as_ref()),
    )
    .context("approvals")?;
    std::fs::create_dir_all(&settings.base_dir).with_context(|| {
        format!(
            "cannot create the sandbox base directory {}",
            settings.base_dir.display()
        )
    })?;
    // bubblewrap runs as `nobody` when this host is root: it must reach the thread
    // directories through the base directory.
    if let Ok(meta) = std::fs::metadata(&settings.base_dir) {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode();
        if mode & 0o001 == 0 {
            let _ = std::fs::set_permissions(
                &settings.base_dir,
                std::fs::Permissions::from_mode(mode | 0o711),
            );
        }
    }
    provider::bwrap::kill_strays(&settings.base_dir);
    let mut verdict = provider::probe(&settings);
    if let ProviderVerdict::Serve {
        kind: ProviderKind::Bwrap,
        note,
    } = &mut verdict
    {
        let bound = match Cgroups::detect(&settings.base_dir, settings.limits) {
            Ok(cgroups) => {
                let bound = cgroups.note();
                settings.cgroups = Some(Arc::new(cgroups));
                bound
            }
            Err(e) => {
                let l = settings.limits;
                let why = format!(
                    "no cgroups ({e}): each sandbox process is bounded alone (RLIMIT_AS {} MiB, RLIMIT_NPROC {}), so one sandbox can take the host's memory and CPU",
                    l.max_memory >> 20,
                    l.max_processes
                );
                tracing::warn!("{why}");
                why
            }
        };
        note.push_str("; ");
        note.push_str(&bound);
        if let Some(size) = settings.user_disk_quota {
            let quota = match UserVolumes::start(&settings.base_dir, size) {
                Ok(volumes) => {
                    let quota = volumes.note();
                    settings.volumes = Some(Arc::new(volumes));
                    quota
                }
                Err(e) => {
                    let why = format!("disk quota NOT enforced ({e}): only reported after each command, so one command can write past it into the volume every thread shares");
                    tracing::warn!("{why}");
                    why
                }
            };
            note.push_str("; ");
            note.push_str(&quota);
        }
    }
    let cgroups = settings.cgroups.clone();
    let volumes = settings.volumes.clone();
    let system = actix::System::new();
    let served = system.block_on(async move {
        let base_dir = settings.base_dir.clone();
        let pool = SandboxPool::new(settings, verdict).start();
        let handler = Arc::new(
            SandboxService::new(pool.clone(), base_dir, acp_agents).with_approvals(approvals),
        );
        let served = host::serve(Role::SandboxHost, cli.host, handler).await;
        // Every sandbox's namespace dies before this process does, then their cgroups.
        let _ = pool.send(Shutdown).await;
        if let Some(cgroups) = cgroups {
            let _ = tokio::task::spawn_blocking(move || cgroups.remove_all()).await;
        }
        if let Some(volumes) = volumes {
            let _ = tokio::task::spawn_blocking(move || volumes.unmount_all()).await;
        }
        served
    });
    // The spans of the drain and of the pool's shutdown included.
    host::finish_telemetry();
    served?;
    Ok(())
}
