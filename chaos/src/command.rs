//! `antler chaos`'s arguments and its entry: the schedule's seed and sizes checked, the
//! cluster's directory and files written, mounts and namespaces made before any thread
//! starts, the schedule run on a runtime of its own, and its report printed and written
//! (the command exits 1 when an invariant breaks).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::cluster::ChaosCluster;
use crate::faults::FaultKind;
use crate::plan::{self, Plan};
use crate::report::Report;
use crate::{disk, multihost, multilead, schedule};

/// `antler chaos`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ChaosArgs {
    /// The schedule's seed (printed; a random one when absent).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Runs the schedule submits.
    #[arg(long, default_value_t = 9)]
    pub runs: usize,
    /// How long faults fire, in minutes (runs are submitted over the first 60%).
    #[arg(long, default_value_t = 2.0)]
    pub minutes: f64,
    /// Only these fault kinds (comma-separated, e.g. kill9:lead,sigstop:worker); default all.
    #[arg(long, value_delimiter = ',')]
    pub faults: Vec<String>,
    /// The same schedule without faults: the throughput to compare against.
    #[arg(long)]
    pub no_faults: bool,
    /// Subagent workers of the cluster.
    #[arg(long, default_value_t = 2)]
    pub workers: u32,
    /// `local`: a cluster of `antler up`'s own processes; `multi-host`: every host in a
    /// network namespace of its own, over TLS through a fault proxy each (needs root);
    /// `multi-lead`: several leads on one PostgreSQL, killed, paused and partitioned.
    #[arg(long, value_enum, default_value_t = Mode::Local)]
    pub mode: Mode,
    /// Multi-lead mode: how many leads share the database (2 or 3).
    #[arg(long, default_value_t = 3)]
    pub leads: usize,
    /// Multi-lead mode: the PostgreSQL database the leads share (a postgres:// URL taking
    /// plain connections); default a throwaway cluster of this command's own.
    #[arg(long)]
    pub pg_dsn: Option<String>,
    /// Multi-lead mode: the leads' lease time to live (`antler.ha.lease_ttl_ms`); pauses
    /// and partitions last longer.
    #[arg(long, default_value_t = 1500)]
    pub lease_ttl_ms: u64,
    /// Where to write the JSON report (default: chaos-report.json in the directory).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// The directory for the cluster, its logs and (by default) the report; default a new
    /// one under the temporary directory. Kept, unless every invariant held and the report
    /// was written elsewhere (--report) into a directory this command made.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Where the cluster's processes run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Local,
    MultiHost,
    MultiLead,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Local => "local",
            Mode::MultiHost => "multi-host",
            Mode::MultiLead => "multi-lead",
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The `antler` binary beside this one (as `antler chaos` runs it): the cluster's lead
/// (`antler up`) and, in multi-host mode, `antler cluster init` and the hosts beside it.
pub(crate) fn antler_beside() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let antler = exe
        .parent()
        .context("the antler-chaos binary has no directory")?
        .join("antler");
    if !antler.is_file() {
        anyhow::bail!(
            "antler is not beside antler-chaos ({}): build both with `cargo build --workspace --bins`",
            antler.display()
        );
    }
    Ok(antler)
}

/// The `everything` MCP server's command: on PATH (scripts/chaos.sh puts the pinned one
/// there), or `ANTLER_CHAOS_MCP_COMMAND`.
pub(crate) fn everything() -> anyhow::Result<String> {
    if let Ok(c) = std::env::var("ANTLER_CHAOS_MCP_COMMAND") {
        return Ok(c);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("mcp-server-everything"))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
        .context("mcp-server-everything is not on PATH (scripts/chaos.sh installs it; or set ANTLER_CHAOS_MCP_COMMAND)")
}

/// Runs `antler chaos`.
pub fn run(args: ChaosArgs) -> anyhow::Result<ExitCode> {
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..1_000_000));
    let kinds = fault_kinds(&args)?;
    check_sizes(&args)?;
    let duration = Duration::from_secs_f64(args.minutes * 60.0);
    let plan = Plan::new(seed, args.runs, duration, &kinds);
    eprintln!(
        "antler chaos: seed {seed} (replay with --seed {seed}), {} runs, {} faults over {:.1} min",
        plan.runs.len(),
        plan.faults.len(),
        args.minutes
    );
    let dir = cluster_dir(&args, seed)?;
    let report_path = args
        .report
        .clone()
        .unwrap_or_else(|| dir.join("chaos-report.json"));
    if args.mode == Mode::MultiLead {
        let report = multilead::run(&args, plan, &dir)?;
        return print_report(&args, &dir, &report, &report_path);
    }
    let cluster = Arc::new(prepare_cluster(&args, &dir)?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = rt.block_on(schedule::schedule(
        cluster.clone(),
        plan,
        args.workers,
        args.mode,
    ));
    drop(rt);
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            cluster.stop();
            return Err(e);
        }
    };
    print_report(&args, &dir, &report, &report_path)
}

/// The fault kinds of the schedule: none with --no-faults, --faults' (each one `mode`
/// can take), else every kind of `mode`.
fn fault_kinds(args: &ChaosArgs) -> anyhow::Result<Vec<FaultKind>> {
    Ok(if args.no_faults {
        Vec::new()
    } else if args.faults.is_empty() {
        FaultKind::all(args.mode)
    } else {
        args.faults
            .iter()
            .map(|n| {
                FaultKind::parse(n, args.mode).with_context(|| {
                    let all: Vec<String> = FaultKind::all(args.mode)
                        .iter()
                        .map(FaultKind::name)
                        .collect();
                    format!(
                        "--faults: unknown fault `{n}`; expected some of {}",
                        all.join(", ")
                    )
                })
            })
            .collect::<anyhow::Result<_>>()?
    })
}

/// --minutes, --runs and --workers within their bounds.
fn check_sizes(args: &ChaosArgs) -> anyhow::Result<()> {
    if !(0.1..=24.0 * 60.0).contains(&args.minutes) {
        anyhow::bail!("--minutes: expected 0.1 to 1440");
    }
    if args.runs == 0 || args.runs > 10_000 {
        anyhow::bail!("--runs: expected 1 to 10000");
    }
    if !(1..=8).contains(&args.workers) {
        anyhow::bail!("--workers: expected 1 to 8");
    }
    if args.mode == Mode::MultiLead {
        if !(2..=3).contains(&args.leads) {
            anyhow::bail!("--leads: expected 2 or 3");
        }
        if !(300..=60_000).contains(&args.lease_ttl_ms) {
            anyhow::bail!("--lease-ttl-ms: expected 300 to 60000");
        }
    }
    Ok(())
}

/// The cluster's directory: --dir, else a new one under the temporary directory; readable
/// by the sandbox's user.
fn cluster_dir(args: &ChaosArgs, seed: u64) -> anyhow::Result<PathBuf> {
    let dir = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            let d =
                std::env::temp_dir().join(format!("antler-chaos-{seed}-{}", std::process::id()));
            std::fs::create_dir_all(&d)?;
            d
        }
    };
    // The sandbox's user reaches its thread's directories through this one.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    Ok(dir)
}

/// The cluster in `dir`, not started: its extensions and config files written, and
/// before any thread starts, mounts of this command's own (for the disk faults), the
/// namespaces, and this process in the lead's.
fn prepare_cluster(args: &ChaosArgs, dir: &Path) -> anyhow::Result<ChaosCluster> {
    let exe = antler_beside()?;
    std::fs::write(
        dir.join("extensions_config.json"),
        plan::extensions_json(&everything()?),
    )?;
    if disk::available() {
        disk::private_mounts()?;
    }
    let multi = match args.mode {
        // Multi-lead mode has a preparation of its own (`multilead::run`).
        Mode::Local | Mode::MultiLead => None,
        Mode::MultiHost => Some(multihost::MultiHost::create(dir, &exe, args.workers)?),
    };
    if disk::available() {
        let bases = match &multi {
            Some(m) => m.bases(),
            None => vec![dir.join("base")],
        };
        for base in bases {
            disk::mount_volume(&base)?;
        }
    }
    std::fs::write(
        dir.join("config.yaml"),
        plan::config_yaml(args.workers, multi.as_ref().map(|m| m.antler_config())),
    )?;
    Ok(ChaosCluster::new(
        dir.to_path_buf(),
        multi,
        exe,
        format!("127.0.0.1:{}", free_port()?),
        args.workers,
    ))
}

/// Writes the report to `report_path` and prints its table, its path and the report as
/// one JSON line: exit 0 when every invariant held (the directory removed when this
/// command made it and the report went elsewhere), else 1, naming the failures.
fn print_report(
    args: &ChaosArgs,
    dir: &Path,
    report: &Report,
    report_path: &Path,
) -> anyhow::Result<ExitCode> {
    std::fs::write(report_path, serde_json::to_vec_pretty(&report.json)?)?;
    print!("{}", report.table);
    println!("report: {}", report_path.display());
    println!("{}", report.json);
    if report.ok {
        if args.dir.is_none() && args.report.is_some() {
            let _ = std::fs::remove_dir_all(dir);
        }
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "antler chaos: {}; the cluster's files and logs are in {}",
            report.failures.join("; "),
            dir.display()
        );
        Ok(ExitCode::from(1))
    }
}
