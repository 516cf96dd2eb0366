//! The subagent bench (issue 12), a bench command reporting ratios measured in the same
//! run. Real `antler-subagent` processes under the lead's `Supervisor`, placed through
//! the lead's `SubagentDispatcher`, each task a real `TaskGraph` on the engine with a
//! scripted model (no network):
//! - throughput: tasks of 4 model turns, each turn 50 ms of model latency, 3 slots per
//!   worker, with 1, 2 and 4 workers; target: 4 workers ≥ 3.6× one worker;
//! - dispatch overhead: a task sent until its first model request (its first
//!   `task_running` event, the model answering at once), p50 over Unix sockets; target
//!   ≤ 1 ms;
//! - 1,000 concurrent tasks across 4 workers (250 slots each), all idle in their model
//!   call at once, then all completed; target: each worker's memory per idle task
//!   ≤ 64 KiB. DeerFlow runs at most 3 subagents per process.
//!
//! - the same throughput with the workers over TCP with mutual TLS, each in a network
//!   namespace of its own (as on separate machines; the bench's lead side runs in one too,
//!   re-executing this binary there); target: still ≥ 0.9× linear from 1 to 4 workers.
//!   Skipped, and said so, when the bench cannot create namespaces (not root).
//!
//! `cargo build --workspace --bins --release`, then
//! `cargo bench -p antler-tests --bench subagents` (the bench runs the binaries beside it,
//! in `target/release`)
//! (`cargo test -p antler-tests --bench subagents` runs it against the debug build).
//! Exits 1 when a task does not complete.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use antler_engine::{
    catalog::{Catalog, ToolSpec},
    Playbook, ScriptedCall, ScriptedTurn, TaskEvent, TaskResult, TaskSpec, TaskStatus, WireCatalog,
    WireModel,
};
use antler_lead::cluster::{ChildSpec, GetStatus, RestartPolicy, StopAll, Supervisor};
use antler_lead::subagents::{Release, Reserve, Reserved, SubagentDispatcher, Workers};
use antler_protocol::calls::{run_task, TaskItem};
use antler_protocol::messages::TaskAssignment;
use antler_protocol::runtime_dir::RuntimeDir;
use antler_protocol::{ConnectionConfig, Identity, Role};
use serde_json::json;

const SLOTS: u32 = 3;
const TURNS: usize = 4;
const TURN_MS: u64 = 50;

struct Pool {
    _dir: tempfile::TempDir,
    supervisor: Addr<Supervisor>,
    dispatcher: Addr<SubagentDispatcher>,
}

impl Pool {
    /// `workers` already listening at `addresses` (TCP with TLS), dialed as remote
    /// children with the lead's certificate in `certs`.
    async fn remote(addresses: &[String], certs: &std::path::Path) -> Pool {
        let dir = tempfile::Builder::new()
            .prefix("antler-bench-sa")
            .tempdir_in("/tmp")
            .unwrap();
        let token = std::fs::read_to_string(certs.join("token")).unwrap();
        let specs = addresses
            .iter()
            .enumerate()
            .map(|(i, a)| ChildSpec::remote(Role::Subagent, i as u32, a.parse().unwrap()))
            .collect();
        let files = antler_protocol::tls::TlsFiles {
            ca: certs.join("ca.crt"),
            cert: certs.join("lead.crt"),
            key: certs.join("lead.key"),
        };
        let tls = antler_protocol::tls::ClusterTls::load(&files, Role::Lead).unwrap();
        let identity = Identity::new(Role::Lead, "bench", Some(token.trim().to_owned()))
            .with_tls(Some(Arc::new(tls)));
        Self::supervise(dir, specs, identity, addresses.len() as u32, None).await
    }

    async fn start(workers: u32, slots: u32) -> Pool {
        let dir = tempfile::Builder::new()
            .prefix("antler-bench-sa")
            .tempdir_in("/tmp")
            .unwrap();
        let runtime = RuntimeDir::open(dir.path().join("run")).unwrap();
        let token = runtime.generate_token().unwrap();
        let specs = (0..workers)
            .map(|index| ChildSpec {
                role: Role::Subagent,
                index,
                binary: antler_tests::bin("antler-subagent"),
                socket: runtime.socket(Role::Subagent, index),
                log: runtime.log(Role::Subagent, index),
                token_file: runtime.token_path(),
                args: vec!["--capacity".into(), slots.to_string()],
                survives_lead: false,
                remote: None,
            })
            .collect();
        let identity = Identity::new(Role::Lead, "bench", Some(token));
        Self::supervise(dir, specs, identity, workers, Some(runtime)).await
    }

    async fn supervise(
        dir: tempfile::TempDir,
        specs: Vec<ChildSpec>,
        identity: Identity,
        workers: u32,
        runtime: Option<RuntimeDir>,
    ) -> Pool {
        let supervisor = Supervisor::new(
            specs,
            identity,
            ConnectionConfig::default(),
            RestartPolicy::default(),
        )
        .start();
        let dispatcher = SubagentDispatcher::new(supervisor.clone()).start();
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let known = dispatcher.send(Workers).await.unwrap();
            if known.len() == workers as usize && known.iter().all(|w| w.connected) {
                break;
            }
            if Instant::now() >= until {
                let logs: Vec<String> = (0..workers)
                    .filter_map(|i| {
                        let log = runtime.as_ref()?.log(Role::Subagent, i);
                        Some(std::fs::read_to_string(log).unwrap_or_default())
                    })
                    .collect();
                panic!("workers did not connect: {known:?}\n{}", logs.join("\n"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Pool {
            _dir: dir,
            supervisor,
            dispatcher,
        }
    }

    async fn stop(self) {
        let _ = self
            .supervisor
            .send(StopAll {
                grace: Duration::from_secs(5),
            })
            .await;
    }

    /// Resident memory of every worker, in KiB.
    async fn rss_kib(&self) -> u64 {
        let status = self.supervisor.send(GetStatus).await.unwrap();
        status
            .iter()
            .filter_map(|p| p.pid)
            .map(antler_protocol::sys::rss_kib)
            .sum()
    }

    /// Places one task and follows it to its end: (result, time to its first model
    /// request).
    async fn task(
        &self,
        n: usize,
        playbook: &Playbook,
        catalog: &WireCatalog,
    ) -> (TaskResult, Duration) {
        let run_id = format!("bench-{n}");
        let spec = TaskSpec {
            run_id: run_id.clone(),
            tool_call_id: format!("call-{n}"),
            user_id: "bench".into(),
            thread_id: format!("t-{n}"),
            data_root: std::env::temp_dir(),
            thread_files: Default::default(),
            subagent_type: "general-purpose".into(),
            description: format!("task {n}"),
            prompt: "work".into(),
            system_prompt: None,
            catalog: catalog.clone(),
            model: WireModel::Scripted {
                playbook: playbook.clone(),
            },
            max_turns: 50,
            timeout_s: 600,
            tool_timeout_s: 60,
            token_budget: None,
            web_tools: Default::default(),
            sandbox_host: None,
            mcp_host: None,
            summarization: None,
            loop_detection: Default::default(),
            tool_output: Default::default(),
            approvals: None,
        };
        let reserved = self
            .dispatcher
            .send(Reserve {
                run_id: run_id.clone(),
                max_concurrent: 4,
                max_total: 50,
                wait: Duration::from_secs(600),
            })
            .await
            .unwrap();
        let placement = match reserved {
            Reserved::Placed(p) => p,
            Reserved::Queued(slot) => slot.await.unwrap().unwrap(),
            Reserved::Refused(text) => panic!("{text}"),
        };
        let assignment = TaskAssignment {
            run_id: run_id.clone(),
            tool_call_id: spec.tool_call_id.clone(),
            spec: Box::new(spec.to_wire().unwrap()),
        };
        let sent = Instant::now();
        let mut first = None;
        let mut stream = run_task(&placement.connection, assignment, Duration::from_secs(900))
            .await
            .unwrap();
        let mut result = None;
        while let Some(item) = stream.next().await {
            match item.unwrap() {
                TaskItem::Event(event) => {
                    let event = TaskEvent::from(event);
                    if matches!(event, TaskEvent::TaskRunning { .. }) && first.is_none() {
                        first = Some(sent.elapsed());
                    }
                }
                TaskItem::Ended(ended) => {
                    result = Some(TaskResult::from(ended));
                }
                other => panic!("{other:?}"),
            }
        }
        self.dispatcher.do_send(Release {
            index: placement.index,
            run_id,
        });
        (result.unwrap(), first.unwrap_or_default())
    }
}

/// `turns` model turns of `delay_ms` each: tool_search calls, then the answer.
fn playbook(turns: usize, delay_ms: u64) -> Playbook {
    let mut all: Vec<ScriptedTurn> = (1..turns)
        .map(|i| ScriptedTurn {
            delay_ms,
            tool_calls: vec![ScriptedCall {
                name: "tool_search".into(),
                args: json!({"query": format!("bench {i}")}),
                id: None,
            }],
            ..ScriptedTurn::default()
        })
        .collect();
    all.push(ScriptedTurn {
        delay_ms,
        content: "done".into(),
        ..ScriptedTurn::default()
    });
    Playbook {
        turns: all,
        ..Playbook::default()
    }
}

fn bench_catalog() -> WireCatalog {
    let tool = ToolSpec::mcp(
        "srv_bench",
        "A deferred tool for the bench's searches.",
        json!({"type": "object", "properties": {}}),
        Some("srv".into()),
        "bench",
    );
    WireCatalog::of(&Catalog::build(vec![tool], true).unwrap(), true)
}

async fn throughput(workers: u32, tasks: usize) -> (f64, usize) {
    measure(Pool::start(workers, SLOTS).await, tasks, 0).await
}

/// Throughput of `tasks` tasks numbered from `first`: the workers of the namespaced run
/// serve every phase and keep finished results for a lead that asks again, so each phase
/// numbers its tasks apart (a repeated id would be answered from the kept result).
async fn measure(pool: Pool, tasks: usize, first: usize) -> (f64, usize) {
    let pool = Arc::new(pool);
    let playbook = playbook(TURNS, TURN_MS);
    let catalog = bench_catalog();
    let started = Instant::now();
    let results = futures::future::join_all((first..first + tasks).map(|n| {
        let pool = pool.clone();
        let playbook = playbook.clone();
        let catalog = catalog.clone();
        async move { pool.task(n, &playbook, &catalog).await.0 }
    }))
    .await;
    let took = started.elapsed().as_secs_f64();
    let failed = results
        .iter()
        .filter(|r| r.status != TaskStatus::Completed)
        .count();
    if let Ok(pool) = Arc::try_unwrap(pool) {
        pool.stop().await;
    }
    (tasks as f64 / took, failed)
}

/// The environment variable that tells a re-executed bench it is the lead side of the
/// namespaced run: the workers' addresses, comma-separated.
const REMOTE_WORKERS: &str = "ANTLER_BENCH_REMOTE_WORKERS";
/// The certificates' directory for that run.
const REMOTE_CERTS: &str = "ANTLER_BENCH_REMOTE_CERTS";

fn rounds() -> usize {
    std::env::var("ANTLER_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6usize)
}

/// The lead side inside its namespace: throughput with the first 1, 2 and 4 workers;
/// one `netns-rate WORKERS RATE FAILED` line each.
fn remote_side(addresses: String) -> ExitCode {
    let certs = std::path::PathBuf::from(std::env::var(REMOTE_CERTS).unwrap());
    let addresses: Vec<String> = addresses.split(',').map(str::to_owned).collect();
    actix::System::new().block_on(async move {
        for workers in [1usize, 2, 4] {
            let pool = Pool::remote(&addresses[..workers], &certs).await;
            let tasks = SLOTS as usize * workers * rounds();
            let (rate, failed) = measure(pool, tasks, workers * 1_000_000).await;
            println!("netns-rate {workers} {rate} {failed}");
        }
    });
    ExitCode::SUCCESS
}

// The bench uses part of the suites' support module.
#[allow(dead_code)]
#[path = "../tests/netns_support/mod.rs"]
mod netns_support;

/// The throughput ratio with workers in namespaces over TLS: `None` when namespaces
/// cannot be made here; else (rates for 1, 2, 4 workers, failed tasks).
fn namespaced() -> Option<(Vec<f64>, usize)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let mut net = netns_support::Topology::new();
    let lead = net.node("lead");
    let mut addresses = Vec::new();
    for i in 0..4 {
        let node = net.node(&format!("worker-{i}"));
        let mut args = net.host_args(&node, "subagent", 7104);
        args.extend(["--capacity".into(), SLOTS.to_string()]);
        net.spawn(&node, &antler_tests::bin("antler-subagent"), &args, &[]);
        addresses.push(format!("tcp:{}:7104", node.ip));
    }
    let out = Command::new("ip")
        .args(["netns", "exec", &lead.ns])
        .arg(std::env::current_exe().unwrap())
        .env(REMOTE_WORKERS, addresses.join(","))
        .env(REMOTE_CERTS, net.certs())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut rates = Vec::new();
    let mut failed = 0;
    for line in text.lines().filter_map(|l| l.strip_prefix("netns-rate ")) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        rates.push(parts[1].parse::<f64>().unwrap());
        failed += parts[2].parse::<usize>().unwrap();
    }
    if rates.len() != 3 {
        eprintln!(
            "the namespaced run did not finish: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return Some((vec![0.0; 3], 1));
    }
    Some((rates, failed))
}

fn main() -> ExitCode {
    if let Ok(addresses) = std::env::var(REMOTE_WORKERS) {
        return remote_side(addresses);
    }
    let system = actix::System::new();
    let ok = system.block_on(async {
        let rounds = rounds();
        let mut failures = 0;
        let mut rates = Vec::new();
        for workers in [1u32, 2, 4] {
            let tasks = SLOTS as usize * workers as usize * rounds;
            let (rate, failed) = throughput(workers, tasks).await;
            failures += failed;
            println!("throughput: {workers} worker(s), {tasks} tasks of {TURNS} x {TURN_MS} ms turns: {rate:.1} tasks/s");
            rates.push(rate);
        }
        let scale = rates[2] / rates[0];
        let ideal = 1000.0 / (TURNS as f64 * TURN_MS as f64) * SLOTS as f64;
        println!(
            "throughput ratio 4 workers / 1 worker: {scale:.2}x (target >= 3.60x: {}); 1 worker runs at {:.0}% of its ideal {ideal:.1} tasks/s",
            if scale >= 3.6 { "met" } else { "MISSED" },
            rates[0] / ideal * 100.0
        );

        // Dispatch overhead: sequential tasks whose model answers at once.
        let pool = Pool::start(1, SLOTS).await;
        let instant = playbook(1, 0);
        let catalog = bench_catalog();
        let mut overheads = Vec::new();
        for n in 0..200 {
            let (result, first) = pool.task(10_000 + n, &instant, &catalog).await;
            failures += usize::from(result.status != TaskStatus::Completed);
            overheads.push(first);
        }
        pool.stop().await;
        overheads.sort();
        let p50 = overheads[overheads.len() / 2];
        let p99 = overheads[overheads.len() * 99 / 100];
        println!(
            "dispatch overhead (task sent -> first model request, Unix sockets): p50 {:.3} ms, p99 {:.3} ms (target p50 <= 1 ms: {}); events are streamed, where DeerFlow's task tool polls its task every 5 s",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            if p50 <= Duration::from_millis(1) { "met" } else { "MISSED" },
        );

        // 1,000 concurrent idle tasks across 4 workers.
        let concurrent = 1000usize;
        let pool = Arc::new(Pool::start(4, 250).await);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = pool.rss_kib().await;
        let idle = playbook(1, 6000);
        let catalog = bench_catalog();
        let all = futures::future::join_all((0..concurrent).map(|n| {
            let pool = pool.clone();
            let idle = idle.clone();
            let catalog = catalog.clone();
            async move { pool.task(20_000 + n, &idle, &catalog).await.0 }
        }));
        let sampler = {
            let pool = pool.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(4)).await;
                pool.rss_kib().await
            }
        };
        let (results, during) = futures::future::join(all, sampler).await;
        let completed = results
            .iter()
            .filter(|r| r.status == TaskStatus::Completed)
            .count();
        failures += concurrent - completed;
        let per_task = during.saturating_sub(before) as f64 / concurrent as f64;
        println!(
            "{concurrent} concurrent tasks on 4 workers: {completed} completed; worker memory per idle task {per_task:.1} KiB (target <= 64 KiB: {}); {} per worker process, {:.0}x DeerFlow's 3 subagents per process",
            if per_task <= 64.0 { "met" } else { "MISSED" },
            concurrent / 4,
            concurrent as f64 / 4.0 / 3.0
        );
        if let Ok(pool) = Arc::try_unwrap(pool) {
            pool.stop().await;
        }
        failures == 0
    });
    let ok = ok
        && match namespaced() {
            None => {
                println!("throughput over TLS in network namespaces: skipped (creating namespaces needs root)");
                true
            }
            Some((rates, failed)) => {
                let ideal = 1000.0 / (TURNS as f64 * TURN_MS as f64) * SLOTS as f64;
                for (workers, rate) in [1, 2, 4].iter().zip(&rates) {
                    println!("throughput over TLS, workers in network namespaces: {workers} worker(s): {rate:.1} tasks/s");
                }
                let scale = rates[2] / rates[0].max(f64::MIN_POSITIVE);
                println!(
                "throughput ratio over TLS in namespaces, 4 workers / 1 worker: {scale:.2}x = {:.2} of linear (target >= 0.90: {}); 1 worker runs at {:.0}% of its ideal {ideal:.1} tasks/s",
                scale / 4.0,
                if scale / 4.0 >= 0.9 { "met" } else { "MISSED" },
                rates[0] / ideal * 100.0
            );
                failed == 0
            }
        };
    if ok {
        ExitCode::SUCCESS
    } else {
        eprintln!("subagents bench: some tasks did not complete");
        ExitCode::FAILURE
    }
}
