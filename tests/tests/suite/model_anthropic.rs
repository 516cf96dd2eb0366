//! The Anthropic Messages API client against a real server and a stand-in.
//!
//! The real one is `peers::litellm()` (LiteLLM's `/v1/messages` in front of llama.cpp with
//! SmolLM2): a whole reply and a streamed one, a forced `tool_use` and a `tool_result`
//! turn, and the usage the client reports equal to what the server's bytes said (a relay
//! in the test records them). What SmolLM2 behind a proxy cannot show (thinking blocks
//! and their signatures, cache counts, each stop reason, a 429) is shown against
//! `anthropic_standin`, a server in the test that answers payloads in the shapes of
//! Anthropic's API reference and its Python SDK's stream fixtures, and checks every
//! request it gets against the documented request shape (a malformed one is answered 400
//! and fails the test): a tool loop through `antler run` with thinking, retries and
//! prompt caching, an image shown to a vision model as a base64 `image` block, a
//! `fallback:` model answering for one that fails with a 500, and the client's replies
//! for each stop reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::model_support::{
    antler_run, peers, put_viewed_png, trace_events, VIEWED_PNG_BASE64, VIEWED_PNG_PATH,
};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_engine::{
    catalog::ToolSpec, model_from_entry, ChatModel, Message, ModelObserver, ModelRequest,
    RetryNotice, TokenUsage, ToolStatus,
};
use antler_protocol::config::ModelConfig;
use serde_json::{json, Value};

const KEY: &str = "sk-ant-api03-standin";

fn entry(yaml: &str) -> ModelConfig {
    serde_yaml::from_str(yaml).unwrap()
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn weather_tool() -> ToolSpec {
    ToolSpec::builtin(
        "get_weather",
        "Get the current weather in a city.",
        json!({
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name"}},
            "required": ["city"],
        }),
    )
}

// ---------------------------------------------------------------------------------------
// HTTP plumbing shared by the relay and the stand-in.

/// One HTTP/1.1 request read off a socket.
struct Request {
    line: String,
    head: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

fn read_request(reader: &mut impl BufRead) -> Option<Request> {
    let mut line = String::new();
    reader.read_line(&mut line).ok().filter(|n| *n > 0)?;
    let mut head = String::new();
    let mut headers = BTreeMap::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 || header == "\r\n" {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
        if !header.to_ascii_lowercase().starts_with("connection:") {
            head.push_str(&header);
        }
    }
    let length = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        line,
        head,
        headers,
        body,
    })
}

/// The body of a raw HTTP response, de-chunked when it was sent chunked.
fn response_body(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return String::new();
    };
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return body.to_owned();
    }
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

/// The data of each SSE event of a body, as JSON.
fn sse_events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

/// What the server's bytes said the usage was: a whole message's `usage`, or a stream's
/// `message_start` usage updated by `message_delta`'s (cumulative) counts.
fn reported_usage(body: &str) -> BTreeMap<String, u64> {
    let mut usage = BTreeMap::new();
    let mut take = |u: &Value| {
        for (k, v) in u.as_object().into_iter().flatten() {
            if let Some(n) = v.as_u64() {
                usage.insert(k.clone(), n);
            }
        }
    };
    match serde_json::from_str::<Value>(body) {
        Ok(whole) => take(&whole["usage"]),
        Err(_) => {
            for event in sse_events(body) {
                match event["type"].as_str() {
                    Some("message_start") => take(&event["message"]["usage"]),
                    Some("message_delta") => take(&event["usage"]),
                    _ => {}
                }
            }
        }
    }
    usage
}

/// A relay in front of a real server that records each exchange: the request body and
/// the response's body as the server sent it.
struct Relay {
    root: String,
    exchanges: Arc<Mutex<Vec<(Value, String)>>>,
}

fn recording_relay(upstream_port: u16) -> Relay {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let root = format!("http://{}", listener.local_addr().unwrap());
    let exchanges = Arc::new(Mutex::new(Vec::new()));
    let seen = exchanges.clone();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let mut reader = BufReader::new(client.try_clone().unwrap());
            let Some(request) = read_request(&mut reader) else {
                continue;
            };
            let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream_port)) else {
                continue;
            };
            let _ = up.write_all(request.line.as_bytes());
            let _ = up.write_all(request.head.as_bytes());
            let _ = up.write_all(b"Connection: close\r\n\r\n");
            let _ = up.write_all(&request.body);
            let mut raw = Vec::new();
            let _ = up.read_to_end(&mut raw);
            let body = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            seen.lock().unwrap().push((body, response_body(&raw)));
            let _ = client.write_all(&raw);
        }
    });
    Relay { root, exchanges }
}

// ---------------------------------------------------------------------------------------
// The real server.

/// A model entry for LiteLLM's Anthropic route through `relay`. Prompt caching is off:
/// llama-cpp-python refuses content given as a list of blocks, which every cache
/// breakpoint makes (the stand-in tests show the breakpoints).
fn litellm_entry(relay: &Relay, extra: &str) -> ModelConfig {
    entry(&format!(
        "name: smol-claude\nuse: langchain_anthropic:ChatAnthropic\nmodel: {}\nbase_url: {}\napi_key: {}\nenable_prompt_caching: false\ntemperature: 0\n{extra}",
        peers::ALIAS,
        relay.root,
        peers::LITELLM_KEY
    ))
}

/// The usage the client must report for what the server reported: every input token,
/// cached or not, as `input_tokens`, the cache writes and reads also apart, and a total
/// of input and output.
fn expected_usage(reported: &BTreeMap<String, u64>) -> TokenUsage {
    let n = |key: &str| reported.get(key).copied().unwrap_or(0);
    let (creation, read) = (
        n("cache_creation_input_tokens"),
        n("cache_read_input_tokens"),
    );
    let input = n("input_tokens") + creation + read;
    TokenUsage {
        input_tokens: input,
        output_tokens: n("output_tokens"),
        total_tokens: input + n("output_tokens"),
        cache_creation_input_tokens: creation,
        cache_read_input_tokens: read,
        reasoning_tokens: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn litellm_answers_whole_and_streamed_text_and_a_forced_tool_use() {
    let peer = tokio::task::spawn_blocking(peers::litellm).await.unwrap();
    let relay = recording_relay(peer.port);
    let tool = weather_tool();
    let tools = [&tool];
    let task = [
        Message::System {
            content: "You are a helpful assistant.".to_owned(),
        },
        Message::human("Say hello."),
    ];

    // A whole reply (`disable_streaming`) and a streamed one: text, a finish reason, and
    // the usage the server's own bytes reported.
    for (extra, streamed) in [("disable_streaming: true\n", false), ("", true)] {
        let model = model_from_entry(
            &litellm_entry(&relay, &format!("max_tokens: 16\n{extra}")),
            &no_env,
        )
        .unwrap();
        let reply = model
            .complete(ModelRequest::new(&task, &[], &[]))
            .await
            .unwrap();
        assert!(!reply.content.trim().is_empty(), "{reply:?}");
        assert!(reply.tool_calls.is_empty(), "{reply:?}");
        assert!(
            matches!(reply.finish_reason.as_deref(), Some("stop" | "length")),
            "{reply:?}"
        );
        let (sent, answered) = relay.exchanges.lock().unwrap().last().cloned().unwrap();
        assert_eq!(sent["stream"], streamed);
        assert_eq!(sent["system"], "You are a helpful assistant.");
        assert_eq!(sent["max_tokens"], 16);
        assert_eq!(
            answered.trim_start().starts_with("event:"),
            streamed,
            "{answered}"
        );
        let reported = reported_usage(&answered);
        assert!(reported["output_tokens"] > 0, "{answered}");
        assert_eq!(reply.usage, Some(expected_usage(&reported)), "{answered}");
    }

    // A forced tool_use, streamed (LiteLLM splits it into one block per fragment, all
    // with one id: the client makes them one call again).
    let forced = model_from_entry(
        &litellm_entry(
            &relay,
            "max_tokens: 64\ntool_choice: {type: tool, name: get_weather}\n",
        ),
        &no_env,
    )
    .unwrap();
    let mut messages = vec![
        Message::System {
            content: "You are a helpful assistant.".to_owned(),
        },
        Message::human("What is the weather in Paris?"),
    ];
    let reply = forced
        .complete(ModelRequest::new(&messages, &tools, &[]))
        .await
        .unwrap();
    assert_eq!(reply.tool_calls.len(), 1, "{reply:?}");
    assert!(reply.invalid_calls.is_empty(), "{reply:?}");
    let call = reply.tool_calls[0].clone();
    assert_eq!(call.name, "get_weather");
    assert!(call.args["city"].is_string(), "{reply:?}");
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
    let (sent, answered) = relay.exchanges.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        sent["tool_choice"],
        json!({"type": "tool", "name": "get_weather"})
    );
    assert_eq!(
        sent["tools"][0]["input_schema"]["required"],
        json!(["city"])
    );
    assert_eq!(
        reply.usage,
        Some(expected_usage(&reported_usage(&answered))),
        "{answered}"
    );

    // The call and its result go back as tool_use and tool_result blocks, and the server
    // answers them. (llama-cpp-python refuses an assistant turn holding only a tool_use
    // block, so the turn also says something.)
    let plain = model_from_entry(&litellm_entry(&relay, "max_tokens: 24\n"), &no_env).unwrap();
    let mut ai = reply.into_message();
    if let Message::Ai { content, .. } = &mut ai {
        *content = "Let me check.".to_owned();
    }
    messages.push(ai);
    messages.push(Message::tool(
        call.id.clone(),
        "get_weather",
        "Sunny, 21 °C",
        ToolStatus::Success,
    ));
    let after = plain
        .complete(ModelRequest::new(&messages, &tools, &[]))
        .await
        .unwrap();
    assert_eq!(after.id, "ai-2");
    assert!(!after.content.trim().is_empty(), "{after:?}");
    let (sent, _) = relay.exchanges.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        sent["messages"][1]["content"][1],
        json!({"type": "tool_use", "id": call.id, "name": "get_weather", "input": call.args})
    );
    assert_eq!(
        sent["messages"][2]["content"],
        json!([{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 °C"}])
    );
}

// ---------------------------------------------------------------------------------------
// The stand-in.

/// One scripted answer of the stand-in.
#[derive(Clone)]
struct Answer {
    status: u16,
    headers: Vec<(&'static str, String)>,
    content_type: &'static str,
    body: String,
    /// Close the connection after the body, without saying how long it was (a stream
    /// cut before its end).
    cut: bool,
}

impl Answer {
    /// A streamed reply: each event as `event: {type}` and its `data:` line.
    fn stream(events: &[Value]) -> Answer {
        let body = events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
            .collect();
        Answer {
            status: 200,
            headers: Vec::new(),
            content_type: "text/event-stream",
            body,
            cut: false,
        }
    }

    /// A stream whose connection closes after `events`, before `message_stop`.
    fn cut(events: &[Value]) -> Answer {
        Answer {
            cut: true,
            ..Answer::stream(events)
        }
    }

    /// An error answer in the API's shape (`{"type":"error","error":{type,message}}`).
    fn error(status: u16, kind: &str, message: &str, headers: &[(&'static str, &str)]) -> Answer {
        Answer {
            status,
            headers: headers.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
            content_type: "application/json",
            body: json!({"type": "error", "error": {"type": kind, "message": message}}).to_string(),
            cut: false,
        }
    }
}

/// The documented events of one streamed message: `message_start` with `usage`, each
/// block (`text`, `thinking` with its `signature_delta`, `tool_use` with its input as
/// `input_json_delta` pieces), then `message_delta` with the stop reason and the output
/// count, and `message_stop`. (The shapes of the SDK's `basic_response.txt` and
/// `tool_use_response.txt` fixtures and the API reference's extended thinking stream.)
struct Streamed {
    blocks: Vec<Value>,
    start_usage: Value,
    output_tokens: u64,
    stop_reason: &'static str,
}

fn thinking(text: &str, signature: &str) -> Value {
    json!({"type": "thinking", "thinking": text, "signature": signature})
}

fn text(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input})
}

impl Streamed {
    fn events(&self) -> Vec<Value> {
        let mut events = vec![
            json!({"type": "message_start", "message": {"id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message",
                "role": "assistant", "model": "claude-sonnet-4-5", "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": self.start_usage}}),
            json!({"type": "ping"}),
        ];
        for (index, block) in self.blocks.iter().enumerate() {
            let kind = block["type"].as_str().unwrap();
            let start = match kind {
                "thinking" => json!({"type": "thinking", "thinking": ""}),
                "text" => json!({"type": "text", "text": ""}),
                _ => {
                    json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}})
                }
            };
            events.push(
                json!({"type": "content_block_start", "index": index, "content_block": start}),
            );
            let deltas: Vec<Value> = match kind {
                "thinking" => vec![
                    json!({"type": "thinking_delta", "thinking": block["thinking"]}),
                    json!({"type": "signature_delta", "signature": block["signature"]}),
                ],
                "text" => {
                    let text = block["text"].as_str().unwrap();
                    let (a, b) = text.split_at(text.len() / 2);
                    vec![
                        json!({"type": "text_delta", "text": a}),
                        json!({"type": "text_delta", "text": b}),
                    ]
                }
                _ => {
                    let input = block["input"].to_string();
                    let (a, b) = input.split_at(input.len() / 2);
                    vec![
                        json!({"type": "input_json_delta", "partial_json": ""}),
                        json!({"type": "input_json_delta", "partial_json": a}),
                        json!({"type": "input_json_delta", "partial_json": b}),
                    ]
                }
            };
            for delta in deltas {
                events.push(json!({"type": "content_block_delta", "index": index, "delta": delta}));
            }
            events.push(json!({"type": "content_block_stop", "index": index}));
        }
        events.push(
            json!({"type": "message_delta", "delta": {"stop_reason": self.stop_reason,
            "stop_sequence": null}, "usage": {"output_tokens": self.output_tokens}}),
        );
        events.push(json!({"type": "message_stop"}));
        events
    }

    fn answer(&self) -> Answer {
        Answer::stream(&self.events())
    }
}

/// One request the stand-in received, and what is wrong with it.
#[derive(Clone, Debug)]
struct Seen {
    headers: BTreeMap<String, String>,
    body: Value,
    problems: Vec<String>,
}

struct Standin {
    base_url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Standin {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Starts `anthropic_standin` on a loopback port (a thread that lives as long as the
/// test process): each request is checked ([`check_request`]); a malformed one is
/// answered 400 `invalid_request_error` with what is wrong, any other the next scripted
/// answer (the last again when they run out).
fn anthropic_standin(answers: Vec<Answer>) -> Standin {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        let mut served = 0usize;
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let Some(request) = read_request(&mut reader) else {
                continue;
            };
            let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            let problems = check_request(&request.line, &request.headers, &body);
            record.lock().unwrap().push(Seen {
                headers: request.headers,
                body,
                problems: problems.clone(),
            });
            let answer = if problems.is_empty() {
                served += 1;
                answers[(served - 1).min(answers.len() - 1)].clone()
            } else {
                Answer::error(400, "invalid_request_error", &problems.join("; "), &[])
            };
            let mut head = format!(
                "HTTP/1.1 {} X\r\ncontent-type: {}\r\nrequest-id: req_standin\r\nconnection: close\r\n",
                answer.status, answer.content_type
            );
            for (name, value) in &answer.headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            if !answer.cut {
                head.push_str(&format!("content-length: {}\r\n", answer.body.len()));
            }
            let _ = stream.write_all(format!("{head}\r\n{}", answer.body).as_bytes());
            let _ = stream.flush();
        }
    });
    Standin { base_url, seen }
}

/// What is wrong with a request, against the Messages API's documented shape: the route
/// and headers, the top-level fields, roles that alternate from `user`, the blocks each
/// role may hold and their fields, every `tool_use` answered by a `tool_result` first in
/// the next turn, tools with an object `input_schema`, a thinking budget of at least
/// 1024 and below `max_tokens` (and, with thinking on, a last assistant turn with tool
/// use that starts with its thinking block), and at most 4 `cache_control` markers,
/// none on a thinking block.
fn check_request(line: &str, headers: &BTreeMap<String, String>, body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let mut problem = |text: String| problems.push(text);
    if !line.starts_with("POST /v1/messages ") {
        problem(format!("request line {line:?}"));
    }
    if headers.get("x-api-key").map(String::as_str) != Some(KEY) {
        problem("x-api-key: missing or wrong".to_owned());
    }
    if headers.get("anthropic-version").map(String::as_str) != Some("2023-06-01") {
        problem("anthropic-version: must be 2023-06-01".to_owned());
    }
    if !headers
        .get("content-type")
        .is_some_and(|c| c.starts_with("application/json"))
    {
        problem("content-type: must be application/json".to_owned());
    }
    let Some(object) = body.as_object() else {
        problem("the body is not a JSON object".to_owned());
        return problems;
    };
    const FIELDS: &[&str] = &[
        "model",
        "messages",
        "max_tokens",
        "system",
        "tools",
        "tool_choice",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "metadata",
        "thinking",
        "service_tier",
    ];
    for key in object.keys() {
        if !FIELDS.contains(&key.as_str()) {
            problem(format!("{key}: Extra inputs are not permitted"));
        }
    }
    if body["model"].as_str().is_none_or(str::is_empty) {
        problem("model: Field required".to_owned());
    }
    let max_tokens = body["max_tokens"].as_u64().unwrap_or(0);
    if max_tokens == 0 {
        problem("max_tokens: Field required (a positive integer)".to_owned());
    }
    if !body["stream"].is_null() && !body["stream"].is_boolean() {
        problem("stream: must be a boolean".to_owned());
    }
    let mut markers = 0;
    let mut count_marker = |block: &Value, at: &str, problem: &mut dyn FnMut(String)| {
        if let Some(marker) = block.get("cache_control") {
            markers += 1;
            if marker["type"] != "ephemeral" {
                problem(format!("{at}.cache_control: type must be ephemeral"));
            }
        }
    };
    match &body["system"] {
        Value::Null | Value::String(_) => {}
        Value::Array(blocks) => {
            for (n, block) in blocks.iter().enumerate() {
                if block["type"] != "text" || !block["text"].is_string() {
                    problem(format!("system.{n}: must be a text block"));
                }
                count_marker(block, &format!("system.{n}"), &mut problem);
            }
        }
        _ => problem("system: must be a string or a list of text blocks".to_owned()),
    }
    for (n, tool) in body["tools"].as_array().into_iter().flatten().enumerate() {
        let name_ok = tool["name"].as_str().is_some_and(|name| {
            !name.is_empty()
                && name.len() <= 128
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        });
        if !name_ok {
            problem(format!("tools.{n}.name: invalid"));
        }
        if tool["input_schema"]["type"] != "object" {
            problem(format!(
                "tools.{n}.input_schema.type: Field required: object"
            ));
        }
        count_marker(tool, &format!("tools.{n}"), &mut problem);
    }
    if !body["tool_choice"].is_null() {
        let kind = body["tool_choice"]["type"].as_str().unwrap_or("");
        if !["auto", "any", "tool", "none"].contains(&kind)
            || (kind == "tool" && !body["tool_choice"]["name"].is_string())
        {
            problem("tool_choice: invalid".to_owned());
        }
        if body["tools"].is_null() {
            problem("tool_choice: set without tools".to_owned());
        }
    }
    let thinking_on = body["thinking"]["type"] == "enabled";
    match body["thinking"]["type"].as_str() {
        None if body["thinking"].is_null() => {}
        Some("disabled") => {}
        Some("enabled") => {
            let budget = body["thinking"]["budget_tokens"].as_u64().unwrap_or(0);
            if budget < 1024 || budget >= max_tokens {
                problem(format!(
                    "thinking.budget_tokens: {budget} must be ≥ 1024 and less than max_tokens"
                ));
            }
        }
        _ => problem("thinking: invalid".to_owned()),
    }

    let Some(messages) = body["messages"].as_array().filter(|m| !m.is_empty()) else {
        problem("messages: Field required (a non-empty list)".to_owned());
        return problems;
    };
    let mut pending_calls: Vec<String> = Vec::new();
    let mut last_assistant: Option<&Vec<Value>> = None;
    for (m, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or("");
        let expected = if m % 2 == 0 { "user" } else { "assistant" };
        if role != expected {
            problem(format!(
                "messages.{m}.role: roles must alternate from user, got {role:?}"
            ));
        }
        let blocks: Vec<Value> = match &message["content"] {
            Value::String(s) if !s.is_empty() => vec![json!({"type": "text", "text": s})],
            Value::Array(blocks) if !blocks.is_empty() => blocks.clone(),
            _ => {
                problem(format!("messages.{m}.content: must be non-empty"));
                continue;
            }
        };
        let mut answered: Vec<String> = Vec::new();
        let mut past_results = false;
        for (n, block) in blocks.iter().enumerate() {
            let at = format!("messages.{m}.content.{n}");
            let kind = block["type"].as_str().unwrap_or("");
            let allowed: &[&str] = match (role, kind) {
                ("user", "text") | ("assistant", "text") => &["type", "text", "cache_control"],
                ("user", "image") => &["type", "source", "cache_control"],
                ("user", "tool_result") => &[
                    "type",
                    "tool_use_id",
                    "content",
                    "is_error",
                    "cache_control",
                ],
                ("assistant", "tool_use") => &["type", "id", "name", "input", "cache_control"],
                ("assistant", "thinking") => &["type", "thinking", "signature"],
                ("assistant", "redacted_thinking") => &["type", "data"],
                _ => {
                    problem(format!("{at}: a {role} turn cannot hold a {kind:?} block"));
                    continue;
                }
            };
            for key in block.as_object().into_iter().flat_map(|o| o.keys()) {
                if !allowed.contains(&key.as_str()) {
                    problem(format!("{at}.{key}: Extra inputs are not permitted"));
                }
            }
            count_marker(block, &at, &mut problem);
            match kind {
                "text" if block["text"].as_str().is_none_or(str::is_empty) => {
                    problem(format!("{at}.text: must be non-empty"));
                }
                "image" => {
                    let source = &block["source"];
                    let media = source["media_type"].as_str().unwrap_or("");
                    if source["type"] != "base64"
                        || !["image/jpeg", "image/png", "image/gif", "image/webp"].contains(&media)
                        || !source["data"].is_string()
                    {
                        problem(format!("{at}.source: invalid"));
                    }
                }
                "tool_use" => {
                    if !block["id"].is_string()
                        || !block["name"].is_string()
                        || !block["input"].is_object()
                    {
                        problem(format!("{at}: tool_use needs id, name and an object input"));
                    }
                    pending_calls.push(block["id"].as_str().unwrap_or("").to_owned());
                }
                "tool_result" => {
                    if past_results {
                        problem(format!("{at}: tool_result blocks must come first"));
                    }
                    let id = block["tool_use_id"].as_str().unwrap_or("").to_owned();
                    if !pending_calls.contains(&id) {
                        problem(format!("{at}: tool_result for unknown tool_use id {id:?}"));
                    }
                    if !block["is_error"].is_null() && !block["is_error"].is_boolean() {
                        problem(format!("{at}.is_error: must be a boolean"));
                    }
                    answered.push(id);
                }
                "thinking" => {
                    if !block["thinking"].is_string() || !block["signature"].is_string() {
                        problem(format!("{at}: thinking needs thinking and signature"));
                    }
                    if block.get("cache_control").is_some() {
                        problem(format!("{at}: a thinking block cannot be cached"));
                    }
                }
                _ => {}
            }
            if kind != "tool_result" {
                past_results = true;
            }
        }
        if role == "user" {
            for id in pending_calls.drain(..) {
                if !answered.contains(&id) {
                    problem(format!(
                        "messages.{m}: tool_use ids were found without tool_result blocks immediately after: {id}"
                    ));
                }
            }
        } else {
            last_assistant = message["content"].as_array();
        }
    }
    if thinking_on {
        if let Some(blocks) = last_assistant {
            let uses_tools = blocks.iter().any(|b| b["type"] == "tool_use");
            let first = blocks
                .first()
                .map(|b| b["type"].clone())
                .unwrap_or(Value::Null);
            if uses_tools && first != "thinking" && first != "redacted_thinking" {
                problem(
                    "Expected `thinking` or `redacted_thinking`, but found another block: when `thinking` is enabled, a final `assistant` message must start with a thinking block".to_owned(),
                );
            }
        }
    }
    if markers > 4 {
        problem(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {markers}."
        ));
    }
    problems
}

/// The `ls` call of the tool loop and its signed thinking.
const THOUGHT: &str = "The user wants the workspace listed; ls will show it.";
const SIGNATURE: &str = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds";
const LATER_THOUGHT: &str = "The listing is empty, so I can answer.";

#[test]
fn antler_run_loops_through_tool_use_with_thinking_retries_and_the_cached_prefix() {
    let ls_input = json!({"description": "look", "path": "/mnt/user-data/workspace"});
    let standin = anthropic_standin(vec![
        Answer::error(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
            &[("retry-after", "1")],
        ),
        Streamed {
            blocks: vec![
                thinking(THOUGHT, SIGNATURE),
                text("Let me look."),
                tool_use("toolu_01A09q90qw90lq917835lq9", "ls", ls_input.clone()),
            ],
            start_usage: json!({"input_tokens": 210, "cache_creation_input_tokens": 1800,
                "cache_read_input_tokens": 0, "output_tokens": 1}),
            output_tokens: 40,
            stop_reason: "tool_use",
        }
        .answer(),
        Streamed {
            blocks: vec![
                thinking(LATER_THOUGHT, "EqQBCgIYAhIMsecond"),
                text("The workspace is empty."),
            ],
            start_usage: json!({"input_tokens": 150, "cache_creation_input_tokens": 60,
                "cache_read_input_tokens": 1800, "output_tokens": 1}),
            output_tokens: 12,
            stop_reason: "end_turn",
        }
        .answer(),
    ]);
    let dir = tempfile::Builder::new()
        .prefix("antler-anth")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: claude\n    use: langchain_anthropic:ChatAnthropic\n    model: claude-sonnet-4-5\n    base_url: {}\n    api_key: {KEY}\n    max_tokens: 4096\n    supports_thinking: true\n    when_thinking_enabled:\n      thinking: {{type: enabled, budget_tokens: 2048}}\ntools:\n  - {{name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n",
            standin.base_url
        ),
    )
    .unwrap();
    let (view, stderr) = antler_run(d, &["List the workspace", "--model", "claude", "--trace"]);
    let seen = standin.seen();
    for request in &seen {
        assert!(
            request.problems.is_empty(),
            "{:?}\n{}",
            request.problems,
            request.body
        );
    }
    assert_eq!(view["status"], "success", "{view}\n{stderr}");

    // The answer is the last reply's text: no thinking, of either turn.
    assert_eq!(view["final_answer"], "The workspace is empty.");
    let shown = view.to_string();
    assert!(!shown.contains(LATER_THOUGHT) && !view["final_answer"].to_string().contains(THOUGHT));

    // The 429 was retried (after the `retry-after` it asked for) with the same request.
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[0].body, seen[1].body);
    let finished: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|e| e["event"].clone())
        .filter(|e| e["event"] == "model_finished")
        .collect();
    let reasons: Vec<&Value> = finished.iter().map(|e| &e["finish_reason"]).collect();
    assert_eq!(reasons, [&json!("tool_calls"), &json!("stop")], "{stderr}");

    // The usage is what the stand-in reported, cache reads and writes counted as input.
    assert_eq!(
        view["token_usage"]["input_tokens"],
        210 + 1800 + 150 + 60 + 1800
    );
    assert_eq!(view["token_usage"]["output_tokens"], 40 + 12);
    assert_eq!(
        view["token_usage"]["total_tokens"],
        210 + 1800 + 150 + 60 + 1800 + 52
    );

    // Both turns asked for thinking with its budget.
    let (first, second) = (&seen[1].body, &seen[2].body);
    for body in [first, second] {
        assert_eq!(
            body["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        assert_eq!(body["max_tokens"], 4096);
        assert_eq!(body["stream"], true);
    }
    assert_eq!(seen[2].headers["x-api-key"], KEY);

    // The second turn carries the same cached prefix as the first: the tools and the
    // system prompt, each ending in a cache breakpoint.
    let ephemeral = json!({"type": "ephemeral"});
    let tools = first["tools"].as_array().unwrap();
    assert_eq!(tools.last().unwrap()["cache_control"], ephemeral);
    let system = first["system"].as_array().unwrap();
    assert_eq!(system.last().unwrap()["cache_control"], ephemeral);
    assert!(system[0]["text"]
        .as_str()
        .unwrap()
        .starts_with("<role>\nYou are Antler"));
    assert_eq!(first["tools"], second["tools"]);
    assert_eq!(first["system"], second["system"]);

    // The tool turn goes back as the API requires: the thinking block with its
    // signature first, then the text and the tool_use; then the tool_result.
    let turns = second["messages"].as_array().unwrap();
    assert_eq!(turns.len(), 3, "{second}");
    let assistant = turns[1]["content"].as_array().unwrap();
    assert_eq!(assistant[0], thinking(THOUGHT, SIGNATURE));
    assert_eq!(assistant[1]["text"], "Let me look.");
    assert_eq!(assistant[2]["type"], "tool_use");
    assert_eq!(assistant[2]["id"], "toolu_01A09q90qw90lq917835lq9");
    assert_eq!(assistant[2]["input"], ls_input);
    let result = &turns[2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "toolu_01A09q90qw90lq917835lq9");
}

/// Hears the retries of a call.
#[derive(Default)]
struct Retries(Mutex<Vec<RetryNotice>>);

impl ModelObserver for Retries {
    fn retry(&self, notice: &RetryNotice) {
        self.0.lock().unwrap().push(notice.clone());
    }
}

fn standin_model(standin: &Standin, extra: &str) -> Arc<dyn ChatModel> {
    model_from_entry(
        &entry(&format!(
            "name: claude\nuse: deerflow.models.claude_provider:ClaudeChatModel\nmodel: claude-sonnet-4-5\nbase_url: {}/v1\napi_key: {KEY}\nmax_retries: 2\n{extra}",
            standin.base_url
        )),
        &no_env,
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_stop_reason_reaches_the_reply_in_openai_words_after_a_retried_429() {
    let cases = [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
        ("tool_use", "tool_calls"),
    ];
    let mut answers = vec![Answer::error(
        429,
        "rate_limit_error",
        "rate limited",
        &[("retry-after", "1")],
    )];
    for (stop_reason, _) in cases {
        let blocks = if stop_reason == "tool_use" {
            vec![tool_use("toolu_1", "get_weather", json!({"city": "Paris"}))]
        } else {
            vec![text(&format!("Stopped by {stop_reason}."))]
        };
        answers.push(
            Streamed {
                blocks,
                start_usage: json!({"input_tokens": 20, "output_tokens": 1}),
                output_tokens: 5,
                stop_reason,
            }
            .answer(),
        );
    }
    let standin = anthropic_standin(answers);
    let model = standin_model(&standin, "");
    let tool = weather_tool();
    let tools = [&tool];
    let messages = [Message::human("Weather in Paris?")];
    let retries = Retries::default();
    for (n, (stop_reason, finish)) in cases.iter().enumerate() {
        let mut request = ModelRequest::new(&messages, &tools, &[]);
        request.observer = Some(&retries);
        let reply = model.complete(request).await.unwrap();
        assert_eq!(
            reply.finish_reason.as_deref(),
            Some(*finish),
            "{stop_reason}"
        );
        if *stop_reason == "tool_use" {
            assert_eq!(reply.tool_calls[0].args, json!({"city": "Paris"}));
        } else {
            assert_eq!(reply.content, format!("Stopped by {stop_reason}."));
        }
        if n == 0 {
            // The first call met the 429 and waited what `retry-after` asked.
            let heard = retries.0.lock().unwrap().clone();
            assert_eq!(heard.len(), 1, "{heard:?}");
            assert_eq!(heard[0].wait, Duration::from_secs(1));
            assert!(heard[0].reason.contains("HTTP 429"), "{heard:?}");
        }
    }
    let seen = standin.seen();
    assert_eq!(seen.len(), cases.len() + 1);
    for request in &seen {
        assert!(request.problems.is_empty(), "{:?}", request.problems);
    }
    // A base_url that ends in /v1 posts to /v1/messages, not /v1/v1/messages (the
    // stand-in checks the path); ClaudeChatModel's entries cache the tools.
    assert_eq!(
        seen[0].body["tools"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_is_retried_and_bad_tool_json_or_an_error_event_is_never_a_call() {
    let whole = Streamed {
        blocks: vec![text("Hello there!")],
        start_usage: json!({"input_tokens": 11, "output_tokens": 1}),
        output_tokens: 6,
        stop_reason: "end_turn",
    };
    let mut cut = whole.events();
    cut.truncate(5);
    let bad_json = vec![
        json!({"type": "message_start", "message": {"id": "msg_2", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 30, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block":
            {"type": "tool_use", "id": "toolu_cut", "name": "get_weather", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta":
            {"type": "input_json_delta", "partial_json": "{\"city\": \"Par"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": null},
            "usage": {"output_tokens": 64}}),
        json!({"type": "message_stop"}),
    ];
    let overloaded = vec![
        json!({"type": "message_start", "message": {"id": "msg_3", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 30, "output_tokens": 1}}}),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ];
    let standin = anthropic_standin(vec![
        Answer::cut(&cut),
        whole.answer(),
        Answer::stream(&bad_json),
        Answer::stream(&overloaded),
    ]);
    let model = standin_model(&standin, "");
    let tool = weather_tool();
    let tools = [&tool];
    let messages = [Message::human("Hi")];

    // The stream closed before `message_stop`: tried again, and the whole reply wins.
    let retries = Retries::default();
    let mut request = ModelRequest::new(&messages, &tools, &[]);
    request.observer = Some(&retries);
    let reply = model.complete(request).await.unwrap();
    assert_eq!(reply.content, "Hello there!");
    assert_eq!(retries.0.lock().unwrap().len(), 1);

    // Tool JSON cut at max_tokens: an invalid call, not a call.
    let reply = model
        .complete(ModelRequest::new(&messages, &tools, &[]))
        .await
        .unwrap();
    assert!(reply.tool_calls.is_empty(), "{reply:?}");
    assert_eq!(reply.invalid_calls.len(), 1);
    assert_eq!(reply.invalid_calls[0].id, "toolu_cut");
    assert_eq!(reply.invalid_calls[0].arguments, "{\"city\": \"Par");
    assert_eq!(reply.finish_reason.as_deref(), Some("length"));

    // An error event mid-stream fails the call with the server's words, as the HTTP status
    // it stands for (529: the run's model retries it as it would a 529 before the stream).
    let error = model
        .complete(ModelRequest::new(&messages, &tools, &[]))
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "model `claude`: HTTP 529 after 1 attempt(s): the server sent an error event (overloaded_error): Overloaded"
    );
    let seen = standin.seen();
    assert_eq!(seen.len(), 4);
    for request in &seen {
        assert!(request.problems.is_empty(), "{:?}", request.problems);
    }
}

#[test]
fn the_standin_refuses_what_the_api_refuses() {
    let headers: BTreeMap<String, String> = [
        ("x-api-key", KEY),
        ("anthropic-version", "2023-06-01"),
        ("content-type", "application/json"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let marked =
        |t: &str| json!({"type": "text", "text": t, "cache_control": {"type": "ephemeral"}});
    let good = json!({
        "model": "claude-sonnet-4-5", "max_tokens": 4096, "stream": true,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "system": [marked("You are Antler.")],
        "tools": [{"name": "ls", "description": "List.", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "List."},
            {"role": "assistant", "content": [thinking("t", "s"), tool_use("toolu_1", "ls", json!({}))]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "empty"}]},
        ],
    });
    assert_eq!(
        check_request("POST /v1/messages HTTP/1.1", &headers, &good),
        Vec::<String>::new()
    );
    let problems_of = |edit: &dyn Fn(&mut Value)| {
        let mut body = good.clone();
        edit(&mut body);
        check_request("POST /v1/messages HTTP/1.1", &headers, &body)
    };
    // The thinking block left out of the tool turn.
    let missing = problems_of(&|b| {
        b["messages"][1]["content"]
            .as_array_mut()
            .unwrap()
            .remove(0);
    });
    assert!(missing[0].starts_with("Expected `thinking`"), "{missing:?}");
    // A text before the tool result, and an unanswered call.
    let late = problems_of(&|b| {
        b["messages"][2]["content"]
            .as_array_mut()
            .unwrap()
            .insert(0, text("Here:"));
    });
    assert_eq!(
        late,
        ["messages.2.content.1: tool_result blocks must come first"]
    );
    let unanswered = problems_of(&|b| b["messages"][2]["content"] = json!("ok"));
    assert!(
        unanswered[0].contains("without tool_result"),
        "{unanswered:?}"
    );
    // Five breakpoints; a budget not below max_tokens; two user turns in a row.
    let five = problems_of(&|b| {
        b["system"] = json!([
            marked("a"),
            marked("b"),
            marked("c"),
            marked("d"),
            marked("e")
        ]);
    });
    assert_eq!(
        five,
        ["A maximum of 4 blocks with cache_control may be provided. Found 5."]
    );
    let budget = problems_of(&|b| b["thinking"]["budget_tokens"] = json!(4096));
    assert_eq!(budget.len(), 1, "{budget:?}");
    let twice = problems_of(&|b| {
        b["messages"][1] = json!({"role": "user", "content": "again"});
    });
    assert!(twice[0].contains("roles must alternate"), "{twice:?}");
    // No key, or the wrong route.
    assert_eq!(
        check_request("POST /v1/v1/messages HTTP/1.1", &BTreeMap::new(), &good).len(),
        4
    );
}

/// The blocks of a request's messages whose type is `kind`, with the role of their turn.
fn blocks_of(body: &Value, kind: &str) -> Vec<(String, Value)> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| {
            let role = m["role"].as_str().unwrap().to_owned();
            m["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| b["type"] == kind)
                .map(move |b| (role.clone(), b.clone()))
        })
        .collect()
}

#[test]
fn antler_run_shows_a_vision_model_the_viewed_image_as_a_base64_image_block() {
    let standin = anthropic_standin(vec![
        Streamed {
            blocks: vec![tool_use(
                "toolu_view",
                "view_image",
                json!({"image_path": VIEWED_PNG_PATH}),
            )],
            start_usage: json!({"input_tokens": 300, "output_tokens": 1}),
            output_tokens: 20,
            stop_reason: "tool_use",
        }
        .answer(),
        Streamed {
            blocks: vec![text("A chart of rising sales.")],
            start_usage: json!({"input_tokens": 400, "output_tokens": 1}),
            output_tokens: 8,
            stop_reason: "end_turn",
        }
        .answer(),
    ]);
    let dir = tempfile::Builder::new()
        .prefix("antler-anth-img")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    put_viewed_png(d);
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: claude\n    use: langchain_anthropic:ChatAnthropic\n    model: claude-sonnet-4-5\n    base_url: {}\n    api_key: {KEY}\n    supports_vision: true\ntools:\n  - {{name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n",
            standin.base_url
        ),
    )
    .unwrap();
    let (view, stderr) = antler_run(
        d,
        &["Describe the chart", "--model", "claude", "--thread", "t1"],
    );
    let seen = standin.seen();
    for request in &seen {
        assert!(
            request.problems.is_empty(),
            "{:?}\n{}",
            request.problems,
            request.body
        );
    }
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    assert_eq!(view["final_answer"], "A chart of rising sales.");
    assert_eq!(seen.len(), 2, "{seen:?}");
    let (first, second) = (&seen[0].body, &seen[1].body);
    assert!(first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "view_image"));
    assert!(blocks_of(first, "image").is_empty());

    // After the call, the image goes to the model as the API documents it: a base64
    // source with its media type and the file's exact bytes, in the user turn that also
    // answers the call (tool_result first). (Being the request's last block, it may carry
    // the conversation's cache breakpoint: the stand-in checks that one.)
    let images = blocks_of(second, "image");
    assert_eq!(images.len(), 1, "{second}");
    assert_eq!(images[0].0, "user");
    assert_eq!(
        images[0].1["source"],
        json!({"type": "base64", "media_type": "image/png", "data": VIEWED_PNG_BASE64})
    );
    let last = second["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "user");
    let blocks = last["content"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "tool_result");
    assert_eq!(blocks[0]["tool_use_id"], "toolu_view");
    assert_eq!(blocks.last().unwrap()["type"], "image");
    assert!(!second.to_string().contains("/users/default/threads"));
}

#[test]
fn antler_run_falls_back_to_the_next_model_when_anthropic_answers_500() {
    let primary = anthropic_standin(vec![Answer::error(
        500,
        "api_error",
        "Internal server error",
        &[],
    )]);
    let backup = anthropic_standin(vec![Streamed {
        blocks: vec![text("Answered by the fallback.")],
        start_usage: json!({"input_tokens": 120, "output_tokens": 1}),
        output_tokens: 6,
        stop_reason: "end_turn",
    }
    .answer()]);
    let dir = tempfile::Builder::new()
        .prefix("antler-anth-fb")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    // No retries, by the client or by `llm_call`: the first failure is final.
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: primary\n    use: langchain_anthropic:ChatAnthropic\n    model: claude-sonnet-4-5\n    base_url: {}\n    api_key: {KEY}\n    max_retries: 0\n    fallback: [backup]\n  - name: backup\n    use: langchain_anthropic:ChatAnthropic\n    model: claude-haiku-4-5\n    base_url: {}\n    api_key: {KEY}\nllm_call:\n  retry_max_attempts: 1\n",
            primary.base_url, backup.base_url
        ),
    )
    .unwrap();
    let (view, stderr) = antler_run(d, &["Say hello", "--model", "primary", "--trace"]);
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    assert_eq!(view["final_answer"], "Answered by the fallback.");
    let (asked, answered) = (primary.seen(), backup.seen());
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(answered.len(), 1, "{answered:?}");
    for request in asked.iter().chain(&answered) {
        assert!(request.problems.is_empty(), "{:?}", request.problems);
    }
    assert_eq!(answered[0].body["model"], "claude-haiku-4-5");

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
