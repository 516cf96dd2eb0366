//! DeerFlow's thread reads (spec A.1 "Reads", A.5's `tasks`/`checkpoints`/`debug` modes)
//! against the real gateway, a real bubblewrap sandbox and `langgraph-sdk`
//! (`tests/peers/thread_reads_client.py`): two runs on one thread, each writing a file,
//! the second streamed in the three modes; then the thread's messages paged backward by
//! `seq`, a run's messages, events and workspace changes, the token usage with its
//! `context_usage`; another user gets `Thread {tid} not found` from every route.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use crate::lead_support::LeadCluster;
use crate::model_support::{is_memory_update, recording_server_by, Reply};
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";
const BOB: &str = "bob-token-00000000000002";

/// The model: a `write_file` call for each of the user's notes, then a short answer once
/// the tool answered; every other request (a title, a memory update) plain text.
fn reply(request: &Value, _: usize) -> Reply {
    if is_memory_update(request) {
        return Reply::text(r#"{"user": {}, "history": {}, "newFacts": []}"#);
    }
    if request.get("tools").is_none() {
        return Reply::text("Notes");
    }
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    if last["role"] == "tool" {
        return Reply::text("The note is written.").with_usage(200, 20, 220);
    }
    let text = last["content"].to_string();
    let file = if text.contains("second note") {
        "second.md"
    } else {
        "note.md"
    };
    Reply::call(
        "write_file",
        json!({"description": "a note", "path": format!("/mnt/user-data/workspace/{file}"), "content": "hello\nworld\n"}),
    )
    .with_usage(100, 10, 110)
}

/// The `seq`s of a list of rows.
fn seqs(rows: &Value) -> Vec<i64> {
    rows.as_array()
        .unwrap_or_else(|| panic!("not rows: {rows}"))
        .iter()
        .map(|r| r["seq"].as_i64().unwrap())
        .collect()
}

/// The frames of the stream named `event`.
fn frames<'a>(stream: &'a Value, event: &str) -> Vec<&'a Value> {
    stream
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f[0] == event)
        .map(|f| &f[1])
        .collect()
}

#[test]
fn a_thread_reads_back_as_deerflows_frontend_reads_it() {
    let model = recording_server_by(reply);
    let config = format!(
        "models:\n  - name: fast\n    use: langchain_openai:ChatOpenAI\n    model: fast\n    base_url: {}\n    api_key: sk-test\n    context_window: 8192\ntool_search:\n  enabled: false\ntools:\n  - {{name: write_file, group: file, use: \"deerflow.sandbox.tools:write_file_tool\"}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\nantler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice, role: member}}\n      - {{token: {BOB}, user: bob, role: member}}\n",
        model.base_url
    );
    let cluster = LeadCluster::up(&config, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let base = format!("http://{}/api", cluster.gateway());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers/thread_reads_client.py");
    let out = Command::new("python3")
        .arg(script)
        .args([&base, ALICE, BOB])
        .output()
        .expect("run the langgraph-sdk driver");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the driver failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(stdout.trim()).expect("one JSON report");
    let thread = r["thread"].as_str().unwrap();
    assert_eq!(r["statuses"], json!(["success", "success"]));
    let (first, second) = (
        r["first_run"].as_str().unwrap(),
        r["second_run"].as_str().unwrap(),
    );

    // The thread's messages: each run's input, its call, the tool's result and its
    // answer, numbered across the thread; no feedback; each run's last AI row timed.
    let (code, all) = (&r["messages"][0], &r["messages"][1]);
    assert_eq!(code, 200, "{all}");
    assert_eq!(seqs(all), (1..=8).collect::<Vec<_>>());
    let kinds: Vec<(&str, &str)> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["run_id"].as_str().unwrap(),
                m["event_type"].as_str().unwrap(),
            )
        })
        .collect();
    let run_kinds = |run| {
        vec![
            (run, "llm.human.input"),
            (run, "llm.ai.response"),
            (run, "llm.tool.result"),
            (run, "llm.ai.response"),
        ]
    };
    assert_eq!(kinds, [run_kinds(first), run_kinds(second)].concat());
    assert_eq!(all[0]["content"]["content"], "Write a note, please.");
    assert_eq!(all[0]["thread_id"], thread);
    assert_eq!(all[0]["category"], "message");
    assert_eq!(all[1]["content"]["tool_calls"][0]["name"], "write_file");
    assert_eq!(all[7]["content"]["content"], "The note is written.");
    assert!(all
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["feedback"].is_null()));
    for last_ai in [3, 7] {
        assert!(
            all[last_ai]["content"]["additional_kwargs"]["turn_duration"].is_i64(),
            "{}",
            all[last_ai]
        );
    }
    assert!(all[1]["content"]["additional_kwargs"]
        .get("turn_duration")
        .is_none());
    assert_eq!(seqs(&r["messages_after"][1]), [3, 4]);

    // Backward pages of three: 6–8, 3–5, 1–2, each pointing at the next.
    let pages = r["pages"].as_array().unwrap();
    let shape: Vec<(Vec<i64>, bool, Value)> = pages
        .iter()
        .map(|p| {
            (
                seqs(&p[1]["data"]),
                p[1]["has_more"].as_bool().unwrap(),
                p[1]["next_before_seq"].clone(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (vec![6, 7, 8], true, json!(6)),
            (vec![3, 4, 5], true, json!(3)),
            (vec![1, 2], false, Value::Null),
        ]
    );
    assert_eq!(
        r["page_forward"],
        json!([422, {"detail": "after_seq is not supported by this backward-only endpoint"}])
    );
    assert_eq!(r["page_bad_limit"][0], 422);

    // A run's messages, and a page of them.
    let run_messages = &r["run_messages"][1];
    assert_eq!(seqs(&run_messages["data"]), [1, 2, 3, 4]);
    assert_eq!(run_messages["has_more"], false);
    assert!(run_messages["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["run_id"] == first));
    assert_eq!(seqs(&r["run_messages_2"][1]["data"]), [3, 4]);
    assert_eq!(r["run_messages_2"][1]["has_more"], true);

    // A run's events: Antler's, in order, filtered by type on request.
    let events = r["run_events"][1].as_array().unwrap();
    let types: Vec<&str> = events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    for kind in [
        "model_started",
        "tool_started",
        "tool_finished",
        "model_finished",
    ] {
        assert!(types.contains(&kind), "no {kind}: {types:?}");
    }
    assert_eq!(
        seqs(&r["run_events"][1]),
        (1..=events.len() as i64).collect::<Vec<_>>()
    );
    assert!(events.iter().all(|e| e["created_at"].is_string()));
    let tools = r["run_events_tools"][1].as_array().unwrap();
    assert!(!tools.is_empty());
    assert!(tools
        .iter()
        .all(|e| e["event_type"] == "tool_finished" && e["content"]["name"] == "write_file"));

    // The file the run's write_file created.
    let workspace = &r["workspace"][1];
    assert_eq!(workspace["available"], true, "{workspace}");
    assert_eq!(workspace["summary"]["created"], 1, "{workspace}");
    assert_eq!(workspace["summary"]["additions"], 2);
    assert_eq!(
        workspace["files"][0]["path"],
        "/mnt/user-data/workspace/note.md"
    );
    assert_eq!(workspace["files"][0]["root"], "workspace");
    assert_eq!(workspace["files"][0]["size_after"], 12);
    assert_eq!(workspace["files"][0]["status"], "created");

    // Token usage: both runs' calls (110 + 220 each), all the lead agent's; the context
    // is the thread's messages against the model's window.
    let usage = &r["token_usage"][1];
    assert_eq!(usage["thread_id"], thread);
    assert_eq!(usage["total_tokens"], 660, "{usage}");
    assert_eq!(usage["total_input_tokens"], 600);
    assert_eq!(usage["total_output_tokens"], 60);
    assert_eq!(usage["total_runs"], 2);
    assert_eq!(
        usage["by_model"],
        json!({"fast": {"tokens": 660, "runs": 2}})
    );
    assert_eq!(
        usage["by_caller"],
        json!({"lead_agent": 660, "subagent": 0, "middleware": 0})
    );
    let context = &usage["context_usage"];
    assert_eq!(context["max_context_tokens"], 8192, "{usage}");
    let count = context["token_count"].as_u64().unwrap();
    assert!(count > 20, "{context}");
    let percentage = (count as f64 / 8192.0 * 1000.0).round() / 10.0;
    assert_eq!(context["percentage"].as_f64(), Some(percentage));

    // The stream: a task per model turn and per tool call, with their results; a
    // checkpoint per step the run wrote; `debug` wraps all three.
    let stream = &r["stream"];
    let names: Vec<&str> = stream
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f[0].as_str().unwrap())
        .collect();
    assert_eq!(
        (names.first(), names.last()),
        (Some(&"metadata"), Some(&"end"))
    );
    assert!(!names.contains(&"error"), "the run failed: {stream}");
    let tasks = frames(stream, "tasks");
    let started = |name: &str| {
        tasks
            .iter()
            .filter(|t| t["name"] == name && t.get("triggers").is_some())
            .count()
    };
    assert_eq!((started("model"), started("tools")), (2, 1), "{tasks:?}");
    let tool_result = tasks
        .iter()
        .find(|t| t["name"] == "tools" && t.get("result").is_some())
        .unwrap_or_else(|| panic!("no tools result: {tasks:?}"));
    assert_eq!(tool_result["result"][0][0], "messages");
    assert_eq!(tool_result["result"][0][1][0]["type"], "tool");
    assert!(tool_result["error"].is_null());
    let tool_start = tasks
        .iter()
        .find(|t| t["name"] == "tools" && t.get("triggers").is_some())
        .unwrap();
    assert_eq!(tool_start["id"], tool_result["id"]);
    assert_eq!(tool_start["input"]["name"], "write_file");
    let checkpoints = frames(stream, "checkpoints");
    assert!(!checkpoints.is_empty());
    let last = checkpoints.last().unwrap();
    assert_eq!(last["config"]["configurable"]["thread_id"], thread);
    assert_eq!(
        last["values"]["messages"].as_array().unwrap().len(),
        8,
        "{last}"
    );
    assert!(last["parent_config"]["configurable"]["checkpoint_id"].is_string());
    let debug_types: Vec<&str> = frames(stream, "debug")
        .iter()
        .map(|d| d["type"].as_str().unwrap())
        .collect();
    for kind in ["checkpoint", "task", "task_result"] {
        assert!(debug_types.contains(&kind), "no {kind}: {debug_types:?}");
    }
    let debugs = frames(stream, "debug");
    assert_eq!(debugs.len(), tasks.len() + checkpoints.len());
    // A task's result is told with the checkpoint that holds it, at its step.
    let steps = |kind: &str| -> Vec<i64> {
        debugs
            .iter()
            .filter(|d| d["type"] == kind)
            .map(|d| d["step"].as_i64().unwrap())
            .collect()
    };
    let checkpointed = steps("checkpoint");
    assert!(
        steps("task_result")
            .iter()
            .all(|s| checkpointed.contains(s)),
        "{debugs:?}"
    );
    assert!(steps("task").iter().all(|s| *s >= 1), "{debugs:?}");

    // Another user: every route is the same 404 as a missing thread.
    let not_found = json!([404, {"detail": format!("Thread {thread} not found")}]);
    let bob = r["bob"].as_object().unwrap();
    assert_eq!(bob.len(), 10);
    for (route, answer) in bob {
        assert_eq!(answer, &not_found, "{route}");
    }
}
