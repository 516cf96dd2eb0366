//! `task` from an MCP session runs on a subagent worker, against a real cluster (lead
//! with its gateway, sandbox-host, mcp-host, one worker) and a replaying model configured
//! in `models:` (the model a run of the member's would have), driven by the official MCP
//! Python SDK client (`tests/peers/mcp_serve_client.py`): with `subagents.enabled` the
//! session is offered `task`; a call carrying `_meta.progressToken` gets
//! `notifications/progress` as the subagent advances (increasing, each with a message),
//! then the subagent's answer; the subagent's bash ran in the session thread's sandbox;
//! the task is in the session run's events. A `task` call the client cancels stops the
//! subagent's work on the worker (its sandbox command is killed), ends cancelled in the
//! run's events, and the session's next call works. A downstream server's elicitation
//! during the subagent's call (server-everything, policy `ask`) is asked of the MCP client
//! and its answer reaches the server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::lead_support::LeadCluster;
use crate::mcp_support::serve::{
    asking_cluster, cluster as serve_cluster, config as serve_config, ended_runs, mcp_driver,
    mcp_url, process_running, run_events, ALICE,
};
use crate::model_support::{recording_server_by, RecordingServer, Reply};
use antler_tests::wait_for;
use serde_json::{json, Value};

/// The subagent's last answer, once its bash call came back.
const ANSWER: &str = "The subagent wrote the note.";

/// A model that has the subagent call `tool` with `args`, then answer [`ANSWER`].
fn model_calling(tool: &'static str, args: Value) -> RecordingServer {
    recording_server_by(move |request, _| {
        let called = request["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        if called {
            Reply::text(ANSWER)
        } else {
            Reply::call(tool, args.clone())
        }
    })
}

/// A model that has the subagent call bash with `command`, then answer [`ANSWER`].
fn model(command: &'static str) -> RecordingServer {
    model_calling("bash", json!({"description": "work", "command": command}))
}

/// The config of a cluster whose subagents (and the session's `task`) use `model`.
fn config(model: &RecordingServer) -> String {
    serve_config(&format!(
        "models:\n  - name: rec\n    use: langchain_openai:ChatOpenAI\n    model: recorded\n    base_url: {}\n    api_key: sk-x\ntools:\n  - {{name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\nsubagents:\n  enabled: true\n",
        model.base_url
    ))
}

/// A cluster with one subagent worker, its model `model`.
fn cluster(model: &RecordingServer) -> LeadCluster {
    serve_cluster(&config(model), None, 1)
}

fn task_args() -> String {
    json!({
        "description": "write a note",
        "prompt": "Write a note in the workspace.",
        "subagent_type": "general-purpose",
    })
    .to_string()
}

/// The events of the session run on alice's `thread`, once the session ended.
fn session_events(cluster: &LeadCluster, thread: &str) -> Vec<Value> {
    let addr = cluster.gateway();
    let runs = ended_runs(&addr, thread, |runs| {
        runs.first().is_some_and(|r| r["status"] == "success")
    });
    run_events(&addr, runs[0]["run_id"].as_str().unwrap())
}

#[test]
fn task_runs_on_a_worker_with_progress_notifications() {
    let model = model("echo from-subagent > /mnt/user-data/workspace/sub.txt && echo wrote");
    let cluster = cluster(&model);
    let url = mcp_url(&cluster);
    let r: Value = mcp_driver(|c| c.args(["task", &url, ALICE, "delegated", &task_args()]));
    assert!(
        r["tools"].as_array().unwrap().contains(&json!("task")),
        "{r}"
    );
    // The subagent's answer is the call's result.
    assert_eq!(r["result"]["is_error"], false, "{r}");
    assert!(
        r["result"]["text"].as_str().unwrap().contains(ANSWER),
        "{r}"
    );
    // Progress came as the subagent advanced: increasing, each with a message, one of
    // them its bash call.
    let progress = r["progress"].as_array().unwrap();
    assert!(!progress.is_empty(), "no progress: {r}");
    let steps: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "{steps:?}");
    assert!(
        progress
            .iter()
            .all(|p| p["message"].as_str().is_some_and(|m| !m.is_empty())),
        "{r}"
    );
    assert!(
        progress
            .iter()
            .any(|p| p["message"] == "the subagent's bash call returned"),
        "{r}"
    );
    // The subagent worked in the session thread's sandbox.
    let note = cluster
        .base()
        .join("users/alice/threads/delegated/user-data/workspace/sub.txt");
    assert_eq!(
        std::fs::read_to_string(&note)
            .ok()
            .as_deref()
            .map(str::trim),
        Some("from-subagent"),
        "{}",
        note.display()
    );
    // The model was asked the task's prompt.
    let asked = model.requests.lock().unwrap().clone();
    assert!(
        asked
            .iter()
            .any(|q| q.to_string().contains("Write a note in the workspace.")),
        "{asked:?}"
    );
    // The task is in the session run's events, as a run's tasks are.
    let events = session_events(&cluster, "delegated");
    let kinds: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "task")
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert!(kinds.contains(&"task_started"), "{kinds:?}");
    assert!(kinds.contains(&"task_completed"), "{kinds:?}");
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "tool_finished" && e["name"] == "task" && e["error"] == false),
        "{events:?}"
    );
}

#[test]
fn a_task_the_client_cancels_stops_the_subagents_work() {
    let model = model("echo up > /mnt/user-data/workspace/started && sleep 4713");
    let cluster = cluster(&model);
    let url = mcp_url(&cluster);
    let started = cluster
        .base()
        .join("users/alice/threads/stopped/user-data/workspace/started");
    let r: Value = mcp_driver(|c| {
        c.args(["task-cancel", &url, ALICE, "stopped"])
            .arg(&started)
            .arg(task_args())
    });
    // The cancelled request is never answered to the client.
    assert_eq!(r["result"], Value::Null, "{r}");
    // The subagent's sandbox command was killed.
    let gone = wait_for(Duration::from_secs(30), || {
        (!process_running(&["sleep", "4713"])).then_some(())
    });
    assert!(gone.is_some(), "the cancelled task's sleep still runs");
    // The session goes on.
    assert_eq!(r["after"]["is_error"], false, "{r}");
    assert!(
        r["after"]["text"]
            .as_str()
            .unwrap()
            .contains("after-cancel"),
        "{r}"
    );
    // The call ended cancelled in the run's events.
    let events = session_events(&cluster, "stopped");
    let cancelled = events
        .iter()
        .find(|e| e["event"] == "tool_finished" && e["name"] == "task")
        .unwrap_or_else(|| panic!("no task call ended: {events:?}"));
    assert_eq!(cancelled["error"], true, "{cancelled}");
    assert_eq!(
        cancelled["message"], "the call was cancelled by the MCP client",
        "{cancelled}"
    );
    // The subagent never answered.
    assert!(
        !model
            .requests
            .lock()
            .unwrap()
            .iter()
            .any(|q| q.to_string().contains("\"role\":\"tool\"")),
        "the subagent went on after its bash call"
    );
}

#[test]
fn a_subagents_downstream_elicitation_is_asked_of_the_mcp_client() {
    const TOOL: &str = "everything_trigger-elicitation-request";
    let model = model_calling(TOOL, json!({}));
    let cluster = asking_cluster(&config(&model), 1);
    let url = mcp_url(&cluster);
    let answer = json!({"action": "accept", "content": {"name": "Ada Lovelace", "check": true, "integer": 7}});
    let r: Value = mcp_driver(|c| {
        c.args(["task-elicit", &url, ALICE, "asking"])
            .arg(task_args())
            .arg(answer.to_string())
    });
    // The client was asked once, with the server's schema, and the task went on.
    let asked = r["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{r}");
    assert!(
        asked[0]["requested_schema"]["properties"]["name"].is_object(),
        "{r}"
    );
    assert_eq!(r["result"]["is_error"], false, "{r}");
    assert!(
        r["result"]["text"].as_str().unwrap().contains(ANSWER),
        "{r}"
    );
    // The answer reached the server: the subagent's tool result has it.
    let requests = model.requests.lock().unwrap().clone();
    assert!(
        requests
            .iter()
            .any(|q| q.to_string().contains("- Name: Ada Lovelace")),
        "{requests:?}"
    );
}
