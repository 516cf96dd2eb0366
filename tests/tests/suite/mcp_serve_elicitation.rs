//! Antler's MCP server forwards a downstream server's elicitation to its own client:
//! server-everything's `trigger-elicitation-request` (policy `ask`) called from a member's
//! MCP session (the official MCP Python SDK client, `tests/peers/mcp_serve_client.py`,
//! with an elicitation callback) asks that client `elicitation/create` with the server's
//! message and schema; the client's answer goes back down, and the call's result has it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::lead_support::LeadCluster;
use crate::mcp_support::npm_bin;
use crate::suite::mcp_serve::mcp_driver;
use antler_tests::wait_for;
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";

#[test]
fn a_downstream_elicitation_is_asked_of_the_mcp_client_and_its_answer_goes_back() {
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
    let url = format!("http://{}/mcp", cluster.gateway());
    let answer = json!({"action": "accept", "content": {"name": "Ada Lovelace", "check": true, "integer": 7}});
    let r: Value = mcp_driver(|c| {
        c.args([
            "elicit",
            &url,
            ALICE,
            "asked",
            "everything_trigger-elicitation-request",
            &answer.to_string(),
        ])
    });
    // The client was asked once, with the server's schema.
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
