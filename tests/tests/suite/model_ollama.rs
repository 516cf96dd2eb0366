//! The native Ollama client against `ollama_standin`, this file's stand-in for Ollama's
//! `/api/chat` (nothing installable here serves Ollama's native API). The stand-in
//! replays the shapes of Ollama's API documentation (NDJSON streaming, `done` and
//! `done_reason`, usage counts, tool calls whose arguments are an object and which have
//! no id) and checks every request against the documented request shape. It is shown
//! faithful by the official `ollama` Python client (0.6.3), which must talk to it,
//! streaming and with tools; then a tool loop runs through `antler run` with the base URL
//! DeerFlow users write (`http://127.0.0.1:PORT`, no `/v1`), an image goes to a vision
//! model as base64 in a message's `images`, and a `fallback:` model answers for an Ollama
//! that is not running.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::model_support::{
    antler_run, put_viewed_png, trace_events, VIEWED_PNG_BASE64, VIEWED_PNG_PATH,
};

/// One scripted reply: the NDJSON lines of a streamed answer (the last is `done`); a
/// request with `stream: false` gets them merged into one response.
type Reply = Vec<Value>;

struct OllamaStandin {
    root: String,
    /// (path, body) of every request.
    received: Arc<Mutex<Vec<(String, Value)>>>,
    violations: Arc<Mutex<Vec<String>>>,
}

impl OllamaStandin {
    fn assert_no_violations(&self) {
        let violations = self.violations.lock().unwrap().clone();
        assert!(
            violations.is_empty(),
            "requests off the documented shape: {violations:#?}"
        );
    }
}

/// A streamed message chunk.
fn chunk(message: Value) -> Value {
    json!({"model": "qwen3:8b", "created_at": "2025-05-29T09:35:56.836222Z", "message": message, "done": false})
}

/// The last line of a reply, with the documented counts and durations.
fn done(reason: &str, prompt_eval_count: u64, eval_count: u64) -> Value {
    json!({"model": "qwen3:8b", "created_at": "2025-05-29T09:35:57.1Z",
           "message": {"role": "assistant", "content": ""},
           "done_reason": reason, "done": true,
           "total_duration": 4883583458u64, "load_duration": 1334875u64,
           "prompt_eval_count": prompt_eval_count, "prompt_eval_duration": 342546000u64,
           "eval_count": eval_count, "eval_duration": 4535599000u64})
}

/// A reply calling `name` with `arguments` (an object, no id), as Ollama streams it.
fn call_reply(name: &str, arguments: Value, usage: (u64, u64)) -> Reply {
    vec![
        chunk(json!({"role": "assistant", "content": "", "thinking": "I need to call a tool."})),
        chunk(
            json!({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": name, "arguments": arguments}}]}),
        ),
        done("stop", usage.0, usage.1),
    ]
}

/// A text reply streamed in pieces.
fn text_reply(pieces: &[&str], usage: (u64, u64)) -> Reply {
    let mut lines: Vec<Value> = pieces
        .iter()
        .map(|p| chunk(json!({"role": "assistant", "content": p})))
        .collect();
    lines.push(done("stop", usage.0, usage.1));
    lines
}

/// Lines merged into one non-streamed response.
fn merge(lines: &[Value]) -> Value {
    let mut content = String::new();
    let mut thinking = String::new();
    let mut calls = Vec::new();
    for line in lines {
        content.push_str(line["message"]["content"].as_str().unwrap_or(""));
        thinking.push_str(line["message"]["thinking"].as_str().unwrap_or(""));
        calls.extend(
            line["message"]["tool_calls"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        );
    }
    let mut whole = lines.last().cloned().unwrap();
    whole["message"] = json!({"role": "assistant", "content": content});
    if !thinking.is_empty() {
        whole["message"]["thinking"] = json!(thinking);
    }
    if !calls.is_empty() {
        whole["message"]["tool_calls"] = Value::Array(calls);
    }
    whole
}

/// Starts the stand-in on a free loopback port (a thread of the test process). Replies
/// are given in order; the last one repeats.
fn ollama_standin(replies: Vec<Reply>) -> OllamaStandin {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let root = format!("http://{}", listener.local_addr().unwrap());
    let received = Arc::new(Mutex::new(Vec::new()));
    let violations = Arc::new(Mutex::new(Vec::new()));
    let (seen, wrong) = (received.clone(), violations.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let Some((method, path, body)) = read_request(&mut stream) else {
                continue;
            };
            let mut problems = check_request(&method, &path, &body);
            let index = {
                let mut seen = seen.lock().unwrap();
                seen.push((path.clone(), body.clone()));
                seen.len() - 1
            };
            if path == "/api/chat" && problems.is_empty() {
                let model = body["model"].as_str().unwrap_or("");
                if model != "qwen3:8b" {
                    // Ollama's answer for a model it does not have.
                    let error = json!({"error": format!("model \"{model}\" not found, try pulling it first")});
                    write(&mut stream, 404, "application/json", &error.to_string());
                    continue;
                }
            }
            if !problems.is_empty() {
                let error = json!({"error": problems.join("; ")});
                wrong.lock().unwrap().append(&mut problems);
                write(&mut stream, 400, "application/json", &error.to_string());
                continue;
            }
            let reply = replies.get(index).or(replies.last()).cloned().unwrap();
            // `stream` defaults to true.
            if body["stream"].as_bool().unwrap_or(true) {
                let lines: String = reply.iter().map(|l| format!("{l}\n")).collect();
                write(&mut stream, 200, "application/x-ndjson", &lines);
            } else {
                write(
                    &mut stream,
                    200,
                    "application/json; charset=utf-8",
                    &merge(&reply).to_string(),
                );
            }
        }
    });
    OllamaStandin {
        root,
        received,
        violations,
    }
}

fn read_request(stream: &mut std::net::TcpStream) -> Option<(String, String, Value)> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut first = String::new();
    reader.read_line(&mut first).ok()?;
    let mut length = 0usize;
    let mut chunked = false;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 || line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim(), 16).ok()?;
            let mut part = vec![0u8; n + 2];
            reader.read_exact(&mut part).ok()?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&part[..n]);
        }
    } else {
        body = vec![0u8; length];
        reader.read_exact(&mut body).ok()?;
    }
    let mut words = first.split_whitespace();
    let method = words.next()?.to_owned();
    let path = words.next()?.to_owned();
    Some((
        method,
        path,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    ))
}

fn write(stream: &mut std::net::TcpStream, status: u16, content_type: &str, body: &str) {
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// The documented `/api/chat` request, checked: what is wrong, if anything.
fn check_request(method: &str, path: &str, body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let mut bad = |p: String| problems.push(p);
    if method != "POST" || path != "/api/chat" {
        bad(format!("{method} {path} is not Ollama's chat route"));
        return problems;
    }
    let known = [
        "model",
        "messages",
        "tools",
        "format",
        "options",
        "stream",
        "keep_alive",
        "think",
    ];
    for key in body.as_object().map(|o| o.keys()).into_iter().flatten() {
        if !known.contains(&key.as_str()) {
            bad(format!("unknown request field {key}"));
        }
    }
    if !body["model"].is_string() {
        bad("no model".to_owned());
    }
    if let Some(think) = body.get("think") {
        if !(think.is_boolean() || think.is_string()) {
            bad(format!("think is {think}"));
        }
    }
    if let Some(stream) = body.get("stream") {
        if !stream.is_boolean() {
            bad(format!("stream is {stream}"));
        }
    }
    if let Some(options) = body.get("options") {
        if !options.is_object() {
            bad(format!("options is {options}"));
        }
    }
    let Some(messages) = body["messages"].as_array() else {
        bad("no messages".to_owned());
        return problems;
    };
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or("");
        if !["system", "user", "assistant", "tool"].contains(&role) {
            bad(format!("messages[{i}] has role {role:?}"));
        }
        // `content` may be absent: the official client drops empty values.
        if message.get("content").is_some_and(|c| !c.is_string()) {
            bad(format!("messages[{i}] content is not a string"));
        }
        for key in message.as_object().unwrap().keys() {
            if ![
                "role",
                "content",
                "thinking",
                "images",
                "tool_calls",
                "tool_name",
            ]
            .contains(&key.as_str())
            {
                bad(format!("messages[{i}] has unknown field {key}"));
            }
        }
        if let Some(images) = message.get("images") {
            if !images
                .as_array()
                .is_some_and(|i| i.iter().all(Value::is_string))
            {
                bad(format!("messages[{i}] images are not base64 strings"));
            }
        }
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            let function = &call["function"];
            if role != "assistant"
                || !function["name"].is_string()
                || !function["arguments"].is_object()
            {
                bad(format!("messages[{i}] bad tool call {call}"));
            }
        }
        if role == "tool" && message["tool_name"].as_str().is_none_or(str::is_empty) {
            bad(format!("messages[{i}] is a tool result without tool_name"));
        }
    }
    for tool in body["tools"].as_array().into_iter().flatten() {
        if tool["type"] != "function"
            || !tool["function"]["name"].is_string()
            || !tool["function"]["parameters"].is_object()
        {
            bad(format!("bad tool {tool}"));
        }
    }
    problems
}

/// The official client, streaming with tools and then sending the tool's result back
/// without streaming, must succeed against the stand-in.
const OFFICIAL_CLIENT: &str = r#"
import sys, ollama
client = ollama.Client(host=sys.argv[1])
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
messages = [{"role": "user", "content": "What is the weather in Paris?"}]
calls, thinking, last = [], "", None
for part in client.chat(model="qwen3:8b", messages=messages, tools=tools, stream=True, think=True, options={"num_predict": 64}):
    calls += part.message.tool_calls or []
    thinking += part.message.thinking or ""
    last = part
assert len(calls) == 1 and calls[0].function.name == "get_weather", calls
assert calls[0].function.arguments == {"city": "Paris"}, calls
assert thinking == "I need to call a tool.", thinking
assert last.done and last.done_reason == "stop" and last.prompt_eval_count == 26 and last.eval_count == 9, last
messages += [{"role": "assistant", "content": "", "tool_calls": [c.model_dump() for c in calls]},
             {"role": "tool", "content": "Sunny, 21 C", "tool_name": "get_weather"}]
reply = client.chat(model="qwen3:8b", messages=messages, tools=tools, stream=False)
assert reply.message.content == "It is sunny in Paris.", reply
assert reply.done and reply.eval_count == 7, reply
try:
    client.chat(model="missing", messages=messages)
    raise SystemExit("a missing model must fail")
except ollama.ResponseError as e:
    assert e.status_code == 404 and "not found" in e.error, e
print("ok")
"#;

#[test]
fn the_official_ollama_client_talks_to_the_standin() {
    let standin = ollama_standin(vec![
        call_reply("get_weather", json!({"city": "Paris"}), (26, 9)),
        text_reply(&["It is sunny", " in Paris."], (40, 7)),
    ]);
    let out = Command::new("python3")
        .args(["-c", OFFICIAL_CLIENT, &standin.root])
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok",
        "the official client failed against the stand-in:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    standin.assert_no_violations();
    let received = standin.received.lock().unwrap().clone();
    assert_eq!(received.len(), 3);
    assert_eq!(received[0].1["options"]["num_predict"], 64);
    assert_eq!(received[0].1["think"], true);
    // The client sends the call back with its arguments as an object, the result by name.
    assert_eq!(
        received[1].1["messages"][1]["tool_calls"][0]["function"],
        json!({"name": "get_weather", "arguments": {"city": "Paris"}})
    );
    assert_eq!(received[1].1["messages"][2]["tool_name"], "get_weather");
}

#[test]
fn a_tool_loop_through_antler_run_speaks_the_native_api_at_the_base_url_deerflow_users_write() {
    let standin = ollama_standin(vec![
        call_reply(
            "ls",
            json!({"description": "look", "path": "/mnt/user-data/workspace"}),
            (1200, 30),
        ),
        text_reply(&["The workspace", " is empty."], (1300, 12)),
    ]);
    let dir = tempfile::Builder::new()
        .prefix("antler-oll")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: local\n    use: langchain_ollama:ChatOllama\n    model: qwen3:8b\n    \
             base_url: {}\n    num_predict: 512\n    context_window: 16384\n    reasoning: true\n\
             tools:\n  - {{name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}}\n\
             sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n",
            standin.root
        ),
    )
    .unwrap();
    let (view, stderr) = antler_run(d, &["List the workspace", "--model", "local", "--trace"]);
    standin.assert_no_violations();
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    assert_eq!(view["final_answer"], "The workspace is empty.");
    assert_eq!(view["token_usage"]["input_tokens"], 2500, "{view}");
    assert_eq!(view["token_usage"]["output_tokens"], 42, "{view}");
    assert_eq!(view["token_usage"]["total_tokens"], 2542, "{view}");

    let received = standin.received.lock().unwrap().clone();
    assert_eq!(received.len(), 2, "{received:#?}");
    for (path, body) in &received {
        assert_eq!(path, "/api/chat");
        assert_eq!(body["stream"], true);
        assert_eq!(body["options"]["num_predict"], 512);
        assert_eq!(body["options"]["num_ctx"], 16384);
        assert_eq!(body["think"], true);
        assert_eq!(body["messages"][0]["role"], "system");
        assert!(body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["function"]["name"] == "ls"));
    }
    // The call goes back with its arguments as an object and no id, its result by name.
    let messages = received[1].1["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(messages[n - 2]["role"], "assistant");
    assert_eq!(
        messages[n - 2]["tool_calls"],
        json!([{"function": {"name": "ls", "arguments": {"description": "look", "path": "/mnt/user-data/workspace"}}}])
    );
    assert_eq!(messages[n - 1]["role"], "tool");
    assert_eq!(messages[n - 1]["tool_name"], "ls");
    // The thinking is not the answer.
    assert!(!view["final_answer"]
        .as_str()
        .unwrap()
        .contains("need to call"));
    let finished: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|e| e["event"].clone())
        .filter(|e| e["event"] == "model_finished")
        .collect();
    assert_eq!(finished.len(), 2, "{stderr}");
    assert_eq!(finished[0]["finish_reason"], "tool_calls");
    assert_eq!(finished[1]["finish_reason"], "stop");
}

#[test]
fn a_missing_model_is_a_404_that_says_what_to_pull() {
    let standin = ollama_standin(vec![text_reply(&["hi"], (1, 1))]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let entry: antler_protocol::config::ModelConfig = serde_yaml::from_str(&format!(
        "name: local\nuse: langchain_ollama:ChatOllama\nmodel: llama3.2\nbase_url: {}/v1\n",
        standin.root
    ))
    .unwrap();
    let model = antler_engine::model_from_entry(&entry, &|_| None).unwrap();
    let messages = [antler_engine::Message::human("hi")];
    let err = rt
        .block_on(model.complete(antler_engine::ModelRequest::new(&messages, &[], &[])))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "model `local`: HTTP 404 from {}/api/chat (model \"llama3.2\" not found, try pulling it first): check that Ollama has the model `llama3.2` (`ollama pull llama3.2`) and the base_url (Antler posts to <base_url>/api/chat, e.g. http://localhost:11434)",
            standin.root
        )
    );
    standin.assert_no_violations();
}

/// The messages of a request that carry `images`.
fn with_images(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m.get("images").is_some())
        .cloned()
        .collect()
}

#[test]
fn antler_run_shows_a_vision_model_the_viewed_image_as_base64_in_images() {
    let standin = ollama_standin(vec![
        call_reply(
            "view_image",
            json!({"image_path": VIEWED_PNG_PATH}),
            (300, 10),
        ),
        text_reply(&["A chart of", " rising sales."], (400, 8)),
    ]);
    let dir = tempfile::Builder::new()
        .prefix("antler-oll-img")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    put_viewed_png(d);
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: local\n    use: langchain_ollama:ChatOllama\n    model: qwen3:8b\n    \
             base_url: {}\n    supports_vision: true\n\
             tools:\n  - {{name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}}\n\
             sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n",
            standin.root
        ),
    )
    .unwrap();
    let (view, stderr) = antler_run(
        d,
        &["Describe the chart", "--model", "local", "--thread", "t1"],
    );
    standin.assert_no_violations();
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    assert_eq!(view["final_answer"], "A chart of rising sales.");
    let received = standin.received.lock().unwrap().clone();
    assert_eq!(received.len(), 2, "{received:#?}");
    let (first, second) = (&received[0].1, &received[1].1);
    assert!(first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["function"]["name"] == "view_image"));
    assert!(with_images(first).is_empty());

    // After the tool's result, the image goes to the model as Ollama documents it: a
    // user message whose `images` holds the file's exact bytes in base64 (no data URL).
    let shown = with_images(second);
    assert_eq!(shown.len(), 1, "{second}");
    assert_eq!(shown[0]["role"], "user");
    assert_eq!(shown[0]["images"], json!([VIEWED_PNG_BASE64]));
    let messages = second["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(messages[n - 2]["role"], "tool");
    assert_eq!(messages[n - 2]["tool_name"], "view_image");
    assert_eq!(messages[n - 1], shown[0]);
    assert!(!second.to_string().contains("/users/default/threads"));
}

#[test]
fn antler_run_falls_back_to_the_next_model_when_ollama_is_not_running() {
    let backup = ollama_standin(vec![text_reply(
        &["Answered by", " the fallback."],
        (120, 6),
    )]);
    let dir = tempfile::Builder::new()
        .prefix("antler-oll-fb")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    // Nothing listens on port 1; no retries, by the client or by `llm_call`: the first
    // failure is final.
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: primary\n    use: langchain_ollama:ChatOllama\n    model: qwen3:8b\n    \
             base_url: http://127.0.0.1:1\n    max_retries: 0\n    fallback: [backup]\n  \
             - name: backup\n    use: langchain_ollama:ChatOllama\n    model: qwen3:8b\n    \
             base_url: {}\nllm_call:\n  retry_max_attempts: 1\n",
            backup.root
        ),
    )
    .unwrap();
    let (view, stderr) = antler_run(d, &["Say hello", "--model", "primary", "--trace"]);
    backup.assert_no_violations();
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    assert_eq!(view["final_answer"], "Answered by the fallback.");
    assert_eq!(backup.received.lock().unwrap().len(), 1);

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
