//! The native Gemini client against a real Gemini endpoint and a stand-in. The real one
//! is the LiteLLM proxy in front of llama.cpp with SmolLM2 (`peers::litellm()`): text,
//! streaming, tools in mode AUTO not streamed, and a `functionResponse` turn. The
//! `gemini_standin` is this file's own server: it checks every request against the
//! documented `generateContent` shape (roles, parts, function responses answering the
//! calls before them, the schema subset, the key in `x-goog-api-key` and never in the
//! URL) and answers payloads shaped as the Gemini API documents them (thought parts,
//! thought signatures, `usageMetadata`, finish reasons, a 429 with `Retry-After`); it
//! drives a whole tool loop through `antler run`, an image shown to a vision model as an
//! `inlineData` part, and a `fallback:` model answering for one that fails with a 500.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_engine::{
    catalog::ToolSpec, model_from_entry, ChatModel, Message, ModelObserver, ModelRequest,
    RetryNotice, ToolCall, ToolStatus,
};
use antler_protocol::config::ModelConfig;
use serde_json::{json, Value};

use crate::model_support::{
    antler_run, peers, put_viewed_png, trace_events, VIEWED_PNG_BASE64, VIEWED_PNG_PATH,
};

const KEY: &str = "gm-standin-key-0123";

fn weather_tool() -> ToolSpec {
    ToolSpec::builtin(
        "get_weather",
        "Get the current weather in a city.",
        json!({"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
               "required": ["city"], "additionalProperties": false}),
    )
}

fn entry(yaml: &str) -> ModelConfig {
    serde_yaml::from_str(yaml).unwrap()
}

// ---------------------------------------------------------------------------------------
// The real endpoint: LiteLLM's Gemini routes in front of SmolLM2.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_gemini_endpoint_answers_text_streams_and_takes_a_function_response() {
    let root = tokio::task::spawn_blocking(|| peers::litellm().root.clone())
        .await
        .unwrap();
    let model = model_from_entry(
        &entry(&format!(
            "name: gem\nuse: langchain_google_genai:ChatGoogleGenerativeAI\nmodel: {}\nbase_url: {root}\n\
             gemini_api_key: {}\ntemperature: 0\nmax_tokens: 24\ndisable_streaming: tool_calling\n",
            peers::ALIAS,
            peers::LITELLM_KEY
        )),
        &|_| None,
    )
    .unwrap();

    // Text, streamed over SSE (no tools): the deltas reach the observer as they come.
    let deltas = Deltas::default();
    let messages = vec![
        Message::System {
            content: "You are a helpful assistant.".to_owned(),
        },
        Message::human("Say hello."),
    ];
    let mut request = ModelRequest::new(&messages, &[], &[]);
    request.observer = Some(&deltas);
    let text = model.complete(request).await.unwrap();
    assert_eq!(text.id, "ai-1");
    assert!(!text.content.trim().is_empty(), "{text:?}");
    assert!(deltas.0.lock().unwrap().len() > 1, "streamed in pieces");
    assert_eq!(deltas.0.lock().unwrap().concat(), text.content);
    let usage = text.usage.expect("usageMetadata");
    assert!(
        usage.input_tokens > 0 && usage.output_tokens > 0,
        "{usage:?}"
    );
    assert_eq!(usage.total_tokens, usage.input_tokens + usage.output_tokens);
    assert!(
        matches!(text.finish_reason.as_deref(), Some("stop" | "length")),
        "{text:?}"
    );

    // Tools in mode AUTO, not streamed: SmolLM2 may call the function or answer in text;
    // either way the reply is whole, and a call has an id and an object for arguments.
    let tool = weather_tool();
    let tools = [&tool];
    let question = vec![Message::human("What is the weather in Paris?")];
    let auto = model
        .complete(ModelRequest::new(&question, &tools, &[]))
        .await
        .unwrap();
    for call in &auto.tool_calls {
        assert_eq!(call.name, "get_weather", "{auto:?}");
        assert!(call.args.is_object(), "{auto:?}");
        assert_eq!(call.id, "call-1-1");
        assert_eq!(auto.finish_reason.as_deref(), Some("tool_calls"));
    }
    if auto.tool_calls.is_empty() {
        assert!(!auto.content.trim().is_empty(), "{auto:?}");
    }

    // A functionResponse turn: the call and its result go back, and the model answers.
    // (An assistant turn holding only a call fails on llama-cpp-python, so it has text.)
    let conversation = vec![
        Message::human("What is the weather in Paris?"),
        Message::Ai {
            id: "ai-1".to_owned(),
            content: "Let me check.".to_owned(),
            tool_calls: vec![ToolCall {
                id: "call-1-1".to_owned(),
                name: "get_weather".to_owned(),
                args: json!({"city": "Paris"}),
            }],
            reasoning: None,
        },
        Message::tool(
            "call-1-1",
            "get_weather",
            "Sunny, 21 °C",
            ToolStatus::Success,
        ),
    ];
    let after = model
        .complete(ModelRequest::new(&conversation, &tools, &[]))
        .await
        .unwrap();
    assert_eq!(after.id, "ai-2");
    assert!(
        !after.content.trim().is_empty() || !after.tool_calls.is_empty(),
        "{after:?}"
    );
}

#[derive(Default)]
struct Deltas(Mutex<Vec<String>>);

impl ModelObserver for Deltas {
    fn text_delta(&self, text: &str) {
        self.0.lock().unwrap().push(text.to_owned());
    }
}

// ---------------------------------------------------------------------------------------
// gemini_standin: a stand-in for the Gemini API.

/// One scripted answer: a reply (its `GenerateContentResponse` chunks: streamed as SSE
/// on `:streamGenerateContent`, merged into one body on `:generateContent`), or an HTTP
/// error with headers.
#[derive(Clone)]
enum Answer {
    Reply(Vec<Value>),
    Error {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Value,
    },
}

/// One request the stand-in received.
#[derive(Clone, Debug)]
struct Received {
    path: String,
    headers: HashMap<String, String>,
    body: Value,
}

struct GeminiStandin {
    root: String,
    received: Arc<Mutex<Vec<Received>>>,
    /// What was wrong with the requests (each answered 400, as Gemini would).
    violations: Arc<Mutex<Vec<String>>>,
}

impl GeminiStandin {
    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    fn assert_no_violations(&self) {
        let violations = self.violations.lock().unwrap().clone();
        assert!(
            violations.is_empty(),
            "requests off the documented shape: {violations:#?}"
        );
    }
}

/// Starts the stand-in on a free loopback port (a thread of the test process, ending
/// with it). Answers are given in order; the last one repeats.
fn gemini_standin(answers: Vec<Answer>) -> GeminiStandin {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let root = format!("http://{}", listener.local_addr().unwrap());
    let received = Arc::new(Mutex::new(Vec::new()));
    let violations = Arc::new(Mutex::new(Vec::new()));
    let (seen, wrong) = (received.clone(), violations.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let Some((path, headers, body)) = read_request(&mut stream) else {
                continue;
            };
            let request = Received {
                path: path.clone(),
                headers,
                body,
            };
            let problems = check_request(&request);
            let index = {
                let mut seen = seen.lock().unwrap();
                seen.push(request.clone());
                seen.len() - 1
            };
            if !problems.is_empty() {
                wrong.lock().unwrap().extend(problems.iter().cloned());
                let body = json!({"error": {"code": 400, "message": problems.join("; "), "status": "INVALID_ARGUMENT"}});
                write_response(&mut stream, 400, "application/json", &[], &body.to_string());
                continue;
            }
            let answer = answers.get(index).or(answers.last()).cloned().unwrap();
            match answer {
                Answer::Error {
                    status,
                    headers,
                    body,
                } => write_response(
                    &mut stream,
                    status,
                    "application/json",
                    &headers,
                    &body.to_string(),
                ),
                Answer::Reply(chunks) if path.contains(":streamGenerateContent") => {
                    let sse: String = chunks
                        .iter()
                        .map(|c| format!("data: {c}\r\n\r\n"))
                        .collect();
                    write_response(&mut stream, 200, "text/event-stream", &[], &sse);
                }
                Answer::Reply(chunks) => {
                    let whole = merge(&chunks);
                    write_response(
                        &mut stream,
                        200,
                        "application/json",
                        &[],
                        &whole.to_string(),
                    );
                }
            }
        }
    });
    GeminiStandin {
        root,
        received,
        violations,
    }
}

/// Streamed chunks as one whole reply: the parts in order, the last finish reason and
/// usage.
fn merge(chunks: &[Value]) -> Value {
    let mut parts = Vec::new();
    let mut finish = Value::Null;
    let mut usage = Value::Null;
    for chunk in chunks {
        if let Some(candidate) = chunk["candidates"].get(0) {
            if let Some(more) = candidate["content"]["parts"].as_array() {
                parts.extend(more.iter().cloned());
            }
            if !candidate["finishReason"].is_null() {
                finish = candidate["finishReason"].clone();
            }
        }
        if !chunk["usageMetadata"].is_null() {
            usage = chunk["usageMetadata"].clone();
        }
    }
    json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
           "usageMetadata": usage, "modelVersion": "gemini-2.5-flash"})
}

fn read_request(
    stream: &mut std::net::TcpStream,
) -> Option<(String, HashMap<String, String>, Value)> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut first = String::new();
    reader.read_line(&mut first).ok()?;
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    let mut words = first.split_whitespace();
    let method = words.next()?;
    let path = words.next()?.to_owned();
    headers.insert(":method".to_owned(), method.to_owned());
    Some((
        path,
        headers,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    ))
}

fn write_response(
    stream: &mut std::net::TcpStream,
    status: u16,
    content_type: &str,
    headers: &[(&'static str, String)],
    body: &str,
) {
    let mut head = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let _ = write!(stream, "{head}\r\n{body}");
}

/// The documented `generateContent` request, checked: what is wrong, if anything.
fn check_request(request: &Received) -> Vec<String> {
    let mut problems = Vec::new();
    let mut bad = |p: String| problems.push(p);
    if request.headers.get(":method").map(String::as_str) != Some("POST") {
        bad("not a POST".to_owned());
    }
    let path = &request.path;
    let routed = path.starts_with("/v1beta/models/")
        && (path.ends_with(":streamGenerateContent?alt=sse") || path.ends_with(":generateContent"));
    if !routed {
        bad(format!("unknown route {path}"));
    }
    if path.contains("key=") {
        bad("the API key is in the URL".to_owned());
    }
    if request.headers.get("x-goog-api-key").map(String::as_str) != Some(KEY) {
        bad("no x-goog-api-key header with the key".to_owned());
    }
    let body = &request.body;
    let allowed_top = [
        "contents",
        "systemInstruction",
        "tools",
        "toolConfig",
        "generationConfig",
        "safetySettings",
        "cachedContent",
    ];
    for key in body.as_object().map(|o| o.keys()).into_iter().flatten() {
        if !allowed_top.contains(&key.as_str()) {
            bad(format!("unknown request field {key}"));
        }
    }
    if let Some(system) = body.get("systemInstruction") {
        let texts = system["parts"]
            .as_array()
            .is_some_and(|p| !p.is_empty() && p.iter().all(|p| p["text"].is_string()));
        if !texts {
            bad(format!("systemInstruction is not text parts: {system}"));
        }
    }
    let Some(contents) = body["contents"].as_array().filter(|c| !c.is_empty()) else {
        bad("no contents".to_owned());
        return problems;
    };
    let mut previous_calls: Vec<String> = Vec::new();
    for (i, content) in contents.iter().enumerate() {
        let role = content["role"].as_str().unwrap_or("");
        if role != "user" && role != "model" {
            bad(format!("contents[{i}] has role {role:?}"));
        }
        let Some(parts) = content["parts"].as_array().filter(|p| !p.is_empty()) else {
            bad(format!("contents[{i}] has no parts"));
            continue;
        };
        let mut calls = Vec::new();
        let mut responses = Vec::new();
        for part in parts {
            let data: Vec<&str> = ["text", "inlineData", "functionCall", "functionResponse"]
                .into_iter()
                .filter(|k| part.get(*k).is_some())
                .collect();
            if data.len() != 1 {
                bad(format!("contents[{i}] part {part} has {data:?}"));
            }
            for key in part.as_object().unwrap().keys() {
                if ![
                    "text",
                    "inlineData",
                    "functionCall",
                    "functionResponse",
                    "thought",
                    "thoughtSignature",
                ]
                .contains(&key.as_str())
                {
                    bad(format!("contents[{i}] part has unknown field {key}"));
                }
            }
            if let Some(call) = part.get("functionCall") {
                if role != "model" || !call["name"].is_string() || !call["args"].is_object() {
                    bad(format!("contents[{i}] bad functionCall {call}"));
                }
                calls.push(call["name"].as_str().unwrap_or("").to_owned());
            }
            if let Some(response) = part.get("functionResponse") {
                if role != "user"
                    || !response["name"].is_string()
                    || !response["response"].is_object()
                {
                    bad(format!("contents[{i}] bad functionResponse {response}"));
                }
                responses.push(response["name"].as_str().unwrap_or("").to_owned());
            }
            if let Some(data) = part.get("inlineData") {
                if !data["mimeType"].is_string() || !data["data"].is_string() {
                    bad(format!("contents[{i}] bad inlineData"));
                }
            }
        }
        // Function responses answer the calls of the model turn just before, one each.
        if !responses.is_empty() && responses != previous_calls {
            bad(format!(
                "contents[{i}] answers {responses:?} but the turn before called {previous_calls:?}"
            ));
        }
        previous_calls = calls;
    }
    for tool in body["tools"].as_array().into_iter().flatten() {
        for declaration in tool["functionDeclarations"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if !declaration["name"].is_string() {
                bad(format!("a declaration without a name: {declaration}"));
            }
            if let Some(parameters) = declaration.get("parameters") {
                check_schema(parameters, &mut bad);
            }
        }
    }
    if let Some(config) = body.get("generationConfig") {
        let known = [
            "temperature",
            "topP",
            "topK",
            "maxOutputTokens",
            "stopSequences",
            "seed",
            "presencePenalty",
            "frequencyPenalty",
            "thinkingConfig",
            "candidateCount",
        ];
        for key in config.as_object().map(|o| o.keys()).into_iter().flatten() {
            if !known.contains(&key.as_str()) {
                bad(format!("unknown generationConfig field {key}"));
            }
        }
    }
    problems
}

/// Gemini's `Schema`: only its fields, types from its enum.
fn check_schema(schema: &Value, bad: &mut impl FnMut(String)) {
    const FIELDS: &[&str] = &[
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "maxItems",
        "minItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "anyOf",
        "items",
        "minimum",
        "maximum",
        "propertyOrdering",
    ];
    const TYPES: &[&str] = &["STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT"];
    let Some(object) = schema.as_object() else {
        bad(format!("a schema that is not an object: {schema}"));
        return;
    };
    for (key, value) in object {
        if !FIELDS.contains(&key.as_str()) {
            bad(format!("schema field {key} is not Gemini's"));
        }
        match key.as_str() {
            "type" if !value.as_str().is_some_and(|t| TYPES.contains(&t)) => {
                bad(format!("schema type {value}"))
            }
            "enum"
                if !value
                    .as_array()
                    .is_some_and(|v| v.iter().all(Value::is_string)) =>
            {
                bad(format!("enum values not strings: {value}"))
            }
            "properties" => {
                for property in value.as_object().into_iter().flat_map(|p| p.values()) {
                    check_schema(property, bad);
                }
            }
            "items" => check_schema(value, bad),
            "anyOf" => {
                for member in value.as_array().into_iter().flatten() {
                    check_schema(member, bad);
                }
            }
            _ => {}
        }
    }
}

fn standin_model(root: &str, extra: &str) -> std::sync::Arc<dyn ChatModel> {
    model_from_entry(
        &entry(&format!(
            "name: gem\nuse: langchain_google_genai:ChatGoogleGenerativeAI\nmodel: gemini-2.5-flash\n\
             base_url: {root}\napi_key: {KEY}\n{extra}"
        )),
        &|_| None,
    )
    .unwrap()
}

/// The documented reply of a thinking model calling `ls`: a thought, then the call with
/// its thought signature, then `STOP` with the usage.
fn ls_call_reply() -> Answer {
    Answer::Reply(vec![
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "I should list the workspace first.", "thought": true}]}, "index": 0}],
               "usageMetadata": {"promptTokenCount": 1200, "totalTokenCount": 1200}, "modelVersion": "gemini-2.5-flash", "responseId": "r1"}),
        json!({"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {"description": "look", "path": "/mnt/user-data/workspace"}}, "thoughtSignature": "c2lnLWxzLWNhbGw="}]}, "finishReason": "STOP", "index": 0}],
               "usageMetadata": {"promptTokenCount": 1200, "candidatesTokenCount": 18, "thoughtsTokenCount": 12, "totalTokenCount": 1230}, "modelVersion": "gemini-2.5-flash", "responseId": "r1"}),
    ])
}

/// The final answer, streamed in two pieces, its signature on an empty last part.
fn answer_reply() -> Answer {
    Answer::Reply(vec![
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "The workspace "}]}, "index": 0}],
               "usageMetadata": {"promptTokenCount": 1300, "totalTokenCount": 1300}, "modelVersion": "gemini-2.5-flash"}),
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "is empty."}]}, "index": 0}]}),
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "", "thoughtSignature": "c2lnLWFuc3dlcg=="}]}, "finishReason": "STOP", "index": 0}],
               "usageMetadata": {"promptTokenCount": 1300, "candidatesTokenCount": 12, "cachedContentTokenCount": 1024, "totalTokenCount": 1312}, "modelVersion": "gemini-2.5-flash"}),
    ])
}

fn rate_limited() -> Answer {
    Answer::Error {
        status: 429,
        headers: vec![("Retry-After", "1".to_owned())],
        body: json!({"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED"}}),
    }
}

#[test]
fn a_tool_loop_through_antler_run_sends_the_thought_signature_back_and_totals_the_usage() {
    let standin = gemini_standin(vec![rate_limited(), ls_call_reply(), answer_reply()]);
    let dir = tempfile::Builder::new()
        .prefix("antler-gem")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: gem\n    use: langchain_google_genai:ChatGoogleGenerativeAI\n    model: gemini-2.5-flash\n    \
             base_url: {}\n    gemini_api_key: {KEY}\n    supports_thinking: true\n    max_tokens: 2048\n\
             tools:\n  - {{name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}}\n\
             sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n",
            standin.root
        ),
    )
    .unwrap();
    let (view, stderr) = antler_run(d, &["List the workspace", "--model", "gem", "--trace"]);
    standin.assert_no_violations();
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    assert_eq!(view["final_answer"], "The workspace is empty.");
    // The totals are the sums of what the server reported (the 429 reported nothing).
    assert_eq!(view["token_usage"]["input_tokens"], 2500, "{view}");
    assert_eq!(view["token_usage"]["output_tokens"], 42, "{view}");
    assert_eq!(view["token_usage"]["total_tokens"], 2542, "{view}");

    let received = standin.received();
    assert_eq!(received.len(), 3, "the 429 was retried once: {received:#?}");
    for request in &received {
        assert_eq!(
            request.path,
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        let body = &request.body;
        assert!(body["systemInstruction"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("You are Antler"));
        assert_eq!(body["generationConfig"]["maxOutputTokens"], 2048);
        assert_eq!(
            body["generationConfig"]["thinkingConfig"],
            json!({"includeThoughts": true})
        );
        let declarations = body["tools"][0]["functionDeclarations"].as_array().unwrap();
        assert!(declarations.iter().any(|d| d["name"] == "ls"), "{body}");
    }
    assert_eq!(
        received[0].body, received[1].body,
        "a retry sends the same request"
    );

    // The second model call: the call goes back on its part with its signature (no id:
    // Gemini gave none), the thought text does not, and the result answers it by name.
    let contents = received[2].body["contents"].as_array().unwrap().clone();
    let model_turn = contents
        .iter()
        .find(|c| c["role"] == "model")
        .expect("the model's turn is sent back");
    assert_eq!(
        model_turn["parts"],
        json!([{"functionCall": {"name": "ls", "args": {"description": "look", "path": "/mnt/user-data/workspace"}},
                "thoughtSignature": "c2lnLWxzLWNhbGw="}])
    );
    let last = contents.last().unwrap();
    assert_eq!(last["role"], "user");
    let response = &last["parts"][0]["functionResponse"];
    assert_eq!(response["name"], "ls", "{last}");
    assert!(response["response"]["output"].is_string(), "{last}");
    assert!(!received[2]
        .body
        .to_string()
        .contains("list the workspace first"));

    // The trace: each model call finished with its own reason and usage.
    let finished: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|e| e["event"].clone())
        .filter(|e| e["event"] == "model_finished")
        .collect();
    assert_eq!(finished.len(), 2, "{stderr}");
    assert_eq!(finished[0]["finish_reason"], "tool_calls");
    assert_eq!(finished[0]["usage"]["total_tokens"], 1230);
    assert_eq!(finished[1]["finish_reason"], "stop");
    assert!(!view["final_answer"]
        .as_str()
        .unwrap()
        .contains("list the workspace first"));
}

#[derive(Default)]
struct Retries(Mutex<Vec<RetryNotice>>);

impl ModelObserver for Retries {
    fn retry(&self, notice: &RetryNotice) {
        self.0.lock().unwrap().push(notice.clone());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_is_retried_after_its_retry_after_and_told_to_the_observer() {
    let standin = gemini_standin(vec![rate_limited(), answer_reply()]);
    let model = standin_model(&standin.root, "");
    let retries = Retries::default();
    let messages = [Message::human("hi")];
    let mut request = ModelRequest::new(&messages, &[], &[]);
    request.observer = Some(&retries);
    let reply = model.complete(request).await.unwrap();
    assert_eq!(reply.content, "The workspace is empty.");
    let notices = retries.0.lock().unwrap().clone();
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].attempt, 1);
    assert_eq!(notices[0].wait, Duration::from_secs(1));
    assert!(notices[0]
        .reason
        .starts_with("HTTP 429: Resource has been exhausted"));
    standin.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_reasons_blocked_prompts_and_malformed_calls_are_what_the_run_sees() {
    let reply = |parts: Value, finish: &str, extra: Value| {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0});
        if let Value::Object(more) = extra {
            candidate.as_object_mut().unwrap().extend(more);
        }
        Answer::Reply(vec![
            json!({"candidates": [candidate], "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 3, "totalTokenCount": 8}}),
        ])
    };
    let standin = gemini_standin(vec![
        reply(json!([{"text": "Once upon a"}]), "MAX_TOKENS", json!({})),
        reply(
            json!([]),
            "SAFETY",
            json!({"safetyRatings": [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true}]}),
        ),
        reply(
            json!([]),
            "MALFORMED_FUNCTION_CALL",
            json!({"finishMessage": "Malformed function call: print(default_api.get_weather(city='Paris'"}),
        ),
        Answer::Reply(vec![
            json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": {"promptTokenCount": 5, "totalTokenCount": 5}}),
        ]),
        Answer::Error {
            status: 400,
            headers: Vec::new(),
            body: json!({"error": {"code": 400, "message": format!("API key not valid: {KEY}"), "status": "INVALID_ARGUMENT"}}),
        },
    ]);
    let model = standin_model(&standin.root, "max_retries: 0\n");
    let tool = weather_tool();
    let tools = [&tool];
    let messages = [Message::human("Tell me a story.")];
    let ask = || model.complete(ModelRequest::new(&messages, &tools, &[]));

    let length = ask().await.unwrap();
    assert_eq!(length.finish_reason.as_deref(), Some("length"));
    assert_eq!(length.content, "Once upon a");
    let safety = ask().await.unwrap();
    assert_eq!(safety.finish_reason.as_deref(), Some("content_filter"));
    let malformed = ask().await.unwrap();
    assert_eq!(malformed.finish_reason.as_deref(), Some("tool_calls"));
    assert!(malformed.tool_calls.is_empty());
    assert_eq!(malformed.invalid_calls.len(), 1);
    assert_eq!(malformed.invalid_calls[0].name, "get_weather");
    assert!(malformed.invalid_calls[0]
        .error
        .contains("MALFORMED_FUNCTION_CALL"));
    let blocked = ask().await.unwrap_err().to_string();
    assert_eq!(
        blocked,
        "model `gem`: invalid reply: Gemini refused the prompt (promptFeedback.blockReason PROHIBITED_CONTENT); rephrase the request or remove the content it objects to"
    );
    let refused = ask().await.unwrap_err().to_string();
    assert!(refused.contains("HTTP 400"), "{refused}");
    assert!(!refused.contains(KEY), "the key is redacted: {refused}");
    standin.assert_no_violations();
}

/// A whole reply of `parts` that stopped, with its usage.
fn parts_reply(parts: Value, usage: (u64, u64)) -> Answer {
    Answer::Reply(vec![
        json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
               "usageMetadata": {"promptTokenCount": usage.0, "candidatesTokenCount": usage.1, "totalTokenCount": usage.0 + usage.1},
               "modelVersion": "gemini-2.5-flash"}),
    ])
}

/// The `inlineData` parts of a request's contents, with the role of their content.
fn inline_data(body: &Value) -> Vec<(String, Value)> {
    body["contents"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| {
            let role = c["role"].as_str().unwrap().to_owned();
            c["parts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p.get("inlineData").is_some())
                .map(move |p| (role.clone(), p.clone()))
        })
        .collect()
}

#[test]
fn antler_run_shows_a_vision_model_the_viewed_image_as_inline_data() {
    let standin = gemini_standin(vec![
        parts_reply(
            json!([{"functionCall": {"name": "view_image", "args": {"image_path": VIEWED_PNG_PATH}}}]),
            (300, 10),
        ),
        parts_reply(json!([{"text": "A chart of rising sales."}]), (400, 8)),
    ]);
    let dir = tempfile::Builder::new()
        .prefix("antler-gem-img")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    put_viewed_png(d);
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: gem\n    use: langchain_google_genai:ChatGoogleGenerativeAI\n    model: gemini-2.5-flash\n    \
             base_url: {}\n    gemini_api_key: {KEY}\n    supports_vision: true\n\
             tools:\n  - {{name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}}\n\
             sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n",
            standin.root
        ),
    )
    .unwrap();
    let (view, stderr) = antler_run(
        d,
        &["Describe the chart", "--model", "gem", "--thread", "t1"],
    );
    standin.assert_no_violations();
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    assert_eq!(view["final_answer"], "A chart of rising sales.");
    let received = standin.received();
    assert_eq!(received.len(), 2, "{received:#?}");
    let (first, second) = (&received[0].body, &received[1].body);
    let declarations = first["tools"][0]["functionDeclarations"]
        .as_array()
        .unwrap();
    assert!(declarations.iter().any(|d| d["name"] == "view_image"));
    assert!(inline_data(first).is_empty());

    // After the call, the image goes to the model as Gemini documents it: an
    // `inlineData` part with its MIME type and the file's exact bytes in base64, in a
    // user content after the function's response.
    assert_eq!(
        inline_data(second),
        [(
            "user".to_owned(),
            json!({"inlineData": {"mimeType": "image/png", "data": VIEWED_PNG_BASE64}})
        )]
    );
    let contents = second["contents"].as_array().unwrap();
    let answered = contents
        .iter()
        .position(|c| c["parts"][0].get("functionResponse").is_some())
        .expect("the call is answered");
    assert_eq!(
        contents[answered]["parts"][0]["functionResponse"]["name"],
        "view_image"
    );
    let shown = contents
        .iter()
        .position(|c| {
            c["parts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p.get("inlineData").is_some())
        })
        .unwrap();
    assert!(shown >= answered, "{second}");
    assert!(!second.to_string().contains("/users/default/threads"));
}

#[test]
fn antler_run_falls_back_to_the_next_model_when_gemini_answers_500() {
    let primary = gemini_standin(vec![Answer::Error {
        status: 500,
        headers: Vec::new(),
        body: json!({"error": {"code": 500, "message": "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting", "status": "INTERNAL"}}),
    }]);
    let backup = gemini_standin(vec![parts_reply(
        json!([{"text": "Answered by the fallback."}]),
        (120, 6),
    )]);
    let dir = tempfile::Builder::new()
        .prefix("antler-gem-fb")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    // No retries, by the client or by `llm_call`: the first failure is final.
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: primary\n    use: langchain_google_genai:ChatGoogleGenerativeAI\n    model: gemini-2.5-pro\n    \
             base_url: {}\n    gemini_api_key: {KEY}\n    max_retries: 0\n    fallback: [backup]\n  \
             - name: backup\n    use: langchain_google_genai:ChatGoogleGenerativeAI\n    model: gemini-2.5-flash\n    \
             base_url: {}\n    gemini_api_key: {KEY}\nllm_call:\n  retry_max_attempts: 1\n",
            primary.root, backup.root
        ),
    )
    .unwrap();
    let (view, stderr) = antler_run(d, &["Say hello", "--model", "primary", "--trace"]);
    primary.assert_no_violations();
    backup.assert_no_violations();
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    assert_eq!(view["final_answer"], "Answered by the fallback.");
    let (asked, answered) = (primary.received(), backup.received());
    assert_eq!(asked.len(), 1, "{asked:#?}");
    assert_eq!(answered.len(), 1, "{answered:#?}");
    assert!(asked[0].path.starts_with("/v1beta/models/gemini-2.5-pro:"));
    assert!(answered[0]
        .path
        .starts_with("/v1beta/models/gemini-2.5-flash:"));

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
