//! mcp-host pings each live stdio session every second: a server that stops answering
//! (here paused with SIGSTOP: it neither dies nor closes its pipes, so nothing else would
//! notice) is named in mcp-host's log within seconds, and again when it answers after
//! SIGCONT; nothing is torn down meanwhile (no reconnect), and its tools work as before.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::mcp_support::{npm_bin, stdio, McpCluster};
use antler_tests::{signal, wait_for};
use serde_json::json;

#[test]
fn a_paused_server_is_named_in_the_log_and_served_again_after_sigcont() {
    let c = McpCluster::start_with(
        json!({
            "everything": stdio(npm_bin("mcp-server-everything").display().to_string(), &["stdio"]),
        }),
        &[("RUST_LOG", "info")],
    );
    let log = c.runtime_dir().join("logs").join("mcp-host.log");
    let logged = |needle: &str| {
        wait_for(Duration::from_secs(15), || {
            std::fs::read_to_string(&log)
                .ok()
                .filter(|l| {
                    l.lines()
                        .any(|l| l.contains(needle) && l.contains("server=everything"))
                })
                .map(|_| ())
        })
        .is_some()
    };
    let pids = c.server_pids("mcp-server-everything");
    assert_eq!(pids.len(), 1, "one server child: {pids:?}");
    let pid = pids[0];
    let reconnects = c.server("everything")["reconnects"].clone();

    signal(pid, libc::SIGSTOP);
    let noticed = logged("did not answer a ping");
    signal(pid, libc::SIGCONT);
    assert!(
        noticed,
        "the paused server is not named: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(
        logged("answers pings again"),
        "no word of the server answering again: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let (code, result) = c.call("everything", "echo", r#"{"message": "still here"}"#);
    assert_eq!(code, 0, "{result}");
    assert!(McpCluster::text(&result).contains("still here"), "{result}");
    assert_eq!(c.server("everything")["reconnects"], reconnects);
    assert_eq!(c.server_pids("mcp-server-everything"), vec![pid]);
}
