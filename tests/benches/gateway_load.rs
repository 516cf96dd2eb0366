//! The load bench (issue 10): N concurrent runs (default 1,000; `ANTLER_LOAD_RUNS`) of the
//! bundled example's playbook (`examples/report`: tool_search, the everything server's
//! echo through mcp-host, write_file in sandbox-host, present_files) submitted at once
//! through the gateway. A 503 is retried after its `Retry-After`; any other refusal is a
//! failure. Reports the submission and completion times against one run measured alone
//! in the same cluster first, the 503s, the run statuses, host restarts, and the pool
//! after the load (it must hold no lease). Exits 1 when a run fails, a submission gets
//! a 4xx, a host restarted or the pool is not empty.
//!
//! `cd tests && npm ci`, then `cargo build --workspace --bins --release` and
//! `ANTLER_BIN_DIR=target/release cargo bench -p antler-tests --bench gateway_load`
//! (`cargo test -p antler-tests --bench gateway_load` runs it against the debug build).

#![allow(clippy::unwrap_used, clippy::expect_used)]

// The bench uses part of the suites' support module.
#[allow(dead_code)]
#[path = "../tests/lead_support/mod.rs"]
mod lead_support;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use antler_tests::wait_for;
use lead_support::{http_full, LeadCluster};
use serde_json::{json, Value};

/// Submissions of one run before it counts as refused.
const MAX_ATTEMPTS: usize = 30;

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/report")
}

/// Submits one run, retrying 503s after their `Retry-After`: (run id, 503s, time to 201).
fn submit(addr: &str, token: &str, body: &str) -> Result<(String, usize, Duration), String> {
    let started = Instant::now();
    let mut busy = 0;
    for _ in 0..MAX_ATTEMPTS {
        let (status, head, text) = http_full(addr, token, "POST", "/api/runs", Some(body));
        match status {
            201 => {
                let id = serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|v| v["run_id"].as_str().map(str::to_owned))
                    .ok_or_else(|| format!("201 without a run id: {text}"))?;
                return Ok((id, busy, started.elapsed()));
            }
            503 => {
                busy += 1;
                let after = head
                    .lines()
                    .find_map(|l| l.strip_prefix("retry-after: "))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .ok_or_else(|| format!("503 without Retry-After: {head}"))?;
                std::thread::sleep(Duration::from_secs(after));
            }
            other => return Err(format!("{other}: {text}")),
        }
    }
    Err(format!("still 503 after {MAX_ATTEMPTS} attempts"))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn wait_ended(c: &LeadCluster, run_id: &str, within: Duration) -> String {
    wait_for(within, || {
        let status = c.run_status(run_id);
        (status != "running" && !status.is_empty()).then_some(status)
    })
    .unwrap_or_else(|| "running".into())
}

fn main() -> ExitCode {
    let runs: usize = std::env::var("ANTLER_LOAD_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let everything =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("node_modules/.bin/mcp-server-everything");
    if !everything.exists() {
        eprintln!(
            "{} is missing: run `cd tests && npm ci`",
            everything.display()
        );
        return ExitCode::FAILURE;
    }
    let config =
        std::fs::read_to_string(example().join("config.yaml")).expect("the example's config");
    let staging = tempfile::tempdir().expect("tempdir");
    let extensions = staging.path().join("extensions_config.json");
    std::fs::write(
        &extensions,
        json!({"mcpServers": {"everything": {"type": "stdio", "command": everything, "args": ["stdio"]}}}).to_string(),
    )
    .expect("extensions");
    let c = LeadCluster::up(
        &config,
        &[
            ("ANTLER_GATEWAY_ADDR", "127.0.0.1:0"),
            (
                "ANTLER_EXTENSIONS_CONFIG_PATH",
                extensions.to_str().expect("utf-8 path"),
            ),
        ],
    );
    let addr = c.gateway();
    let token = c.gateway_token();
    let playbook =
        std::fs::read_to_string(example().join("playbook.yaml")).expect("the example's playbook");
    let body = |i: usize| {
        // A thread each: a thread's runs are serialised (a second would be 409); the
        // sandbox pool makes runs beyond its capacity wait for a sandbox.
        json!({"task": "Write a short report", "playbook_yaml": playbook, "user": "load", "thread": format!("t{i}")})
            .to_string()
    };

    // The baseline: one run alone.
    let t = Instant::now();
    let (alone, _, alone_submit) = match submit(&addr, &token, &body(0)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("the baseline run was refused: {e}");
            return ExitCode::FAILURE;
        }
    };
    let alone_status = wait_ended(&c, &alone, Duration::from_secs(120));
    let alone_total = t.elapsed();
    println!(
        "baseline: 1 run, submitted in {alone_submit:?}, {alone_status} after {alone_total:?}"
    );

    // The load: every run submitted at once, while the lead's view of its hosts'
    // heartbeats is sampled.
    let loaded = AtomicBool::new(true);
    let silence_ms = AtomicU64::new(0);
    let t = Instant::now();
    let (submitted, statuses, submit_wall, refused) = std::thread::scope(|outer| {
        outer.spawn(|| {
            while loaded.load(Ordering::SeqCst) {
                for p in c.status().unwrap_or_default() {
                    if p["role"] != "lead" {
                        let heard = p["last_heartbeat_ms"].as_u64().unwrap_or(0);
                        silence_ms.fetch_max(heard, Ordering::SeqCst);
                    }
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        });
        let refused = AtomicUsize::new(0);
        let submitted: Vec<(String, usize, Duration)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..runs)
                .map(|i| {
                    let (addr, token, body, refused) = (&addr, &token, body(i), &refused);
                    s.spawn(move || match submit(addr, token, &body) {
                        Ok(r) => Some(r),
                        Err(e) => {
                            if refused.fetch_add(1, Ordering::SeqCst) < 5 {
                                eprintln!("refused: {e}");
                            }
                            None
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .filter_map(|h| h.join().ok().flatten())
                .collect()
        });
        let submit_wall = t.elapsed();
        let mut statuses = std::collections::BTreeMap::<String, usize>::new();
        for (run_id, ..) in &submitted {
            *statuses
                .entry(wait_ended(&c, run_id, Duration::from_secs(900)))
                .or_default() += 1;
        }
        loaded.store(false, Ordering::SeqCst);
        (submitted, statuses, submit_wall, refused)
    });
    let total_wall = t.elapsed();
    let mut times: Vec<Duration> = submitted.iter().map(|(_, _, d)| *d).collect();
    times.sort();
    let retried = submitted.iter().filter(|(_, b, _)| *b > 0).count();
    let busy: usize = submitted.iter().map(|(_, b, _)| b).sum();
    let restarts: u64 = c
        .status()
        .unwrap_or_default()
        .iter()
        .map(|p| p["restarts"].as_u64().unwrap_or(0))
        .sum();
    let pool_empty = wait_for(Duration::from_secs(60), || {
        let list = c.sandboxes()?;
        list.iter().all(|s| s["state"] != "active").then_some(())
    })
    .is_some();
    let refused = refused.load(Ordering::SeqCst);
    let succeeded = statuses.get("success").copied().unwrap_or(0);
    let per_run = total_wall.as_secs_f64() / runs.max(1) as f64;
    println!("load: {runs} runs at once through POST /api/runs");
    println!(
        "  submissions: {} accepted ({retried} after {busy} 503s), {refused} refused; all in {submit_wall:?}",
        submitted.len()
    );
    println!(
        "  time to 201: p50 {:?}, p99 {:?}, max {:?} ({:.1}x / {:.1}x the baseline's {alone_submit:?})",
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        percentile(&times, 1.0),
        percentile(&times, 0.5).as_secs_f64() / alone_submit.as_secs_f64().max(1e-6),
        percentile(&times, 0.99).as_secs_f64() / alone_submit.as_secs_f64().max(1e-6),
    );
    println!(
        "  runs: {statuses:?}; all ended after {total_wall:?} ({:.1} runs/s; {:.2}x the baseline run's time per run)",
        runs as f64 / total_wall.as_secs_f64().max(1e-6),
        per_run / alone_total.as_secs_f64().max(1e-6),
    );
    println!(
        "  longest silence of a host the lead saw: {} ms (dead after 3,000 ms)",
        silence_ms.load(Ordering::SeqCst)
    );
    println!("  host restarts: {restarts}; pool empty afterwards: {pool_empty}");
    if refused > 0 || succeeded != runs || restarts > 0 || !pool_empty {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
