//! OAuth for MCP (spec 5.4) against real peers: oauth2-mock-server issuing RS256 JWTs and
//! a Python SDK MCPServer verifying them against the issuer's JWKS. client_credentials with
//! `$VAR` secrets and reserved fields overriding `extra_token_params`; a token the server
//! rejects (401) is refreshed once, by one request however many calls wait; the
//! refresh_token grant keeps a rotated refresh token in memory; no secret reaches a log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, process::Command, thread, time::Duration};

use crate::mcp_support::{free_port, npm_bin, peer_script, python, spawn_peer, McpCluster, Peer};
use serde_json::{json, Value};

const SECRET: &str = "s3cret-value-never-logged";

fn node() -> String {
    // The npm peers' own node: whatever runs tests/node_modules/.bin scripts.
    let _ = npm_bin("oauth2-mock-server");
    "node".into()
}

/// The issuer (tokens valid `ttl` s; `expires_in` overridden when given) and its log.
fn issuer(ttl: u32, expires_in: Option<u32>, log: &Path) -> (Peer, u16) {
    let port = free_port();
    let mut cmd = Command::new(node());
    cmd.arg(peer_script("oauth_issuer.mjs"))
        .arg(port.to_string())
        .arg(ttl.to_string())
        .arg(log);
    if let Some(e) = expires_in {
        cmd.args(["--expires-in", &e.to_string()]);
    }
    let peer = spawn_peer(&mut cmd, "the issuer", &[port]);
    (peer, port)
}

fn secure_server(issuer_port: u16) -> (Peer, u16) {
    let port = free_port();
    let peer = spawn_peer(
        Command::new(python()).args([
            &peer_script("oauth_server.py"),
            &port.to_string(),
            &issuer_port.to_string(),
        ]),
        "the secure server",
        &[port],
    );
    (peer, port)
}

fn token_requests(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("log line"))
        .collect()
}

fn no_secret_in(dir: &Path) {
    let logs = walk(dir);
    let host_log = logs
        .iter()
        .find(|p| p.ends_with("mcp-host.log"))
        .expect("mcp-host.log");
    let text = std::fs::read_to_string(host_log).unwrap_or_default();
    assert!(
        text.contains("secure"),
        "mcp-host.log says nothing about the server: the check would be vacuous"
    );
    for e in logs {
        let text = std::fs::read(&e)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        assert!(
            !text.contains(SECRET),
            "the client secret appears in {}",
            e.display()
        );
        assert!(!text.contains("eyJ"), "a JWT appears in {}", e.display());
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "log") {
            out.push(p);
        }
    }
    out
}

#[test]
fn client_credentials_tokens_are_sent_refreshed_once_on_401_and_never_logged() {
    let logs = tempfile::tempdir().expect("tempdir");
    let log = logs.path().join("tokens.jsonl");
    // The JWT lives 5 s but the endpoint claims an hour: only the server's 401 tells.
    let (_issuer, iport) = issuer(5, Some(3600), &log);
    let (_server, sport) = secure_server(iport);
    let url = format!("http://127.0.0.1:{sport}/mcp");
    let c = McpCluster::start_with(
        json!({
            "secure": {"type": "http", "url": url, "oauth": {
                "token_url": format!("http://127.0.0.1:{iport}/token"),
                "client_id": "antler-test", "client_secret": "$ANTLER_TEST_OAUTH_SECRET", "scope": "mcp",
                "extra_token_params": {"resource": "https://mcp.example", "scope": "evil"}}},
            "anonymous": {"type": "http", "url": url},
        }),
        &[("ANTLER_TEST_OAUTH_SECRET", SECRET), ("RUST_LOG", "debug")],
    );
    assert_eq!(c.tool_names("secure"), ["secure_whoami"]);
    let (code, r) = c.call("secure", "whoami", "{}");
    assert_eq!(
        (code, McpCluster::text(&r)),
        (0, "antler-test".to_owned()),
        "{r}"
    );
    let reqs = token_requests(&log);
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert_eq!(reqs[0]["grant_type"], "client_credentials");
    assert_eq!(reqs[0]["client_id"], "antler-test");
    assert_eq!(
        reqs[0]["scope"], "mcp",
        "the reserved scope overrides extra_token_params"
    );
    assert_eq!(reqs[0]["resource"], "https://mcp.example");
    assert_eq!(reqs[0]["has_secret"], true);
    // Without a token the server answers 401 and the server is reported failed.
    let anon = c.server("anonymous");
    assert_eq!(anon["state"], "failed", "{anon}");
    assert!(
        anon["last_error"].as_str().unwrap_or("").contains("401"),
        "{anon}"
    );

    // Let the token expire, then call from several places at once: one refresh serves all.
    thread::sleep(Duration::from_secs(6));
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let dir = c.runtime_dir();
            thread::spawn(move || antler_tests::antler(&dir, &["mcp", "call", "secure", "whoami"]))
        })
        .collect();
    for h in calls {
        let out = h.join().expect("call");
        assert!(
            out.status.success(),
            "{} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "antler-test");
    }
    assert_eq!(token_requests(&log).len(), 2, "{:?}", token_requests(&log));
    no_secret_in(&c.runtime_dir());
}

#[test]
fn the_refresh_token_grant_keeps_the_rotated_token_in_memory_only() {
    let logs = tempfile::tempdir().expect("tempdir");
    let log = logs.path().join("tokens.jsonl");
    let (_issuer, iport) = issuer(4, Some(4), &log);
    let (_server, sport) = secure_server(iport);
    let c = McpCluster::start(json!({
        "secure": {"type": "http", "url": format!("http://127.0.0.1:{sport}/mcp"), "oauth": {
            "token_url": format!("http://127.0.0.1:{iport}/token"), "grant_type": "refresh_token",
            "refresh_token": "initial-refresh-token", "scope": "mcp", "refresh_skew_seconds": 1}},
    }));
    let (code, r) = c.call("secure", "whoami", "{}");
    assert_eq!(code, 0, "{r}");
    // Past expiry minus the skew: the next call refreshes before it is sent.
    thread::sleep(Duration::from_secs(4));
    let (code, r) = c.call("secure", "whoami", "{}");
    assert_eq!(code, 0, "{r}");
    let reqs = token_requests(&log);
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!(reqs[0]["grant_type"], "refresh_token");
    assert_eq!(reqs[0]["refresh_token"], "initial-refresh-token");
    assert!(reqs[0]["issued_refresh_token"].is_string());
    assert_eq!(
        reqs[1]["refresh_token"], reqs[0]["issued_refresh_token"],
        "the rotated token is used"
    );
    let on_disk = std::fs::read_to_string(&c.config).expect("config");
    assert!(
        on_disk.contains("initial-refresh-token"),
        "the file is not rewritten"
    );
}
