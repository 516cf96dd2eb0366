//! The legacy HTTP+SSE transport (our client on rmcp's transport trait) against
//! server-everything's `sse` mode, and `notifications/tools/list_changed`: a server that
//! adds a tool at run time has it listed and callable without a reconnect.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::mcp_support::{everything_http, peer_script, python, stdio, McpCluster};
use antler_tests::wait_for;
use serde_json::json;

#[test]
fn legacy_sse_lists_and_calls_like_the_other_transports() {
    let (_peer, port) = everything_http("sse");
    let c = McpCluster::start(json!({
        "legacy": {"type": "sse", "url": format!("http://127.0.0.1:{port}/sse"), "headers": {"X-Antler-Test": "1"}},
    }));
    // 13 tools, and 2 for a client that declares roots and elicitation, announced once
    // initialized.
    let names = wait_for(Duration::from_secs(15), || {
        let names = c.tool_names("legacy");
        (names.len() == 15).then_some(names)
    })
    .unwrap_or_else(|| c.tool_names("legacy"));
    let s = c.server("legacy");
    assert_eq!(
        (s["state"].as_str(), s["transport"].as_str()),
        (Some("ready"), Some("sse")),
        "{s}"
    );
    assert_eq!(names.len(), 15, "{names:?}");
    assert!(names.contains(&"legacy_echo".to_owned()));
    let (code, r) = c.call("legacy", "echo", r#"{"message": "over sse"}"#);
    assert_eq!(
        (code, McpCluster::text(&r)),
        (0, "Echo: over sse".to_owned()),
        "{r}"
    );
    // Several calls at once over the one event stream.
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let dir = c.runtime_dir();
            std::thread::spawn(move || {
                let out = antler_tests::antler(
                    &dir,
                    &[
                        "mcp",
                        "call",
                        "legacy",
                        "echo",
                        "--args",
                        &format!(r#"{{"message": "n{i}"}}"#),
                    ],
                );
                String::from_utf8_lossy(&out.stdout).trim().to_owned()
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().expect("call"), format!("Echo: n{i}"));
    }
}

#[test]
fn a_tools_list_changed_notification_relists_the_server() {
    let c = McpCluster::start(json!({"py": stdio(python(), &[&peer_script("slow_tools.py")])}));
    assert!(!c.tool_names("py").contains(&"py_extra".to_owned()));
    let (code, r) = c.call("py", "grow", r#"{"name": "extra"}"#);
    assert_eq!(
        (code, McpCluster::text(&r)),
        (0, "added extra".to_owned()),
        "{r}"
    );
    let listed = wait_for(Duration::from_secs(10), || {
        c.tool_names("py")
            .contains(&"py_extra".to_owned())
            .then_some(())
    });
    assert!(
        listed.is_some(),
        "py_extra never listed: {:?}",
        c.tool_names("py")
    );
    let (code, r) = c.call("py", "py_extra", "{}");
    assert_eq!(
        (code, McpCluster::text(&r)),
        (0, "I am extra".to_owned()),
        "{r}"
    );
    assert_eq!(c.server("py")["reconnects"], 0);
    // slow_tools.py lists 7 tools; `grow` added one.
    assert_eq!(c.server("py")["tools"], 8);
}
