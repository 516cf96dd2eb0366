//! No sandbox process outlives sandbox-host: after `kill -9` or SIGTERM of a sandbox-host
//! with live sandboxes (active, warm, pre-warmed and one still being set up, with processes
//! left running inside and a call in flight), no bubblewrap, supervisor or sandboxed
//! process survives.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::sandbox_support::*;

const CONFIG: &str = "sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  bash_command_timeout: 20\n  prewarm: 1\n";

/// Starts sandboxes with processes left running and returns every process they hold.
async fn live_sandboxes(h: &SandboxHost) -> Vec<ProcessId> {
    let c = h.connect().await;
    let active = c.acquire("u", "active").await.expect("acquire");
    let warm = c.acquire("u", "warm").await.expect("acquire");
    for id in [&active.sandbox_id, &warm.sandbox_id] {
        let out = c
            .bash(id, "sleep 1000 & (setsid sleep 1001 &) ; echo ok")
            .await;
        assert!(out.starts_with("ok\n"), "{out}");
    }
    c.release(&warm.sandbox_id).await.expect("release");
    // A call in flight when the host goes.
    let _in_flight = {
        let c = c.clone();
        let id = active.sandbox_id.clone();
        tokio::spawn(async move {
            let _ = c
                .conn
                .request(
                    antler_protocol::Request::Sandbox(
                        antler_protocol::messages::SandboxRequest::Call {
                            sandbox_id: id,
                            call: antler_protocol::messages::ToolCall {
                                tool: "bash".into(),
                                args: serde_json::json!({"command": "sleep 1002"}).into(),
                                secrets: vec![],
                                clearance: None,
                            },
                            owner: None,
                            call_id: None,
                        },
                    ),
                    antler_protocol::TraceContext::new_root(),
                    Duration::from_secs(60),
                )
                .await;
        })
    };
    // The host, two bubblewraps with their supervisors, the pre-warmed one's pair, the
    // active sandbox's two sleeps (the warm one's died at its release), the call in flight.
    // Polled without blocking the runtime the call in flight runs on.
    let mut ready = false;
    for _ in 0..200 {
        let tree = process_tree(h.pid());
        let flying = tree.iter().any(|(p, _)| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.starts_with(b"sleep\x001002"))
        });
        if tree.len() >= 1 + 6 + 2 && flying {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tree = process_tree(h.pid());
    assert!(ready, "sandboxes did not start: {tree:?}");
    // One more, still being set up when the host goes (its bubblewrap names the base dir).
    c.acquire("u", "fresh").await.expect("acquire");
    tree.into_iter().filter(|(p, _)| *p != h.pid()).collect()
}

fn assert_all_gone(h: &SandboxHost, held: &[ProcessId]) {
    let marker = h.dir.path().display().to_string();
    let gone = antler_tests::wait_for(Duration::from_secs(10), || {
        (still_running(held).is_empty() && processes_naming(&marker).is_empty()).then_some(())
    });
    assert!(
        gone.is_some(),
        "processes outlived sandbox-host: {:?} {:?}",
        still_running(held),
        processes_naming(&marker)
    );
}

#[tokio::test]
async fn kill_9_of_sandbox_host_kills_every_sandbox_namespace() {
    let mut h = SandboxHost::start(CONFIG);
    let held = live_sandboxes(&h).await;
    h.stop_with(libc::SIGKILL);
    assert_all_gone(&h, &held);
}

#[tokio::test]
async fn sigterm_of_sandbox_host_kills_every_sandbox_namespace() {
    let mut h = SandboxHost::start(CONFIG);
    let held = live_sandboxes(&h).await;
    h.stop_with(libc::SIGTERM);
    assert_all_gone(&h, &held);
}
