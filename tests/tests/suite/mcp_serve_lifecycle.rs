//! An MCP session's end frees its thread, against a real cluster (lead with its gateway,
//! sandbox-host) and the official MCP Python SDK client (`tests/peers/mcp_serve_client.py`)
//! over streamable HTTP at `/mcp` with a member's token. A client that closes its session
//! (`DELETE`) and opens the next one on the same thread right away works in it every time:
//! the `DELETE` answers once the session's run is released, so every run of the thread has
//! ended when the client's last `DELETE` came back. `antler mcp serve` joining the cluster
//! exits only once its session's run is released, so a stdio client that closed its
//! session finds the thread's runs ended. A client that vanishes without closing
//! its session (killed) holds the thread only until the session's idle limit
//! (`antler.gateway.mcp_server.session_idle_s`, short here) passes: then its run ends and
//! a new session works on the thread. SIGTERM to `antler mcp serve` (its stdin still
//! open) closes its session as the end of stdin does, and it exits 0.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::lead_support::LeadCluster;
use crate::mcp_support::serve::{
    cluster as serve_cluster, config, mcp_driver, thread_runs, ALICE, SANDBOX_TOOLS,
};
use antler_tests::wait_for;
use serde_json::Value;

/// Sessions opened one after the other on the same thread.
const ROUNDS: usize = 6;

/// A cluster whose MCP sessions idle out after `idle_s` seconds.
fn cluster(idle_s: u64) -> LeadCluster {
    let config = format!(
        "{}    mcp_server:\n      session_idle_s: {idle_s}\n",
        config(SANDBOX_TOOLS)
    );
    serve_cluster(&config, None, 0)
}

/// `rounds` sessions one after the other on `thread`, each closed before the next opens.
fn reopen(url: &str, thread: &str, rounds: usize) -> Vec<Value> {
    let r = mcp_driver(|c| c.args(["reopen", url, ALICE, thread, &rounds.to_string()]));
    r["rounds"].as_array().unwrap().clone()
}

#[test]
fn a_new_session_works_on_the_thread_right_after_the_last_one_closed() {
    let cluster = cluster(300);
    let addr = cluster.gateway();
    let url = format!("http://{addr}/mcp");
    let rounds = reopen(&url, "reopened", ROUNDS);
    assert_eq!(rounds.len(), ROUNDS);
    for (i, round) in rounds.iter().enumerate() {
        assert_eq!(round["is_error"], false, "round {i}: {round}");
        assert!(
            round["text"]
                .as_str()
                .unwrap()
                .contains(&format!("round-{i}")),
            "round {i}: {round}"
        );
    }
    let runs = thread_runs(&addr, "reopened");
    assert_eq!(runs.len(), ROUNDS, "{runs:?}");
    assert!(
        runs.iter().all(|r| r["status"] == "success"),
        "a closed session's run still runs: {runs:?}"
    );
}

#[test]
fn a_stdio_session_s_run_has_ended_when_antler_mcp_serve_exits() {
    let cluster = cluster(300);
    let addr = cluster.gateway();
    let runtime = cluster.runtime().display().to_string();
    for round in 0..2 {
        let r = mcp_driver(|c| {
            c.args(["stdio", "over-stdio"])
                .arg(antler_tests::bin("antler"))
                .args(["--runtime-dir", &runtime, "mcp", "serve", "--user", "alice"])
                .env("ANTLER_SANDBOX_BASE_DIR", cluster.base())
        });
        assert_eq!(r["bash"]["is_error"], false, "round {round}: {r}");
        let runs = thread_runs(&addr, "over-stdio");
        assert_eq!(runs.len(), round + 1, "{runs:?}");
        assert!(
            runs.iter().all(|r| r["status"] == "success"),
            "round {round}: the stdio session's run still runs: {runs:?}"
        );
    }
}

/// `antler mcp serve` joining the cluster, its stdin left open (a client that stops it
/// with a signal, as MCP clients do once they closed stdin and waited): SIGTERM ends its
/// session as the end of stdin does. It exits 0 at once and the session's run has ended.
#[test]
fn sigterm_to_antler_mcp_serve_ends_its_session() {
    use std::io::{BufRead, BufReader, Write};
    let cluster = cluster(300);
    let addr = cluster.gateway();
    let mut serve = Command::new(antler_tests::bin("antler"))
        .arg("--runtime-dir")
        .arg(cluster.runtime())
        .args(["mcp", "serve", "--user", "alice"])
        .env("ANTLER_SANDBOX_BASE_DIR", cluster.base())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = serve.stdin.take().unwrap();
    let mut stdout = BufReader::new(serve.stdout.take().unwrap());
    let meta = serde_json::json!({"antler/thread": "signalled"});
    let mut send = |message: Value| {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    };
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}}),
    );
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("\"serverInfo\""), "{line}");
    send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "bash", "_meta": meta,
        "arguments": {"description": "say", "command": "echo signalled"}}}),
    );
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert!(
        line.contains("signalled") && line.contains("\"id\":2"),
        "{line}"
    );
    assert_eq!(thread_runs(&addr, "signalled")[0]["status"], "running");

    antler_tests::signal(serve.id(), libc::SIGTERM);
    let status = wait_for(Duration::from_secs(30), || serve.try_wait().ok().flatten())
        .unwrap_or_else(|| {
            let _ = serve.kill();
            let _ = serve.wait();
            panic!("antler mcp serve did not stop on SIGTERM")
        });
    assert_eq!(status.code(), Some(0));
    // The session was closed before the process exited: its run has ended.
    let runs = thread_runs(&addr, "signalled");
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["status"], "success", "{runs:?}");
}

#[test]
fn a_client_that_vanishes_frees_its_thread_once_its_session_idles_out() {
    let cluster = cluster(2);
    let addr = cluster.gateway();
    let url = format!("http://{addr}/mcp");
    let ready = cluster.dir.path().join("held");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers/mcp_serve_client.py");
    let mut client = Command::new("python3")
        .arg(script)
        .args(["hold", &url, ALICE, "vanished"])
        .arg(&ready)
        .stdout(Stdio::null())
        .spawn()
        .expect("start the MCP SDK driver");
    let held = wait_for(Duration::from_secs(120), || {
        if let Ok(Some(status)) = client.try_wait() {
            panic!("the holding client ended: {status}");
        }
        ready.exists().then_some(())
    });
    if held.is_none() {
        let _ = client.kill();
        let _ = client.wait();
        panic!("the holding client never called bash");
    }
    // The client vanishes: no DELETE, its connections just close.
    client.kill().unwrap();
    client.wait().unwrap();
    let ended = wait_for(Duration::from_secs(120), || {
        let runs = thread_runs(&addr, "vanished");
        (runs.len() == 1 && runs[0]["status"] == "success").then_some(())
    });
    assert!(ended.is_some(), "{:?}", thread_runs(&addr, "vanished"));
    // The thread takes a new session.
    let rounds = reopen(&url, "vanished", 1);
    assert_eq!(rounds[0]["is_error"], false, "{rounds:?}");
    assert!(
        rounds[0]["text"].as_str().unwrap().contains("round-0"),
        "{rounds:?}"
    );
}
