//! Antler's MCP server forwards a downstream server's elicitation to its own client:
//! server-everything's `trigger-elicitation-request` (policy `ask`) called from a member's
//! MCP session (the official MCP Python SDK client, `tests/peers/mcp_serve_client.py`,
//! with an elicitation callback) asks that client `elicitation/create` with the server's
//! message and schema; the client's answer goes back down, and the call's result has it.
//! The same over stdio: `antler mcp serve --user alice` joined to the running cluster
//! relays the elicitation to its stdio client (the SDK's stdio client) and the answer back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lead_support::LeadCluster;
use crate::mcp_support::serve::{asking_cluster, config, direct_calls, mcp_driver, mcp_url, ALICE};
use serde_json::{json, Value};

/// A cluster whose mcp-host runs server-everything with elicitation policy `ask`, once
/// server-everything lists its eliciting tool.
fn cluster() -> LeadCluster {
    asking_cluster(&config(""), 0)
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
    let url = mcp_url(&cluster);
    let r: Value = mcp_driver(|c| c.args(["elicit", &url, ALICE, "asked", TOOL, &answer()]));
    assert_asked_and_answered(&r);
    // A client that can be asked mid-call has its calls on rmcp's streams, never direct.
    assert_eq!(direct_calls(&cluster), 0);
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
