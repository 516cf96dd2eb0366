//! The OpenAI Responses client against a real server and a stand-in. Real: the LiteLLM
//! proxy in front of llama-cpp-python with SmolLM2 (`peers::litellm()`, model
//! `smollm2-responses`): text, the streamed deltas, a forced `function_call`. Stand-in:
//! `responses_standin`, a tiny HTTP server that checks every request against the
//! documented Responses request shape (input item types, roles, content part types,
//! `function_call`/`function_call_output` pairing, flat function tools, reasoning items
//! with `encrypted_content` when `store` is false) and answers with the documented event
//! sequences: a multi-turn tool loop through `antler run` with reasoning items sent back,
//! usage, every finish reason, a 429 with `Retry-After`, an image shown to a vision model
//! as an `input_image` part with a data URL, and a `fallback:` model answering for one
//! that fails with a 500. The stand-in's HTTP plumbing
//! (`standin`) is shared with `model_azure`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_engine::{
    catalog::ToolSpec, finish_reason, model_from_entry, Message, ModelObserver, ModelRequest,
    RetryNotice,
};
use antler_protocol::config::ModelConfig;
use serde_json::{json, Value};

use crate::model_support::{
    antler_run, peers, put_viewed_png, trace_events, VIEWED_PNG_BASE64, VIEWED_PNG_PATH,
};

/// One request a stand-in received.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The request target: path and query.
    pub target: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One answer of a stand-in.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub content_type: &'static str,
    pub body: String,
}

impl Answer {
    pub fn json(status: u16, body: Value) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
            content_type: "application/json",
            body: body.to_string(),
        }
    }

    pub fn sse(events: &[Value]) -> Answer {
        let mut body = String::new();
        for event in events {
            body.push_str(&format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap_or("")
            ));
        }
        Answer {
            status: 200,
            headers: Vec::new(),
            content_type: "text/event-stream",
            body,
        }
    }

    /// A 400 naming what the request got wrong (the client fails, the test sees why).
    pub fn violation(problems: &[String]) -> Answer {
        Answer::json(
            400,
            json!({"error": {"message": format!("stand-in: malformed request: {}", problems.join("; ")), "type": "invalid_request_error"}}),
        )
    }
}

/// A running stand-in: `root` is `http://127.0.0.1:PORT`; every request it got.
pub struct Standin {
    pub root: String,
    pub requests: Arc<Mutex<Vec<Seen>>>,
}

/// Starts a stand-in on a free port (a thread of the test process): each request is
/// recorded, then answered by `answer(n, &request)`.
pub fn standin(answer: impl Fn(usize, &Seen) -> Answer + Send + 'static) -> Standin {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let root = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                continue;
            }
            let mut headers = Vec::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((name, value)) = line.trim_end().split_once(':') {
                    let name = name.trim().to_ascii_lowercase();
                    if name == "content-length" {
                        length = value.trim().parse().unwrap_or(0);
                    }
                    headers.push((name, value.trim().to_owned()));
                }
            }
            let mut body = vec![0u8; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let request = Seen {
                target: request_line
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or("")
                    .to_owned(),
                headers,
                body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            };
            let n = {
                let mut seen = seen.lock().unwrap();
                seen.push(request.clone());
                seen.len() - 1
            };
            let reply = answer(n, &request);
            let mut head = format!(
                "HTTP/1.1 {} X\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
                reply.status,
                reply.content_type,
                reply.body.len()
            );
            for (name, value) in &reply.headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            let _ = write!(stream, "{head}\r\n{}", reply.body);
        }
    });
    Standin { root, requests }
}

const STANDIN_KEY: &str = "sk-responses-standin";

/// What is wrong with a request against the documented Responses request shape
/// (`POST /v1/responses`, openai-python's `ResponseCreateParams` and input item types).
fn responses_problems(request: &Seen) -> Vec<String> {
    let mut problems = Vec::new();
    let mut bad = |p: String| problems.push(p);
    if request.target != "/v1/responses" {
        bad(format!("posted to {}", request.target));
    }
    if request.header("authorization") != Some(&format!("Bearer {STANDIN_KEY}")) {
        bad("no Bearer key".into());
    }
    let body = &request.body;
    if !body["model"].is_string() {
        bad("model is not a string".into());
    }
    if body.get("messages").is_some() {
        bad("`messages` is chat completions".into());
    }
    if let Some(instructions) = body.get("instructions") {
        if !instructions.is_string() {
            bad("instructions is not a string".into());
        }
    }
    let store = body["store"].as_bool().unwrap_or(true);
    let mut calls = Vec::new();
    let Some(input) = body["input"].as_array() else {
        bad("input is not an array".into());
        return problems;
    };
    for item in input {
        match item["type"].as_str() {
            Some("message") => {
                let role = item["role"].as_str().unwrap_or("");
                if !["user", "assistant", "system", "developer"].contains(&role) {
                    bad(format!("message role {role:?}"));
                }
                let allowed: &[&str] = if role == "assistant" {
                    &["output_text", "refusal"]
                } else {
                    &["input_text", "input_image", "input_file"]
                };
                match &item["content"] {
                    Value::String(_) => {}
                    Value::Array(parts) => {
                        for part in parts {
                            let kind = part["type"].as_str().unwrap_or("");
                            if !allowed.contains(&kind) {
                                bad(format!("a {role} message holds a {kind:?} part"));
                            }
                            if kind == "input_image"
                                && (!part["image_url"].is_string() || !part["detail"].is_string())
                            {
                                bad("input_image without image_url and detail".into());
                            }
                            if kind.ends_with("_text") && !part["text"].is_string() {
                                bad(format!("{kind} without text"));
                            }
                        }
                    }
                    other => bad(format!("message content {other}")),
                }
            }
            Some("function_call") => {
                for key in ["call_id", "name", "arguments"] {
                    if !item[key].is_string() {
                        bad(format!("function_call without {key}"));
                    }
                }
                calls.push(item["call_id"].as_str().unwrap_or("").to_owned());
            }
            Some("function_call_output") => {
                let id = item["call_id"].as_str().unwrap_or("");
                if !calls.iter().any(|c| c == id) {
                    bad(format!(
                        "function_call_output {id:?} answers no earlier function_call"
                    ));
                }
                if !item["output"].is_string() {
                    bad("function_call_output without output".into());
                }
            }
            Some("reasoning") => {
                if !item["id"].is_string() || !item["summary"].is_array() {
                    bad("reasoning item without id and summary".into());
                }
                if !store && !item["encrypted_content"].is_string() {
                    bad("with store false a reasoning item needs its encrypted_content".into());
                }
            }
            other => bad(format!("input item type {other:?}")),
        }
    }
    for tool in body["tools"].as_array().into_iter().flatten() {
        if tool["type"] != "function"
            || !tool["name"].is_string()
            || !tool["parameters"].is_object()
        {
            bad(format!("not a flat function tool: {tool}"));
        }
        if tool.get("function").is_some() {
            bad("a chat-completions tool (`function` wrapper)".into());
        }
    }
    if let Some(include) = body.get("include") {
        if !include
            .as_array()
            .is_some_and(|a| a.iter().all(Value::is_string))
        {
            bad("include is not a list of strings".into());
        }
    }
    problems
}

/// The documented events of one reply: optional reasoning item, optional text, optional
/// function call, then `response.completed` (or `response.incomplete` with `reason`).
fn reply_events(
    reasoning: Option<(&str, &str, &str)>,
    text: Option<&str>,
    call: Option<(&str, &str, Value)>,
    incomplete: Option<&str>,
    usage: (u64, u64, u64),
) -> Vec<Value> {
    let mut events = vec![json!({"type": "response.created", "sequence_number": 0,
        "response": {"id": "resp_s", "object": "response", "status": "in_progress", "output": []}})];
    let mut output = Vec::new();
    let mut seq = 1;
    let mut next = || {
        seq += 1;
        seq
    };
    if let Some((id, summary, encrypted)) = reasoning {
        let item = json!({"id": id, "type": "reasoning", "summary": [{"type": "summary_text", "text": summary}], "encrypted_content": encrypted});
        let index = output.len();
        events.push(json!({"type": "response.output_item.added", "output_index": index, "sequence_number": next(),
            "item": {"id": id, "type": "reasoning", "summary": []}}));
        events.push(json!({"type": "response.reasoning_summary_text.delta", "item_id": id, "output_index": index,
            "summary_index": 0, "delta": summary, "sequence_number": next()}));
        events.push(json!({"type": "response.output_item.done", "output_index": index, "item": item, "sequence_number": next()}));
        output.push(item);
    }
    if let Some(text) = text {
        let index = output.len();
        let item = json!({"id": "msg_s", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]});
        events.push(json!({"type": "response.output_item.added", "output_index": index, "sequence_number": next(),
            "item": {"id": "msg_s", "type": "message", "role": "assistant", "status": "in_progress", "content": []}}));
        let (a, b) = text.split_at(text.len() / 2);
        for delta in [a, b] {
            events.push(json!({"type": "response.output_text.delta", "item_id": "msg_s", "output_index": index,
                "content_index": 0, "delta": delta, "sequence_number": next()}));
        }
        events.push(json!({"type": "response.output_item.done", "output_index": index, "item": item, "sequence_number": next()}));
        output.push(item);
    }
    if let Some((call_id, name, args)) = call {
        let index = output.len();
        let arguments = args.to_string();
        let item = json!({"id": "fc_s", "type": "function_call", "call_id": call_id, "name": name, "arguments": arguments, "status": "completed"});
        events.push(json!({"type": "response.output_item.added", "output_index": index, "sequence_number": next(),
            "item": {"id": "fc_s", "type": "function_call", "call_id": call_id, "name": name, "arguments": "", "status": "in_progress"}}));
        events.push(json!({"type": "response.function_call_arguments.delta", "item_id": "fc_s", "output_index": index,
            "delta": arguments, "sequence_number": next()}));
        events.push(json!({"type": "response.function_call_arguments.done", "item_id": "fc_s", "output_index": index,
            "arguments": arguments, "sequence_number": next()}));
        events.push(json!({"type": "response.output_item.done", "output_index": index, "item": item, "sequence_number": next()}));
        output.push(item);
    }
    let (input, out, reasoning_tokens) = usage;
    let usage = json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": out, "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input + out});
    let (kind, status, details) = match incomplete {
        Some(reason) => (
            "response.incomplete",
            "incomplete",
            json!({"reason": reason}),
        ),
        None => ("response.completed", "completed", Value::Null),
    };
    events.push(json!({"type": kind, "sequence_number": next(), "response": {"id": "resp_s", "object": "response",
        "status": status, "incomplete_details": details, "error": null, "output": output, "usage": usage}}));
    events
}

fn entry(yaml: &str) -> ModelConfig {
    serde_yaml::from_str(yaml).unwrap()
}

fn weather_tool() -> ToolSpec {
    ToolSpec::builtin(
        "get_weather",
        "Get the current weather in a city.",
        json!({"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}}, "required": ["city"]}),
    )
}

#[derive(Default)]
struct Heard {
    text: Mutex<Vec<String>>,
    retries: Mutex<Vec<RetryNotice>>,
}

impl ModelObserver for Heard {
    fn retry(&self, notice: &RetryNotice) {
        self.retries.lock().unwrap().push(notice.clone());
    }
    fn text_delta(&self, text: &str) {
        self.text.lock().unwrap().push(text.to_owned());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_litellm_responses_route_answers_text_streams_and_a_forced_function_call() {
    let root = tokio::task::spawn_blocking(|| peers::litellm().root.clone())
        .await
        .unwrap();
    let yaml = |extra: &str| {
        format!(
            "name: smol-responses\nuse: langchain_openai:ChatOpenAI\nmodel: smollm2-responses\n\
             base_url: {root}/v1\napi_key: {}\nuse_responses_api: true\noutput_version: responses/v1\n\
             temperature: 0\nmax_tokens: 48\n{extra}",
            peers::LITELLM_KEY
        )
    };
    let model = model_from_entry(&entry(&yaml("")), &|_| None).unwrap();

    // Text, streamed: the deltas the observer heard are the answer.
    let heard = Heard::default();
    let messages = [
        Message::System {
            content: "You are a helpful assistant.".into(),
        },
        Message::human("Say hello."),
    ];
    let mut request = ModelRequest::new(&messages, &[], &[]);
    request.observer = Some(&heard);
    let reply = model.complete(request).await.unwrap();
    assert!(!reply.content.trim().is_empty(), "{reply:?}");
    assert!(reply.tool_calls.is_empty(), "{reply:?}");
    let streamed = heard.text.lock().unwrap().clone();
    assert!(
        streamed.len() > 1,
        "the reply came in one piece: {streamed:?}"
    );
    assert_eq!(streamed.concat(), reply.content);
    assert!(matches!(
        reply.finish_reason.as_deref(),
        Some(finish_reason::STOP) | Some(finish_reason::LENGTH)
    ));
    let usage = reply.usage.expect("LiteLLM reports usage");
    assert!(
        usage.input_tokens > 0 && usage.output_tokens > 0,
        "{usage:?}"
    );

    // A forced function call: exactly that call, with a JSON object for arguments. Not
    // streamed: LiteLLM 1.108 ends a streamed forced call with `response.failed` ("Error
    // building chunks for logging/streaming usage calculation").
    let forced = model_from_entry(
        &entry(&yaml(
            "tool_choice: {type: function, function: {name: get_weather}}\nstreaming: false\n",
        )),
        &|_| None,
    )
    .unwrap();
    let tool = weather_tool();
    let tools = [&tool];
    let messages = [Message::human("What is the weather in Paris?")];
    let reply = forced
        .complete(ModelRequest::new(&messages, &tools, &[]))
        .await
        .unwrap();
    assert_eq!(reply.tool_calls.len(), 1, "{reply:?}");
    assert_eq!(reply.tool_calls[0].name, "get_weather");
    assert!(reply.tool_calls[0].args.is_object(), "{reply:?}");
    assert!(!reply.tool_calls[0].id.is_empty());
    assert_eq!(
        reply.finish_reason.as_deref(),
        Some(finish_reason::TOOL_CALLS)
    );
}

/// `antler run` through `responses_standin`: the config, the run's view, the requests.
fn run_through(
    answer: impl Fn(usize, &Seen) -> Answer + Send + 'static,
    model_extra: &str,
) -> (Value, Vec<Seen>) {
    let server = responses_standin(answer);
    let dir = tempfile::Builder::new()
        .prefix("antler-resp")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: resp\n    use: langchain_openai:ChatOpenAI\n    model: gpt-5-mini\n    base_url: {}/v1\n    api_key: {STANDIN_KEY}\n    use_responses_api: true\n    max_retries: 0\n{model_extra}tools:\n  - {{name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n",
            server.root
        ),
    )
    .unwrap();
    let (view, _stderr) = antler_run(d, &["List the workspace", "--model", "resp"]);
    let requests = server.requests.lock().unwrap().clone();
    (view, requests)
}

#[test]
fn a_tool_loop_through_antler_run_sends_the_reasoning_items_back_with_the_call() {
    let (view, requests) = run_through(
        |n, request| {
            let has_output = request.body["input"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["type"] == "function_call_output");
            if n == 0 && !has_output {
                Answer::sse(&reply_events(
                    Some(("rs_1", "The user wants a listing.", "gAAAA-encrypted-1")),
                    None,
                    Some((
                        "call_ls_1",
                        "ls",
                        json!({"description": "look", "path": "/mnt/user-data/workspace"}),
                    )),
                    None,
                    (1200, 40, 24),
                ))
            } else {
                Answer::sse(&reply_events(
                    None,
                    Some("The workspace is empty."),
                    None,
                    None,
                    (1300, 12, 0),
                ))
            }
        },
        "    reasoning: {effort: low, summary: auto}\n",
    );
    assert_eq!(view["status"], "success", "{view}");
    assert_eq!(view["final_answer"], "The workspace is empty.");
    assert_eq!(requests.len(), 2, "{requests:?}");
    // The run's totals are the sums the server reported.
    assert_eq!(
        view["token_usage"],
        json!({"input_tokens": 2500, "output_tokens": 52, "total_tokens": 2552, "reasoning_tokens": 24})
    );

    let first = &requests[0].body;
    assert_eq!(first["stream"], json!(true));
    assert_eq!(first["store"], json!(false));
    assert_eq!(first["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        first["reasoning"],
        json!({"effort": "low", "summary": "auto"})
    );
    assert!(
        first["instructions"]
            .as_str()
            .unwrap()
            .starts_with("<role>\nYou are Antler"),
        "{first}"
    );
    assert!(first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "ls"));

    // The second turn carries the reasoning item, whole, right before its call.
    let input = requests[1].body["input"].as_array().unwrap();
    let at = input
        .iter()
        .position(|i| i["type"] == "reasoning")
        .expect("the reasoning item went back");
    assert_eq!(
        input[at],
        json!({"type": "reasoning", "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "The user wants a listing."}],
            "encrypted_content": "gAAAA-encrypted-1"})
    );
    assert_eq!(input[at + 1]["type"], "function_call");
    assert_eq!(input[at + 1]["call_id"], "call_ls_1");
    assert_eq!(input[at + 2]["type"], "function_call_output");
    assert_eq!(input[at + 2]["call_id"], "call_ls_1");
    // Reasoning is never the answer.
    assert!(!view["final_answer"]
        .as_str()
        .unwrap()
        .contains("wants a listing"));
}

#[test]
fn an_incomplete_response_at_the_output_limit_ends_the_run_length_capped() {
    let (view, _) = run_through(
        |_, _| {
            Answer::sse(&reply_events(
                None,
                Some("The answer is cut off mid"),
                None,
                Some("max_output_tokens"),
                (50, 16, 0),
            ))
        },
        "    max_tokens: 16\n",
    );
    assert_eq!(view["status"], "success", "{view}");
    assert_eq!(view["stop_reason"], "model_length_capped");
    assert_eq!(view["final_answer"], "The answer is cut off mid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_reasons_usage_and_a_429_with_retry_after() {
    let server = standin(|n, request| {
        let problems = responses_problems(request);
        if !problems.is_empty() {
            return Answer::violation(&problems);
        }
        match n {
            0 => {
                let mut answer = Answer::json(
                    429,
                    json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}),
                );
                answer.headers.push(("Retry-After".into(), "1".into()));
                answer
            }
            1 => Answer::sse(&reply_events(
                None,
                Some("Hello there."),
                None,
                None,
                (20, 4, 0),
            )),
            2 => Answer::sse(&reply_events(
                None,
                None,
                Some(("call_w", "get_weather", json!({"city": "Oslo"}))),
                None,
                (30, 9, 0),
            )),
            3 => Answer::sse(&reply_events(
                None,
                Some("Cut"),
                None,
                Some("max_output_tokens"),
                (30, 1, 0),
            )),
            4 => Answer::sse(&reply_events(
                None,
                Some(""),
                None,
                Some("content_filter"),
                (30, 0, 0),
            )),
            // A reply sent whole, not streamed.
            _ => Answer::json(
                200,
                json!({"id": "resp_w", "object": "response", "status": "completed", "error": null,
                "incomplete_details": null,
                "output": [{"id": "msg_w", "type": "message", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "Whole.", "annotations": []}]}],
                "usage": {"input_tokens": 8, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 2,
                    "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 10}}),
            ),
        }
    });
    let model = model_from_entry(
        &entry(&format!(
            "name: resp\nuse: langchain_openai:ChatOpenAI\nmodel: gpt-5-mini\nbase_url: {}/v1\napi_key: {STANDIN_KEY}\nwire_api: responses\nmax_retries: 2\n",
            server.root
        )),
        &|_| None,
    )
    .unwrap();
    let tool = weather_tool();
    let tools = [&tool];
    let messages = [Message::human("Weather in Oslo?")];
    let heard = Heard::default();
    let mut request = ModelRequest::new(&messages, &tools, &[]);
    request.observer = Some(&heard);

    let reply = model.complete(request).await.unwrap();
    assert_eq!(reply.content, "Hello there.");
    assert_eq!(reply.finish_reason.as_deref(), Some(finish_reason::STOP));
    let usage = reply.usage.unwrap();
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.total_tokens),
        (20, 4, 24)
    );
    // The 429 was retried after the wait the server asked for, and the observer heard.
    let retries = heard.retries.lock().unwrap().clone();
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert_eq!(retries[0].wait, Duration::from_secs(1));
    assert!(retries[0].reason.starts_with("HTTP 429"), "{retries:?}");

    let finish = |reply: antler_engine::ModelReply| reply.finish_reason.unwrap();
    let ask = || model.complete(ModelRequest::new(&messages, &tools, &[]));
    let called = ask().await.unwrap();
    assert_eq!(called.tool_calls[0].id, "call_w");
    assert_eq!(called.tool_calls[0].args, json!({"city": "Oslo"}));
    assert_eq!(finish(called), finish_reason::TOOL_CALLS);
    assert_eq!(finish(ask().await.unwrap()), finish_reason::LENGTH);
    assert_eq!(finish(ask().await.unwrap()), finish_reason::CONTENT_FILTER);
    let whole = ask().await.unwrap();
    assert_eq!(whole.content, "Whole.");
    assert_eq!(whole.usage.unwrap().cache_read_input_tokens, 4);
    assert_eq!(server.requests.lock().unwrap().len(), 6);
}

/// `responses_standin`: [`standin`] answering a request off the documented shape 400,
/// any other with `answer`.
fn responses_standin(answer: impl Fn(usize, &Seen) -> Answer + Send + 'static) -> Standin {
    standin(move |n, request| {
        let problems = responses_problems(request);
        if !problems.is_empty() {
            return Answer::violation(&problems);
        }
        answer(n, request)
    })
}

/// The `input_image` parts of a request's input, with the role of their message.
fn input_images(body: &Value) -> Vec<(String, Value)> {
    body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "message")
        .flat_map(|m| {
            let role = m["role"].as_str().unwrap().to_owned();
            m["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["type"] == "input_image")
                .map(move |p| (role.clone(), p.clone()))
        })
        .collect()
}

#[test]
fn antler_run_shows_a_vision_model_the_viewed_image_as_an_input_image_data_url() {
    let server = responses_standin(|n, _| {
        if n == 0 {
            Answer::sse(&reply_events(
                None,
                None,
                Some((
                    "call_view_1",
                    "view_image",
                    json!({"image_path": VIEWED_PNG_PATH}),
                )),
                None,
                (300, 10, 0),
            ))
        } else {
            Answer::sse(&reply_events(
                None,
                Some("A chart of rising sales."),
                None,
                None,
                (400, 8, 0),
            ))
        }
    });
    let dir = tempfile::Builder::new()
        .prefix("antler-resp-img")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    put_viewed_png(d);
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: resp\n    use: langchain_openai:ChatOpenAI\n    model: gpt-5-mini\n    base_url: {}/v1\n    api_key: {STANDIN_KEY}\n    use_responses_api: true\n    supports_vision: true\ntools:\n  - {{name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n",
            server.root
        ),
    )
    .unwrap();
    let (view, stderr) = antler_run(
        d,
        &["Describe the chart", "--model", "resp", "--thread", "t1"],
    );
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    assert_eq!(view["final_answer"], "A chart of rising sales.");
    let requests = server.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let (first, second) = (&requests[0].body, &requests[1].body);
    assert!(first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "view_image"));
    assert!(input_images(first).is_empty());

    // After the call's output, the image goes to the model as the API documents it: an
    // `input_image` part of a user message whose `image_url` is a data URL holding the
    // file's exact bytes in base64.
    assert_eq!(
        input_images(second),
        [(
            "user".to_owned(),
            json!({"type": "input_image", "detail": "auto",
                "image_url": format!("data:image/png;base64,{VIEWED_PNG_BASE64}")})
        )]
    );
    let input = second["input"].as_array().unwrap();
    let output = input
        .iter()
        .position(|i| i["type"] == "function_call_output")
        .expect("the call is answered");
    assert_eq!(input[output]["call_id"], "call_view_1");
    assert_eq!(input.last().unwrap()["role"], "user");
    assert!(output < input.len() - 1, "{second}");
    assert!(!second.to_string().contains("/users/default/threads"));
}

#[test]
fn antler_run_falls_back_to_the_next_model_when_the_responses_api_answers_500() {
    let primary = responses_standin(|_, _| {
        Answer::json(
            500,
            json!({"error": {"message": "The server had an error while processing your request. Sorry about that!", "type": "server_error", "param": null, "code": null}}),
        )
    });
    let backup = responses_standin(|_, _| {
        Answer::sse(&reply_events(
            None,
            Some("Answered by the fallback."),
            None,
            None,
            (120, 6, 0),
        ))
    });
    let dir = tempfile::Builder::new()
        .prefix("antler-resp-fb")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    // No retries, by the client or by `llm_call`: the first failure is final.
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: primary\n    use: langchain_openai:ChatOpenAI\n    model: gpt-5\n    base_url: {}/v1\n    api_key: {STANDIN_KEY}\n    use_responses_api: true\n    max_retries: 0\n    fallback: [backup]\n  - name: backup\n    use: langchain_openai:ChatOpenAI\n    model: gpt-5-mini\n    base_url: {}/v1\n    api_key: {STANDIN_KEY}\n    use_responses_api: true\nllm_call:\n  retry_max_attempts: 1\n",
            primary.root, backup.root
        ),
    )
    .unwrap();
    let (view, stderr) = antler_run(d, &["Say hello", "--model", "primary", "--trace"]);
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    assert_eq!(view["final_answer"], "Answered by the fallback.");
    let asked = primary.requests.lock().unwrap().clone();
    let answered = backup.requests.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(answered.len(), 1, "{answered:?}");
    for request in asked.iter().chain(&answered) {
        assert_eq!(responses_problems(request), Vec::<String>::new());
    }
    assert_eq!(asked[0].body["model"], "gpt-5");
    assert_eq!(answered[0].body["model"], "gpt-5-mini");

    // The attempt is an event, and the turn says which model answered.
    let fallbacks = trace_events(&stderr, "model_fallback");
    assert_eq!(fallbacks.len(), 1, "{stderr}");
    assert_eq!(fallbacks[0]["from"], "primary");
    assert_eq!(fallbacks[0]["to"], "backup");
    assert_eq!(fallbacks[0]["reason"], "transient");
    let finished = trace_events(&stderr, "model_finished");
    assert_eq!(finished.len(), 1, "{stderr}");
    assert_eq!(finished[0]["model"], "backup");
    assert!(trace_events(&stderr, "llm_retry").is_empty(), "{stderr}");
}
