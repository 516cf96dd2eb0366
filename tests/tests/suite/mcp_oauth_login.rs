//! A user's OAuth login to an MCP server (the MCP authorization spec) against the npm
//! `@modelcontextprotocol/sdk` example server with `--oauth` (its own authorization server:
//! protected-resource metadata, dynamic client registration, PKCE, an `/authorize` that
//! approves with a redirect). Without a login and without `$BROWSER` the server fails with
//! an error naming `antler mcp login`; `antler mcp login` with a headless `$BROWSER` (curl
//! following redirects to the loopback callback) gets a token and the next call succeeds;
//! the token survives an mcp-host restart in a 0600 store and never shows in logs,
//! `antler mcp status` or `GET /api/mcp/config`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{os::unix::fs::PermissionsExt, path::Path, process::Command, time::Duration};

use crate::mcp_support::{headless_browser, oauth_example_server, BrowserLog, McpCluster};
use antler_tests::{bin, signal, wait_for};
use serde_json::{json, Value};

fn login(c: &McpCluster, browser: &str, args: &[&str]) -> std::process::Output {
    Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(c.runtime_dir())
        .args(["mcp", "login"])
        .args(args)
        .env("BROWSER", browser)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run antler mcp login")
}

fn all_text(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(all_text(&p));
        } else if p.extension().is_some_and(|x| x == "log" || x == "jsonl") {
            let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap_or_default()).into_owned();
            out.push((p.display().to_string(), text));
        }
    }
    out
}

#[test]
fn login_gets_a_token_that_survives_a_restart_and_is_never_shown() {
    let (_server, port) = oauth_example_server();
    let work = tempfile::tempdir().unwrap();
    let browser = headless_browser(work.path(), BrowserLog::Opened);
    // The example server names itself `localhost` in its metadata: the URL matches it.
    let c = McpCluster::start_with(
        json!({"notes": {"type": "http", "url": format!("http://localhost:{port}/mcp")}}),
        &[("RUST_LOG", "debug")],
    );

    // No token and no $BROWSER for mcp-host: the error says which command to run.
    let st = c.server("notes");
    assert_eq!(st["state"], "failed", "{st}");
    let why = st["last_error"].as_str().unwrap_or("");
    assert!(why.contains("401"), "{st}");
    assert!(why.contains("run `antler mcp login notes`"), "{st}");

    let out = login(&c, &browser, &["notes"]);
    assert!(
        out.status.success(),
        "{} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("logged in to 'notes' as user 'default'"));
    // The authorization URL: PKCE S256, the resource, a dynamically registered client, the
    // scope the server's metadata offers, and the loopback redirect.
    let opened = std::fs::read_to_string(work.path().join("opened.txt")).unwrap();
    let url = url::Url::parse(opened.lines().next().unwrap()).unwrap();
    let q: std::collections::HashMap<_, _> = url.query_pairs().into_owned().collect();
    assert_eq!(q["code_challenge_method"], "S256", "{url}");
    assert_eq!(q["response_type"], "code");
    assert_eq!(q["resource"], format!("http://localhost:{port}/mcp"));
    assert_eq!(q["scope"], "mcp:tools");
    assert!(q["redirect_uri"].starts_with("http://127.0.0.1:"), "{url}");
    assert!(!q["client_id"].is_empty());

    // The server reconnects with the token: the call succeeds.
    let ready = wait_for(Duration::from_secs(20), || {
        (c.server("notes")["state"] == "ready").then_some(())
    });
    assert!(ready.is_some(), "{}", c.server("notes"));
    let (code, r) = c.call("notes", "greet", r#"{"name": "Antler"}"#);
    assert_eq!(code, 0, "{r}");
    assert!(McpCluster::text(&r).contains("Hello, Antler"), "{r}");

    // The token is in a 0600 store of the runtime directory.
    let store = c.runtime_dir().join("mcp-oauth.json");
    let mode = std::fs::metadata(&store).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let stored: Value = serde_json::from_slice(&std::fs::read(&store).unwrap()).unwrap();
    let entry = stored["entries"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| k.starts_with("notes"))
        .map(|(_, v)| v.clone())
        .expect("a stored entry for notes");
    let token = entry["credentials"]["token_response"]["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(token.len() >= 16, "{token}");

    // mcp-host restarts: the stored token serves the next call with no new login.
    let host = c.cluster.process("mcp-host", 0).unwrap()["pid"]
        .as_u64()
        .unwrap() as u32;
    signal(host, libc::SIGKILL);
    let back = wait_for(Duration::from_secs(30), || {
        let p = c.cluster.process("mcp-host", 0)?;
        (p["pid"].as_u64() != Some(host as u64) && p["healthy"] == true).then_some(())
    });
    assert!(back.is_some(), "mcp-host did not come back");
    let ready = wait_for(Duration::from_secs(20), || {
        (c.server("notes")["state"] == "ready").then_some(())
    });
    assert!(ready.is_some(), "{}", c.server("notes"));
    let (code, r) = c.call("notes", "greet", r#"{"name": "again"}"#);
    assert_eq!(code, 0, "{r}");
    assert_eq!(
        std::fs::read_to_string(work.path().join("opened.txt"))
            .unwrap()
            .lines()
            .count(),
        1,
        "no second login"
    );

    // Never shown: not in any log, not in `antler mcp status`, not in the config API.
    let status = c.mcp(&["status", "--json"]);
    assert!(!String::from_utf8_lossy(&status.stdout).contains(&token));
    let (code, body) = c.cluster.gateway_http("GET", "/api/mcp/config", None);
    assert_eq!(code, 200, "{body}");
    assert!(!body.contains(&token));
    let logs = all_text(&c.runtime_dir());
    assert!(
        logs.iter()
            .any(|(p, t)| p.ends_with("mcp-host.log") && t.contains("notes")),
        "mcp-host.log says nothing about the server: the check would be vacuous"
    );
    for (p, t) in logs {
        assert!(!t.contains(&token), "the access token appears in {p}");
    }
}
