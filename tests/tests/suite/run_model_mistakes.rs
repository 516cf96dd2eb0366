//! A model's mistakes through `antler run`, with a real model and a stand-in. SmolLM2 on
//! llama-cpp-python, forced to call `write_file` with a tight `max_tokens`, writes cut
//! JSON arguments (and says `finish_reason: tool_calls`): the call is never executed,
//! the model's next request carries DeerFlow's write_file text for it, and the third
//! such reply in a row ends the run as `invalid_tool_calls_capped`. The suites'
//! OpenAI `recording_server` stand-in gives the deterministic cases: a hallucinated tool
//! name and arguments that are not an object answered at once, then an empty reply asked
//! again once with the hidden reminder; and `llm_call.max_invalid_tool_calls` honoured.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::model_support::{self, peers, peers::ALIAS, Reply};

use serde_json::{json, Value};

fn dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("antler-mistakes")
        .tempdir_in("/tmp")
        .unwrap()
}

/// The messages of request `n` the server saw.
fn messages(requests: &[Value], n: usize) -> Vec<Value> {
    requests[n]["messages"].as_array().unwrap().clone()
}

/// The run's events, from `antler run --json`'s stderr.
fn events(stderr: &str) -> Vec<Value> {
    stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| l["event"].clone())
        .collect()
}

#[test]
fn a_real_models_cut_arguments_are_answered_and_the_limit_ends_the_run() {
    let llama = peers::llama();
    let proxy = model_support::recording_proxy(llama.root.trim_start_matches("http://"));
    let dir = dir();
    std::fs::write(
        dir.path().join("config.yaml"),
        format!(
            "models:\n  - name: smol\n    use: langchain_openai:ChatOpenAI\n    model: {ALIAS}\n    base_url: {}\n    temperature: 0\n    max_tokens: 12\n    tool_choice: {{type: function, function: {{name: write_file}}}}\ntools:\n  - {{name: write_file, group: file:write, use: \"deerflow.sandbox.tools:write_file_tool\"}}\ntool_search:\n  enabled: false\n",
            proxy.base_url
        ),
    )
    .unwrap();
    let (view, stderr) = model_support::antler_run(
        dir.path(),
        &[
            "Write a poem about the sea to /mnt/user-data/outputs/poem.md",
            "--model",
            "smol",
            "--trace",
        ],
    );
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    assert_eq!(view["stop_reason"], "invalid_tool_calls_capped", "{view}");
    let answer = view["final_answer"].as_str().unwrap();
    assert!(
        answer.ends_with("[FORCED STOP] The model's tool calls were invalid in 3 consecutive replies, so none of them was executed. Producing final answer with results collected so far."),
        "{answer}"
    );
    // A request the client retried (the model server slow to answer its first completion
    // on a busy machine) is sent again unchanged: the turns are the distinct requests.
    let mut requests = proxy.requests.lock().unwrap().clone();
    requests.dedup();
    assert_eq!(requests.len(), 3, "{requests:#?}");
    // The second request: the first reply's call, its arguments repaired to `{}`, and
    // DeerFlow's write_file text answering it.
    let second = messages(&requests, 1);
    let call = second
        .iter()
        .find(|m| m["role"] == "assistant")
        .map(|m| m["tool_calls"][0].clone())
        .unwrap();
    assert_eq!(call["function"]["name"], "write_file");
    assert_eq!(call["function"]["arguments"], "{}");
    let answer = second.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(answer["tool_call_id"], call["id"]);
    let text = answer["content"].as_str().unwrap();
    assert!(
        text.starts_with("[write_file failed before execution: the tool-call arguments were not valid JSON, so no file was written.")
            && text.contains(" Parser error: not JSON (EOF while parsing"),
        "{text}"
    );
    // Nothing was written.
    let ran = events(&stderr).iter().any(|e| {
        e["event"] == "lifecycle" && e["state"] == "executed" && e["tool"] == "write_file"
    });
    assert!(!ran, "{stderr}");
}

#[test]
fn a_stand_ins_invalid_calls_are_answered_and_an_empty_reply_asked_again() {
    let server = model_support::recording_server(vec![
        Reply {
            content: String::new(),
            tool_calls: vec![
                ("web_serch".to_owned(), json!({"query": "x"})),
                (
                    "write_file".to_owned(),
                    json!("{\"path\": \"/mnt/user-data/outputs/a.md\", \"content\": \"cut"),
                ),
            ],
            finish_reason: "tool_calls".to_owned(),
            usage: None,
        },
        Reply::text(""),
        Reply::text("Done."),
    ]);
    let dir = dir();
    std::fs::write(
        dir.path().join("config.yaml"),
        format!(
            "models:\n  - name: standin\n    use: langchain_openai:ChatOpenAI\n    model: m\n    base_url: {}\ntools:\n  - {{name: write_file, group: file:write, use: \"deerflow.sandbox.tools:write_file_tool\"}}\ntool_search:\n  enabled: false\n",
            server.base_url
        ),
    )
    .unwrap();
    let (view, stderr) =
        model_support::antler_run(dir.path(), &["Go.", "--model", "standin", "--trace"]);
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    assert_eq!(view["final_answer"], "Done.");
    assert_eq!(view["stop_reason"], Value::Null);
    let requests = server.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 3, "{requests:#?}");
    let answers: Vec<String> = messages(&requests, 1)
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(
        answers[0].starts_with("[write_file failed before execution:"),
        "{answers:?}"
    );
    assert!(
        answers[0].ends_with(" Parser error: expected a JSON object, got …]"),
        "{answers:?}"
    );
    // LangGraph's text, listing the run's tools.
    assert!(
        answers[1].starts_with("Error: web_serch is not a valid tool, try one of [")
            && answers[1].contains("write_file")
            && answers[1].ends_with("]."),
        "{answers:?}"
    );
    // The empty reply: asked again with the hidden reminder, the last message.
    let third = messages(&requests, 2);
    let last = third.last().unwrap();
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"], antler_engine::RECOVERY_PROMPT);
    assert!(
        events(&stderr)
            .iter()
            .any(|e| e["event"] == "empty_reply_retried"),
        "{stderr}"
    );
}

#[test]
fn the_configured_limit_of_invalid_replies_ends_the_run() {
    let server = model_support::recording_server(vec![Reply::call("made_up_tool", json!({}))]);
    let dir = dir();
    std::fs::write(
        dir.path().join("config.yaml"),
        format!(
            "models:\n  - name: standin\n    use: langchain_openai:ChatOpenAI\n    model: m\n    base_url: {}\nllm_call:\n  max_invalid_tool_calls: 2\ntool_search:\n  enabled: false\n",
            server.base_url
        ),
    )
    .unwrap();
    let (view, stderr) =
        model_support::antler_run(dir.path(), &["Go.", "--model", "standin", "--trace"]);
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    assert_eq!(view["stop_reason"], "invalid_tool_calls_capped");
    assert_eq!(server.requests.lock().unwrap().len(), 2);
    // `antler run` shows each refused call as a failed tool call.
    let refused = events(&stderr)
        .iter()
        .filter(|e| {
            e["event"] == "tool_finished" && e["error"] == true && e["name"] == "made_up_tool"
        })
        .count();
    assert_eq!(refused, 1, "{stderr}");
}
