//! Protocol versions (issue 13): Antler proposes `2025-11-25` in `initialize` (never the
//! handshake-less `2026-07-28`), with the roots and elicitation capabilities; a server
//! answering `2025-06-18` or `2024-11-05` is used; one answering a version Antler does not
//! speak is reported failed with a reason naming it; `antler mcp status` shows each
//! server's negotiated version (human and `--json`). Peers: server-everything (stdio and
//! streamable HTTP), the Python SDK server, and the raw stdio server's `answer:` modes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::mcp_support::{everything_http, npm_bin, peer_script, python, stdio, McpCluster};
use antler_tests::wait_for;
use serde_json::{json, Value};

fn raw(mode: &str) -> Value {
    stdio(python(), &[&peer_script("raw_server.py"), mode])
}

#[test]
fn antler_proposes_2025_11_25_and_shows_what_each_server_agreed() {
    let (_http, port) = everything_http("streamableHttp");
    let c = McpCluster::start(json!({
        "everything": stdio(npm_bin("mcp-server-everything").display().to_string(), &[]),
        "everything_http": {"type": "http", "url": format!("http://127.0.0.1:{port}/mcp")},
        "python": stdio(python(), &[&peer_script("slow_tools.py")]),
        "older": raw("answer:2025-06-18"),
        "oldest": raw("answer:2024-11-05"),
        "future": raw("answer:1999-01-01"),
    }));
    let version = |name: &str| {
        let s = c.server(name);
        (s["state"].clone(), s["protocol_version"].clone())
    };
    for name in ["everything", "everything_http", "python"] {
        assert_eq!(
            version(name),
            (json!("ready"), json!("2025-11-25")),
            "{}",
            c.server(name)
        );
    }
    assert_eq!(version("older"), (json!("ready"), json!("2025-06-18")));
    assert_eq!(version("oldest"), (json!("ready"), json!("2024-11-05")));

    // What was proposed, as the server saw it.
    let (code, result) = c.call("older", "initialize", "{}");
    assert_eq!(code, 0, "{result}");
    let init: Value = serde_json::from_str(&McpCluster::text(&result)).unwrap();
    assert_eq!(init["protocolVersion"], "2025-11-25");
    assert_eq!(init["capabilities"]["roots"], json!({"listChanged": true}));
    assert_eq!(init["capabilities"]["elicitation"], json!({"form": {}}));
    assert_eq!(init["clientInfo"]["name"], "antler-mcp-host");

    // A version Antler does not speak is refused, with the reason in status.
    let future = c.server("future");
    assert_eq!(future["state"], "failed", "{future}");
    let why = future["last_error"].as_str().unwrap_or_default();
    assert!(
        why.contains("answered protocol version 1999-01-01, which Antler does not speak (2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25"),
        "{why}"
    );

    // The human table has a PROTOCOL column.
    let out = c.mcp(&["status"]);
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    let header = table.lines().next().unwrap_or_default();
    assert!(header.contains("PROTOCOL"), "{table}");
    let older = table
        .lines()
        .find(|l| l.starts_with("older "))
        .unwrap_or_default();
    assert!(older.contains("2025-06-18"), "{table}");

    // The declared capabilities unlock everything's conditional tools.
    // (everything registers them once initialized and announces them.)
    let wanted = [
        "everything_get-roots-list",
        "everything_trigger-elicitation-request",
    ];
    let listed = wait_for(Duration::from_secs(15), || {
        let names = c.tool_names("everything");
        wanted
            .iter()
            .all(|t| names.iter().any(|n| n == t))
            .then_some(())
    });
    assert!(listed.is_some(), "{:?}", c.tool_names("everything"));
}
