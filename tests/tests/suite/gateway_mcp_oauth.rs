//! A web user's MCP login through the gateway, against the npm `@modelcontextprotocol/sdk`
//! example server with `--oauth` (its own authorization server, dynamic registration,
//! PKCE, an `/authorize` that approves with a redirect). `POST
//! /api/mcp/{server}/oauth/start` as alice returns the authorization URL whose redirect is
//! the gateway's callback; a headless browser follows it, the callback (no token, a
//! top-level navigation) completes alice's login and says so on a page that shows no code;
//! then alice's calls work while bob's still fail with the login hint. A forged state and a
//! reused one are refused with 400.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{process::Command, time::Duration};

use crate::lead_support::{http_full, LeadCluster};
use crate::mcp_support::{oauth_example_server, McpCluster};
use antler_tests::{antler, wait_for};
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";
const BOB: &str = "bob-token-00000000000002";

struct Gateway {
    cluster: LeadCluster,
    addr: String,
}

impl Gateway {
    fn up(port: u16) -> Gateway {
        let config = format!(
            "antler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice}}\n      - {{token: {BOB}, user: bob}}\n"
        );
        let servers = json!({"mcpServers": {
            // The example server names itself `localhost` in its metadata.
            "notes": {"type": "http", "url": format!("http://localhost:{port}/mcp")}}});
        let extensions = servers.to_string();
        let cluster = LeadCluster::up_with_files(
            &config,
            &[("extensions_config.json", &extensions)],
            &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")],
        );
        let addr = cluster.gateway();
        Gateway { cluster, addr }
    }

    fn post(&self, token: &str, path: &str) -> (u16, Value) {
        let (code, _, text) = http_full(&self.addr, token, "POST", path, Some("{}"));
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// A GET with no credential and a browser's cross-site navigation headers.
    fn navigate(&self, path_and_query: &str) -> (u16, String) {
        antler_tests::http(
            &self.addr,
            "GET",
            path_and_query,
            &[
                ("Sec-Fetch-Site", "cross-site"),
                ("Sec-Fetch-Mode", "navigate"),
            ],
            None,
        )
    }

    /// `antler mcp call notes greet --user USER --json`: (exit code, result JSON).
    fn call_as(&self, user: &str, name: &str) -> (i32, Value) {
        let args = json!({ "name": name }).to_string();
        let out = antler(
            &self.cluster.runtime(),
            &[
                "mcp", "call", "notes", "greet", "--args", &args, "--user", user, "--json",
            ],
        );
        let code = out.status.code().unwrap_or(-1);
        let v = serde_json::from_slice::<Value>(&out.stdout).unwrap_or_else(|_| {
            panic!(
                "call output is not JSON (exit {code}): {} / {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (code, v)
    }

    fn server_state(&self) -> Value {
        let out = antler(&self.cluster.runtime(), &["mcp", "status", "--json"]);
        let list: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        list.as_array()
            .into_iter()
            .flatten()
            .find(|s| s["name"] == "notes")
            .cloned()
            .unwrap_or(Value::Null)
    }
}

/// Follows `url` and its redirects as a headless browser holding `cookie` (`name=value`,
/// or empty) would: (final status, final URL, page).
fn follow(url: &str, cookie: &str) -> (u16, String, String) {
    // `-b`: curl's cookie engine (a `Cookie:` header of `-H` is dropped on a redirect to
    // another host, as a browser's jar is not).
    let cookie = if cookie.is_empty() { "none=1" } else { cookie };
    let out = Command::new("curl")
        .args([
            "-sS",
            "-L",
            "--max-time",
            "30",
            "-H",
            "Sec-Fetch-Site: cross-site",
            "-b",
            cookie,
            "-w",
            "\n%{http_code} %{url_effective}",
            url,
        ])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (page, tail) = text.rsplit_once('\n').unwrap_or(("", &text));
    let (code, last) = tail.split_once(' ').unwrap_or((tail, ""));
    (code.parse().unwrap_or(0), last.to_owned(), page.to_owned())
}

#[test]
fn a_web_user_logs_in_through_the_gateway_for_itself_only() {
    let (_server, port) = oauth_example_server();
    let g = Gateway::up(port);
    // No token for anyone yet: the server failed its start with a 401.
    let failed = wait_for(Duration::from_secs(30), || {
        let s = g.server_state();
        (s["state"] == "failed").then_some(s)
    });
    assert!(failed.is_some(), "{}", g.server_state());
    // The status says a login is needed (and never shows a token).
    assert_eq!(
        g.server_state()["auth"],
        "login required",
        "{}",
        g.server_state()
    );

    // A forged state completes nothing.
    let (code, page) = g.navigate("/api/mcp/oauth/callback?code=x&state=forged");
    assert_eq!(code, 400, "{page}");
    assert!(page.contains("unknown or was already used"), "{page}");

    // alice starts her login: the URL sends the browser back to the gateway, and her
    // browser gets the cookie that binds the login to it.
    let (code, head, text) = http_full(
        &g.addr,
        ALICE,
        "POST",
        "/api/mcp/notes/oauth/start",
        Some("{}"),
    );
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(code, 200, "{body}");
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .expect("the start sets the browser's binding cookie")
        .to_owned();
    assert!(
        head.contains("httponly") && head.contains("samesite=lax"),
        "{head}"
    );
    let url = body["authorization_url"].as_str().unwrap().to_owned();
    let parsed = url::Url::parse(&url).unwrap();
    let q: std::collections::HashMap<_, _> = parsed.query_pairs().into_owned().collect();
    assert_eq!(
        q["redirect_uri"],
        format!("http://{}/api/mcp/oauth/callback", g.addr),
        "{url}"
    );
    assert_eq!(q["code_challenge_method"], "S256", "{url}");
    assert!(!q["state"].is_empty(), "{url}");

    // Another browser (bob's victim, say) that opens the link completes nothing: the page
    // names the user the link was made for.
    let (code, head2, text2) = http_full(
        &g.addr,
        BOB,
        "POST",
        "/api/mcp/notes/oauth/start",
        Some("{}"),
    );
    assert_eq!(code, 200, "{text2}");
    assert!(head2.contains("set-cookie: "), "{head2}");
    let bobs_link = serde_json::from_str::<Value>(&text2).unwrap()["authorization_url"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, _, page) = follow(&bobs_link, &cookie);
    assert_eq!(code, 403, "{page}");
    assert!(page.contains("another browser"), "{page}");
    assert!(page.contains("&#39;bob&#39;"), "{page}");

    // alice's browser follows hers; the authorization server approves and redirects to
    // the callback, which names who is being linked before anything is.
    let (code, last, page) = follow(&url, &cookie);
    assert_eq!(code, 200, "{last}: {page}");
    assert!(
        last.contains("/api/mcp/oauth/callback?"),
        "the browser did not come back to the gateway: {last}"
    );
    assert!(
        page.contains("Link your account at &#39;notes&#39; to Antler user &#39;alice&#39;?"),
        "{page}"
    );
    assert_eq!(
        g.server_state()["auth"],
        "login required",
        "nothing linked before the confirmation"
    );
    let field = |name: &str| {
        let at = page.find(&format!("name=\"{name}\" value=\"")).unwrap() + name.len() + 15;
        page[at..].split('"').next().unwrap().to_owned()
    };
    let form = format!("nonce={}&cookie={}", field("nonce"), field("cookie"));
    let origin = format!("http://{}", g.addr);
    // The confirmation needs the same browser's cookie and the gateway's own origin.
    let (code, _) = antler_tests::http(
        &g.addr,
        "POST",
        "/api/mcp/oauth/confirm",
        &[
            ("Origin", "http://evil.example"),
            ("Cookie", &cookie),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        Some(&form),
    );
    assert_eq!(code, 403);
    let (code, page) = antler_tests::http(
        &g.addr,
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
    assert!(
        page.contains("Logged in to &#39;notes&#39; as &#39;alice&#39;"),
        "{page}"
    );
    let logged_in = wait_for(Duration::from_secs(10), || {
        (g.server_state()["auth"] == "logged in: 1 user").then_some(())
    });
    assert!(logged_in.is_some(), "{}", g.server_state());
    let back = url::Url::parse(&last).unwrap();
    let code_param = back
        .query_pairs()
        .find(|(k, _)| k == "code")
        .map(|(_, v)| v.into_owned())
        .expect("the redirect carries a code");
    assert!(
        !page.contains(&code_param),
        "the page shows the code: {page}"
    );

    // The same callback again: the state was used.
    let again = format!("/api/mcp/oauth/callback?{}", back.query().unwrap());
    let (code, page) = g.navigate(&again);
    assert_eq!(code, 400, "{page}");
    assert!(page.contains("unknown or was already used"), "{page}");

    // alice's calls work; bob's (and the default user's) still need a login.
    let (code, r) = g.call_as("alice", "Alice");
    assert_eq!(code, 0, "{r}");
    assert!(McpCluster::text(&r).contains("Hello, Alice"), "{r}");
    let (code, r) = g.call_as("bob", "Bob");
    assert_ne!(code, 0, "{r}");
    let text = McpCluster::text(&r);
    assert!(
        text.contains("run `antler mcp login notes --user bob`"),
        "{r}"
    );
    // A web user is told the gateway's route too.
    assert!(text.contains("POST /api/mcp/notes/oauth/start"), "{r}");
    assert_eq!(
        g.server_state()["state"],
        "failed",
        "the default user has no login"
    );

    // bob cannot start a login to a server that does not exist, and gets a clear error.
    let (code, body) = g.post(BOB, "/api/mcp/nope/oauth/start");
    assert_eq!(code, 400, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or("")
            .contains("no MCP server named 'nope'"),
        "{body}"
    );
    // The start needs a credential; the rest of /api/mcp stays the operator's.
    let (code, _) = g.post("wrong-token", "/api/mcp/notes/oauth/start");
    assert_eq!(code, 401);
    let (code, _, _) = http_full(&g.addr, ALICE, "GET", "/api/mcp/config", None);
    assert_eq!(code, 403);

    // alice's token is stored for her, and never in the store under bob.
    let store: Value =
        serde_json::from_slice(&std::fs::read(g.cluster.runtime().join("mcp-oauth.json")).unwrap())
            .unwrap();
    let keys: Vec<&String> = store["entries"].as_object().unwrap().keys().collect();
    assert!(keys.iter().any(|k| *k == "notes\u{1f}alice"), "{keys:?}");
    assert!(!keys.iter().any(|k| k.ends_with("bob")), "{keys:?}");
}
