//! A real agent harness drives Antler's tools: a LangGraph ReAct agent
//! (`tests/peers/harness_langgraph.py`: langgraph's prebuilt `create_react_agent`, tools
//! loaded with langchain-mcp-adapters, langchain-openai's ChatOpenAI) connected to
//! `antler mcp serve --user alice` over stdio, joining a running cluster. Its model is the
//! suites' OpenAI-compatible stand-in, scripted to call bash (writing a file in the
//! session's thread sandbox), read_file (reading it back) and server-everything's echo
//! (through mcp-host), then to answer with what the tools returned. The agent's answer
//! carries the tool results, the model was offered Antler's catalog, the file is on the
//! thread's disk, and the calls are the events of the session's run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use crate::mcp_support::serve::{
    cluster, config, ended_runs, everything, finished_calls, run_events, SANDBOX_TOOLS,
};
use crate::model_support::{recording_server_by, Reply};
use serde_json::{json, Value};

const THREAD: &str = "harnessed";
const NOTE: &str = "/mnt/user-data/workspace/harness.txt";
/// How the scripted answer opens; the tool results follow.
const ANSWER_OPENING: &str = "Antler's tools answered:";

/// The tool calls the model makes, one a turn, in order.
fn script() -> [(&'static str, Value); 3] {
    [
        (
            "bash",
            json!({"description": "write a note",
                   "command": format!("echo from-langgraph > {NOTE} && echo written")}),
        ),
        (
            "read_file",
            json!({"description": "read the note back", "path": NOTE}),
        ),
        (
            "everything_echo",
            json!({"message": "hello from langgraph"}),
        ),
    ]
}

/// A message's content as text: a string, or text blocks.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// The model's turn: the next scripted call while the conversation has fewer tool results
/// than calls, then an answer quoting every tool result it was sent.
fn respond(request: &Value, _index: usize) -> Reply {
    let results: Vec<String> = request["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| text_of(&m["content"]).trim().to_owned())
                .collect()
        })
        .unwrap_or_default();
    match script().into_iter().nth(results.len()) {
        Some((name, args)) => Reply::call(name, args),
        None => Reply::text(&format!("{ANSWER_OPENING} {}", results.join(" | "))),
    }
}

/// The harness's Python: tests/.venv-harness (langchain-mcp-adapters and the MCP SDK 1.x
/// over the suites' packages; scripts/test.sh makes it from tests/requirements.txt).
fn harness_python() -> PathBuf {
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv-harness/bin/python");
    assert!(
        python.exists(),
        "{} is missing: scripts/test.sh makes it (the `#harness-venv` lines of tests/requirements.txt)",
        python.display()
    );
    python
}

#[test]
fn a_langgraph_agent_calls_antlers_sandbox_and_mcp_tools_through_antler_mcp_serve() {
    let model = recording_server_by(respond);
    let cluster = cluster(&config(SANDBOX_TOOLS), Some(&everything(None)), 0);
    let script_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers/harness_langgraph.py");
    let out = Command::new(harness_python())
        .arg(script_path)
        .args([
            &model.base_url,
            THREAD,
            "Write a note in the workspace, read it back, then echo a greeting.",
        ])
        .arg(antler_tests::bin("antler"))
        .arg("--runtime-dir")
        .arg(cluster.runtime())
        .args(["mcp", "serve", "--user", "alice"])
        .output()
        .expect("run the LangGraph harness");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the harness failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(stdout.trim()).expect("one JSON report");

    // The adapters turned Antler's catalog into the agent's tools.
    for tool in ["bash", "read_file", "everything_echo"] {
        assert!(
            r["tools"].as_array().unwrap().contains(&json!(tool)),
            "{tool}: {r}"
        );
    }
    // The agent made the model's calls, and each came back a success.
    let script = script();
    let made: Vec<(&str, &Value)> = r["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), &c["args"]))
        .collect();
    let scripted: Vec<(&str, &Value)> = script.iter().map(|(n, a)| (*n, a)).collect();
    assert_eq!(made, scripted, "{r}");
    let results = r["results"].as_array().unwrap();
    assert!(
        results.iter().all(|t| t["status"] == "success"),
        "{results:?}"
    );
    // The final answer carries what Antler's tools returned.
    let answer = r["answer"].as_str().unwrap();
    assert_eq!(
        answer,
        format!("{ANSWER_OPENING} written | from-langgraph | Echo: hello from langgraph"),
        "{r}"
    );

    // The model was offered Antler's tools, as OpenAI functions, on every turn.
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 4, "{requests:?}");
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    for tool in ["bash", "read_file", "everything_echo"] {
        assert!(offered.contains(&tool), "{tool}: {offered:?}");
    }

    // The file is on alice's thread's disk.
    let note = cluster.base().join(format!(
        "users/alice/threads/{THREAD}/user-data/workspace/harness.txt"
    ));
    assert_eq!(
        std::fs::read_to_string(&note)
            .ok()
            .as_deref()
            .map(str::trim),
        Some("from-langgraph"),
        "{}",
        note.display()
    );

    // The session was one run of the thread, ended with it; every call is one of its events.
    let addr = cluster.gateway();
    let runs = ended_runs(&addr, THREAD, |runs| {
        runs.len() == 1 && runs[0]["status"] == "success"
    });
    let events = run_events(&addr, runs[0]["run_id"].as_str().unwrap());
    let finished = finished_calls(&events);
    assert_eq!(
        finished,
        [
            ("bash".to_owned(), json!(false)),
            ("read_file".to_owned(), json!(false)),
            ("everything_echo".to_owned(), json!(false)),
        ],
        "{events:?}"
    );
}
