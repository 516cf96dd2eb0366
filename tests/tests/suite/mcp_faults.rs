//! Faults at the MCP edge: `kill -9` of a server child in the middle of a call (an error
//! result at once, then the next call works after a reconnect), a server that never answers
//! initialize (skipped after `session_init_timeout`, the others work), malformed JSON-RPC,
//! pagination (with a cursor that repeats), unsafe tool names, and per-call timeouts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    thread,
    time::{Duration, Instant},
};

use crate::mcp_support::{npm_bin, peer_script, python, stdio, McpCluster};
use antler_tests::{alive, signal, wait_for};
use serde_json::json;

#[test]
fn kill_9_of_a_server_child_fails_the_call_at_once_and_the_next_call_works() {
    let c = McpCluster::start(json!({
        "slow": stdio(python(), &[&peer_script("slow_tools.py")]),
        "everything": stdio(npm_bin("mcp-server-everything").display().to_string(), &["stdio"]),
    }));
    let pids = c.server_pids("slow_tools.py");
    assert_eq!(pids.len(), 1, "one slow_tools.py child: {pids:?}");
    let victim = pids[0];

    let dir = c.runtime_dir();
    let call = thread::spawn(move || {
        let t = Instant::now();
        let out = antler_tests::antler(
            &dir,
            &[
                "mcp",
                "call",
                "slow",
                "sleep",
                "--args",
                r#"{"seconds": 30}"#,
                "--json",
            ],
        );
        (out, t.elapsed())
    });
    // Wait until the call is in flight on the server, then kill the server.
    let in_flight = wait_for(Duration::from_secs(15), || {
        (c.server("slow")["in_flight"] == 1).then_some(())
    });
    assert!(
        in_flight.is_some(),
        "the call never got in flight: {}",
        c.server("slow")
    );
    let killed_at = Instant::now();
    signal(victim, libc::SIGKILL);
    let (out, _) = call.join().expect("call thread");
    let answered_after = killed_at.elapsed();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(
        McpCluster::text(&r).contains("connection lost during the call to 'sleep'"),
        "{r}"
    );
    // The call sleeps 30 s: an error well before that is the kill's, not the sleep's end.
    assert!(
        answered_after < Duration::from_secs(15),
        "the error came after {answered_after:?}"
    );

    // The next call works, on a new child; the dead one was reaped.
    let (code, r) = c.call("slow", "echo", r#"{"text": "back"}"#);
    assert_eq!((code, McpCluster::text(&r)), (0, "back".to_owned()), "{r}");
    let s = c.server("slow");
    assert_eq!(s["state"], "ready", "{s}");
    assert_eq!(s["reconnects"], 1, "{s}");
    assert!(s["last_error"].is_null(), "{s}");
    let new = c.server_pids("slow_tools.py");
    assert_eq!(new.len(), 1);
    assert_ne!(new[0], victim);
    assert!(
        !antler_tests::exists(victim),
        "the killed child is not reaped"
    );
    // The other server was not disturbed.
    assert_eq!(c.server("everything")["reconnects"], 0);
    let (code, _) = c.call("everything", "echo", r#"{"message": "x"}"#);
    assert_eq!(code, 0);
}

#[test]
fn a_server_that_never_answers_initialize_is_skipped_and_the_others_work() {
    let c = McpCluster::start(json!({
        "silent": {"command": python(), "args": [peer_script("raw_server.py"), "silent"], "session_init_timeout": 2},
        "ok": stdio(python(), &[&peer_script("raw_server.py"), "paged"]),
        "nocmd": {"type": "stdio"},
        "nourl": {"type": "http"},
        "dies": stdio(python(), &["-c", "import sys; sys.stderr.write('boom: MISSING_API_KEY is not set\\n'); sys.exit(1)"]),
    }));
    // The listing answers (within the command's own deadline) with the working server's
    // tools, and the silent server is skipped for its discovery timeout, not waited for.
    let tools = c.tools(None);
    assert!(tools.iter().all(|t| t["server"] == "ok"), "{tools:?}");
    assert_eq!(tools.len(), 9);
    let s = c.server("silent");
    assert_eq!(s["state"], "failed", "{s}");
    assert_eq!(s["tools"], 0);
    assert_eq!(
        s["last_error"], "Skipping MCP server 'silent' after tool discovery timed out (2.0s)",
        "{s}"
    );
    let (code, r) = c.call("silent", "echo", "{}");
    assert_eq!(code, 1);
    assert!(
        McpCluster::text(&r)
            .starts_with("MCP server 'silent' is unavailable: Skipping MCP server 'silent'"),
        "{r}"
    );
    let (code, _) = c.call("ok", "a1", "{}");
    assert_eq!(code, 0);
    // Servers missing their required field are reported with DeerFlow's text and skipped.
    let nocmd = c.server("nocmd");
    assert_eq!(nocmd["state"], "invalid", "{nocmd}");
    assert_eq!(
        nocmd["last_error"],
        "MCP server 'nocmd' with stdio transport requires 'command' field"
    );
    assert_eq!(
        c.server("nourl")["last_error"],
        "MCP server 'nourl' with http transport requires 'url' field"
    );
    // A stdio server that exits at start is reported with the tail of its stderr.
    let d = c.server("dies");
    assert_eq!(d["state"], "failed", "{d}");
    let why = d["last_error"].as_str().unwrap_or("");
    assert!(
        why.starts_with("MCP server 'dies' failed to start: initialize failed"),
        "{d}"
    );
    assert!(
        why.contains("stderr: boom: MISSING_API_KEY is not set"),
        "{d}"
    );
}

#[test]
fn pagination_repeated_cursors_unsafe_names_and_malformed_json_rpc() {
    let raw = |mode: &str| stdio(python(), &[&peer_script("raw_server.py"), mode]);
    let c = McpCluster::start(json!({
        "paged": raw("paged"),
        "loop": raw("repeat-cursor"),
        "names": raw("bad-names"),
        "garbage": raw("malformed"),
        "crash": raw("crash-on-call"),
    }));
    let host = c.cluster.process("mcp-host", 0).expect("mcp-host")["pid"]
        .as_u64()
        .expect("pid") as u32;
    assert_eq!(
        c.tool_names("paged"),
        [
            "paged_a1", "paged_a2", "paged_a3", "paged_b1", "paged_b2", "paged_b3", "paged_c1",
            "paged_c2", "paged_c3"
        ]
    );
    // A cursor that repeats ends the listing instead of looping forever.
    assert_eq!(c.tool_names("loop"), ["loop_r1", "loop_r2"]);
    // Names outside ^[A-Za-z0-9_-]+$ are dropped.
    assert_eq!(c.tool_names("names"), ["names_ok_tool"]);
    // Garbage lines between replies: no panic; the valid replies still arrive.
    assert_eq!(c.tool_names("garbage"), ["garbage_echo"]);
    let (code, r) = c.call("garbage", "echo", r#"{"k": 1}"#);
    assert_eq!(code, 0, "{r}");
    assert_eq!(McpCluster::text(&r), r#"{"k": 1}"#);
    // A server that exits mid-call: an error result, and the host is still the same process.
    let (code, r) = c.call("crash", "echo", "{}");
    assert_eq!(code, 1, "{r}");
    assert!(McpCluster::text(&r).contains("connection lost"), "{r}");
    assert!(alive(host));
    assert_eq!(
        c.cluster.process("mcp-host", 0).expect("mcp-host")["pid"].as_u64(),
        Some(host as u64)
    );
}

#[test]
fn calls_run_concurrently_on_one_server_and_time_out_per_call() {
    let c = McpCluster::start(json!({
        "slow": stdio(python(), &[&peer_script("slow_tools.py")]),
        "strict": {"command": python(), "args": [peer_script("slow_tools.py")], "tool_call_timeout": 1},
    }));
    // Eight 2-second calls on one server finish together, not one after another.
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let dir = c.runtime_dir();
            thread::spawn(move || {
                antler_tests::antler(
                    &dir,
                    &[
                        "mcp",
                        "call",
                        "slow",
                        "sleep",
                        "--args",
                        r#"{"seconds": 2}"#,
                    ],
                )
            })
        })
        .collect();
    // All eight are in flight on the one server at the same moment.
    let together = wait_for(Duration::from_secs(10), || {
        (c.server("slow")["in_flight"] == 8).then_some(())
    });
    for h in calls {
        let out = h.join().expect("call");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "slept 2.0");
    }
    // Eight in flight at one moment is what concurrency means; no wall-clock bound.
    assert!(together.is_some(), "the eight calls never ran at once");

    // tool_call_timeout: an error result after 1 s, and the server keeps working.
    let t = Instant::now();
    let (code, r) = c.call("strict", "sleep", r#"{"seconds": 20}"#);
    assert_eq!(code, 1, "{r}");
    assert_eq!(
        McpCluster::text(&r),
        "MCP tool 'sleep' on server 'strict' timed out after 1.0s"
    );
    // The tool sleeps 20 s: the error well before that is the 1 s timeout's.
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    // The server was told: notifications/cancelled stopped its sleep.
    let told = wait_for(Duration::from_secs(5), || {
        let (_, r) = c.call("strict", "cancellations", "{}");
        (McpCluster::text(&r) == "[20.0]").then_some(())
    });
    assert!(
        told.is_some(),
        "the server never saw notifications/cancelled"
    );
    let (code, r) = c.call("strict", "echo", r#"{"text": "still here"}"#);
    assert_eq!((code, McpCluster::text(&r)), (0, "still here".to_owned()));
    assert_eq!(c.server("strict")["in_flight"], 0);
}

#[test]
fn kill_9_of_mcp_host_takes_its_server_children_with_it_and_the_restart_serves_again() {
    let c = McpCluster::start(json!({"slow": stdio(python(), &[&peer_script("slow_tools.py")])}));
    assert_eq!(c.tool_names("slow").len(), 7);
    let old = c.server_pids("slow_tools.py");
    assert_eq!(old.len(), 1);
    let host = c.cluster.process("mcp-host", 0).expect("mcp-host")["pid"]
        .as_u64()
        .expect("pid") as u32;
    signal(host, libc::SIGKILL);
    let gone = wait_for(Duration::from_secs(5), || (!alive(old[0])).then_some(()));
    assert!(gone.is_some(), "the server child outlived its mcp-host");
    // The supervisor restarts mcp-host, which starts the server again.
    let back = wait_for(Duration::from_secs(20), || {
        let p = c.cluster.process("mcp-host", 0)?;
        (p["pid"].as_u64()? as u32 != host && p["healthy"] == true).then_some(())
    });
    assert!(back.is_some(), "mcp-host did not come back");
    let (code, r) = c.call("slow", "echo", r#"{"text": "again"}"#);
    assert_eq!((code, McpCluster::text(&r)), (0, "again".to_owned()), "{r}");
}
