//! The stateless `2026-07-28` era (issue 13): a server configured `"protocol": "auto"` is
//! probed with `server/discover`; one that serves the new era (the Python SDK 2.3.0 server
//! `stateless_tools.py`, over stdio and streamable HTTP) is listed and called in it, and
//! `antler mcp status` shows `2026-07-28` and the `discover` lifecycle. A server that only
//! knows `initialize` (server-everything: -32601 over stdio, HTTP 400 over streamable HTTP)
//! falls back on a fresh connection and shows what it answered, as does one that never
//! answers `server/discover` (after the 10 s probe window); the lifecycle chosen is kept,
//! so a reconnect does not probe again. The default (`legacy`) never probes. An unknown
//! `protocol` value is refused by name, with the accepted values. In the new era a tool
//! list change arrives on a `subscriptions/listen` stream and is listed without a reconnect.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, process::Command, time::Duration};

use crate::mcp_support::{
    config_check_refused, everything_http, free_port, npm_bin, peer_script, python, spawn_peer,
    McpCluster,
};
use antler_tests::wait_for;
use serde_json::{json, Value};

/// A stdio entry whose command first appends a line to `log`, so each start is counted.
fn counted(log: &Path, command: &str, protocol: Option<&str>) -> Value {
    let mut entry = json!({
        "type": "stdio",
        "command": "sh",
        "args": ["-c", format!("echo start >> '{}'; exec {command}", log.display())],
    });
    if let Some(p) = protocol {
        entry["protocol"] = json!(p);
    }
    entry
}

fn starts(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// (state, protocol_version, lifecycle) of one server.
fn era(c: &McpCluster, name: &str) -> (Value, Value, Value) {
    let s = c.server(name);
    (
        s["state"].clone(),
        s["protocol_version"].clone(),
        s["lifecycle"].clone(),
    )
}

/// The protocol version the `era` tool's call arrived under, as the server saw it.
fn called_under(c: &McpCluster, server: &str) -> String {
    let (code, result) = c.call(server, "era", r#"{"text": "hi"}"#);
    assert_eq!(code, 0, "{result}");
    let said: Value = serde_json::from_str(&McpCluster::text(&result)).unwrap();
    assert_eq!(said["text"], "hi", "{said}");
    said["protocol_version"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Kills the stdio server whose command line contains `needle` and waits until the actor
/// has reconnected.
fn kill_and_await_reconnect(c: &McpCluster, name: &str, needle: &str) {
    let pids = c.server_pids(needle);
    assert!(!pids.is_empty(), "no {needle} under mcp-host");
    for pid in pids {
        antler_tests::signal(pid, libc::SIGKILL);
    }
    let back = wait_for(Duration::from_secs(30), || {
        let s = c.server(name);
        (s["state"] == "ready" && s["reconnects"].as_u64() >= Some(1)).then_some(())
    });
    assert!(back.is_some(), "{}", c.server(name));
}

#[test]
fn auto_uses_the_stateless_era_where_offered_and_initialize_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let (stateless_log, everything_log, legacy_log, deaf_log) = (
        dir.path().join("stateless.log"),
        dir.path().join("everything.log"),
        dir.path().join("legacy.log"),
        dir.path().join("deaf.log"),
    );
    let python = python();
    // The argument after the script only tells the two stdio servers apart.
    let script = peer_script("stateless_tools.py");
    let (stateless, legacy) = (
        format!("{python} {script} auto"),
        format!("{python} {script} legacy"),
    );
    let everything = format!("{} stdio", npm_bin("mcp-server-everything").display());
    let deaf = format!("{python} {} deaf-to-discover", peer_script("raw_server.py"));

    let port = free_port();
    let _stateless_http = spawn_peer(
        Command::new(&python).args([
            &peer_script("stateless_tools.py"),
            "--http",
            &port.to_string(),
        ]),
        "stateless_tools.py --http",
        &[port],
    );
    let (_everything_http, everything_port) = everything_http("streamableHttp");

    let c = McpCluster::start(json!({
        "stateless": counted(&stateless_log, &stateless, Some("auto")),
        "stateless_http": {
            "type": "http",
            "url": format!("http://127.0.0.1:{port}/mcp"),
            "protocol": "auto",
        },
        "everything": counted(&everything_log, &everything, Some("auto")),
        "everything_http": {
            "type": "http",
            "url": format!("http://127.0.0.1:{everything_port}/mcp"),
            "protocol": "auto",
        },
        "legacy": counted(&legacy_log, &legacy, None),
        "deaf": counted(&deaf_log, &deaf, Some("auto")),
    }));

    // The new era where the server offers it, over stdio and streamable HTTP: listed,
    // called, and the server saw the call under 2026-07-28.
    let modern = (json!("ready"), json!("2026-07-28"), json!("discover"));
    for name in ["stateless", "stateless_http"] {
        assert_eq!(era(&c, name), modern, "{}", c.server(name));
        assert_eq!(
            c.tool_names(name),
            [format!("{name}_era"), format!("{name}_grow")]
        );
        assert_eq!(called_under(&c, name), "2026-07-28");
    }

    // A server of the handshake era falls back at once (-32601 over stdio, HTTP 400 over
    // streamable HTTP) and works as before.
    let handshake = (json!("ready"), json!("2025-11-25"), json!("initialize"));
    for name in ["everything", "everything_http"] {
        assert_eq!(era(&c, name), handshake, "{}", c.server(name));
        let (code, result) = c.call(name, "echo", r#"{"message": "still here"}"#);
        assert_eq!(code, 0, "{result}");
        assert!(McpCluster::text(&result).contains("still here"), "{result}");
    }
    // The probe's child and then a fresh one for `initialize`.
    assert_eq!(starts(&everything_log), 2);

    // No answer to `server/discover` within the window: the same, after it.
    assert_eq!(era(&c, "deaf"), handshake, "{}", c.server("deaf"));
    assert_eq!(starts(&deaf_log), 2);
    assert_eq!(c.tool_names("deaf"), ["deaf_echo"]);

    // The default never probes: one start, the handshake, and the same server answers in
    // the old era.
    assert_eq!(era(&c, "legacy"), handshake, "{}", c.server("legacy"));
    assert_eq!(starts(&legacy_log), 1);
    assert_eq!(called_under(&c, "legacy"), "2025-11-25");
    assert_eq!(starts(&stateless_log), 1);

    // The human table shows the version and the lifecycle.
    let out = c.mcp(&["status"]);
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table
            .lines()
            .next()
            .unwrap_or_default()
            .contains("LIFECYCLE"),
        "{table}"
    );
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("stateless")[3..5],
        ["2026-07-28", "discover"],
        "{table}"
    );
    assert_eq!(
        row("everything")[3..5],
        ["2025-11-25", "initialize"],
        "{table}"
    );

    // A reconnect keeps the era that worked: one new start each, no second probe.
    kill_and_await_reconnect(&c, "everything", "mcp-server-everything stdio");
    assert_eq!(starts(&everything_log), 3);
    assert_eq!(era(&c, "everything"), handshake);
    kill_and_await_reconnect(&c, "stateless", "stateless_tools.py auto");
    assert_eq!(starts(&stateless_log), 2);
    assert_eq!(era(&c, "stateless"), modern);
    assert_eq!(called_under(&c, "stateless"), "2026-07-28");
}

#[test]
fn an_unknown_protocol_value_is_refused_with_what_is_accepted() {
    let server = json!({"type": "stdio", "command": "true", "protocol": "stateless"});
    let said = config_check_refused(&json!({"odd": server}));
    assert!(
        said.contains(
            "mcpServers.odd.protocol: unknown variant `stateless`, expected `legacy` or `auto`"
        ),
        "{said}"
    );
}

/// In the new era list changes ride a `subscriptions/listen` stream: a server that adds a
/// tool and says so has it listed without a reconnect.
#[test]
fn a_stateless_server_tells_its_list_changes_on_a_listen_stream() {
    let c = McpCluster::start(json!({
        "stateless": {
            "type": "stdio",
            "command": python(),
            "args": [peer_script("stateless_tools.py")],
            "protocol": "auto",
        },
    }));
    assert_eq!(
        c.server("stateless")["lifecycle"],
        "discover",
        "{}",
        c.server("stateless")
    );
    assert!(!c
        .tool_names("stateless")
        .iter()
        .any(|t| t.contains("grown")));
    let (code, result) = c.call("stateless", "grow", "{}");
    assert_eq!(code, 0, "{result}");
    let listed = wait_for(Duration::from_secs(15), || {
        c.tool_names("stateless")
            .iter()
            .any(|t| t.contains("grown"))
            .then_some(())
    });
    assert!(
        listed.is_some(),
        "the new tool was not listed: {:?}",
        c.tool_names("stateless")
    );
    assert_eq!(
        c.server("stateless")["reconnects"],
        0,
        "{}",
        c.server("stateless")
    );
}
