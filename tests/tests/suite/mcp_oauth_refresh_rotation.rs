//! A user's login tokens are refreshed, and the refresh tokens rotate, against a strict
//! authorization server (`peers/oauth_strict_issuer.mjs`: oauth2-mock-server whose refresh
//! tokens are good once, a reused one is `invalid_grant`) and Python SDK MCP servers that
//! verify its JWTs. Server `early`: `expires_in` is short while the JWT lives an hour, so a
//! refresh can only be the client's own before expiry; the rotated refresh token is stored,
//! and after an mcp-host restart the stored one (never the old) refreshes again. Server
//! `late`: `expires_in` says an hour while the JWT dies in seconds, so the server's 401 is
//! what leads to the refresh.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, process::Command, time::Duration};

use crate::mcp_support::{
    free_port, headless_browser, npm_bin, peer_script, python, spawn_peer, BrowserLog, McpCluster,
    Peer,
};
use antler_tests::{bin, signal, wait_for};
use serde_json::{json, Value};

/// The strict issuer with `args`, logging to `log`: (peer, port).
fn issuer(log: &Path, args: &[&str]) -> (Peer, u16) {
    let _ = npm_bin("oauth2-mock-server");
    let port = free_port();
    let peer = spawn_peer(
        Command::new("node")
            .arg(peer_script("oauth_strict_issuer.mjs"))
            .arg(port.to_string())
            .arg(log)
            .args(args),
        "the issuer",
        &[port],
    );
    (peer, port)
}

/// A Python SDK server requiring scope `mcp` from `issuer_port`'s tokens: (peer, port).
fn resource_server(issuer_port: u16) -> (Peer, u16) {
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

fn requests(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The refresh token the store holds for `server`'s default user.
fn stored_refresh(c: &McpCluster, server: &str) -> String {
    let store: Value =
        serde_json::from_slice(&std::fs::read(c.runtime_dir().join("mcp-oauth.json")).unwrap())
            .unwrap();
    store["entries"][format!("{server}\u{1f}default")]["credentials"]["token_response"]
        ["refresh_token"]
        .as_str()
        .unwrap_or_else(|| panic!("no stored refresh token for {server}: {store}"))
        .to_owned()
}

fn login(c: &McpCluster, browser: &str, server: &str) {
    let out = Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(c.runtime_dir())
        .args(["mcp", "login", server])
        .env("BROWSER", browser)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run antler mcp login");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn call_ok(c: &McpCluster, server: &str) {
    let ready = wait_for(Duration::from_secs(30), || {
        (c.server(server)["state"] == "ready").then_some(())
    });
    assert!(ready.is_some(), "{}", c.server(server));
    let (code, r) = c.call(server, "whoami", "{}");
    assert_eq!(code, 0, "{server}: {r}");
    assert_eq!(McpCluster::text(&r), "antler-login", "{r}");
}

/// Every refresh in `reqs` used the token the one before issued, each token once.
fn assert_rotation(reqs: &[Value]) {
    let mut current = None::<String>;
    let mut used = std::collections::HashSet::new();
    for r in reqs {
        assert_eq!(r["status"], 200, "a refused token request: {reqs:?}");
        if r["grant_type"] == "refresh_token" {
            let token = r["refresh_token"].as_str().unwrap().to_owned();
            assert_eq!(Some(&token), current.as_ref(), "not the latest: {reqs:?}");
            assert!(used.insert(token), "a refresh token used twice: {reqs:?}");
        }
        current = r["issued_refresh_token"].as_str().map(str::to_owned);
    }
}

#[test]
fn login_tokens_refresh_before_expiry_and_after_a_401_with_rotated_refresh_tokens() {
    let logs = tempfile::tempdir().unwrap();
    let (early_log, late_log) = (
        logs.path().join("early.jsonl"),
        logs.path().join("late.jsonl"),
    );
    let (_early_issuer, early_iport) = issuer(&early_log, &["--expires-in", "6"]);
    let (_late_issuer, late_iport) = issuer(&late_log, &["--ttl", "4", "--expires-in", "3600"]);
    let (_early, early_port) = resource_server(early_iport);
    let (_late, late_port) = resource_server(late_iport);
    let oauth = json!({"client_id": "antler-login", "scope": "mcp", "refresh_skew_seconds": 2});
    let c = McpCluster::start(json!({
        "early": {"type": "http", "url": format!("http://127.0.0.1:{early_port}/mcp"), "oauth": oauth},
        "late": {"type": "http", "url": format!("http://127.0.0.1:{late_port}/mcp"), "oauth": oauth},
    }));
    let browser = headless_browser(logs.path(), BrowserLog::None);

    // early: the login's token, then a refresh before it expires (the JWT is still good
    // for an hour: nothing but the client's clock asked for it).
    login(&c, &browser, "early");
    call_ok(&c, "early");
    let first = requests(&early_log);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0]["grant_type"], "authorization_code");
    std::thread::sleep(Duration::from_millis(4500));
    call_ok(&c, "early");
    let reqs = requests(&early_log);
    assert_eq!(reqs.len(), 2, "one refresh: {reqs:?}");
    assert_eq!(reqs[1]["grant_type"], "refresh_token");
    assert_eq!(reqs[1]["refresh_token"], first[0]["issued_refresh_token"]);
    // The rotated refresh token is the stored one.
    assert_eq!(
        stored_refresh(&c, "early"),
        reqs[1]["issued_refresh_token"].as_str().unwrap()
    );

    // mcp-host restarts: the stored (rotated) refresh token refreshes; the issuer would
    // refuse the old one.
    let host = c.cluster.process("mcp-host", 0).unwrap()["pid"]
        .as_u64()
        .unwrap() as u32;
    signal(host, libc::SIGKILL);
    let back = wait_for(Duration::from_secs(30), || {
        let p = c.cluster.process("mcp-host", 0)?;
        (p["pid"].as_u64() != Some(host as u64) && p["healthy"] == true).then_some(())
    });
    assert!(back.is_some(), "mcp-host did not come back");
    std::thread::sleep(Duration::from_millis(4500));
    call_ok(&c, "early");
    let reqs = requests(&early_log);
    assert!(reqs.len() >= 3, "a refresh after the restart: {reqs:?}");
    assert!(
        reqs[2..].iter().all(|r| r["grant_type"] == "refresh_token"),
        "no new login: {reqs:?}"
    );
    assert_rotation(&reqs);
    assert_eq!(
        stored_refresh(&c, "early"),
        reqs.last().unwrap()["issued_refresh_token"]
            .as_str()
            .unwrap()
    );

    // late: the token looks good for an hour but the server refuses it after 4 s (401);
    // one refresh, and the call goes through.
    login(&c, &browser, "late");
    call_ok(&c, "late");
    std::thread::sleep(Duration::from_secs(5));
    call_ok(&c, "late");
    let reqs = requests(&late_log);
    assert_eq!(reqs.len(), 2, "one refresh after the 401: {reqs:?}");
    assert_eq!(reqs[1]["grant_type"], "refresh_token");
    assert_rotation(&reqs);
    assert_eq!(
        stored_refresh(&c, "late"),
        reqs[1]["issued_refresh_token"].as_str().unwrap()
    );
}
