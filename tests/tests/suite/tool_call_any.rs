//! `antler tool call` runs any catalog tool through the real execution path: an MCP tool of
//! a real server through the lead and mcp-host, `tool_search` on the assembled catalog, and
//! a clear error for a tool the catalog does not have or a builtin that needs a run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::mcp_support::{npm_bin, stdio, McpCluster};
use antler_tests::antler;
use serde_json::json;

#[test]
fn mcp_tools_and_tool_search_run_through_tool_call() {
    let everything = npm_bin("mcp-server-everything").display().to_string();
    let c = McpCluster::start(json!({"everything": stdio(everything, &["stdio"])}));
    let rd = c.runtime_dir();

    let out = antler(
        &rd,
        &[
            "tool",
            "call",
            "everything_echo",
            "--args",
            r#"{"message": "hello antler"}"#,
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "Echo: hello antler");

    let cfg = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(cfg.path(), "tool_search:\n  enabled: true\n").unwrap();
    let cfg = cfg.path().to_str().unwrap();
    let out = antler(
        &rd,
        &[
            "tool",
            "call",
            "tool_search",
            "--args",
            r#"{"query": "select:everything_echo"}"#,
            "--config",
            cfg,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let schemas: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(schemas[0]["name"], "everything_echo");
    assert!(schemas[0]["parameters"]["properties"]["message"].is_object());

    let out = antler(&rd, &["tool", "call", "everything_nope"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`everything_nope` is not a tool `antler tool call` can run")
            && err.contains("everything_echo"),
        "{err}"
    );

    let out = antler(
        &rd,
        &[
            "tool",
            "call",
            "present_files",
            "--args",
            r#"{"filepaths": []}"#,
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("run it inside `antler run`"));
}
