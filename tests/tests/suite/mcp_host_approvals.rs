//! mcp-host's own check of the approval policy (issue 37, the second layer): against a
//! recording MCP server (`peers/recording_tools.py` writes down every call it gets), a call
//! sent straight to mcp-host under an `ask` rule without a person's approval of that rule
//! (`McpCall::clearance`), or under a `deny` rule with any, is refused and the server never
//! sees it; with the approval of the asking rule it runs; `antler mcp call` and `antler tool
//! call`, which skip the lead's stage, are refused the same way; and a call the run's user
//! approved through a run reaches the server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use antler_protocol::{
    calls::McpCalls, link::dial, messages::McpCall, runtime_dir::RuntimeDir, Address,
    ConnectionConfig, Identity, Json, Role,
};
use antler_tests::{antler, wait_for};
use serde_json::{json, Value};

use crate::lead_support::LeadCluster;
use crate::mcp_support::{peer_script, python};

const CONFIG: &str = r#"tool_search:
  enabled: false
approvals:
  defaults: false
  deadline_seconds: 3600
  rules:
    - name: publish
      tool: rec_publish
      source: "mcp:rec"
      decision: ask
      justification: Publishing is public
      examples:
        match: [{text: hello}]
    - name: no-delete
      tool: rec_delete
      source: mcp
      decision: deny
      justification: nothing is deleted here
"#;

/// What mcp-host says of a call asked about and sent without its rule's approval.
const NOT_APPROVED: &str = "denied by policy: this call needs a person's approval (rule publish) and reached mcp-host without one";

const PUBLISH: &str = r#"
turns:
  - tool_calls:
      - {name: rec_publish, id: pub-1, args: {text: from the run}}
  - content: Published.
"#;

/// The calls the recording server saw, in order.
fn seen(record: &Path) -> Vec<Value> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A call of `tool` on the recording server, as a caller that skips the lead sends it.
fn call(tool: &str, args: Value, clearance: Option<&str>) -> McpCall {
    McpCall {
        server: "rec".into(),
        tool: tool.into(),
        args: Json::from(&args),
        user: None,
        thread: None,
        workspace: None,
        run_id: None,
        tool_call_id: None,
        clearance: clearance.map(str::to_owned),
    }
}

/// Sends each call straight to mcp-host (as a forged request would); (is_error, text) each.
fn send_direct(runtime: PathBuf, calls: Vec<McpCall>) -> Vec<(bool, String)> {
    let rt = RuntimeDir::open(runtime).expect("runtime dir");
    let token = rt.read_token().expect("token");
    let socket = rt.socket(Role::McpHost, 0);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let me = Identity::new(Role::Lead, "approvals-test", Some(token));
        let conn = dial(
            &Address::Unix(socket),
            &me,
            ConnectionConfig::default(),
            None,
        )
        .await
        .expect("dial mcp-host");
        let mut out = Vec::new();
        for c in calls {
            let result = conn
                .call_tool(c, Duration::from_secs(60))
                .await
                .expect("an answer");
            out.push((result.is_error, result.text()));
        }
        out
    })
}

#[test]
fn mcp_host_decides_every_call_again_and_runs_only_what_a_person_approved() {
    let scratch = tempfile::Builder::new()
        .prefix("antler-mcp-approvals")
        .tempdir_in("/tmp")
        .unwrap();
    let record = scratch.path().join("calls.jsonl");
    let extensions = json!({"mcpServers": {"rec": {
        "type": "stdio",
        "command": python(),
        "args": [peer_script("recording_tools.py"), record.to_str().unwrap()],
    }}});
    let c = LeadCluster::up_with_files(
        CONFIG,
        &[("extensions_config.json", &extensions.to_string())],
        &[],
    );
    let ready = wait_for(Duration::from_secs(60), || {
        let out = antler(&c.runtime(), &["mcp", "status", "--json"]);
        let status: Value = serde_json::from_slice(&out.stdout).ok()?;
        (status[0]["state"] == "ready").then_some(())
    });
    assert!(ready.is_some(), "the recording server did not start");

    // Straight to mcp-host: without an approval, with another rule's, under a deny rule
    // whatever it carries; then with the asking rule's approval, which alone runs.
    let answers = send_direct(
        c.runtime(),
        vec![
            call("publish", json!({"text": "no approval"}), None),
            call(
                "rec_publish",
                json!({"text": "wrong rule"}),
                Some("no-delete"),
            ),
            call("delete", json!({"name": "all"}), Some("no-delete")),
            call("publish", json!({"text": "approved"}), Some("publish")),
        ],
    );
    assert_eq!(answers[0], (true, NOT_APPROVED.to_owned()));
    assert_eq!(answers[1], (true, NOT_APPROVED.to_owned()));
    assert_eq!(
        answers[2],
        (
            true,
            "denied by policy: nothing is deleted here (rule no-delete; refused where the call runs)"
                .to_owned()
        )
    );
    assert_eq!(answers[3], (false, "published approved".to_owned()));
    assert_eq!(
        seen(&record),
        vec![json!({"tool": "publish", "args": {"text": "approved"}})],
        "the server saw a call the policy held back"
    );

    // The commands that skip the lead's stage are refused there too.
    let out = antler(
        &c.runtime(),
        &[
            "mcp",
            "call",
            "rec",
            "publish",
            "--args",
            r#"{"text": "by mcp call"}"#,
        ],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(NOT_APPROVED),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = antler(
        &c.runtime(),
        &[
            "tool",
            "call",
            "rec_publish",
            "--args",
            r#"{"text": "by tool call"}"#,
        ],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(NOT_APPROVED),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(seen(&record).len(), 1, "{:?}", seen(&record));

    // Through a run: the lead asks, the user approves, the approved call reaches the server.
    let playbook = c.write("publish.yaml", PUBLISH);
    let run_id = c.submit("Publish", &playbook, &["--thread", "t-run"]);
    let asked = wait_for(Duration::from_secs(90), || {
        (c.run_status(&run_id) == "interrupted").then_some(())
    });
    assert!(asked.is_some(), "the run is {}", c.run_status(&run_id));
    assert_eq!(
        seen(&record).len(),
        1,
        "a call waiting for approval was sent"
    );
    let out = antler(
        &c.runtime(),
        &["run", "--resume", &run_id, "--approve", "pub-1", "--json"],
    );
    let done: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    assert_eq!(done["status"], "success", "{done}");
    assert_eq!(done["final_answer"], "Published.");
    let state = c.run_state(&run_id);
    let result = state["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["tool_call_id"] == "pub-1")
        .map(|m| m["content"].clone());
    assert_eq!(result, Some(json!("published from the run")), "{state}");
    assert_eq!(
        seen(&record).last(),
        Some(&json!({"tool": "publish", "args": {"text": "from the run"}}))
    );
}
