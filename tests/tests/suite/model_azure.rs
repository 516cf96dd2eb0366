//! Azure OpenAI through `antler run` with `use: langchain_openai:AzureChatOpenAI`, against
//! `azure_standin` (nothing here serves Azure's routes): a stand-in that checks each
//! request's deployment path, `api-version` query and `api-key` header (and that no
//! `Authorization` header is sent), checks the body against the chat-completions request
//! shape, and answers streamed chat completions: a tool loop (a call to `ls`, then the
//! answer).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};

use super::model_responses::{standin, Answer, Seen};
use crate::model_support::antler_run;

const AZURE_KEY: &str = "az-standin-key-42";
const DEPLOYMENT: &str = "prod-4o";
const API_VERSION: &str = "2024-10-21";

/// What is wrong with a request against Azure's deployment route and the chat
/// completions request shape.
fn azure_problems(request: &Seen) -> Vec<String> {
    let mut problems = Vec::new();
    let expected =
        format!("/openai/deployments/{DEPLOYMENT}/chat/completions?api-version={API_VERSION}");
    if request.target != expected {
        problems.push(format!("posted to {}", request.target));
    }
    if request.header("api-key") != Some(AZURE_KEY) {
        problems.push("no api-key header".into());
    }
    if request.header("authorization").is_some() {
        problems.push("an Authorization header (Azure keys go in api-key)".into());
    }
    let mut calls = Vec::new();
    let Some(messages) = request.body["messages"].as_array() else {
        problems.push("messages is not an array".into());
        return problems;
    };
    for message in messages {
        match message["role"].as_str() {
            Some("system" | "user") if message["content"].is_string() => {}
            Some("assistant") => {
                for call in message["tool_calls"].as_array().into_iter().flatten() {
                    if call["type"] != "function" || !call["function"]["arguments"].is_string() {
                        problems.push(format!("tool call {call}"));
                    }
                    calls.push(call["id"].as_str().unwrap_or("").to_owned());
                }
            }
            Some("tool") => {
                let id = message["tool_call_id"].as_str().unwrap_or("");
                if !calls.iter().any(|c| c == id) {
                    problems.push(format!("tool message {id:?} answers no call"));
                }
            }
            _ => problems.push(format!("message {message}")),
        }
    }
    for tool in request.body["tools"].as_array().into_iter().flatten() {
        if tool["type"] != "function" || !tool["function"]["name"].is_string() {
            problems.push(format!("tool {tool}"));
        }
    }
    problems
}

/// A streamed chat completion as Azure sends it (the first chunk carries the
/// `prompt_filter_results`, an empty `choices`).
fn completion(delta: Value, finish: &str) -> Answer {
    let chunk = |choices: Value| json!({"id": "chatcmpl-az", "object": "chat.completion.chunk", "model": "gpt-4o-2024-08-06", "choices": choices});
    let mut filter = chunk(json!([]));
    filter["prompt_filter_results"] = json!([{"prompt_index": 0, "content_filter_results": {}}]);
    let events = [
        filter,
        chunk(json!([{"index": 0, "delta": delta, "finish_reason": null}])),
        chunk(json!([{"index": 0, "delta": {}, "finish_reason": finish}])),
    ];
    let mut answer = Answer::sse(&[]);
    for event in events {
        answer.body.push_str(&format!("data: {event}\n\n"));
    }
    answer.body.push_str("data: [DONE]\n\n");
    answer
}

#[test]
fn a_tool_loop_through_antler_run_reaches_the_azure_deployment() {
    let server = standin(|_, request| {
        let problems = azure_problems(request);
        if !problems.is_empty() {
            return Answer::violation(&problems);
        }
        let answered = request.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool");
        if answered {
            completion(
                json!({"role": "assistant", "content": "The workspace is empty."}),
                "stop",
            )
        } else {
            completion(
                json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_az_1", "type": "function",
                    "function": {"name": "ls", "arguments": "{\"description\": \"look\", \"path\": \"/mnt/user-data/workspace\"}"}}]}),
                "tool_calls",
            )
        }
    });
    let dir = tempfile::Builder::new()
        .prefix("antler-az")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: azure\n    use: langchain_openai:AzureChatOpenAI\n    model: gpt-4o\n    azure_endpoint: {}\n    azure_deployment: {DEPLOYMENT}\n    api_version: {API_VERSION}\n    api_key: {AZURE_KEY}\n    max_retries: 0\ntools:\n  - {{name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n",
            server.root
        ),
    )
    .unwrap();
    let (view, _) = antler_run(d, &["List the workspace", "--model", "azure"]);
    assert_eq!(view["status"], "success", "{view}");
    assert_eq!(view["final_answer"], "The workspace is empty.");
    let requests = server.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2, "{requests:?}");
    // The second request carried the call and its result back to the deployment.
    let second = requests[1].body["messages"].as_array().unwrap();
    let tool = second.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool["tool_call_id"], "call_az_1");
}
