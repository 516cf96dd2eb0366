//! `antler chaos`: faults at random, under load, against a whole local cluster, and a
//! report of what held. It starts a cluster of its own (`antler up` in a private
//! directory, the gateway on a free loopback port), submits the schedule's runs through
//! the gateway while its faults fire (it is the lead's orchestrator too: a killed lead is
//! started again, as Kubernetes would), answers clarifications, waits for every run to
//! end, checks the invariants, stops the cluster and checks that nothing is left. The
//! seed is printed and accepted, so a failure replays. The report is a table per fault
//! kind and the invariants, printed and written as JSON (its last line on stdout); the
//! command exits 1 when an invariant breaks.

mod checks;
mod disk;
mod events;
mod faults;
mod multihost;
mod plan;
mod report;

use std::path::PathBuf;
use std::process::{Child, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{json, Value};

use faults::{FaultKind, FaultOutcome};
use plan::{Plan, PlannedRun};

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
    /// network namespace of its own, over TLS through a fault proxy each (needs root).
    #[arg(long, value_enum, default_value_t = Mode::Local)]
    pub mode: Mode,
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
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Local => "local",
            Mode::MultiHost => "multi-host",
        }
    }
}

/// The cluster under test and how to reach it.
pub struct ChaosCluster {
    dir: PathBuf,
    /// The multi-host layout, in multi-host mode.
    pub multi: Option<multihost::MultiHost>,
    exe: PathBuf,
    gateway: String,
    token: String,
    pub workers: u32,
    lead: Mutex<Option<Child>>,
    starts: Mutex<u32>,
    http: reqwest::Client,
    /// What the runs reported, as it arrived.
    events: events::Events,
    /// Faults restarting the lead now (the watchdog leaves it be).
    restarting: std::sync::atomic::AtomicU32,
    /// The schedule is over: nothing restarts the lead any more.
    stopping: std::sync::atomic::AtomicBool,
}

/// How long one gateway request may take (a paused lead must not hang the schedule).
const HTTP_TIMEOUT: Duration = Duration::from_secs(3);

impl ChaosCluster {
    pub fn runtime(&self) -> PathBuf {
        self.dir.join("run")
    }

    /// The sandbox-host replicas' base directories (the threads' files).
    pub fn bases(&self) -> Vec<PathBuf> {
        match &self.multi {
            Some(m) => m.bases(),
            None => vec![self.dir.join("base")],
        }
    }

    /// Replicas of `role` (`sandbox-host`, `subagent`, ...).
    pub fn replicas(&self, role: &str) -> u32 {
        match (&self.multi, role) {
            (Some(m), _) => m.replicas(role),
            (None, "subagent") => self.workers,
            (None, _) => 1,
        }
    }

    /// The pid of host `role` (replica `index`): from the cluster view in local mode, from
    /// this command's own children in multi-host mode.
    pub fn host_pid(&self, view: &Value, role: &str, index: u32) -> Option<u32> {
        match &self.multi {
            Some(m) => m.node(role, index).and_then(|i| m.pid(i)),
            None => faults::pid_of(view, role, (role == "subagent").then_some(u64::from(index))),
        }
    }

    /// A host's log: in the runtime directory, or in multi-host mode beside its node.
    pub fn host_log(&self, role: &str, index: u32) -> PathBuf {
        if let Some(m) = &self.multi {
            if let Some(i) = m.node(role, index) {
                return m.log(i);
            }
        }
        let name = if role == "subagent" {
            format!("subagent-{index}.log")
        } else {
            format!("{role}.log")
        };
        self.runtime().join("logs").join(name)
    }

    fn lead_log(&self, n: u32) -> PathBuf {
        self.dir.join(format!("lead-{n}.log"))
    }

    /// The last lines of the current lead's log that say what it did at start.
    pub fn lead_log_tail(&self) -> String {
        let n = *self.starts.lock().unwrap_or_else(|e| e.into_inner());
        let text = std::fs::read_to_string(self.lead_log(n)).unwrap_or_default();
        text.lines()
            .rev()
            .find(|l| l.contains("resum") || l.contains("adopted") || l.contains("cluster started"))
            .map(|l| l.chars().take(200).collect())
            .unwrap_or_else(|| "started".into())
    }

    /// The newest line of any lead's log, written at `since` or later, containing every
    /// one of `needles`.
    pub fn lead_log_matching(&self, needles: &[&str], since: &str) -> Option<String> {
        let n = *self.starts.lock().unwrap_or_else(|e| e.into_inner());
        (1..=n)
            .rev()
            .find_map(|i| faults::logged_since(&self.lead_log(i), needles, since))
    }

    /// Starts `antler up` (again): in place of the lead `replacing` when given, unless
    /// another fault or the watchdog has replaced it already (two faults that hit one
    /// lead at once start one successor, not two).
    fn start_lead(&self, replacing: Option<u32>) -> anyhow::Result<()> {
        let mut lead = self.lead.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some(old), Some(current)) = (replacing, lead.as_ref()) {
            if current.id() != old {
                return Ok(());
            }
        }
        let n = {
            let mut starts = self.starts.lock().unwrap_or_else(|e| e.into_inner());
            *starts += 1;
            *starts
        };
        let log = std::fs::File::create(self.lead_log(n))?;
        let mut command = std::process::Command::new(&self.exe);
        if let Some(m) = &self.multi {
            command.env("ANTLER_CLUSTER_TOKEN", m.token()?);
        }
        command
            .arg("--runtime-dir")
            .arg(self.runtime())
            .args(["up", "--config"])
            .arg(self.dir.join("config.yaml"));
        if self.multi.is_none() {
            // Actors are stopped on purpose only here (refused off loopback).
            command.arg("--chaos");
        }
        let child = command
            .env("ANTLER_GATEWAY_ADDR", &self.gateway)
            .env("ANTLER_GATEWAY_TOKEN", &self.token)
            .env(
                antler_protocol::config::ANTLER_EXTENSIONS_ENV,
                self.dir.join("extensions_config.json"),
            )
            .env("ANTLER_SANDBOX_BASE_DIR", self.dir.join("base"))
            .env("RUST_LOG", "info")
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start `antler up`")?;
        *lead = Some(child);
        Ok(())
    }

    /// The lead's pid, while it runs.
    pub fn lead_pid(&self) -> Option<u32> {
        let mut lead = self.lead.lock().unwrap_or_else(|e| e.into_inner());
        let child = lead.as_mut()?;
        match child.try_wait() {
            Ok(None) => Some(child.id()),
            _ => None,
        }
    }

    /// As an orchestrator restarts a container that exits: a lead that exited on its own
    /// (it could not start, or it crashed) is started again after a second. Runs until the
    /// schedule stops.
    async fn watch_lead(cluster: Arc<ChaosCluster>) {
        use std::sync::atomic::Ordering;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if cluster.stopping.load(Ordering::SeqCst) {
                return;
            }
            if cluster.restarting.load(Ordering::SeqCst) > 0 {
                continue;
            }
            let exited = {
                let mut lead = cluster.lead.lock().unwrap_or_else(|e| e.into_inner());
                lead.as_mut()
                    .and_then(|c| matches!(c.try_wait(), Ok(Some(_))).then(|| c.id()))
            };
            if exited.is_some() && cluster.restarting.load(Ordering::SeqCst) == 0 {
                eprintln!("antler chaos: the lead exited on its own; starting it again");
                if let Err(e) = cluster.start_lead(exited) {
                    eprintln!("antler chaos: {e:#}");
                }
            }
        }
    }

    /// A fault is about to stop the lead and start it again itself.
    pub fn lead_restart_begins(&self) {
        self.restarting
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Waits for the lead `pid` to exit (it was signalled, after
    /// [`ChaosCluster::lead_restart_begins`]), then starts a new one.
    pub async fn restart_lead(&self, pid: u32) {
        self.restart_lead_now(pid).await;
        self.restarting
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }

    async fn restart_lead_now(&self, pid: u32) {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let gone = {
                let mut lead = self.lead.lock().unwrap_or_else(|e| e.into_inner());
                match lead.as_mut() {
                    Some(c) if c.id() == pid => !matches!(c.try_wait(), Ok(None)),
                    _ => true,
                }
            };
            if gone || Instant::now() >= until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if let Err(e) = self.start_lead(Some(pid)) {
            eprintln!("antler chaos: {e:#}");
        }
    }

    /// `GET /api/cluster`: processes, sandboxes, MCP servers; `None` when the lead does not
    /// answer in time.
    pub async fn view(&self) -> Option<Value> {
        self.get("/api/cluster")
            .await
            .filter(|v| v["processes"].is_array())
    }

    pub async fn get(&self, path: &str) -> Option<Value> {
        let reply = self
            .http
            .get(format!("http://{}{path}", self.gateway))
            .bearer_auth(&self.token)
            .timeout(HTTP_TIMEOUT)
            .send()
            .await
            .ok()?;
        if !reply.status().is_success() {
            return None;
        }
        reply.json().await.ok()
    }

    async fn post(&self, path: &str, body: Value) -> Result<(u16, Value), String> {
        self.post_keyed(path, body, None).await
    }

    /// A POST with an `Idempotency-Key`, when `key` is given: safe to repeat.
    async fn post_keyed(
        &self,
        path: &str,
        body: Value,
        key: Option<&str>,
    ) -> Result<(u16, Value), String> {
        let mut request = self
            .http
            .post(format!("http://{}{path}", self.gateway))
            .bearer_auth(&self.token);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        let reply = request
            .json(&body)
            .timeout(HTTP_TIMEOUT)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = reply.status().as_u16();
        Ok((status, reply.json().await.unwrap_or(Value::Null)))
    }

    /// Every process of the view healthy, the lead and all its hosts present.
    pub fn all_healthy(&self, view: &Value) -> bool {
        view["processes"].as_array().is_some_and(|ps| {
            let hosts = match &self.multi {
                Some(m) => m.nodes.len(),
                None => 2 + self.workers as usize,
            };
            ps.len() == 1 + hosts && ps.iter().all(|p| p["healthy"] == true)
        })
    }

    async fn wait_healthy(&self, within: Duration) -> bool {
        let until = Instant::now() + within;
        while Instant::now() < until {
            if let Some(v) = self.view().await {
                if self.all_healthy(&v)
                    && v["mcp_servers"].as_array().is_some_and(|s| !s.is_empty())
                {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// SIGTERM to the lead (it stops its hosts and workers), SIGKILL after 30 s; in
    /// multi-host mode then the hosts, their proxies and the namespaces.
    fn stop(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // A disk fault cut short by an error is undone.
        if disk::available() {
            let _ = disk::database_read_only(&self.runtime(), false);
            for base in self.bases() {
                disk::unfill(&base);
            }
        }
        self.stop_lead();
        if let Some(m) = &self.multi {
            m.stop();
        }
    }

    fn stop_lead(&self) {
        let mut lead = self.lead.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(child) = lead.as_mut() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGCONT);
            }
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
            let until = Instant::now() + Duration::from_secs(30);
            while Instant::now() < until {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What became of one run of the schedule.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub planned: PlannedRun,
    pub run_id: Option<String>,
    /// The last view seen.
    pub view: Value,
    pub answered: bool,
    pub ended_at: Option<Duration>,
}

/// Submits the run at its time and follows it to its end (answering its clarification),
/// riding out a lead that is away.
async fn drive(
    cluster: Arc<ChaosCluster>,
    run: PlannedRun,
    started: Instant,
    deadline: Instant,
) -> RunOutcome {
    tokio::time::sleep_until((started + run.at).into()).await;
    let mut outcome = RunOutcome {
        planned: run.clone(),
        run_id: None,
        view: Value::Null,
        answered: false,
        ended_at: None,
    };
    let body = json!({
        "task": format!("chaos run {} ({})", run.index, run.kind.as_str()),
        "thread": format!("chaos-{}", run.index),
        "playbook_yaml": plan::playbook(&run),
        "subagents": run.kind == plan::RunKind::Delegate,
    });
    // A submission whose reply was lost (the lead killed or paused) is repeated with the
    // same key: the lead answers the first one's run instead of starting a second.
    let key = format!("chaos-run-{}", run.index);
    while Instant::now() < deadline {
        match cluster
            .post_keyed("/api/runs", body.clone(), Some(&key))
            .await
        {
            Ok((201, reply)) => {
                outcome.run_id = reply["run_id"].as_str().map(str::to_owned);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    let Some(id) = outcome.run_id.clone() else {
        return outcome;
    };
    tokio::spawn(events::follow(
        cluster.clone(),
        run.index,
        id.clone(),
        deadline,
    ));
    while Instant::now() < deadline {
        if let Some(view) = cluster.get(&format!("/api/runs/{id}")).await {
            let status = view["status"].as_str().unwrap_or_default().to_owned();
            outcome.view = view;
            match status.as_str() {
                "success" | "error" => {
                    outcome.ended_at = Some(started.elapsed());
                    return outcome;
                }
                "interrupted" if !outcome.view["question"].is_null() => {
                    if let Ok((code, _)) = cluster
                        .post(
                            &format!("/api/runs/{id}/answer"),
                            json!({"answer": "Chaos"}),
                        )
                        .await
                    {
                        outcome.answered |= code < 300;
                    }
                }
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    outcome
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The `everything` MCP server's command: on PATH (scripts/chaos.sh puts the pinned one
/// there), or `ANTLER_CHAOS_MCP_COMMAND`.
fn everything() -> anyhow::Result<String> {
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
    let kinds: Vec<FaultKind> = if args.no_faults {
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
    };
    if !(0.1..=24.0 * 60.0).contains(&args.minutes) {
        anyhow::bail!("--minutes: expected 0.1 to 1440");
    }
    if args.runs == 0 || args.runs > 10_000 {
        anyhow::bail!("--runs: expected 1 to 10000");
    }
    if !(1..=8).contains(&args.workers) {
        anyhow::bail!("--workers: expected 1 to 8");
    }
    let duration = Duration::from_secs_f64(args.minutes * 60.0);
    let plan = Plan::new(seed, args.runs, duration, &kinds);
    eprintln!(
        "antler chaos: seed {seed} (replay with --seed {seed}), {} runs, {} faults over {:.1} min",
        plan.runs.len(),
        plan.faults.len(),
        args.minutes
    );
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
    let exe = std::env::current_exe()?;
    std::fs::write(
        dir.join("extensions_config.json"),
        plan::extensions_json(&everything()?),
    )?;
    // Before any thread starts: mounts of this command's own (for the disk faults), the
    // namespaces, and this process in the lead's.
    if disk::available() {
        disk::private_mounts()?;
    }
    let multi = match args.mode {
        Mode::Local => None,
        Mode::MultiHost => Some(multihost::MultiHost::create(&dir, &exe, args.workers)?),
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
    let cluster = Arc::new(ChaosCluster {
        dir: dir.clone(),
        multi,
        exe,
        gateway: format!("127.0.0.1:{}", free_port()?),
        token: uuid::Uuid::new_v4().simple().to_string(),
        workers: args.workers,
        lead: Mutex::new(None),
        starts: Mutex::new(0),
        http: reqwest::Client::new(),
        events: events::Events::default(),
        restarting: Default::default(),
        stopping: Default::default(),
    });
    let report_path = args
        .report
        .clone()
        .unwrap_or_else(|| dir.join("chaos-report.json"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = rt.block_on(schedule(cluster.clone(), plan, args.workers, args.mode));
    drop(rt);
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            cluster.stop();
            return Err(e);
        }
    };
    std::fs::write(&report_path, serde_json::to_vec_pretty(&report.json)?)?;
    print!("{}", report.table);
    println!("report: {}", report_path.display());
    println!("{}", report.json);
    if report.ok {
        if args.dir.is_none() && args.report.is_some() {
            let _ = std::fs::remove_dir_all(&dir);
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

/// The schedule from start to report.
async fn schedule(
    cluster: Arc<ChaosCluster>,
    plan: Plan,
    workers: u32,
    mode: Mode,
) -> anyhow::Result<report::Report> {
    if let Some(m) = &cluster.multi {
        if let Err(e) = m.start() {
            cluster.stop();
            return Err(e);
        }
    }
    if let Err(e) = cluster.start_lead(None) {
        cluster.stop();
        return Err(e);
    }
    if !cluster.wait_healthy(Duration::from_secs(90)).await {
        cluster.stop();
        anyhow::bail!(
            "the cluster did not come up; see {}",
            cluster.lead_log(1).display()
        );
    }
    tokio::spawn(ChaosCluster::watch_lead(cluster.clone()));
    // One run before the schedule warms every process, so their memory is measured warm.
    let warm = PlannedRun {
        index: 10_000,
        kind: plan::RunKind::Tools,
        at: Duration::ZERO,
    };
    let now = Instant::now();
    drive(cluster.clone(), warm, now, now + Duration::from_secs(120)).await;
    let memory_before = checks::memory(&cluster).await;
    let started = Instant::now();
    // Runs get the schedule plus time to finish once the faults have stopped.
    let deadline = started + plan.duration + Duration::from_secs(180);
    let drivers: Vec<_> = plan
        .runs
        .iter()
        .cloned()
        .map(|run| tokio::spawn(drive(cluster.clone(), run, started, deadline)))
        .collect();
    let faults: Vec<_> = plan
        .faults
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, fault)| {
            let cluster = cluster.clone();
            let pick = (plan.seed as usize).wrapping_add(i * 7919);
            tokio::spawn(async move {
                tokio::time::sleep_until((started + fault.at).into()).await;
                faults::inject(&cluster, fault.kind, fault.pause, started, pick).await
            })
        })
        .collect();
    let mut fault_outcomes: Vec<FaultOutcome> = Vec::new();
    for f in faults {
        if let Ok(o) = f.await {
            fault_outcomes.push(o);
        }
    }
    let mut runs: Vec<RunOutcome> = Vec::new();
    for d in drivers {
        if let Ok(o) = d.await {
            runs.push(o);
        }
    }
    let elapsed = started.elapsed();
    let healthy = cluster.wait_healthy(Duration::from_secs(60)).await;
    let invariants =
        checks::after_runs(&cluster, &runs, &memory_before, healthy, &fault_outcomes).await;
    let lead_pid = cluster.lead_pid();
    cluster.stop();
    let mut invariants = invariants;
    invariants.push(checks::nothing_left(&cluster.dir, lead_pid));
    let observed = cluster.events.all();
    let node_of = |replica: u32| match &cluster.multi {
        Some(m) => m
            .node("subagent", replica)
            .map(|i| m.nodes[i].name.clone())
            .unwrap_or_default(),
        None => format!("subagent-{replica}"),
    };
    let figures = report::Figures::from(&fault_outcomes, &observed, node_of);
    Ok(report::build(
        &plan,
        mode,
        workers,
        &runs,
        &fault_outcomes,
        invariants,
        elapsed,
        figures,
    ))
}
