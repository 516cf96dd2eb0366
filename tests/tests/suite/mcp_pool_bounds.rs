//! The stdio session pool's bounds (issue 10, item 17; `antler.mcp_pool` in config.yaml):
//! past `max_sessions` the least recently used session's server is stopped, a session
//! unused for `idle_timeout_s` is stopped, and past `max_rss_mb` (resident memory summed
//! over the pooled servers) the pool sheds sessions even before they are idle. The base
//! session is not pooled and stays; the pool drains back to zero.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, time::Duration};

use crate::mcp_support::{peer_script, python, stdio, McpCluster};
use antler_tests::{alive, wait_for};
use serde_json::{json, Value};

/// `where` on the pooled session of (user, thread): its pid.
fn pooled_pid(c: &McpCluster, user: &str, thread: &str, ws: &Path) -> u32 {
    std::fs::create_dir_all(ws).unwrap();
    let ws = ws.display().to_string();
    let out = c.mcp(&[
        "call",
        "py",
        "where",
        "--user",
        user,
        "--thread",
        thread,
        "--workspace",
        &ws,
    ]);
    assert!(
        out.status.success(),
        "{} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("where json");
    v["pid"].as_u64().expect("pid") as u32
}

fn base_pid(c: &McpCluster) -> u32 {
    let out = c.mcp(&["call", "py", "where"]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("where json");
    v["pid"].as_u64().expect("pid") as u32
}

/// A cluster with the `py` server and config.yaml's `antler.mcp_pool` set to `pool`.
fn cluster(pool: &str) -> (McpCluster, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, format!("antler:\n  mcp_pool: {pool}\n")).unwrap();
    let c = McpCluster::start_with(
        json!({"py": stdio(python(), &[&peer_script("slow_tools.py")])}),
        &[("ANTLER_CONFIG_PATH", config.to_str().unwrap())],
    );
    (c, dir)
}

#[test]
fn the_pool_holds_its_count_cap_and_stops_idle_sessions() {
    let (c, dir) = cluster("{idle_timeout_s: 8, max_sessions: 2}");
    let base = base_pid(&c);
    let p1 = pooled_pid(&c, "alice", "t1", &dir.path().join("t1"));
    let p2 = pooled_pid(&c, "alice", "t2", &dir.path().join("t2"));
    let p3 = pooled_pid(&c, "alice", "t3", &dir.path().join("t3"));
    let pids = [base, p1, p2, p3];
    for (i, p) in pids.iter().enumerate() {
        assert!(!pids[i + 1..].contains(p), "sessions are shared: {pids:?}");
    }
    // Two sessions at most: the least recently used one went.
    let gone = wait_for(Duration::from_secs(10), || (!alive(p1)).then_some(()));
    assert!(gone.is_some(), "the third session did not evict the first");
    assert!(alive(p2) && alive(p3), "the two most recent sessions stay");
    assert_eq!(
        c.server_pids("slow_tools.py").len(),
        3,
        "base + 2 pooled: {:?}",
        c.server_pids("slow_tools.py")
    );
    // Unused for the idle timeout, they go; the base session stays.
    let drained = wait_for(Duration::from_secs(40), || {
        (!alive(p2) && !alive(p3)).then_some(())
    });
    assert!(drained.is_some(), "idle sessions outlived the idle timeout");
    assert_eq!(c.server_pids("slow_tools.py"), [base]);
    // A pair comes back with a new session.
    let again = pooled_pid(&c, "alice", "t2", &dir.path().join("t2"));
    assert_ne!(again, p2);
    assert!(alive(again));
}

#[test]
fn past_the_memory_cap_sessions_go_before_they_are_idle() {
    // A Python server's resident memory alone is past 1 MiB.
    let (c, dir) = cluster("{idle_timeout_s: 600, max_sessions: 256, max_rss_mb: 1}");
    let base = base_pid(&c);
    let p = pooled_pid(&c, "bob", "t1", &dir.path().join("t1"));
    let gone = wait_for(Duration::from_secs(30), || (!alive(p)).then_some(()));
    assert!(
        gone.is_some(),
        "the pool kept a session past its memory cap"
    );
    assert_eq!(c.server_pids("slow_tools.py"), [base]);
}
