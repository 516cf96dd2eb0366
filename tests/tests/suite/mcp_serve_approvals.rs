//! Approvals in MCP-served sessions (issue 37): a call an `ask` rule matches (a `touch` of
//! a marker with bash) is put to the session's MCP client as an elicitation (the official
//! MCP Python SDK client, `tests/peers/mcp_serve_approvals_client.py`, answering from a
//! script) naming the tool, its arguments and the rule, with a required `decision` of
//! approve / approve_for_thread / deny and an optional reason. Over the gateway's `/mcp`:
//! approved, the call runs (the marker exists); approved for the thread, a second matching
//! call is not asked (the client saw one elicitation), nor is one of a later session on
//! that thread; denied with a reason, the result is
//! an error with that reason, the marker is absent and the call was never executed; a
//! decline is a denial saying so, as is a call the client cancels while it is asked (the
//! session goes on); a client that declared no elicitation capability is denied, saying
//! why. Each answer is in the runs store's `approval_decisions` (by the
//! session's user) and in the session run's events (`approval_requested` then
//! `approval_decided`). Over stdio (`antler mcp serve --user alice` joined to the
//! cluster) an approval is asked and answered the same way. An ask the client does not
//! answer by `approvals.deadline_seconds` is a denial.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use antler_tests::wait_for;
use serde_json::{json, Value};

use crate::lead_support::{sql, LeadCluster};
use crate::mcp_support::serve::{python_driver, ALICE};

const WORKSPACE: &str = "/mnt/user-data/workspace";

fn config(deadline_seconds: u64) -> String {
    format!(
        r#"tools:
  - {{name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}}
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
tool_search:
  enabled: false
approvals:
  defaults: false
  deadline_seconds: {deadline_seconds}
  rules:
    - name: markers
      tool: bash
      command: [touch]
      decision: ask
      justification: Touching a marker needs a person
      examples:
        match: ["echo x && touch m.txt"]
        not_match: ["ls"]
antler:
  gateway:
    tokens:
      - {{token: {ALICE}, user: alice, role: member}}
"#
    )
}

fn cluster(deadline_seconds: u64) -> LeadCluster {
    LeadCluster::up(
        &config(deadline_seconds),
        &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")],
    )
}

/// The driver (`tests/peers/mcp_serve_approvals_client.py`) run with what `configure`
/// gives it, to its end: its one JSON report.
fn driver(configure: impl FnOnce(&mut Command) -> &mut Command) -> Value {
    python_driver("mcp_serve_approvals_client.py", configure)
}

/// A session of alice's over `/mcp` on `thread`: `calls` made in turn, the client's
/// elicitations answered by `answers` (`Value::Null`: no elicitation capability).
fn over_http(c: &LeadCluster, thread: &str, calls: Value, answers: Value) -> Value {
    let url = format!("http://{}/mcp", c.gateway());
    driver(|d| {
        d.args([
            "http",
            &url,
            ALICE,
            thread,
            &calls.to_string(),
            &answers.to_string(),
        ])
    })
}

/// A bash call touching `name` in the workspace.
fn touch(name: &str) -> Value {
    json!(["bash", {"description": "touch a marker", "command": format!("touch {WORKSPACE}/{name} && echo touched")}])
}

fn accept(decision: &str) -> Value {
    json!({"action": "accept", "content": {"decision": decision}})
}

fn workspace(c: &LeadCluster, thread: &str) -> PathBuf {
    c.base()
        .join("users/alice/threads")
        .join(thread)
        .join("user-data/workspace")
}

/// The id of the session run on `thread` (one session per thread here).
fn run_of(c: &LeadCluster, thread: &str) -> String {
    let rows = sql(
        &c.runtime().join("runs.sqlite"),
        "select run_id from runs where thread_id = ?",
        thread,
    );
    let rows: Value = serde_json::from_str(&rows).unwrap();
    rows[0][0].as_str().unwrap().to_owned()
}

/// The run's events about approvals and tool lifecycles, in order, once the store keeps
/// them (when its session ended).
fn kept_events(c: &LeadCluster, run_id: &str) -> Vec<Value> {
    let kept = wait_for(Duration::from_secs(60), || {
        let rows = sql(
            &c.runtime().join("runs.sqlite"),
            "select event from run_events where run_id = ? order by seq",
            run_id,
        );
        let rows: Value = serde_json::from_str(&rows).ok()?;
        rows.as_array().filter(|r| !r.is_empty()).cloned()
    });
    kept.unwrap_or_else(|| panic!("the events of run {run_id} were not kept"))
        .iter()
        .filter_map(|row| serde_json::from_str::<Value>(row[0].as_str()?).ok())
        .filter(|e| {
            e["event"]
                .as_str()
                .is_some_and(|k| k.starts_with("approval_") || k == "lifecycle")
        })
        .collect()
}

/// The run's `approval_decisions` rows: (choice, decided_by, reason).
fn decisions(c: &LeadCluster, run_id: &str) -> Vec<Value> {
    let rows = sql(
        &c.runtime().join("runs.sqlite"),
        "select choice, decided_by, reason from approval_decisions where run_id = ? order by decided_ms",
        run_id,
    );
    serde_json::from_str::<Value>(&rows)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Whether the run's events show call `call` executed (sent to where it runs).
fn executed(events: &[Value], call: &str) -> bool {
    events
        .iter()
        .any(|e| e["event"] == "lifecycle" && e["state"] == "executed" && e["tool_call_id"] == call)
}

#[test]
fn an_ask_is_answered_by_the_mcp_client_approve_for_the_thread_or_deny() {
    let c = cluster(3600);

    // Approved: the client was asked once, with the call, the rule and the form.
    let r = over_http(
        &c,
        "t-approve",
        json!([touch("approved.txt")]),
        json!([accept("approve")]),
    );
    let asked = r["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{r}");
    let message = asked[0]["message"].as_str().unwrap();
    assert!(message.contains("bash"), "{message}");
    assert!(
        message.contains("touch /mnt/user-data/workspace/approved.txt"),
        "{message}"
    );
    assert!(message.contains("markers"), "{message}");
    assert!(
        message.contains("Touching a marker needs a person"),
        "{message}"
    );
    let schema = &asked[0]["requested_schema"];
    assert_eq!(
        schema["properties"]["decision"]["enum"],
        json!(["approve", "approve_for_thread", "deny"]),
        "{schema}"
    );
    assert_eq!(schema["required"], json!(["decision"]), "{schema}");
    assert_eq!(schema["properties"]["reason"]["type"], "string", "{schema}");
    assert_eq!(r["calls"][0]["is_error"], false, "{r}");
    assert!(
        r["calls"][0]["text"].as_str().unwrap().contains("touched"),
        "{r}"
    );
    assert!(workspace(&c, "t-approve").join("approved.txt").exists());
    let run_id = run_of(&c, "t-approve");
    assert_eq!(
        decisions(&c, &run_id),
        vec![json!(["approve", "alice", null])]
    );
    let approvals: Vec<Value> = kept_events(&c, &run_id)
        .into_iter()
        .filter(|e| e["event"] != "lifecycle")
        .collect();
    assert_eq!(approvals.len(), 2, "{approvals:?}");
    assert_eq!(approvals[0]["event"], "approval_requested", "{approvals:?}");
    assert_eq!(approvals[0]["rule"], "markers", "{approvals:?}");
    let decided = &approvals[1];
    assert_eq!(decided["event"], "approval_decided", "{decided}");
    assert_eq!(decided["decision"], "approve", "{decided}");
    assert_eq!(decided["by"], "alice", "{decided}");
    assert_eq!(decided["rule"], "markers", "{decided}");

    // Approved for the thread: the second matching call is not asked.
    let r = over_http(
        &c,
        "t-thread",
        json!([touch("first.txt"), touch("second.txt")]),
        json!([accept("approve_for_thread")]),
    );
    assert_eq!(r["asked"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["calls"][0]["is_error"], false, "{r}");
    assert_eq!(r["calls"][1]["is_error"], false, "{r}");
    let ws = workspace(&c, "t-thread");
    assert!(ws.join("first.txt").exists() && ws.join("second.txt").exists());
    let decided: Vec<Value> = kept_events(&c, &run_of(&c, "t-thread"))
        .into_iter()
        .filter(|e| e["event"] == "approval_decided")
        .map(|e| e["decision"].clone())
        .collect();
    assert_eq!(decided, [json!("approve_for_thread"), json!("thread_rule")]);
    // Remembered for the thread: a later session on it is not asked either (its first
    // session ended: its events are kept).
    let r = over_http(&c, "t-thread", json!([touch("third.txt")]), json!([]));
    assert!(r["asked"].as_array().unwrap().is_empty(), "{r}");
    assert_eq!(r["calls"][0]["is_error"], false, "{r}");
    assert!(ws.join("third.txt").exists());

    // Denied with a reason, then declined: error results saying so; nothing was sent.
    let deny =
        json!({"action": "accept", "content": {"decision": "deny", "reason": "not on a Saturday"}});
    let r = over_http(
        &c,
        "t-deny",
        json!([touch("denied.txt"), touch("declined.txt")]),
        json!([deny, {"action": "decline"}]),
    );
    assert_eq!(r["asked"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(r["calls"][0]["is_error"], true, "{r}");
    assert_eq!(
        r["calls"][0]["text"], "denied by alice: not on a Saturday",
        "{r}"
    );
    assert_eq!(r["calls"][1]["is_error"], true, "{r}");
    assert_eq!(
        r["calls"][1]["text"],
        "denied by alice: the approval request was declined in the MCP client",
        "{r}"
    );
    let ws = workspace(&c, "t-deny");
    assert!(!ws.join("denied.txt").exists() && !ws.join("declined.txt").exists());
    let run_id = run_of(&c, "t-deny");
    let events = kept_events(&c, &run_id);
    let requested: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "approval_requested")
        .collect();
    assert_eq!(requested.len(), 2, "{events:?}");
    for call in requested {
        let id = call["tool_call_id"].as_str().unwrap();
        assert!(!executed(&events, id), "a denied call was sent: {events:?}");
    }
    assert_eq!(
        decisions(&c, &run_id),
        vec![
            json!(["deny", "alice", "not on a Saturday"]),
            json!([
                "deny",
                "alice",
                "the approval request was declined in the MCP client"
            ]),
        ]
    );

    // A call the client cancels while it is asked is denied, never sent; the session goes on.
    let r = over_http(
        &c,
        "t-cancel",
        json!([touch("cancelled.txt"), ["bash", {"description": "after", "command": "echo after-cancel"}]]),
        json!([{"cancel_call": true, "delay_s": 2}]),
    );
    assert_eq!(r["asked"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["calls"][0], json!({"cancelled": true}), "{r}");
    assert_eq!(r["calls"][1]["is_error"], false, "{r}");
    assert!(
        r["calls"][1]["text"]
            .as_str()
            .unwrap()
            .contains("after-cancel"),
        "{r}"
    );
    assert!(!workspace(&c, "t-cancel").join("cancelled.txt").exists());
    let run_id = run_of(&c, "t-cancel");
    assert_eq!(
        decisions(&c, &run_id),
        vec![json!([
            "deny",
            null,
            "the MCP client cancelled the call while it waited for approval"
        ])]
    );
    let events = kept_events(&c, &run_id);
    let asked = events
        .iter()
        .find(|e| e["event"] == "approval_requested")
        .unwrap();
    let call = asked["tool_call_id"].as_str().unwrap();
    assert!(
        !executed(&events, call),
        "a cancelled ask was sent: {events:?}"
    );
    let state = c.run_state(&run_id);
    let result = state["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["tool_call_id"] == call)
        .unwrap_or_else(|| panic!("no result for {call}: {state}"));
    assert_eq!(
        result["content"],
        "denied by policy: the MCP client cancelled the call while it waited for approval (rule markers)"
    );

    // A client without the elicitation capability cannot be asked: a denial saying so.
    let r = over_http(&c, "t-nocap", json!([touch("nocap.txt")]), Value::Null);
    assert!(r["asked"].as_array().unwrap().is_empty(), "{r}");
    assert_eq!(r["calls"][0]["is_error"], true, "{r}");
    assert_eq!(
        r["calls"][0]["text"],
        "denied by policy: the MCP client cannot be asked: it did not declare the elicitation capability (form mode) (rule markers)",
        "{r}"
    );
    assert!(!workspace(&c, "t-nocap").join("nocap.txt").exists());

    // Over stdio, joined to the cluster: asked of the stdio client and approved.
    let runtime = c.runtime().display().to_string();
    let r = driver(|d| {
        d.args([
            "stdio",
            "t-stdio",
            &json!([touch("stdio.txt")]).to_string(),
            &json!([accept("approve")]).to_string(),
        ])
        .arg(antler_tests::bin("antler"))
        .args(["--runtime-dir", &runtime, "mcp", "serve", "--user", "alice"])
        .env("ANTLER_SANDBOX_BASE_DIR", c.base())
    });
    assert_eq!(r["asked"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["calls"][0]["is_error"], false, "{r}");
    assert!(workspace(&c, "t-stdio").join("stdio.txt").exists());
}

#[test]
fn an_ask_the_mcp_client_does_not_answer_by_its_deadline_is_a_denial() {
    let c = cluster(1);
    // The client answers only after the deadline passed.
    let late = json!({"action": "accept", "content": {"decision": "approve"}, "delay_s": 4});
    let r = over_http(&c, "t-late", json!([touch("late.txt")]), json!([late]));
    assert_eq!(r["asked"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["calls"][0]["is_error"], true, "{r}");
    assert_eq!(
        r["calls"][0]["text"],
        "denied by policy: nobody approved this call within 1 s (rule markers)",
        "{r}"
    );
    assert!(!workspace(&c, "t-late").join("late.txt").exists());
    let run_id = run_of(&c, "t-late");
    assert_eq!(decisions(&c, &run_id), vec![json!(["expired", null, null])]);
}
