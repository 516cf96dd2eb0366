//! The stdio session pool (spec 5.3): a call for a user and thread runs on that pair's own
//! session of the server, started in the thread's workspace with TMPDIR under
//! `workspace/.mcp/tmp` (mode 0700); the same pair gets the same session back, another
//! pair or no pair gets another; a configured `env` wins over the pool's TMPDIR.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;

use crate::mcp_support::{peer_script, python, stdio, McpCluster};
use serde_json::{json, Value};

fn where_(c: &McpCluster, server: &str, pair: Option<(&str, &str, &std::path::Path)>) -> Value {
    let mut args = vec!["call".to_owned(), server.to_owned(), "where".to_owned()];
    if let Some((user, thread, ws)) = pair {
        args.extend([
            "--user".into(),
            user.into(),
            "--thread".into(),
            thread.into(),
            "--workspace".into(),
            ws.display().to_string(),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = c.mcp(&args);
    assert!(
        out.status.success(),
        "{} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("where json")
}

#[test]
fn each_user_thread_pair_gets_its_own_session_in_its_workspace() {
    let ws = tempfile::tempdir().expect("tempdir");
    let (w1, w2) = (ws.path().join("t1"), ws.path().join("t2"));
    std::fs::create_dir_all(&w1).expect("mkdir");
    std::fs::create_dir_all(&w2).expect("mkdir");
    let c = McpCluster::start(json!({
        "py": stdio(python(), &[&peer_script("slow_tools.py")]),
        "pinned": {"command": python(), "args": [peer_script("slow_tools.py")], "env": {"TMPDIR": "/var/tmp"}},
    }));
    let base = where_(&c, "py", None);
    let a1 = where_(&c, "py", Some(("alice", "t1", &w1)));
    assert_eq!(a1["cwd"], w1.display().to_string());
    let tmp = w1.join(".mcp/tmp");
    assert_eq!(a1["tmpdir"], tmp.display().to_string());
    assert_eq!(
        std::fs::metadata(&tmp).expect("tmp").permissions().mode() & 0o777,
        0o700
    );
    let a2 = where_(&c, "py", Some(("alice", "t2", &w2)));
    assert_eq!(a2["cwd"], w2.display().to_string());
    let again = where_(&c, "py", Some(("alice", "t1", &w1)));
    let bob = where_(&c, "py", Some(("bob", "t1", &w1)));
    assert_eq!(again["pid"], a1["pid"], "the same pair reuses its session");
    let pids = [&base["pid"], &a1["pid"], &a2["pid"], &bob["pid"]];
    for (i, p) in pids.iter().enumerate() {
        for q in &pids[i + 1..] {
            assert_ne!(p, q, "sessions are shared between pairs: {pids:?}");
        }
    }
    // The operator's env wins over the pool's TMPDIR.
    let pinned = where_(&c, "pinned", Some(("alice", "t1", &w1)));
    assert_eq!(pinned["tmpdir"], "/var/tmp");
    assert_eq!(pinned["cwd"], w1.display().to_string());
}
