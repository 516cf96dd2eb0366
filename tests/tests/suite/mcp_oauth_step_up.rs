//! Step-up on 403 `insufficient_scope` (the MCP authorization spec), with a retry limit:
//! client_credentials at a discovered token endpoint (`peers/oauth_strict_issuer.mjs`, which
//! never grants scope `root`) for Python SDK servers whose 403 challenge names the scopes
//! they need (`peers/oauth_server.py`). `admin` needs `mcp admin`: the configured `mcp`
//! is refused, the client asks again with the challenged scopes and the call succeeds.
//! `root` needs `mcp root`, which is never granted: after [`MAX_STEP_UPS`] step-ups the
//! server is failed with rmcp's `Insufficient scope`, and no further token is asked for.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, process::Command, time::Duration};

use crate::mcp_support::{free_port, npm_bin, peer_script, python, spawn_peer, McpCluster, Peer};
use serde_json::{json, Value};

/// mcp-host's limit (`antler_mcp_host::oauth::discovered::MAX_STEP_UPS`).
const MAX_STEP_UPS: usize = 2;

fn issuer(log: &Path) -> (Peer, u16) {
    let _ = npm_bin("oauth2-mock-server");
    let port = free_port();
    let peer = spawn_peer(
        Command::new("node")
            .arg(peer_script("oauth_strict_issuer.mjs"))
            .arg(port.to_string())
            .arg(log)
            .args(["--deny-scope", "root"]),
        "the issuer",
        &[port],
    );
    (peer, port)
}

fn scoped_server(issuer_port: u16, scopes: &str) -> (Peer, u16) {
    let port = free_port();
    let peer = spawn_peer(
        Command::new(python()).args([
            &peer_script("oauth_server.py"),
            &port.to_string(),
            &issuer_port.to_string(),
            scopes,
        ]),
        "the scoped server",
        &[port],
    );
    (peer, port)
}

fn requests_of(log: &Path, client: &str) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["client_id"] == client)
        .collect()
}

#[test]
fn a_403_insufficient_scope_steps_up_at_most_twice() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("tokens.jsonl");
    let (_issuer, iport) = issuer(&log);
    let (_admin, admin_port) = scoped_server(iport, "mcp admin");
    let (_root, root_port) = scoped_server(iport, "mcp root");
    let oauth = |id: &str| {
        json!({"grant_type": "client_credentials", "client_id": id,
               "client_secret": "step-up-secret", "scope": "mcp"})
    };
    let c = McpCluster::start(json!({
        "admin": {"type": "http", "url": format!("http://127.0.0.1:{admin_port}/mcp"), "oauth": oauth("cc-admin")},
        "root": {"type": "http", "url": format!("http://127.0.0.1:{root_port}/mcp"), "oauth": oauth("cc-root")},
    }));

    // admin: `mcp` is refused with a challenge for `mcp admin`; the second token has it.
    let (code, r) = c.call("admin", "whoami", "{}");
    assert_eq!(code, 0, "{r}");
    assert_eq!(McpCluster::text(&r), "cc-admin mcp admin", "{r}");
    let reqs = requests_of(&log, "cc-admin");
    let asked: Vec<&str> = reqs
        .iter()
        .map(|r| r["requested_scope"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(asked, ["mcp", "mcp admin"], "{reqs:?}");

    // root: never granted. The first token and MAX_STEP_UPS step-ups, then the 403 stands.
    let st = c.server("root");
    assert_eq!(st["state"], "failed", "{st}");
    let why = st["last_error"].as_str().unwrap_or("");
    assert!(why.contains("Insufficient scope"), "{st}");
    let (code, r) = c.call("root", "whoami", "{}");
    assert_ne!(code, 0, "{r}");
    assert!(McpCluster::text(&r).contains("Insufficient scope"), "{r}");
    // Reconnects keep coming with their backoff; none asks for another token.
    std::thread::sleep(Duration::from_secs(6));
    let reqs = requests_of(&log, "cc-root");
    assert_eq!(reqs.len(), 1 + MAX_STEP_UPS, "{reqs:?}");
    assert!(
        reqs.iter().all(|r| r["granted_scope"] == "mcp"),
        "root was granted: {reqs:?}"
    );
    assert!(
        reqs[1..].iter().all(|r| r["requested_scope"] == "mcp root"),
        "{reqs:?}"
    );
}
