//! No OAuth secret reaches a log at any level: a cluster with `RUST_LOG=trace` in every
//! process (rmcp logs the authorization code and token responses at DEBUG) runs two logins
//! against the npm `@modelcontextprotocol/sdk` example server with `--oauth`: one with
//! `antler mcp login --user cli` (mcp-host's loopback callback), one through the gateway's
//! callback as the operator; then calls with both tokens. Neither code, access token or
//! refresh token, nor a PKCE verifier, appears in any process's log or stderr, nor in the
//! CLI's output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use crate::mcp_support::{headless_browser, oauth_example_server, BrowserLog, McpCluster};
use antler_tests::{antler, bin, wait_for, Cluster};
use serde_json::{json, Value};

/// The `code` of a redirect URL.
fn code_of(url: &str) -> String {
    url::Url::parse(url.trim())
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "code")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| panic!("no code in {url}"))
}

/// Every file under `dir`, as text.
fn all_files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(all_files(&p));
        } else if p.is_file() {
            let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap_or_default()).into_owned();
            out.push((p.display().to_string(), text));
        }
    }
    out
}

/// `POST /api/mcp/notes/oauth/start` as `token`: (status, lower-case head, body).
fn start_with_head(addr: &str, token: &str) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /api/mcp/notes/oauth/start HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, head.to_ascii_lowercase(), body.to_owned())
}

#[test]
fn no_code_or_token_is_logged_even_at_trace() {
    let (_server, port) = oauth_example_server();
    let work = tempfile::tempdir().unwrap();
    let browser = headless_browser(work.path(), BrowserLog::Landed);
    let dir = tempfile::Builder::new()
        .prefix("antler-t")
        .tempdir_in("/tmp")
        .unwrap();
    let extensions = dir.path().join("extensions_config.json");
    std::fs::write(
        &extensions,
        json!({"mcpServers": {"notes": {"type": "http", "url": format!("http://localhost:{port}/mcp")}}})
            .to_string(),
    )
    .unwrap();
    let lead_stderr = std::fs::File::create(dir.path().join("lead.stderr")).unwrap();
    let lead = Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(dir.path().join("run"))
        .args(["up", "--workers", "0"])
        .env("RUST_LOG", "trace")
        .env("ANTLER_EXTENSIONS_CONFIG_PATH", &extensions)
        .env("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(lead_stderr)
        .spawn()
        .unwrap();
    let cluster = Cluster {
        dir,
        lead,
        workers: 0,
    };
    let healthy = wait_for(Duration::from_secs(60), || {
        let st = cluster.status()?;
        (st.len() == 3 && st.iter().all(|p| p["healthy"] == true)).then_some(())
    });
    assert!(healthy.is_some(), "{:?}", cluster.status());
    let runtime = cluster.runtime_dir();

    // A login through mcp-host's loopback callback, the CLI at trace too.
    let cli = Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(&runtime)
        .args(["mcp", "login", "notes", "--user", "cli"])
        .env("BROWSER", &browser)
        .env("RUST_LOG", "trace")
        .output()
        .unwrap();
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    let landed = std::fs::read_to_string(work.path().join("landed.txt")).unwrap();
    let cli_code = code_of(landed.lines().next().unwrap());

    // A login through the gateway's callback, as the operator (the default user), in the
    // browser that started it (its binding cookie), confirmed on the gateway's page.
    let addr = cluster.gateway_addr().expect("the gateway listens");
    let (code, head, body) = start_with_head(&addr, &cluster.gateway_token());
    assert_eq!(code, 200, "{body}");
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .expect("the binding cookie")
        .to_owned();
    let url = serde_json::from_str::<Value>(&body).unwrap()["authorization_url"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = Command::new("curl")
        .args([
            "-sS",
            "-L",
            "--max-time",
            "20",
            "-b",
            &cookie,
            "-w",
            "\n%{url_effective}",
            &url,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (page, gateway_landing) = text.rsplit_once('\n').unwrap();
    assert!(
        gateway_landing.contains("/api/mcp/oauth/callback?"),
        "{gateway_landing}"
    );
    let field = |name: &str| {
        let at = page.find(&format!("name=\"{name}\" value=\"")).unwrap() + name.len() + 15;
        page[at..].split('"').next().unwrap().to_owned()
    };
    let form = format!("nonce={}&cookie={}", field("nonce"), field("cookie"));
    let (code, confirmed) = antler_tests::http(
        &addr,
        "POST",
        "/api/mcp/oauth/confirm",
        &[
            ("Origin", &format!("http://{addr}")),
            ("Cookie", &cookie),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        Some(&form),
    );
    assert_eq!(code, 200, "{confirmed}");
    let gateway_code = code_of(gateway_landing);

    // Calls with both tokens (the Authorization header goes out at trace).
    let ready = wait_for(Duration::from_secs(20), || {
        let out = antler(&runtime, &["mcp", "status", "--json"]);
        let list: Value = serde_json::from_slice(&out.stdout).ok()?;
        (list[0]["state"] == "ready").then_some(())
    });
    assert!(
        ready.is_some(),
        "the default user's session did not come up"
    );
    for user in ["default", "cli"] {
        let out = antler(
            &runtime,
            &[
                "mcp",
                "call",
                "notes",
                "greet",
                "--args",
                r#"{"name":"x"}"#,
                "--user",
                user,
                "--json",
            ],
        );
        let r: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        assert!(McpCluster::text(&r).contains("Hello, x"), "{user}: {r}");
    }

    // The secrets: both codes, and every token the store holds.
    let store: Value =
        serde_json::from_slice(&std::fs::read(runtime.join("mcp-oauth.json")).unwrap()).unwrap();
    let mut secrets = vec![cli_code, gateway_code];
    for (_, entry) in store["entries"].as_object().unwrap() {
        let t = &entry["credentials"]["token_response"];
        for field in ["access_token", "refresh_token"] {
            if let Some(s) = t[field].as_str() {
                secrets.push(s.to_owned());
            }
        }
    }
    assert!(
        secrets.len() >= 4,
        "two codes and two access tokens: {secrets:?}"
    );

    let mut texts = all_files(cluster.dir.path());
    texts.push((
        "cli stdout".into(),
        String::from_utf8_lossy(&cli.stdout).into(),
    ));
    texts.push((
        "cli stderr".into(),
        String::from_utf8_lossy(&cli.stderr).into(),
    ));
    // Not vacuous: the processes did log at trace, OAuth included.
    let log = |name: &str| {
        texts
            .iter()
            .find(|(p, _)| p.ends_with(name))
            .map(|(_, t)| t.clone())
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let host_log = log("mcp-host.log");
    assert!(
        host_log.contains("TRACE") && host_log.contains("DEBUG"),
        "mcp-host did not log at trace"
    );
    assert!(
        host_log.contains("OAuth login complete"),
        "mcp-host did not log the logins"
    );
    assert!(
        log("lead.stderr").contains("TRACE"),
        "the lead did not log at trace"
    );
    assert!(
        texts[texts.len() - 1].1.contains("TRACE"),
        "the CLI did not log at trace"
    );
    for (path, text) in &texts {
        if path.ends_with("mcp-oauth.json") || path.ends_with("landed.txt") {
            continue;
        }
        for s in &secrets {
            assert!(
                !text.contains(s.as_str()),
                "a code or token appears in {path}"
            );
        }
        assert!(
            !text.contains("code_verifier"),
            "a PKCE verifier appears in {path}"
        );
    }
}
