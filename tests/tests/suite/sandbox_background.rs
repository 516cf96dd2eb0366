//! Processes a command leaves running: `bash "sleep 1000 &"` returns when its shell exits
//! (not at the timeout), the result names what was left running, and those processes are
//! killed when the sandbox is released or once `sandbox.background_lifetime` has passed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::sandbox_support::*;

/// The pid the result names for `command`.
fn named_pid(out: &str, command: &str) -> u32 {
    out.lines()
        .find_map(|l| {
            let rest = l.strip_prefix("- pid ")?;
            let (pid, cmd) = rest.split_once(": ")?;
            (cmd == command).then(|| pid.parse().ok()).flatten()
        })
        .unwrap_or_else(|| panic!("`{command}` is not named: {out}"))
}

async fn running(c: &Client, id: &str, pid: u32) -> bool {
    c.bash(id, &format!("kill -0 {pid} && echo yes || echo no"))
        .await
        .starts_with("yes")
}

#[tokio::test]
async fn a_background_command_returns_at_once_names_its_processes_and_dies_on_release() {
    // bash_command_timeout is 20 s: the old behaviour waited all of it.
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    let started = Instant::now();
    let out = c.bash(&a.sandbox_id, "echo started; sleep 1000 &").await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}: {out}",
        started.elapsed()
    );
    assert!(out.starts_with("started\n"), "{out}");
    assert!(
        out.contains("Still running in the background (killed when the sandbox is released, or after 600 seconds):"),
        "{out}"
    );
    let pid = named_pid(&out, "sleep 1000");
    assert!(!out.contains("timed out"), "{out}");
    assert!(running(&c, &a.sandbox_id, pid).await);
    // A command that leaves nothing says nothing about it.
    assert_eq!(c.bash(&a.sandbox_id, "echo plain").await, "plain\n");
    c.release(&a.sandbox_id).await.expect("release");
    let again = c.acquire("u", "t").await.expect("acquire");
    assert_eq!(again.sandbox_id, a.sandbox_id);
    let mut gone = false;
    for _ in 0..50 {
        if !running(&c, &a.sandbox_id, pid).await {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "sleep 1000 outlived the release");
}

#[tokio::test]
async fn background_processes_die_after_background_lifetime() {
    let cfg = "sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  bash_command_timeout: 20\n  background_lifetime: 2\n";
    let h = SandboxHost::start(cfg);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    let out = c.bash(&a.sandbox_id, "sleep 1000 & sleep 999 &").await;
    assert!(out.contains("or after 2 seconds):"), "{out}");
    let pids = [named_pid(&out, "sleep 1000"), named_pid(&out, "sleep 999")];
    for pid in pids {
        assert!(running(&c, &a.sandbox_id, pid).await);
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut left: Vec<u32> = pids.to_vec();
    for _ in 0..50 {
        let mut still = Vec::new();
        for pid in &left {
            if running(&c, &a.sandbox_id, *pid).await {
                still.push(*pid);
            }
        }
        left = still;
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(left.is_empty(), "{left:?} outlived background_lifetime");
    // The sandbox itself lives on.
    assert_eq!(c.bash(&a.sandbox_id, "echo alive").await, "alive\n");
}
