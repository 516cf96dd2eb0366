//! Antler's MCP server forwards a downstream server's elicitation to its own client:
//! server-everything's `trigger-elicitation-request` (policy `ask`) called from a member's
//! MCP session (the official MCP Python SDK client, `tests/peers/mcp_serve_client.py`,
//! with an elicitation callback) asks that client `elicitation/create` with the server's
//! message and schema; the client's answer goes back down, and the call's result has it.
//! The same over stdio: `antler mcp serve --user alice` joined to the running cluster
//! relays the elicitation to its stdio client (the SDK's stdio client) and the answer back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::lead_support::LeadCluster;
use crate::mcp_support::npm_bin;
use crate::suite::mcp_serve::mcp_driver;
use antler_tests::wait_for;
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";

/// A cluster whose mcp-host runs server-everything with elicitation policy `ask`, once
/// server-everything lists its eliciting tool.
fn cluster() -> LeadCluster {
    let config = format!(
        "antler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice, role: member}}\n"
    );
    let servers = json!({"mcpServers": {"everything": {
        "type": "stdio",
        "command": npm_bin("mcp-server-everything").display().to_string(),
        "args": ["stdio"],
        "elicitation": "ask",
    }}});
    let cluster = LeadCluster::up_with_files(
        &config,
        &[("extensions_config.json", &servers.to_string())],
        &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")],
    );
    // server-everything adds its eliciting tool once it knows its client can answer.
    let listed = wait_for(Duration::from_secs(30), || {
        let out = antler_tests::antler(&cluster.runtime(), &["mcp", "status", "--json"]);
        let list: Value = serde_json::from_slice(&out.stdout).ok()?;
        list.as_array()?
            .iter()
            .any(|s| s["name"] == "everything" && s["tools"] == 15)
            .then_some(())
    });
    assert!(listed.is_some(), "server-everything did not list its tools");
    cluster
}

const TOOL: &str = "everything_trigger-elicitation-request";

fn answer() -> String {
    json!({"action": "accept", "content": {"name": "Ada Lovelace", "check": true, "integer": 7}})
        .to_string()
}

/// The client was asked once, with the server's schema, and its answer reached the server.
fn assert_asked_and_answered(r: &Value) {
    let asked = r["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{r}");
    assert!(
        asked[0]["requested_schema"]["properties"]["name"].is_object(),
        "{r}"
    );
    // Its answer reached the server: the call's result has it.
    assert_eq!(r["call"]["is_error"], false, "{r}");
    assert!(
        r["call"]["text"]
            .as_str()
            .unwrap()
            .contains("- Name: Ada Lovelace"),
        "{r}"
    );
}

#[test]
fn a_downstream_elicitation_is_asked_of_the_mcp_client_and_its_answer_goes_back() {
    let cluster = cluster();
    let url = format!("http://{}/mcp", cluster.gateway());
    let r: Value = mcp_driver(|c| c.args(["elicit", &url, ALICE, "asked", TOOL, &answer()]));
    assert_asked_and_answered(&r);
}

#[test]
fn over_stdio_a_downstream_elicitation_is_asked_of_the_client_and_answered() {
    let cluster = cluster();
    let runtime = cluster.runtime().display().to_string();
    let r: Value = mcp_driver(|c| {
        c.args(["elicit-stdio", "asked-over-stdio", TOOL, &answer()])
            .arg(antler_tests::bin("antler"))
            .args(["--runtime-dir", &runtime, "mcp", "serve", "--user", "alice"])
            .env("ANTLER_SANDBOX_BASE_DIR", cluster.base())
    });
    assert_asked_and_answered(&r);
}
