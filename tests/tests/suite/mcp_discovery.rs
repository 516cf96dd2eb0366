//! Runs never wait on an MCP server that is not ready (issue 10, item 16): with one good
//! server and one that accepts TCP connections and never answers (a stand-in listener of
//! the test), `antler mcp tools` and a run answer within seconds (they took ~57 s) with
//! the good server's tools, and the run carries a warning event naming the other.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::mcp_support::{peer_script, python, standin::Silent, stdio, McpCluster};
use antler_tests::wait_for;
use serde_json::json;

/// Far below the ~57 s a hung server cost, far above a prompt answer on a busy machine
/// (a listing may wait out what is left of the 10 s start grace of a server's spawn).
const PROMPT: Duration = Duration::from_secs(20);

const PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - name: tool_search
        args: {query: "select:good_echo"}
  - tool_calls:
      - name: good_echo
        args: {text: "still here"}
  - content: Done.
"#;

#[test]
fn a_server_that_accepts_and_never_answers_holds_up_no_listing_and_no_run() {
    let hung = Silent::start();
    let c = McpCluster::start_unsettled(
        json!({
            "good": stdio(python(), &[&peer_script("slow_tools.py")]),
            // The default session_init_timeout (60 s): the server is `starting` all along.
            "hung": {"type": "http", "url": hung.url("/mcp")},
        }),
        &[],
    );
    let ready = wait_for(Duration::from_secs(30), || {
        (c.server("good")["state"] == "ready").then_some(())
    });
    assert!(
        ready.is_some(),
        "good never became ready: {}",
        c.server("good")
    );

    let t = Instant::now();
    let listing = c.mcp(&["tools", "--json"]);
    let took = t.elapsed();
    assert!(listing.status.success(), "{listing:?}");
    let tools: Vec<serde_json::Value> = serde_json::from_slice(&listing.stdout).unwrap();
    let said = String::from_utf8_lossy(&listing.stderr);
    assert!(
        said.contains("MCP server 'hung' is not ready (starting)"),
        "{said}"
    );
    assert!(took < PROMPT, "antler mcp tools took {took:?}");
    assert!(tools.iter().any(|t| t["name"] == "good_echo"), "{tools:?}");
    assert!(tools.iter().all(|t| t["server"] == "good"), "{tools:?}");

    let t = Instant::now();
    let run = c.run_playbook(PLAYBOOK);
    let took = t.elapsed();
    assert_eq!(
        (run.code, run.view["status"].as_str()),
        (0, Some("success")),
        "{}\n{}",
        run.view,
        run.stderr
    );
    assert!(took < PROMPT, "the run took {took:?}");
    assert!(run.called_ok("good_echo"), "{:?}", run.events);
    let warnings = run.warnings();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("not ready") && w.contains("'hung' (starting)")),
        "{warnings:?}"
    );
    assert!(
        !warnings.iter().any(|w| w.contains("'good'")),
        "{warnings:?}"
    );
    // The hung server was still starting all along: nothing was waited out.
    assert_eq!(c.server("hung")["state"], "starting");
}
