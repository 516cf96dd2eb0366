//! Antler as an MCP server, against a real cluster (lead with its gateway, sandbox-host,
//! mcp-host running server-everything) and the official MCP Python SDK client
//! (`tests/peers/mcp_serve_client.py`) over streamable HTTP at `/mcp` with members' tokens:
//! a request without a valid token gets 401 naming the protected resource metadata, which
//! names the configured issuer; a session sees its principal's authorized catalog with deferral
//! (`tool_search` promotes a deferred MCP tool, `notifications/tools/list_changed` follows
//! and the tool appears in the next `tools/list`, and its call runs on its server through
//! mcp-host; before that the deferred filter refuses it, and the guardrail denies a call,
//! with the texts a run's model reads); bash writes a file in the session's thread sandbox that a second call reads;
//! another member naming the same thread id works in a thread of its own and never sees
//! the file, and another member's session id is an unknown session to it (404); every
//! call is a run event (`/api/runs/{id}/events`); the sessions' runs are recorded on their threads and end with the sessions.
//! `antler mcp serve` (stdio, the SDK's stdio client) joins a running cluster through its
//! gateway acting for `--user`, or starts an ephemeral cluster for the session. A session
//! run a killed lead left open ends when the lead comes back, never driven by a model.
//! A call the client cancels (`notifications/cancelled`) kills its sandbox command, ends as
//! cancelled in the run's events, and the session's next call works. Files an editor's
//! session presents are linked in the call's result, listed and read back as its resources
//! (text and blob), and `notifications/resources/list_changed` tells the client they
//! changed; another member's session on a thread of the same name sees none.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lead_support::{http_full, LeadCluster};
use crate::mcp_support::serve::{direct_calls, everything, mcp_driver, process_running, ALICE};
use serde_json::{json, Value};

const BOB: &str = "bob-token-00000000000002";
/// Editors, whose role may present files.
const CAROL: &str = "carol-token-0000000000003";
const DAVE: &str = "dave-token-00000000000004";
const ISSUER: &str = "https://idp.example";

fn config() -> String {
    format!(
        "tool_search:\n  enabled: true\ntools:\n  - {{name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}}\n  - {{name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}}\n  - {{name: read_file, group: file:read, use: deerflow.sandbox.tools:read_file_tool}}\n  - {{name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\nguardrails:\n  enabled: true\n  provider:\n    use: deerflow.guardrails.builtin:AllowlistProvider\n    config:\n      denied_tools: [write_file]\nauthorization:\n  enabled: true\n  provider:\n    use: antler.authz:AllowlistPolicy\n    config:\n      default: {{allowed_tools: null}}\n      roles:\n        member: {{denied_tools: [present_files]}}\nantler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice, role: member}}\n      - {{token: {BOB}, user: bob, role: member}}\n      - {{token: {CAROL}, user: carol, role: editor}}\n      - {{token: {DAVE}, user: dave, role: editor}}\n    jwt:\n      jwks_file: jwks.json\n      issuer: {ISSUER}\n      audience: antler\n"
    )
}

fn cluster() -> LeadCluster {
    LeadCluster::up_with_files(
        &config(),
        &[
            ("jwks.json", r#"{"keys": []}"#),
            ("extensions_config.json", &everything(None)),
        ],
        &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")],
    )
}

#[test]
fn a_request_without_a_valid_token_is_pointed_to_the_resource_metadata() {
    let cluster = cluster();
    let addr = cluster.gateway();
    let metadata_url = format!("http://{addr}/.well-known/oauth-protected-resource/mcp");
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}})
    .to_string();
    for token in ["", "not-a-token"] {
        let (code, head, _) = http_full(&addr, token, "POST", "/mcp", Some(&initialize));
        assert_eq!(code, 401, "{token:?}: {head}");
        let expected = format!("www-authenticate: bearer resource_metadata=\"{metadata_url}\"");
        assert!(head.contains(&expected), "{token:?}: {head}");
    }
    // The metadata is public, in both forms, and names the resource and its issuer.
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let (code, _, body) = http_full(&addr, "", "GET", path, None);
        assert_eq!(code, 200, "{path}: {body}");
        let doc: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(doc["resource"], format!("http://{addr}/mcp"), "{doc}");
        assert_eq!(doc["authorization_servers"], json!([ISSUER]), "{doc}");
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]), "{doc}");
    }
}

/// One raw request to `/mcp` with `headers` (`name: value` lines): the status, the header
/// block (lower case) and the body up to the first event's end.
fn raw_mcp(addr: &str, headers: &str, body: &str) -> (u16, String, String) {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let head = head.to_ascii_lowercase();
    // A JSON answer has a length; an event stream is read up to its first data line.
    let mut body = String::new();
    if head.contains("text/event-stream") {
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 {
                break;
            }
            body.push_str(&line);
            if line.starts_with("data:") && line.contains("jsonrpc") {
                break;
            }
        }
    } else {
        let _ = reader.take(1 << 20).read_to_string(&mut body);
    }
    (status, head, body)
}

#[test]
fn another_members_session_is_an_unknown_one() {
    let cluster = cluster();
    let addr = cluster.gateway();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}})
    .to_string();
    let (code, head, body) = raw_mcp(
        &addr,
        &format!("Authorization: Bearer {ALICE}\r\nConnection: close\r\n"),
        &initialize,
    );
    assert_eq!(code, 200, "{head}{body}");
    let session = head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id: "))
        .expect("a session id")
        .trim()
        .to_owned();
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let with = |token: &str| {
        format!("Authorization: Bearer {token}\r\nMcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-06-18\r\nConnection: close\r\n")
    };
    let (code, head, body) = raw_mcp(&addr, &with(BOB), &list);
    assert_eq!(code, 404, "bob reached alice's session: {head}{body}");
    assert_eq!(body.trim(), "Not Found: Session not found");
    // Its owner still reaches it.
    let (code, head, body) = raw_mcp(&addr, &with(ALICE), &list);
    assert_eq!(code, 200, "{head}{body}");
    assert!(body.contains("\"tools\""), "{body}");
}

#[test]
fn the_python_sdk_client_gets_the_deferred_catalog_and_the_threads_sandbox() {
    let cluster = cluster();
    let url = format!("http://{}/mcp", cluster.gateway());
    let r: Value = mcp_driver(|c| c.args(["http", &url, ALICE, BOB, "notes"]));
    let alice = &r["alice"];
    assert_eq!(alice["server_name"], "antler", "{alice}");
    // This client cannot be asked anything mid-call (no elicitation): its plain calls
    // were answered without rmcp's session worker, with the same results below.
    assert!(direct_calls(&cluster) > 0, "no call was answered directly");
    assert_eq!(alice["list_changed_capability"], true, "{alice}");

    // The catalog a run of alice's would be offered: builtins and sandbox tools, the
    // deferred MCP tools behind tool_search.
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_owned())
            .collect()
    };
    let before = names(&alice["tools_before"]);
    for tool in ["tool_search", "bash", "read_file", "write_file", "ls"] {
        assert!(
            before.contains(&tool.to_owned()),
            "{tool} not listed: {before:?}"
        );
    }
    assert!(
        !before.iter().any(|n| n.starts_with("everything_")),
        "a deferred MCP tool was listed: {before:?}"
    );
    // The principal's policy removed present_files for members: never listed.
    assert!(!before.contains(&"present_files".to_owned()), "{before:?}");
    // A deferred tool called before its promotion is refused as in a run.
    assert_eq!(alice["echo_before"]["is_error"], true, "{alice}");
    assert!(
        alice["echo_before"]["text"]
            .as_str()
            .unwrap()
            .contains("tool_search"),
        "{alice}"
    );
    // The guardrail denies a call as in a run, with DeerFlow's text.
    assert_eq!(alice["denied"]["is_error"], true, "{alice}");
    assert!(
        alice["denied"]["text"]
            .as_str()
            .unwrap()
            .starts_with("Guardrail denied: tool 'write_file' was blocked"),
        "{alice}"
    );
    // tool_search promotes it: the client is told, and the next list has it.
    assert_eq!(alice["tool_search"]["is_error"], false, "{alice}");
    assert!(
        alice["tool_search"]["text"]
            .as_str()
            .unwrap()
            .contains("everything_echo"),
        "{alice}"
    );
    assert_eq!(
        alice["list_changed"], true,
        "no tools/list_changed: {alice}"
    );
    let after = names(&alice["tools_after"]);
    assert!(after.contains(&"everything_echo".to_owned()), "{after:?}");
    // The promoted tool runs on its server, through mcp-host.
    assert_eq!(alice["echo"]["is_error"], false, "{alice}");
    assert!(
        alice["echo"]["text"]
            .as_str()
            .unwrap()
            .contains("hello antler"),
        "{alice}"
    );

    // bash writes in the session's thread sandbox; a second call reads it back.
    assert_eq!(alice["bash"]["is_error"], false, "{alice}");
    assert!(
        alice["bash"]["text"].as_str().unwrap().contains("written"),
        "{alice}"
    );
    assert_eq!(alice["read_back"]["is_error"], false, "{alice}");
    assert!(
        alice["read_back"]["text"]
            .as_str()
            .unwrap()
            .contains("from-alice"),
        "{alice}"
    );
    // The session is bound to its thread: another thread in `_meta` is refused.
    assert!(
        alice["other_thread"]["is_error"] == true
            || alice["other_thread"]["text"]
                .as_str()
                .unwrap()
                .contains("cannot switch"),
        "{alice}"
    );
    // The file is on alice's thread's disk.
    let note = cluster
        .base()
        .join("users/alice/threads/notes/user-data/workspace/note.txt");
    assert_eq!(
        std::fs::read_to_string(&note)
            .map(|s| s.trim().to_owned())
            .ok(),
        Some("from-alice".to_owned()),
        "{}",
        note.display()
    );

    // Bob names the same thread id: his own thread, without alice's file.
    let bob = &r["bob"];
    assert!(names(&bob["tools"]).contains(&"bash".to_owned()), "{bob}");
    assert!(
        !bob["read_alices_note"]["text"]
            .as_str()
            .unwrap()
            .contains("from-alice"),
        "{bob}"
    );
    assert!(
        !bob["bash"]["text"].as_str().unwrap().contains("from-alice"),
        "{bob}"
    );

    // Each session was a run of its user's thread, ended with the session.
    let addr = cluster.gateway();
    let mut run_ids = Vec::new();
    for (who, user_token) in [("alice", ALICE), ("bob", BOB)] {
        let ended = antler_tests::wait_for(std::time::Duration::from_secs(30), || {
            let (code, _, body) =
                http_full(&addr, user_token, "GET", "/api/threads/notes/runs", None);
            let runs: Value = serde_json::from_str(&body).ok()?;
            (code == 200
                && runs
                    .as_array()
                    .is_some_and(|r| !r.is_empty() && r.iter().all(|r| r["status"] == "success")))
            .then_some(runs)
        });
        let runs = ended.unwrap_or_else(|| panic!("{who}'s session run did not end"));
        // Every call was a run event, as a run's calls are.
        let run_id = runs[0]["run_id"].as_str().unwrap().to_owned();
        run_ids.push(run_id.clone());
        let (code, _, events) = http_full(
            &addr,
            user_token,
            "GET",
            &format!("/api/runs/{run_id}/events"),
            None,
        );
        assert_eq!(code, 200, "{events}");
        assert!(
            events.contains("\"event\":\"tool_finished\"") && events.contains("\"name\":\"bash\""),
            "{who}: {events}"
        );
    }
    // Alice's run is not bob's to watch: the same 404 as a missing run.
    let (code, _, _) = http_full(
        &addr,
        BOB,
        "GET",
        &format!("/api/runs/{}/events", run_ids[0]),
        None,
    );
    assert_eq!(code, 404);
}

/// Runs the driver over stdio against `antler ARGS` (`antler mcp serve ...`) on `thread`,
/// the server's sandboxes under `base`; its report.
fn over_stdio(base: &std::path::Path, thread: &str, args: &[&str]) -> Value {
    mcp_driver(|c| {
        c.args(["stdio", thread])
            .arg(antler_tests::bin("antler"))
            .args(args)
            .env("ANTLER_SANDBOX_BASE_DIR", base)
    })
}

fn note(base: &std::path::Path, user: &str, thread: &str) -> Option<String> {
    let path = base.join(format!(
        "users/{user}/threads/{thread}/user-data/workspace/note.txt"
    ));
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

#[test]
fn antler_mcp_serve_joins_the_running_cluster_or_starts_one() {
    let cluster = cluster();
    // A running cluster: the session goes through its gateway, acting for --user.
    let runtime = cluster.runtime().display().to_string();
    let joined = over_stdio(
        &cluster.base(),
        "joined",
        &["--runtime-dir", &runtime, "mcp", "serve", "--user", "alice"],
    );
    assert_eq!(joined["server_name"], "antler", "{joined}");
    assert!(
        joined["tools"].as_array().unwrap().contains(&json!("bash")),
        "{joined}"
    );
    assert_eq!(joined["bash"]["is_error"], false, "{joined}");
    assert!(
        joined["read_back"]["text"]
            .as_str()
            .unwrap()
            .contains("over-stdio"),
        "{joined}"
    );
    assert_eq!(
        note(&cluster.base(), "alice", "joined").as_deref(),
        Some("over-stdio")
    );
    // No cluster in this runtime directory: the command starts one for the session, as
    // `antler run` does, and serves the local operator.
    let alone = tempfile::Builder::new()
        .prefix("antler-mcp-serve")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let base = alone.path().join("base");
    let own_runtime = alone.path().join("run").display().to_string();
    let config = cluster.dir.path().join("config.yaml").display().to_string();
    let started = over_stdio(
        &base,
        "own",
        &[
            "--runtime-dir",
            &own_runtime,
            "mcp",
            "serve",
            "--config",
            &config,
        ],
    );
    assert_eq!(started["bash"]["is_error"], false, "{started}");
    assert!(
        started["read_back"]["text"]
            .as_str()
            .unwrap()
            .contains("over-stdio"),
        "{started}"
    );
    assert_eq!(note(&base, "default", "own").as_deref(), Some("over-stdio"));
}

#[test]
fn a_session_run_left_open_by_a_killed_lead_ends_and_is_never_driven() {
    let mut cluster = cluster();
    let addr = cluster.gateway();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}})
    .to_string();
    let auth = format!("Authorization: Bearer {ALICE}\r\nConnection: close\r\n");
    let (code, head, _) = raw_mcp(&addr, &auth, &initialize);
    assert_eq!(code, 200, "{head}");
    let session = head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id: "))
        .expect("a session id")
        .trim()
        .to_owned();
    let in_session = format!(
        "Authorization: Bearer {ALICE}\r\nMcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-06-18\r\nConnection: close\r\n"
    );
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    raw_mcp(&addr, &in_session, &initialized.to_string());
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "bash", "arguments": {"description": "hi", "command": "echo hi"},
        "_meta": {"antler/thread": "restarted"}}});
    let (code, _, body) = raw_mcp(&addr, &in_session, &call.to_string());
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("hi"), "{body}");
    // The session's run is open on its thread when the lead dies.
    cluster.kill_lead();
    cluster.start();
    let addr = cluster.gateway();
    let runs = antler_tests::wait_for(std::time::Duration::from_secs(30), || {
        let (code, _, body) = http_full(&addr, ALICE, "GET", "/api/threads/restarted/runs", None);
        let runs: Value = serde_json::from_str(&body).ok()?;
        (code == 200 && runs[0]["status"] == "error").then_some(runs)
    })
    .expect("the session's run ended after the restart");
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    let (_, _, view) = http_full(
        &addr,
        ALICE,
        "GET",
        &format!("/api/runs/{}", runs[0]["run_id"].as_str().unwrap()),
        None,
    );
    let view: Value = serde_json::from_str(&view).unwrap();
    assert_eq!(
        view["error"], "the MCP session ended with the lead that served it",
        "{view}"
    );
    // Its thread is free for the next run or session.
    let (_, _, thread) = http_full(&addr, ALICE, "GET", "/api/threads/restarted", None);
    let thread: Value = serde_json::from_str(&thread).unwrap();
    assert_ne!(thread["status"], "busy", "{thread}");
}

#[test]
fn a_call_the_client_cancels_is_killed_and_ends_cancelled() {
    let cluster = cluster();
    let url = format!("http://{}/mcp", cluster.gateway());
    let started = cluster
        .base()
        .join("users/alice/threads/cancelled/user-data/workspace/started");
    let sleep = ["sleep", "4711"];
    let command = "echo up > /mnt/user-data/workspace/started && sleep 4711";
    let r: Value = mcp_driver(|c| {
        c.args(["cancel", &url, ALICE, "cancelled"])
            .arg(&started)
            .arg(command)
    });
    // The cancelled request is never answered to the client.
    assert_eq!(r["cancelled_result"], Value::Null, "{r}");
    // The sandbox command was killed.
    let gone = antler_tests::wait_for(std::time::Duration::from_secs(30), || {
        (!process_running(&sleep)).then_some(())
    });
    assert!(gone.is_some(), "the cancelled call's sleep still runs");
    // The session goes on: the next call works in the same sandbox.
    assert_eq!(r["after"]["is_error"], false, "{r}");
    assert!(
        r["after"]["text"]
            .as_str()
            .unwrap()
            .contains("after-cancel"),
        "{r}"
    );
    // The call ended cancelled in the run's events and on the thread.
    let addr = cluster.gateway();
    let runs = antler_tests::wait_for(std::time::Duration::from_secs(30), || {
        let (code, _, body) = http_full(&addr, ALICE, "GET", "/api/threads/cancelled/runs", None);
        let runs: Value = serde_json::from_str(&body).ok()?;
        (code == 200 && runs[0]["status"] == "success").then_some(runs)
    })
    .expect("the session's run ended");
    let run_id = runs[0]["run_id"].as_str().unwrap();
    let (code, _, events) = http_full(
        &addr,
        ALICE,
        "GET",
        &format!("/api/runs/{run_id}/events"),
        None,
    );
    assert_eq!(code, 200, "{events}");
    let cancelled = events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim_start_matches("data:").trim()).ok())
        .find(|e| e["event"] == "tool_finished" && e["error"] == true);
    let cancelled = cancelled.unwrap_or_else(|| panic!("no cancelled call: {events}"));
    assert_eq!(cancelled["name"], "bash", "{cancelled}");
    assert_eq!(
        cancelled["message"], "the call was cancelled by the MCP client",
        "{cancelled}"
    );
}

#[test]
fn presented_files_are_the_sessions_resources_and_only_its_own() {
    use base64::Engine as _;
    let cluster = cluster();
    let url = format!("http://{}/mcp", cluster.gateway());
    let r: Value = mcp_driver(|c| c.args(["present", &url, CAROL, DAVE, "shared"]));
    let owner = &r["owner"];
    assert_eq!(owner["resources_capability"], true, "{owner}");
    assert_eq!(owner["resources_list_changed_capability"], true, "{owner}");
    assert_eq!(owner["bash"]["is_error"], false, "{owner}");
    assert_eq!(owner["changed_before_present"], false, "{owner}");
    assert_eq!(owner["present"]["is_error"], false, "{owner}");
    // Presenting changed the session's resources: the client is told.
    assert_eq!(owner["resources_list_changed"], true, "{owner}");
    // The call's result links each presented file; the session lists them.
    let text_uri = "antler://thread/shared/mnt/user-data/outputs/report.txt";
    let blob_uri = "antler://thread/shared/mnt/user-data/outputs/data.bin";
    assert_eq!(
        owner["links"],
        json!([
            {"uri": text_uri, "name": "report.txt", "mime_type": "text/plain"},
            {"uri": blob_uri, "name": "data.bin", "mime_type": "application/octet-stream"},
        ]),
        "{owner}"
    );
    assert_eq!(owner["listed"], json!([text_uri, blob_uri]), "{owner}");
    // Read back: the text as text, the binary file as a blob.
    let read = owner["read"].as_array().unwrap();
    assert_eq!(read[0]["uri"], text_uri, "{owner}");
    assert_eq!(read[0]["text"].as_str().map(str::trim), Some("from-owner"));
    assert_eq!(read[1]["uri"], blob_uri, "{owner}");
    let blob = base64::engine::general_purpose::STANDARD
        .decode(read[1]["blob"].as_str().unwrap())
        .unwrap();
    assert_eq!(blob, [0u8, 1, 255]);
    // Another member's session on a thread of the same name sees none of it.
    let other = &r["other"];
    assert_eq!(other["listed"], json!([]), "{other}");
    assert!(other.get("read").is_none(), "{other}");
    assert!(
        other["read_error"]
            .as_str()
            .unwrap()
            .contains("Resource not found"),
        "{other}"
    );
}
