//! client_credentials with no `token_url`: the token endpoint is discovered from the
//! server's 401 (protected-resource metadata, then the issuer's metadata) on rmcp's auth
//! support, and the request carries the `resource` and the configured scope. Real peers:
//! oauth2-mock-server and a Python SDK MCPServer verifying its JWTs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use crate::mcp_support::{
    free_port, npm_bin, peer_script, python, spawn_peer, wait_port, McpCluster, Peer,
};
use serde_json::{json, Value};

fn issuer(log: &Path) -> (Peer, u16) {
    let _ = npm_bin("oauth2-mock-server");
    let port = free_port();
    let peer = spawn_peer(
        Command::new("node")
            .arg(peer_script("oauth_issuer.mjs"))
            .arg(port.to_string())
            .arg("3600")
            .arg(log),
        "the issuer",
        &[port],
    );
    (peer, port)
}

#[test]
fn client_credentials_discovers_the_token_endpoint() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("tokens.jsonl");
    let (_issuer, iport) = issuer(&log);
    let sport = free_port();
    let _server = Peer(
        Command::new(python())
            .args([
                &peer_script("oauth_server.py"),
                &sport.to_string(),
                &iport.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the secure server"),
    );
    wait_port(sport, Duration::from_secs(20));
    let url = format!("http://127.0.0.1:{sport}/mcp");
    let c = McpCluster::start(json!({
        "secure": {"type": "http", "url": url, "oauth": {
            "grant_type": "client_credentials", "client_id": "antler-discovered",
            "client_secret": "discovered-secret", "scope": "mcp"}},
    }));
    let (code, r) = c.call("secure", "whoami", "{}");
    assert_eq!(
        (code, McpCluster::text(&r)),
        (0, "antler-discovered".to_owned()),
        "{r}"
    );
    let reqs: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert_eq!(reqs[0]["grant_type"], "client_credentials");
    assert_eq!(reqs[0]["scope"], "mcp");
    assert_eq!(reqs[0]["resource"], url);
    assert_eq!(reqs[0]["has_secret"], true);
    // A second call reuses the cached token: no new token request.
    let (code, r) = c.call("secure", "whoami", "{}");
    assert_eq!(code, 0, "{r}");
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 1);
}
