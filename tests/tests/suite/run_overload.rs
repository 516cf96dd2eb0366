//! The lead under heavy concurrent load (200 `POST /api/runs` at once on this 2-core
//! machine, each run calling a sandbox tool): every submission is accepted (201) or told
//! to come back (503 with `Retry-After`), never refused with a 4xx for the lead's own
//! load; its hosts are never declared dead (no restarts, all healthy); the runs end and
//! the pool holds no lease afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::lead_support::{http_full, LeadCluster};
use antler_tests::wait_for;
use serde_json::{json, Value};

/// Heartbeats every 250 ms, dead after 4 missed (1 s): a lead whose heartbeats wait
/// behind its runs declares its hosts dead within this burst.
const CONFIG: &str = "antler:\n  heartbeat_interval_ms: 250\n  heartbeat_misses: 4\ntools:\n  - {name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\ntool_search:\n  enabled: false\n";

const PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - {name: ls, args: {description: look, path: /mnt/user-data}}
  - content: Looked around.
"#;

const RUNS: usize = 200;
const OUTPUTS: usize = 3000;

#[test]
fn a_burst_of_runs_gets_201_or_503_with_retry_after_and_no_host_is_declared_dead() {
    let c = LeadCluster::up(CONFIG, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let addr = c.gateway();
    let token = c.gateway_token();
    // Each run on a thread of its own (a thread's runs are serialised: a second would be
    // 409), each thread with outputs: a run reads them when it starts and when it settles,
    // work done on the lead's run thread.
    for run in 0..RUNS {
        let outputs = c
            .base()
            .join(format!("users/load/threads/load-{run}/user-data/outputs"));
        std::fs::create_dir_all(&outputs).unwrap();
        for i in 0..OUTPUTS / RUNS {
            std::fs::write(outputs.join(format!("old-{i}.md")), "kept").unwrap();
        }
    }
    let bodies: Vec<String> = (0..RUNS)
        .map(|run| {
            json!({"task": "Look around", "playbook_yaml": PLAYBOOK, "user": "load", "thread": format!("load-{run}")})
                .to_string()
        })
        .collect();
    let replies: Vec<(u16, String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = bodies
            .iter()
            .map(|body| s.spawn(|| http_full(&addr, &token, "POST", "/api/runs", Some(body))))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut accepted = Vec::new();
    let mut busy = 0;
    for (status, head, text) in &replies {
        match status {
            201 => accepted.push(
                serde_json::from_str::<Value>(text).unwrap()["run_id"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            ),
            503 => {
                assert!(
                    head.contains("\r\nretry-after: "),
                    "503 without Retry-After: {head}"
                );
                busy += 1;
            }
            other => panic!("POST /api/runs answered {other} under load: {text}"),
        }
    }
    eprintln!("{} accepted, {busy} told to retry", accepted.len());
    assert!(!accepted.is_empty());

    for run_id in &accepted {
        let ended = wait_for(Duration::from_secs(240), || {
            let status = c.run_status(run_id);
            (status != "running" && !status.is_empty()).then_some(status)
        });
        assert_eq!(
            ended.as_deref(),
            Some("success"),
            "run {run_id}: {:?}",
            c.run_state(run_id)
        );
    }
    let list = c.status().expect("antler status");
    assert!(
        list.iter()
            .all(|p| p["restarts"] == 0 && p["healthy"] == true),
        "a host was declared dead under load: {list:?}"
    );
    let idle = wait_for(Duration::from_secs(30), || {
        let list = c.sandboxes()?;
        list.iter().all(|s| s["state"] != "active").then_some(())
    });
    assert!(idle.is_some(), "{:?}", c.sandboxes());
}
