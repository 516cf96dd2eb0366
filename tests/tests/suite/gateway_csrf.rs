//! A web page cannot drive the loopback gateway: a DNS-rebound `Host`, a cross-origin
//! browser request, a `text/plain` body and a request without the bearer token are each
//! refused before any route runs, so the stdio "server" they send never starts and the
//! extensions file is untouched. `GET /api/mcp/config` shows every secret as
//! `[redacted]`, and a `PUT` of that view keeps the stored secrets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use antler_tests::{http, Cluster};
use serde_json::{json, Value};

/// A cluster whose extensions file is `servers`, with a loopback gateway on a free port.
fn cluster(dir: &std::path::Path, servers: Value) -> (Cluster, std::path::PathBuf) {
    let file = dir.join("extensions_config.json");
    std::fs::write(&file, json!({"mcpServers": servers}).to_string()).unwrap();
    // The operator lets the gateway add stdio servers (off by default): what is left to
    // stop a web page is the gateway's guard.
    let config = dir.join("config.yaml");
    std::fs::write(&config, "antler:\n  gateway:\n    allow_stdio_mcp: true\n").unwrap();
    let c = Cluster::up_ready(
        0,
        &[
            ("ANTLER_EXTENSIONS_CONFIG_PATH", file.to_str().unwrap()),
            ("ANTLER_CONFIG_PATH", config.to_str().unwrap()),
            ("ANTLER_GATEWAY_ADDR", "127.0.0.1:0"),
        ],
    );
    (c, file)
}

/// (name, headers, the status it must get).
type Attack<'a> = (&'a str, Vec<(&'a str, &'a str)>, u16);

#[test]
fn a_web_page_cannot_make_the_gateway_start_a_command() {
    let dir = tempfile::tempdir().unwrap();
    let (c, file) = cluster(dir.path(), json!({}));
    let addr = c.gateway_addr().expect("the gateway listens");
    let token = c.gateway_token();
    let marker = dir.path().join("pwned");
    let payload = json!({"mcp_servers": {"evil": {
        "type": "stdio", "command": "sh",
        "args": ["-c", format!("id > {}", marker.display())]
    }}})
    .to_string();
    let before = std::fs::read(&file).unwrap();
    let auth = format!("Bearer {token}");
    let rebound = format!("rebind.evil.example:{}", addr.rsplit_once(':').unwrap().1);
    let attacks: Vec<Attack> = vec![
        // DNS rebinding: the page's own name, a simple text/plain request, no token.
        (
            "rebinding",
            vec![("Host", &rebound), ("Content-Type", "text/plain")],
            403,
        ),
        // Even with the token, a rebound Host is refused.
        (
            "rebinding with a token",
            vec![("Host", &rebound), ("Authorization", &auth)],
            403,
        ),
        // CSRF from another origin.
        (
            "cross-origin",
            vec![
                ("Origin", "http://evil.example"),
                ("Content-Type", "text/plain"),
            ],
            403,
        ),
        (
            "cross-site fetch",
            vec![("Sec-Fetch-Site", "cross-site"), ("Authorization", &auth)],
            403,
        ),
        // A simple request's content type, even with the token.
        (
            "text/plain",
            vec![("Content-Type", "text/plain"), ("Authorization", &auth)],
            415,
        ),
        // The right Host and JSON, but no credential.
        ("no token", vec![], 401),
        (
            "wrong token",
            vec![("Authorization", "Bearer not-the-token")],
            401,
        ),
    ];
    for (name, headers, want) in &attacks {
        let (status, text) = http(&addr, "PUT", "/api/mcp/config", headers, Some(&payload));
        assert_eq!(status, *want, "{name}: {text}");
    }
    // Reads need the token too, and a rebound page cannot read.
    let (status, _) = http(&addr, "GET", "/api/mcp/config", &[], None);
    assert_eq!(status, 401);
    let (status, _) = http(
        &addr,
        "GET",
        "/api/runs/run-x",
        &[("Host", &rebound), ("Authorization", &auth)],
        None,
    );
    assert_eq!(status, 403);
    std::thread::sleep(Duration::from_secs(2));
    assert!(!marker.exists(), "a refused request ran its command");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "the file was changed"
    );
    let status = c
        .status()
        .unwrap()
        .into_iter()
        .find(|p| p["role"] == "mcp-host")
        .unwrap();
    assert_eq!(status["healthy"], true);

    // The token file is the operator's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(c.runtime_dir().join("gateway.token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn secrets_read_redacted_and_a_put_of_that_view_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let servers = json!({
        "remote": {
            "type": "http", "url": "http://127.0.0.1:9/mcp",
            "headers": {"Authorization": "Bearer sk-header-secret", "X-Key": "$SOME_VAR"},
            "oauth": {"enabled": true, "token_url": "http://127.0.0.1:9/token",
                      "grant_type": "client_credentials", "client_id": "antler",
                      "client_secret": "cs-oauth-secret", "refresh_token": "rt-oauth-secret"}
        },
        "local": {"type": "stdio", "command": "/bin/false", "env": {"API_KEY": "sk-env-secret"}}
    });
    let (c, file) = cluster(dir.path(), servers);
    let (status, text) = c.gateway_http("GET", "/api/mcp/config", None);
    assert_eq!(status, 200, "{text}");
    for secret in [
        "sk-header-secret",
        "cs-oauth-secret",
        "rt-oauth-secret",
        "sk-env-secret",
    ] {
        assert!(!text.contains(secret), "{secret} readable: {text}");
    }
    let shown: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        shown["mcp_servers"]["local"]["env"]["API_KEY"],
        "[redacted]"
    );
    assert_eq!(
        shown["mcp_servers"]["remote"]["headers"]["X-Key"],
        "$SOME_VAR"
    );
    assert_eq!(
        shown["mcp_servers"]["remote"]["oauth"]["client_id"],
        "antler"
    );

    // Send the redacted view back with one change: the secrets stay as stored.
    let mut edited = shown.clone();
    edited["mcp_servers"]["local"]["args"] = json!(["--quiet"]);
    let (status, text) = c.gateway_http("PUT", "/api/mcp/config", Some(&edited.to_string()));
    assert_eq!(status, 200, "{text}");
    assert!(!text.contains("sk-env-secret"), "{text}");
    let on_disk: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let local = &on_disk["mcpServers"]["local"];
    assert_eq!(local["env"]["API_KEY"], "sk-env-secret");
    assert_eq!(local["args"], json!(["--quiet"]));
    let remote = &on_disk["mcpServers"]["remote"];
    assert_eq!(
        remote["headers"]["Authorization"],
        "Bearer sk-header-secret"
    );
    assert_eq!(remote["oauth"]["client_secret"], "cs-oauth-secret");
    assert_eq!(remote["oauth"]["refresh_token"], "rt-oauth-secret");

    // A redacted value with nothing stored behind it is refused, naming the field.
    let new = json!({"mcp_servers": {"other": {"type": "stdio", "command": "x", "env": {"K": "[redacted]"}}}});
    let (status, text) = c.gateway_http("PUT", "/api/mcp/config", Some(&new.to_string()));
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("mcp_servers.other.env.K"), "{text}");
}
