//! Antler's MCP server in front of a downstream MCP server that needs each user's login
//! (the npm `@modelcontextprotocol/sdk` example server with `--oauth`): once the operator
//! logged in through the gateway (so the server is up and its tools are in the catalog), a
//! member without a login whose MCP session (the official MCP Python SDK client,
//! `tests/peers/mcp_serve_client.py`) calls one of its tools gets a tool error naming the
//! gateway route that starts the member's own login (`POST /api/mcp/{server}/oauth/start`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Duration;

use crate::lead_support::{http_full, LeadCluster};
use crate::mcp_support::oauth_example_server;
use crate::mcp_support::serve::mcp_driver;
use antler_tests::wait_for;
use serde_json::{json, Value};

const BOB: &str = "bob-token-00000000000002";

/// The holder of `token` logs in to `notes` through the gateway, its browser a curl that
/// follows the authorization server's redirects (as `gateway_mcp_oauth` does), and
/// confirms the link.
fn logs_in(addr: &str, token: &str) {
    let start = "/api/mcp/notes/oauth/start";
    let (code, head, text) = http_full(addr, token, "POST", start, Some("{}"));
    assert_eq!(code, 200, "{text}");
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .expect("the start sets the browser's binding cookie")
        .to_owned();
    let body: Value = serde_json::from_str(&text).unwrap();
    let url = body["authorization_url"]
        .as_str()
        .expect("an authorization URL");
    let out = Command::new("curl")
        .args(["-sS", "-L", "--max-time", "30"])
        .args(["-H", "Sec-Fetch-Site: cross-site", "-b"])
        .arg(&cookie)
        .arg(url)
        .output()
        .expect("curl");
    let page = String::from_utf8_lossy(&out.stdout).into_owned();
    let field = |name: &str| {
        let at = page
            .find(&format!("name=\"{name}\" value=\""))
            .unwrap_or_else(|| panic!("no {name} in {page}"))
            + name.len()
            + 15;
        page[at..].split('"').next().unwrap().to_owned()
    };
    let form = format!("nonce={}&cookie={}", field("nonce"), field("cookie"));
    let origin = format!("http://{addr}");
    let (code, page) = antler_tests::http(
        addr,
        "POST",
        "/api/mcp/oauth/confirm",
        &[
            ("Origin", &origin),
            ("Cookie", &cookie),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        Some(&form),
    );
    assert_eq!(code, 200, "{page}");
}

/// One session of `token` on `thread` that lists its tools and calls `notes_greet`.
fn drive(url: &str, token: &str, thread: &str) -> Value {
    mcp_driver(|c| {
        c.args(["call", url, token, thread, "notes_greet"])
            .arg(json!({"name": "Bob"}).to_string())
    })
}

#[test]
fn a_downstream_login_need_is_a_tool_error_naming_the_gateway_route() {
    let (_server, port) = oauth_example_server();
    let config = format!(
        "antler:\n  gateway:\n    tokens:\n      - {{token: {BOB}, user: bob, role: member}}\n"
    );
    let servers = json!({"mcpServers": {
        "notes": {"type": "http", "url": format!("http://localhost:{port}/mcp")}}});
    let cluster = LeadCluster::up_with_files(
        &config,
        &[("extensions_config.json", &servers.to_string())],
        &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")],
    );
    let addr = cluster.gateway();
    logs_in(&addr, &cluster.gateway_token());
    // The server comes up with the operator's login; its tools are then in the catalog.
    let url = format!("http://{addr}/mcp");
    let attempt = std::cell::Cell::new(0);
    let last = std::cell::RefCell::new(Value::Null);
    let listed = wait_for(Duration::from_secs(30), || {
        attempt.set(attempt.get() + 1);
        let r = drive(&url, BOB, &format!("greet-{}", attempt.get()));
        *last.borrow_mut() = r.clone();
        r["tools"]
            .as_array()?
            .contains(&json!("notes_greet"))
            .then_some(r)
    });
    let r = listed.unwrap_or_else(|| panic!("notes_greet never listed: {}", last.borrow()));
    // bob has no login of his own: the call is a tool error naming the gateway's route.
    assert_eq!(r["call"]["is_error"], true, "{r}");
    let text = r["call"]["text"].as_str().unwrap();
    assert!(text.contains("needs a login for user 'bob'"), "{r}");
    assert!(text.contains("POST /api/mcp/notes/oauth/start"), "{r}");
}
