//! Unit tests of the Ollama client: request building (roles, tool calls with object
//! arguments, tool results by `tool_name`, images, `options`, `think`), the base URL
//! DeerFlow users write, and NDJSON stream assembly from the payloads of Ollama's API
//! documentation. Network behaviour is in `tests/tests/suite/model_ollama.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use antler_protocol::config::ModelConfig;
use serde_json::{json, Value};

use super::config::OllamaConfig;
use super::wire::{self, ReplyAssembler};
use crate::catalog::ToolSpec;
use crate::model::stream::StreamItem;
use crate::model::transport::{Flow, ReplyReader};
use crate::model::{check_model_entry, ImagePart, ModelReply, ModelRequest, Provider};
use crate::thread::state::{Message, ToolCall, ToolStatus};

fn config_with(extra: &str, env: &dyn Fn(&str) -> Option<String>) -> OllamaConfig {
    let yaml = format!("name: o\nuse: langchain_ollama:ChatOllama\nmodel: qwen3:8b\n{extra}");
    let entry: ModelConfig = serde_yaml::from_str(&yaml).unwrap();
    OllamaConfig::from_model_config(&entry, env).unwrap()
}

fn config(extra: &str) -> OllamaConfig {
    config_with(extra, &|_| None)
}

fn weather_tool() -> ToolSpec {
    ToolSpec::builtin(
        "get_weather",
        "The weather in a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

fn assemble(request: &ModelRequest<'_>, lines: &[Value]) -> ModelReply {
    let mut reader = ReplyAssembler::new("o", request);
    let mut flow = Flow::Continue;
    for line in lines {
        assert_eq!(flow, Flow::Continue, "nothing is read after done");
        flow = reader
            .item(&StreamItem {
                event: None,
                data: line.to_string(),
            })
            .unwrap();
    }
    assert_eq!(flow, Flow::Done);
    assert!(reader.finished());
    reader.finish().unwrap()
}

#[test]
fn the_base_url_deerflow_users_write_reaches_the_native_chat_route() {
    assert_eq!(
        config("base_url: http://localhost:11434\n").url(),
        "http://localhost:11434/api/chat"
    );
    assert_eq!(
        config("base_url: http://gpu-box:11434/v1/\n").url(),
        "http://gpu-box:11434/api/chat"
    );
    assert_eq!(config("").url(), "http://localhost:11434/api/chat");
    let from_host = config_with("", &|name: &str| {
        (name == "OLLAMA_HOST").then(|| "0.0.0.0:11500".to_owned())
    });
    assert_eq!(from_host.url(), "http://0.0.0.0:11500/api/chat");
    let entry: ModelConfig =
        serde_yaml::from_str("name: o\nuse: langchain_ollama:ChatOllama\nmodel: qwen3\n").unwrap();
    assert_eq!(
        check_model_entry(&entry, &|_| None).unwrap(),
        Provider::Ollama
    );
}

#[test]
fn messages_tools_and_options_become_the_chat_request() {
    let tool = weather_tool();
    let tools = [&tool];
    let messages = vec![
        Message::System {
            content: "Be brief.".to_owned(),
        },
        Message::human("Weather in Paris?"),
        Message::Ai {
            id: "ai-1".into(),
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "call-1-1".into(),
                name: "get_weather".into(),
                args: json!({"city": "Paris"}),
            }],
            reasoning: None,
        },
        Message::tool("call-1-1", "get_weather", "sunny", ToolStatus::Success),
    ];
    let config = config(
        "num_predict: 128\nmax_tokens: 999\ncontext_window: 8192\ntemperature: 0\nstop: END\nkeep_alive: 10m\n",
    );
    let body = wire::request_body(&config, &ModelRequest::new(&messages, &tools, &[]));
    assert_eq!(
        body,
        json!({
            "model": "qwen3:8b",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
                ]},
                {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
            ],
            "stream": true,
            "tools": [{"type": "function", "function": {
                "name": "get_weather", "description": "The weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }}],
            "options": {"num_predict": 128, "num_ctx": 8192, "temperature": 0, "stop": ["END"]},
            "keep_alive": "10m",
        })
    );
    // `max_tokens` stands in for `num_predict` when that is not given.
    let aliased = self::config("max_tokens: 64\n");
    assert_eq!(aliased.options["num_predict"], 64);
}

#[test]
fn think_follows_reasoning_supports_thinking_and_the_call() {
    let messages = [Message::human("hi")];
    let mut request = ModelRequest::new(&messages, &[], &[]);
    let think =
        |c: &OllamaConfig, r: &ModelRequest<'_>| wire::request_body(c, r).get("think").cloned();
    // A model that cannot think is sent nothing either way.
    let plain = config("");
    assert_eq!(think(&plain, &request), None);
    let reasoning = config("reasoning: true\n");
    assert_eq!(think(&reasoning, &request), Some(json!(true)));
    let supports = config("supports_thinking: true\n");
    assert_eq!(think(&supports, &request), Some(json!(true)));
    let level = config("supports_thinking: true\nwhen_thinking_enabled:\n  reasoning: high\n");
    assert_eq!(think(&level, &request), Some(json!("high")));
    request.thinking = false;
    assert_eq!(think(&plain, &request), None);
    assert_eq!(think(&reasoning, &request), Some(json!(false)));
    assert_eq!(think(&supports, &request), Some(json!(false)));
}

#[test]
fn viewed_images_travel_as_base64_in_images() {
    let messages = [Message::human("What is this?")];
    let images = [
        ImagePart {
            path: "/mnt/user-data/uploads/a.png".into(),
            mime_type: "image/png".into(),
            base64: Some("iVBORw0KGgo=".into()),
        },
        ImagePart {
            path: "/mnt/user-data/uploads/b.png".into(),
            mime_type: "image/png".into(),
            base64: None,
        },
    ];
    let body = wire::request_body(&config(""), &ModelRequest::new(&messages, &[], &images));
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "Here are the images you've viewed:\n- **/mnt/user-data/uploads/a.png** (image/png)\n- **/mnt/user-data/uploads/b.png** (image/png)  (file unavailable or changed on disk)", "images": ["iVBORw0KGgo="]})
    );
}

#[test]
fn a_streamed_reply_with_thinking_a_tool_call_and_usage_is_assembled() {
    let messages = [Message::human("Weather in Tokyo?")];
    let tool = weather_tool();
    let tools = [&tool];
    // The shapes of Ollama's API documentation (`/api/chat`, streaming, tools, think).
    let reply = assemble(
        &ModelRequest::new(&messages, &tools, &[]),
        &[
            json!({"model": "qwen3:8b", "created_at": "2025-05-29T09:35:56.836222Z", "message": {"role": "assistant", "content": "", "thinking": "The user asks"}, "done": false}),
            json!({"model": "qwen3:8b", "created_at": "2025-05-29T09:35:56.9Z", "message": {"role": "assistant", "content": "", "thinking": " for weather."}, "done": false}),
            json!({"model": "qwen3:8b", "created_at": "2025-05-29T09:35:57Z", "message": {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Tokyo"}}}]}, "done": false}),
            json!({"model": "qwen3:8b", "created_at": "2025-05-29T09:35:57.1Z", "message": {"role": "assistant", "content": ""}, "done_reason": "stop", "done": true,
                   "total_duration": 4883583458u64, "load_duration": 1334875, "prompt_eval_count": 26, "prompt_eval_duration": 342546000, "eval_count": 282, "eval_duration": 4535599000u64}),
        ],
    );
    assert_eq!(reply.id, "ai-1");
    assert_eq!(reply.tool_calls.len(), 1);
    assert_eq!(reply.tool_calls[0].id, "call-1-1");
    assert_eq!(reply.tool_calls[0].args, json!({"city": "Tokyo"}));
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(reply.reasoning.unwrap().text, "The user asks for weather.");
    let usage = reply.usage.unwrap();
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.total_tokens),
        (26, 282, 308)
    );
}

#[test]
fn text_length_and_invalid_arguments() {
    let messages = [Message::human("hi")];
    let request = ModelRequest::new(&messages, &[], &[]);
    let reply = assemble(
        &request,
        &[
            json!({"model": "m", "message": {"role": "assistant", "content": "The sky"}, "done": false}),
            json!({"model": "m", "message": {"role": "assistant", "content": " is"}, "done": false}),
            json!({"model": "m", "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "length", "prompt_eval_count": 3, "eval_count": 2}),
        ],
    );
    assert_eq!(reply.content, "The sky is");
    assert_eq!(reply.finish_reason.as_deref(), Some("length"));
    let reply = assemble(
        &request,
        &[
            json!({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "ls", "arguments": "{\"path\": \"/mnt"}},
            {"id": "srv-1", "function": {"name": "ls", "arguments": {"path": "/"}}},
        ]}, "done": true, "done_reason": "stop"}),
        ],
    );
    assert_eq!(reply.invalid_calls.len(), 1);
    assert_eq!(reply.invalid_calls[0].id, "call-1-1");
    assert!(
        reply.invalid_calls[0].error.starts_with("not JSON"),
        "{reply:?}"
    );
    assert_eq!(reply.tool_calls[0].id, "srv-1");
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
    let mut reader = ReplyAssembler::new("o", &request);
    let err = reader
        .item(&StreamItem {
            event: None,
            data: r#"{"error":"model requires more system memory"}"#.to_owned(),
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "model `o`: invalid reply: the server reported: model requires more system memory"
    );
}
