//! `kill -9` of each child of `antler up` in turn: the supervisor restarts it, it is healthy
//! again in `antler status` within 3 s with a new pid and one more restart, and a request
//! through its link (a ping through the lead) succeeds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use antler_tests::{antler, signal, wait_for, Cluster};

#[test]
fn every_child_killed_is_restarted_and_reachable_again() {
    let c = Cluster::up(2);
    for (role, index) in [
        ("mcp-host", 0),
        ("sandbox-host", 0),
        ("subagent", 0),
        ("subagent", 1),
    ] {
        let before = c.process(role, index).expect("process listed");
        let pid = before["pid"].as_u64().expect("pid") as u32;
        let restarts = before["restarts"].as_u64().expect("restarts");
        signal(pid, libc::SIGKILL);
        let after = wait_for(Duration::from_secs(3), || {
            let p = c.process(role, index)?;
            let new_pid = p["pid"].as_u64()? as u32;
            (new_pid != pid && p["healthy"] == true).then_some(p)
        });
        let after = after.unwrap_or_else(|| {
            panic!(
                "{role}-{index} not healthy within 3 s: {:?}",
                c.process(role, index)
            )
        });
        assert_eq!(
            after["restarts"].as_u64(),
            Some(restarts + 1),
            "{role}: {after}"
        );
        let out = antler(&c.runtime_dir(), &["ping", "--role", role, "--json"]);
        assert!(
            out.status.success(),
            "ping {role}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let pings: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let mine = pings
            .as_array()
            .expect("array")
            .iter()
            .find(|p| p["index"].as_u64() == Some(index))
            .expect("pinged")
            .clone();
        assert_eq!(mine["ok"], true, "{mine}");
    }
    // The others were never disturbed beyond their own kill: one restart each.
    let st = c.status().expect("status");
    for p in st.iter().filter(|p| p["role"] != "lead") {
        assert_eq!(p["restarts"], 1, "{p}");
        assert_eq!(p["healthy"], true, "{p}");
    }
}

#[test]
fn status_json_has_the_documented_keys_and_the_runtime_dir_is_private() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let c = Cluster::up(1);
    let st = c.status().expect("status");
    let roles: Vec<&str> = st
        .iter()
        .map(|p| p["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(roles, ["lead", "mcp-host", "sandbox-host", "subagent"]);
    for p in &st {
        assert!(p["pid"].is_u64(), "{p}");
        assert!(
            p["address"].as_str().unwrap_or("").starts_with("unix:"),
            "{p}"
        );
        assert!(p["healthy"].is_boolean() && p["restarts"].is_u64(), "{p}");
        assert!(
            p["uptime_s"].is_number() && p["last_heartbeat_ms"].is_u64(),
            "{p}"
        );
    }
    let rd = c.runtime_dir();
    assert_eq!(std::fs::metadata(&rd).expect("dir").mode() & 0o777, 0o700);
    for sock in [
        "lead.sock",
        "mcp-host.sock",
        "sandbox-host.sock",
        "subagent-0.sock",
    ] {
        let m = std::fs::metadata(rd.join(sock)).expect("socket");
        assert_eq!(m.permissions().mode() & 0o777, 0o600, "{sock}");
    }
    assert_eq!(
        std::fs::metadata(rd.join("cluster.token"))
            .expect("token")
            .mode()
            & 0o777,
        0o600
    );
    // A second `antler up` on the same directory refuses instead of fighting over sockets.
    let out = antler(&rd, &["up"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already running"));
}
