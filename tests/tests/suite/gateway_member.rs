//! A hostile member of a shared gateway, against a real cluster: two static tokens
//! (alice, bob, role `member`) beside the operator. Every route of the gateway's own route
//! table, in every spelling a router may fold (percent-encoded, doubled slashes, trailing
//! slash, dot segments, case), refuses a member and a caller without a token what the
//! route refuses them, and no spelling reaches an operator route; a stdio MCP server is
//! never added through the API unless the operator opened it; scripted models are the
//! operator's; a bootstrap run writes the caller's own SOUL, never everyone's; a user over
//! its submission rate, its running runs or its open event streams gets 429 with
//! `Retry-After` while another user and `/health` go on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::lead_support::{http_full, LeadCluster};
use antler_lead::gateway::{Access, ROUTES};
use antler_tests::wait_for;
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";
const BOB: &str = "bob-token-00000000000002";

fn members(extra: &str) -> String {
    format!(
        "antler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice, role: member}}\n      - {{token: {BOB}, user: bob, role: member}}\n{extra}"
    )
}

fn call(addr: &str, token: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let body = body.map(Value::to_string);
    let (code, _, text) = http_full(addr, token, method, path, body.as_deref());
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// `path` with its `{param}` segments filled.
fn concrete(path: &str) -> String {
    path.split('/')
        .map(|s| {
            if s.starts_with('{') {
                "x1".to_owned()
            } else {
                s.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The spellings of `path` a router might take for it.
fn variants(path: &str) -> Vec<String> {
    let mut out = vec![path.to_owned()];
    // Percent-encode the first letter, then every letter.
    if let Some(i) = path.find(|c: char| c.is_ascii_alphabetic()) {
        out.push(format!(
            "{}%{:02x}{}",
            &path[..i],
            path.as_bytes()[i],
            &path[i + 1..]
        ));
        out.push(
            path.chars()
                .map(|c| {
                    if c.is_ascii_alphabetic() {
                        format!("%{:02X}", c as u32)
                    } else {
                        c.to_string()
                    }
                })
                .collect(),
        );
    }
    out.push(format!("/{path}"));
    out.push(path.replacen('/', "//", 2).replacen("///", "//", 1));
    out.push(format!("{path}/"));
    out.push(path.to_ascii_uppercase());
    if let Some((first, rest)) = path[1..].split_once('/') {
        out.push(format!("/{first}/./{rest}"));
        out.push(format!("/{first}/zz/../{rest}"));
        out.push(format!("/{first}%2F{rest}"));
        out.push(format!("/{first}/%2e/{rest}"));
    }
    out
}

#[test]
fn no_spelling_of_a_route_gives_a_member_more_than_the_route_does() {
    let cluster = LeadCluster::up(&members(""), &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let addr = cluster.gateway();
    let operator = cluster.gateway_token();
    let mut checked = 0;
    for route in ROUTES {
        let body = (route.method != "GET").then(|| json!({}));
        let canonical = concrete(route.path);
        // The operator reaches every route of the table: the table and the router agree.
        let (code, reply) = call(&addr, &operator, route.method, &canonical, body.as_ref());
        assert_ne!(
            reply["detail"], "no such route",
            "{} {} is in the table but not routed ({code})",
            route.method, route.path
        );
        for spelling in variants(&canonical) {
            for (who, token) in [("alice", ALICE), ("nobody", "")] {
                let (code, reply) = call(&addr, token, route.method, &spelling, body.as_ref());
                checked += 1;
                let refused_here = match route.access {
                    // The confirmation needs a browser's same-origin form and cookie.
                    Access::Operator | Access::Metrics | Access::Confirm => true,
                    Access::Member | Access::Upload => token.is_empty(),
                    Access::Open | Access::Page | Access::Callback => false,
                };
                if refused_here {
                    assert!(
                        !(200..300).contains(&code),
                        "{who} got {code} from {} {spelling} ({:?} route {}): {reply}",
                        route.method,
                        route.access,
                        route.path
                    );
                }
                // Nothing reaches the MCP config's writer but the operator.
                if spelling.to_ascii_lowercase().contains("config") && route.method == "PUT" {
                    assert!(
                        matches!(code, 401 | 403 | 404 | 405),
                        "{who} {spelling}: {code}"
                    );
                }
            }
        }
    }
    assert!(checked > 300, "only {checked} requests");
    // The decisive spellings of the report: a member is refused, not served.
    for (method, path) in [
        ("GET", "/api/%6dcp/config"),
        ("GET", "/api/%63luster"),
        ("GET", "/%6detrics"),
    ] {
        let (code, reply) = call(&addr, ALICE, method, path, None);
        assert_eq!(code, 403, "{path}: {reply}");
    }
    // Who the inspector is signed in as.
    let (code, me) = call(&addr, ALICE, "GET", "/api/whoami", None);
    assert_eq!((code, me["user"].as_str()), (200, Some("alice")), "{me}");
    assert_eq!(me["operator"], false);
}

#[test]
fn a_stdio_server_is_never_added_through_the_api_unless_the_operator_opened_it() {
    let cluster = LeadCluster::up(&members(""), &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let addr = cluster.gateway();
    let operator = cluster.gateway_token();
    let marker = cluster.dir.path().join("pwned");
    let evil = json!({"mcp_servers": {"evil": {
        "type": "stdio", "command": "sh",
        "args": ["-c", format!("id > {}", marker.display())]
    }}});
    for (who, token, path) in [
        ("alice", ALICE, "/api/%6dcp/config"),
        ("alice", ALICE, "/api/mcp/config"),
        ("the operator", operator.as_str(), "/api/mcp/config"),
    ] {
        let (code, reply) = call(&addr, token, "PUT", path, Some(&evil));
        assert_eq!(code, 403, "{who} {path}: {reply}");
    }
    let (_, reply) = call(&addr, &operator, "PUT", "/api/mcp/config", Some(&evil));
    assert!(
        reply["detail"]
            .as_str()
            .unwrap()
            .contains("allow_stdio_mcp"),
        "{reply}"
    );
    // An http server is the operator's to add as before.
    let http =
        json!({"mcp_servers": {"remote": {"type": "http", "url": "http://127.0.0.1:9/mcp"}}});
    let (code, reply) = call(&addr, &operator, "PUT", "/api/mcp/config", Some(&http));
    assert_eq!(code, 200, "{reply}");
    std::thread::sleep(Duration::from_millis(500));
    assert!(!marker.exists(), "a refused server's command ran");
}

const SLEEPY: &str = "turns:\n  - delay_ms: 60000\n    content: Woke up.\n";
const SETUP_SOUL: &str = "turns:\n  - tool_calls:\n      - name: setup_agent\n        args: {soul: \"Always answer in pirate speak.\", description: \"Pirate\"}\n  - content: Done.\n";
const HELLO: &str = "turns:\n  - content: Hello.\n";

fn submit(addr: &str, token: &str, body: Value) -> (u16, Value, String) {
    let body = body.to_string();
    let (code, head, text) = http_full(addr, token, "POST", "/api/runs", Some(&body));
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
        head,
    )
}

fn ended(addr: &str, token: &str, run: &str) -> Value {
    wait_for(Duration::from_secs(60), || {
        let (code, view) = call(addr, token, "GET", &format!("/api/runs/{run}"), None);
        (code == 200 && view["status"] != "running").then_some(view)
    })
    .unwrap_or_else(|| panic!("run {run} did not end"))
}

#[test]
fn scripted_models_are_the_operators_and_a_bootstrap_writes_only_the_callers_soul() {
    let cluster = LeadCluster::up(&members(""), &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let addr = cluster.gateway();
    let operator = cluster.gateway_token();
    for body in [
        json!({"task": "t", "playbook_yaml": HELLO}),
        json!({"task": "t", "playbook": "anything.yaml"}),
    ] {
        let (code, reply, _) = submit(&addr, ALICE, body);
        assert_eq!(code, 403, "{reply}");
        assert!(
            reply["detail"]
                .as_str()
                .unwrap()
                .contains("allow_scripted_models"),
            "{reply}"
        );
    }
    // The operator runs a bootstrap as alice: her own default agent gets the soul.
    let (code, reply, _) = submit(
        &addr,
        &operator,
        json!({"task": "Set me up", "playbook_yaml": SETUP_SOUL, "bootstrap": true, "user": "alice"}),
    );
    assert_eq!(code, 201, "{reply}");
    let run = reply["run_id"].as_str().unwrap().to_owned();
    assert_eq!(ended(&addr, &operator, &run)["status"], "success");
    let base = cluster.base();
    assert_eq!(
        std::fs::read_to_string(base.join("users/alice/SOUL.md")).unwrap(),
        "Always answer in pirate speak."
    );
    assert!(
        !base.join("SOUL.md").exists(),
        "the SOUL every user's runs read was written"
    );
    assert!(!base.join("users/bob/SOUL.md").exists());
}

/// Opens `/events` of `run` and reads the response head; the stream stays open with the
/// socket.
fn open_events(addr: &str, token: &str, run: &str) -> (u16, String, TcpStream) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET /api/runs/{run}/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head, s)
}

#[test]
fn a_user_over_its_own_limits_gets_429_and_others_go_on() {
    let limits = "    allow_scripted_models: true\n    limits:\n      concurrent_runs: 2\n      submissions_per_minute: 5\n      event_streams: 2\n";
    let cluster = LeadCluster::up(&members(limits), &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let addr = cluster.gateway();
    let sleepy = || json!({"task": "Sleep", "playbook_yaml": SLEEPY});
    let mut runs = Vec::new();
    for _ in 0..2 {
        let (code, reply, _) = submit(&addr, ALICE, sleepy());
        assert_eq!(code, 201, "{reply}");
        runs.push(reply["run_id"].as_str().unwrap().to_owned());
    }
    // Two running: a third waits for one to end.
    let (code, reply, head) = submit(&addr, ALICE, sleepy());
    assert_eq!(code, 429, "{reply}");
    assert!(head.contains("retry-after:"), "{head}");
    assert!(
        reply["detail"]
            .as_str()
            .unwrap()
            .contains("concurrent_runs"),
        "{reply}"
    );
    // Bob is not alice.
    let (code, reply, _) = submit(&addr, BOB, sleepy());
    assert_eq!(code, 201, "{reply}");
    let bobs = reply["run_id"].as_str().unwrap().to_owned();

    // Event streams: two of alice's are open, the third is refused; bob and /health go on.
    let (a1, _, _s1) = open_events(&addr, ALICE, &runs[0]);
    let (a2, _, _s2) = open_events(&addr, ALICE, &runs[1]);
    assert_eq!((a1, a2), (200, 200));
    let (a3, head, _s3) = open_events(&addr, ALICE, &runs[0]);
    assert_eq!(a3, 429, "{head}");
    assert!(head.contains("retry-after:"), "{head}");
    let (b1, _, _b) = open_events(&addr, BOB, &bobs);
    assert_eq!(b1, 200);
    let (code, _) = call(&addr, "", "GET", "/health", None);
    assert_eq!(code, 200);
    // A closed stream gives its place back.
    drop(_s1);
    let reopened = wait_for(Duration::from_secs(10), || {
        let (code, _, s) = open_events(&addr, ALICE, &runs[0]);
        (code == 200).then_some(s)
    });
    assert!(reopened.is_some(), "a closed stream kept its place");

    for run in &runs {
        let (code, reply) = call(
            &addr,
            ALICE,
            "POST",
            &format!("/api/runs/{run}/cancel"),
            None,
        );
        assert_eq!(code, 202, "{reply}");
    }
    // An accepted cancel (202) frees its run's place at once, before the drive stops: both
    // of alice's places are free again right away.
    for _ in 0..2 {
        let (code, reply, _) = submit(&addr, ALICE, json!({"task": "Hi", "playbook_yaml": HELLO}));
        assert_eq!(code, 201, "a cancelled run still held its place: {reply}");
    }
    // The rate: five submissions a minute (the one refused for running runs counted too,
    // as it passed the rate); past it, 429 naming the rate.
    let mut rated = None;
    for _ in 0..5 {
        let (code, reply, head) =
            submit(&addr, ALICE, json!({"task": "Hi", "playbook_yaml": HELLO}));
        if code == 429 {
            rated = Some((reply, head));
            break;
        }
        assert_eq!(code, 201, "{reply}");
    }
    let (reply, head) = rated.expect("the rate never refused alice");
    assert!(
        reply["detail"].as_str().unwrap().contains("in a minute"),
        "{reply}"
    );
    assert!(head.contains("retry-after:"), "{head}");
    let (code, reply, _) = submit(&addr, BOB, json!({"task": "Hi", "playbook_yaml": HELLO}));
    assert_eq!(code, 201, "{reply}");
}
