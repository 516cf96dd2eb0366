//! Token accounting through the whole cluster against `recording_server` (a stand-in
//! OpenAI-compatible endpoint): every request asks for usage in the stream, the run's
//! totals are the sums the endpoint reported, in the `--json` view and the model_finished
//! events; a reply cut at the output limit (`finish_reason: length`) ends the run as
//! `model_length_capped`; with `token_budget` the run stops as `token_capped` with
//! DeerFlow's note.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::model_support::{antler_run, recording_server, Reply};
use serde_json::{json, Value};

/// Runs one task against `replies`; the view, the trace lines and the recorded requests.
fn run(replies: Vec<Reply>, extra_config: &str) -> (Value, Vec<Value>, Vec<Value>) {
    let server = recording_server(replies);
    let dir = tempfile::Builder::new()
        .prefix("antler-tok")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: rec\n    use: langchain_openai:ChatOpenAI\n    model: recorded\n    base_url: {}\n    api_key: sk-x\ntools:\n  - {{name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n{extra_config}",
            server.base_url
        ),
    )
    .unwrap();
    let (view, stderr) = antler_run(d, &["List the workspace", "--model", "rec", "--trace"]);
    let events = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|e| e["event"].clone())
        .collect();
    let requests = server.requests.lock().unwrap().clone();
    (view, events, requests)
}

#[test]
fn the_run_totals_are_the_sums_the_provider_reported() {
    let (view, events, requests) = run(
        vec![
            Reply::call(
                "ls",
                json!({"description": "look", "path": "/mnt/user-data/workspace"}),
            )
            .with_usage(1200, 30, 1230),
            Reply::text("The workspace is empty.").with_usage(1300, 12, 1312),
        ],
        "",
    );
    assert_eq!(view["status"], "success", "{view}");
    assert_eq!(
        view["token_usage"],
        json!({"input_tokens": 2500, "output_tokens": 42, "total_tokens": 2542})
    );
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r["stream_options"], json!({"include_usage": true}), "{r}");
    }
    let finished: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "model_finished")
        .collect();
    assert_eq!(finished.len(), 2, "{events:?}");
    assert_eq!(finished[0]["usage"]["total_tokens"], 1230);
    assert_eq!(finished[0]["finish_reason"], "tool_calls");
    assert_eq!(finished[1]["total_usage"]["total_tokens"], 2542);
    assert_eq!(view["stop_reason"], Value::Null);
}

#[test]
fn a_reply_cut_at_the_output_limit_is_model_length_capped() {
    let (view, _, _) = run(
        vec![Reply::text("The answer is cut off mid").finished("length")],
        "",
    );
    assert_eq!(view["status"], "success", "{view}");
    assert_eq!(view["stop_reason"], "model_length_capped");
    assert_eq!(view["final_answer"], "The answer is cut off mid");
}

#[test]
fn past_the_token_budget_the_run_stops_as_token_capped() {
    let (view, _, requests) = run(
        vec![
            Reply::call(
                "ls",
                json!({"description": "look", "path": "/mnt/user-data/workspace"}),
            )
            .with_usage(850, 50, 900),
            Reply::call(
                "ls",
                json!({"description": "again", "path": "/mnt/user-data/workspace"}),
            )
            .with_usage(1000, 100, 1100),
            Reply::text("never asked"),
        ],
        "token_budget:\n  enabled: true\n  max_tokens: 1000\n",
    );
    assert_eq!(view["status"], "success", "{view}");
    assert_eq!(view["stop_reason"], "token_capped");
    assert_eq!(
        view["final_answer"],
        "\n\n[TOKEN BUDGET EXCEEDED] The total token usage (2,000) has exceeded the safety limit (1,000). Producing final answer with results collected so far."
    );
    // The warning at 90% went with the second request, as a user message of its own.
    let second = requests[1]["messages"].as_array().unwrap();
    let last = second.last().unwrap();
    assert_eq!(last["role"], "user");
    assert_eq!(
        last["content"],
        "[TOKEN BUDGET WARNING] You have used 900 of your 1,000 total token budget (90%). Wrap up your current work and produce a final answer. Avoid starting new tool calls unless absolutely necessary."
    );
    assert_eq!(requests.len(), 2, "the capped reply's tool call never ran");
}
