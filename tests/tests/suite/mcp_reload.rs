//! Hot reload of extensions_config.json and the gateway's `GET`/`PUT /api/mcp/config`:
//! added servers start, removed ones stop, changed ones restart, unchanged ones keep their
//! connection (same child pid, no reconnect); a call in flight during an edit completes; a
//! file that fails to parse or disappears keeps the last good set; a `PUT` is validated
//! with DeerFlow's messages, written atomically, and applied without a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::{Read, Write},
    thread,
    time::Duration,
};

use crate::mcp_support::{peer_script, python, stdio, write_config, McpCluster};
use antler_tests::wait_for;
use serde_json::{json, Value};

fn names(c: &McpCluster) -> Vec<String> {
    c.status()
        .iter()
        .map(|s| s["name"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn wait_names(c: &McpCluster, want: &[&str]) {
    let ok = wait_for(Duration::from_secs(15), || (names(c) == want).then_some(()));
    assert!(
        ok.is_some(),
        "servers are {:?}, expected {want:?}",
        names(c)
    );
}

/// One HTTP/1.1 request to the gateway with its bearer token: (status, JSON body).
fn http(c: &McpCluster, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let addr = c.gateway();
    let token = c.cluster.gateway_token();
    let mut s = std::net::TcpStream::connect(&addr).expect("connect to the gateway");
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read");
    let status = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    let body = resp.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn edits_to_the_file_apply_by_difference_and_bad_files_keep_the_last_good_set() {
    let slow = stdio(python(), &[&peer_script("slow_tools.py")]);
    let paged = stdio(python(), &[&peer_script("raw_server.py"), "paged"]);
    let names_srv = stdio(python(), &[&peer_script("raw_server.py"), "bad-names"]);
    let c = McpCluster::start(json!({"slow": slow, "paged": paged}));
    assert_eq!(names(&c), ["slow", "paged"]);
    let slow_pid = c.server_pids("slow_tools.py");
    assert_eq!(slow_pid.len(), 1);

    // A call in flight while the file changes completes.
    let dir = c.runtime_dir();
    let call = thread::spawn(move || {
        antler_tests::antler(
            &dir,
            &[
                "mcp",
                "call",
                "slow",
                "sleep",
                "--args",
                r#"{"seconds": 3}"#,
            ],
        )
    });
    assert!(
        wait_for(Duration::from_secs(15), || (c.server("slow")["in_flight"]
            == 1)
            .then_some(()))
        .is_some()
    );
    // Remove `paged`, add `names`, keep `slow` as it is.
    write_config(&c.config, &json!({"slow": slow, "names": names_srv}));
    wait_names(&c, &["slow", "names"]);
    let out = call.join().expect("call");
    assert!(
        out.status.success(),
        "the call in flight was lost: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "slept 3.0");
    assert_eq!(
        c.server_pids("slow_tools.py"),
        slow_pid,
        "an unchanged server was restarted"
    );
    assert_eq!(c.server("slow")["reconnects"], 0);
    assert!(
        c.server_pids("raw_server.py paged").is_empty(),
        "the removed server's child still runs"
    );
    assert_eq!(c.tool_names("names"), ["names_ok_tool"]);

    // A changed server restarts: a new child.
    let changed = json!({"command": python(), "args": [peer_script("slow_tools.py")], "description": "now described"});
    write_config(&c.config, &json!({"slow": changed, "names": names_srv}));
    let restarted = wait_for(Duration::from_secs(15), || {
        let now = c.server_pids("slow_tools.py");
        (now.len() == 1 && now != slow_pid).then_some(())
    });
    assert!(restarted.is_some(), "the changed server kept its child");
    let (code, _) = c.call("slow", "echo", r#"{"text": "x"}"#);
    assert_eq!(code, 0);

    // A file that does not parse keeps the current servers; so does a deleted file.
    std::fs::write(&c.config, "{ this is not json").expect("write");
    thread::sleep(Duration::from_secs(3));
    assert_eq!(names(&c), ["slow", "names"]);
    std::fs::remove_file(&c.config).expect("rm");
    thread::sleep(Duration::from_secs(3));
    assert_eq!(names(&c), ["slow", "names"]);
    let (code, r) = c.call("slow", "echo", r#"{"text": "still"}"#);
    assert_eq!((code, McpCluster::text(&r)), (0, "still".to_owned()));
}

#[test]
fn the_gateway_serves_and_replaces_the_mcp_config_without_a_restart() {
    let slow = stdio(python(), &[&peer_script("slow_tools.py")]);
    // The operator lets the gateway add stdio servers (off by default).
    let opened = tempfile::tempdir().unwrap();
    let config = opened.path().join("config.yaml");
    std::fs::write(&config, "antler:\n  gateway:\n    allow_stdio_mcp: true\n").unwrap();
    let c = McpCluster::start_with(
        json!({"slow": slow}),
        &[("ANTLER_CONFIG_PATH", config.to_str().unwrap())],
    );
    let (code, body) = http(&c, "GET", "/health", None);
    assert_eq!((code, body["status"].as_str()), (200, Some("ok")));
    let (code, body) = http(&c, "GET", "/api/mcp/config", None);
    assert_eq!(code, 200);
    assert_eq!(
        body["mcp_servers"]["slow"]["args"][0],
        peer_script("slow_tools.py"),
        "{body}"
    );

    // Invalid: DeerFlow's message, 422, and the file is untouched.
    let before = std::fs::read(&c.config).expect("read");
    let bad = json!({"mcp_servers": {"broken": {"type": "stdio"}}});
    let (code, body) = http(&c, "PUT", "/api/mcp/config", Some(&bad));
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["detail"],
        "MCP server 'broken' with stdio transport requires 'command' field"
    );
    assert_eq!(std::fs::read(&c.config).expect("read"), before);

    // Valid: written, and applied by the time the reply comes.
    let paged = stdio(python(), &[&peer_script("raw_server.py"), "paged"]);
    let good = json!({"mcp_servers": {"slow": slow, "paged": paged}});
    let (code, body) = http(&c, "PUT", "/api/mcp/config", Some(&good));
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["applied"]["started"], json!(["paged"]), "{body}");
    assert_eq!(body["applied"]["unchanged"], json!(["slow"]), "{body}");
    let on_disk: Value =
        serde_json::from_slice(&std::fs::read(&c.config).expect("read")).expect("json");
    assert_eq!(on_disk["mcpServers"]["paged"], paged);
    assert_eq!(names(&c), ["slow", "paged"]);
    assert_eq!(c.tool_names("paged").len(), 9);
    // No temporary file is left beside it.
    let leftovers: Vec<_> = std::fs::read_dir(c.config.parent().expect("dir"))
        .expect("dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let (code, body) = http(&c, "GET", "/api/mcp/config", None);
    assert_eq!(code, 200);
    assert!(body["mcp_servers"]["paged"].is_object(), "{body}");
}
