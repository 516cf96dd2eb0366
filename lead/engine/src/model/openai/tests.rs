//! Unit tests of the OpenAI-compatible model: request conversion, SSE delta assembly,
//! config and `$VAR` resolution. Network behaviour is tested against a real server in
//! `tests/tests/run_openai.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use antler_protocol::config::{AppConfig, ModelConfig};
use serde_json::{json, Value};

use super::config::{ApiKey, OpenAiConfig};
use super::wire::{self, ReplyAssembler};
use super::*;
use crate::catalog::ToolSpec;
use crate::model::entry::select_model_config;
use crate::model::model_from_config;
use crate::thread::state::{Message, TokenUsage, ToolCall, ToolStatus};
use std::time::Duration;

fn weather_tool() -> ToolSpec {
    ToolSpec::builtin(
        "get_weather",
        "The weather in a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

fn conversation() -> Vec<Message> {
    vec![
        Message::System {
            content: "Be brief.".to_owned(),
        },
        Message::human("Weather in Paris?"),
        Message::Ai {
            id: "ai-1".to_owned(),
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "call_1".to_owned(),
                name: "get_weather".to_owned(),
                args: json!({"city": "Paris"}),
            }],
            reasoning: None,
        },
        Message::tool("call_1", "get_weather", "sunny", ToolStatus::Success),
    ]
}

fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |name| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    }
}

fn model_config(yaml: &str) -> ModelConfig {
    serde_yaml::from_str(yaml).unwrap()
}

#[test]
fn messages_and_tools_become_the_openai_request() {
    let tool = weather_tool();
    let tools = [&tool];
    let messages = conversation();
    let mut config = OpenAiConfig::new("smol", "smollm2", "http://127.0.0.1:1/v1/");
    config.params.insert("temperature".to_owned(), json!(0));
    config.params.insert(
        "tool_choice".to_owned(),
        json!({"type": "function", "function": {"name": "get_weather"}}),
    );
    let request = ModelRequest::new(&messages, &tools, &[]);
    assert_eq!(config.endpoint(), "http://127.0.0.1:1/v1/chat/completions");
    assert_eq!(
        wire::request_body(&config, &request),
        json!({
            "model": "smollm2",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [{
                    "id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}
                }]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "tools": [{"type": "function", "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }}],
            "temperature": 0,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        })
    );
    // Without visible tools, neither `tools` nor `tool_choice` is sent.
    let bare = wire::request_body(&config, &ModelRequest::new(&messages[..2], &[], &[]));
    assert!(bare.get("tools").is_none() && bare.get("tool_choice").is_none());
    assert_eq!(bare["temperature"], json!(0));
}

fn chunk(delta: Value) -> String {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]}).to_string()
}

#[test]
fn streamed_deltas_assemble_text_and_tool_calls_by_index() {
    let messages = conversation();
    let request = ModelRequest::new(&messages, &[], &[]);
    let mut assembler = ReplyAssembler::new("smol", &request);
    let chunks = [
        chunk(json!({"role": "assistant", "content": "Checking"})),
        chunk(json!({"content": " both."})),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}),
        ),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"ci"}}]})),
        // The second call starts while the first is still open.
        chunk(
            json!({"tool_calls": [{"index": 1, "function": {"name": "get_", "arguments": "{}"}}]}),
        ),
        // A repeated id and name are not doubled.
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "get_weather", "arguments": "ty\": \"Par"}}]}),
        ),
        chunk(json!({"tool_calls": [{"index": 1, "function": {"name": "time"}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "is\"}"}}]})),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}).to_string(),
        // The usage chunk `stream_options.include_usage` asks for: no choices.
        json!({"choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}}).to_string(),
    ];
    for data in &chunks {
        assembler.push_chunk(data).unwrap();
    }
    assert!(assembler.finished());
    let reply = assembler.finish().unwrap();
    assert_eq!(
        reply,
        ModelReply {
            id: "ai-2".to_owned(),
            content: "Checking both.".to_owned(),
            tool_calls: vec![
                ToolCall {
                    id: "call_a".to_owned(),
                    name: "get_weather".to_owned(),
                    args: json!({"city": "Paris"}),
                },
                ToolCall {
                    id: "call-2-2".to_owned(),
                    name: "get_time".to_owned(),
                    args: json!({}),
                },
            ],
            usage: Some(TokenUsage {
                input_tokens: 120,
                output_tokens: 30,
                total_tokens: 150,
                ..TokenUsage::default()
            }),
            finish_reason: Some("tool_calls".to_owned()),
            ..ModelReply::default()
        }
    );
}

#[test]
fn a_whole_json_completion_is_read_like_a_stream() {
    let request = ModelRequest::new(&[], &[], &[]);
    let mut assembler = ReplyAssembler::new("smol", &request);
    assembler
        .push_completion(&json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "call_x", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]
        }}]}))
        .unwrap();
    let reply = assembler.finish().unwrap();
    assert_eq!((reply.id.as_str(), reply.content.as_str()), ("ai-1", ""));
    assert_eq!(reply.tool_calls[0].args, json!({"city": "Oslo"}));
}

#[test]
fn invalid_tool_arguments_become_invalid_calls_and_never_calls() {
    let request = ModelRequest::new(&[], &[], &[]);
    for (arguments, expected) in [
        (
            "{\"city\": \"Par",
            "not JSON (EOF while parsing a string at line 1 column 13): {\"city\": \"Par",
        ),
        ("[\"Paris\"]", "expected a JSON object, got [\"Paris\"]"),
    ] {
        let mut assembler = ReplyAssembler::new("smol", &request);
        assembler
            .push_chunk(&chunk(json!({"tool_calls": [
                {"index": 0, "id": "c", "function": {"name": "get_weather", "arguments": arguments}},
                {"index": 1, "id": "d", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
            ]})))
            .unwrap();
        let reply = assembler.finish().unwrap();
        assert_eq!(reply.tool_calls.len(), 1, "only the valid call is a call");
        assert_eq!(reply.tool_calls[0].id, "d");
        assert_eq!(
            reply.invalid_calls,
            vec![crate::model::InvalidToolCall {
                id: "c".into(),
                name: "get_weather".into(),
                arguments: arguments.into(),
                error: expected.into(),
            }]
        );
    }
}

#[test]
fn reasoning_content_is_kept_apart_from_the_answer() {
    let request = ModelRequest::new(&[], &[], &[]);
    let mut assembler = ReplyAssembler::new("deepseek", &request);
    for delta in [
        json!({"reasoning_content": "The user greets. "}),
        json!({"reasoning_content": "Answer briefly."}),
        json!({"content": "Hello!"}),
    ] {
        assembler.push_chunk(&chunk(delta)).unwrap();
    }
    let reply = assembler.finish().unwrap();
    assert_eq!(reply.content, "Hello!");
    let reasoning = reply.reasoning.unwrap();
    assert_eq!(reasoning.text, "The user greets. Answer briefly.");
}

#[test]
fn error_chunks_and_error_bodies_carry_the_server_message() {
    let request = ModelRequest::new(&[], &[], &[]);
    let mut assembler = ReplyAssembler::new("smol", &request);
    let err = assembler
        .push_chunk(
            r#"{"error": {"message": "context length exceeded", "type": "invalid_request_error"}}"#,
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "model `smol`: invalid reply: the server reported: context length exceeded"
    );
    assert_eq!(
        crate::model::transport::server_message(r#"{"error": {"message": "bad tool_choice"}}"#),
        "bad tool_choice"
    );
    assert_eq!(
        crate::model::transport::server_message(r#"{"detail": "Not Found"}"#),
        "Not Found"
    );
    assert_eq!(
        crate::model::transport::server_message("  plain text\n"),
        "plain text"
    );
    assert_eq!(crate::model::transport::server_message(""), "(empty body)");
    let long = "é".repeat(2000);
    let quoted = crate::model::transport::server_message(&long);
    assert_eq!(
        quoted.chars().count(),
        crate::model::transport::QUOTE_LIMIT + 1
    );
    assert!(quoted.ends_with('…'));
}

#[test]
fn a_model_config_resolves_its_key_and_endpoint() {
    let config = model_config(
        "name: smol\nuse: langchain_openai:ChatOpenAI\nmodel: smollm2\napi_key: $SMOL_KEY\n\
         base_url: http://127.0.0.1:8080/v1\ntemperature: 0\ntool_choice: required\n\
         max_retries: 2\ntimeout: 30\nstream_idle_timeout: 5\nunrelated: x\n",
    );
    let built =
        OpenAiConfig::from_model_config(&config, &env_of(&[("SMOL_KEY", "sk-secret-1")])).unwrap();
    assert_eq!(built.model, "smollm2");
    assert_eq!(
        built.endpoint(),
        "http://127.0.0.1:8080/v1/chat/completions"
    );
    assert_eq!(built.api_key, Some(ApiKey::new("sk-secret-1")));
    assert_eq!(
        Value::Object(built.params.clone()),
        json!({"temperature": 0, "tool_choice": "required"})
    );
    assert_eq!(built.retry.max_retries, 2);
    assert_eq!(built.request_timeout.as_secs(), 30);
    assert_eq!(built.idle_timeout.as_secs(), 5);
    let debug = format!("{:?}", OpenAiModel::new(built).unwrap());
    assert!(!debug.contains("sk-secret-1"), "{debug}");
    assert!(debug.contains("<redacted>"), "{debug}");

    // An unset variable is named, its (absent) value never shown.
    let err = OpenAiConfig::from_model_config(&config, &env_of(&[])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "model `smol`: api_key names $SMOL_KEY, which is not set"
    );
}

#[test]
fn endpoints_and_keys_fall_back_to_extra_then_environment_then_provider() {
    let env = env_of(&[
        ("OPENAI_API_KEY", "sk-env"),
        ("OPENAI_BASE_URL", "http://10.0.0.1/v1"),
        ("DEEPSEEK_API_KEY", "sk-deep"),
    ]);
    let from_extra = model_config(
        "name: a\nuse: langchain_openai:ChatOpenAI\nmodel: m\nopenai_api_base: http://x/v1\n",
    );
    let built = OpenAiConfig::from_model_config(&from_extra, &env).unwrap();
    assert_eq!(built.base_url, "http://x/v1");
    assert_eq!(built.api_key, Some(ApiKey::new("sk-env")));

    let from_env =
        model_config("name: a\nuse: langchain_openai:ChatOpenAI\nmodel: m\napi_key: ''\n");
    let built = OpenAiConfig::from_model_config(&from_env, &env).unwrap();
    assert_eq!(built.base_url, "http://10.0.0.1/v1");
    assert_eq!(built.api_key, Some(ApiKey::new("sk-env")));
    let built = OpenAiConfig::from_model_config(&from_env, &env_of(&[])).unwrap();
    assert_eq!(built.base_url, "https://api.openai.com/v1");
    assert_eq!(built.api_key, None);

    let deepseek =
        model_config("name: d\nuse: langchain_deepseek:ChatDeepSeek\nmodel: deepseek-chat\n");
    let built = OpenAiConfig::from_model_config(&deepseek, &env).unwrap();
    assert_eq!(built.base_url, "https://api.deepseek.com/v1");
    assert_eq!(built.api_key, Some(ApiKey::new("sk-deep")));

    // Any other class is accepted when it names its endpoint, refused otherwise.
    let vllm = model_config("name: v\nuse: langchain_community.chat_models:ChatVLLM\nmodel: q\napi_base: http://gpu:8000/v1\n");
    assert_eq!(
        OpenAiConfig::from_model_config(&vllm, &env)
            .unwrap()
            .base_url,
        "http://gpu:8000/v1"
    );
    let claude = model_config("name: c\nuse: langchain_anthropic:ChatAnthropic\nmodel: claude\n");
    assert_eq!(
        OpenAiConfig::from_model_config(&claude, &env).unwrap_err().to_string(),
        "model `c`: Antler has no client for `use: langchain_anthropic:ChatAnthropic`; set `provider:` to one of openai, openai_responses, azure_openai, anthropic, gemini, ollama (or give a `base_url` to speak to it as OpenAI-compatible)"
    );

    let bad = model_config("name: b\nuse: langchain_openai:ChatOpenAI\nmodel: m\nbase_url: localhost:8000\nmax_retries: -1\n");
    assert_eq!(
        OpenAiConfig::from_model_config(&bad, &env)
            .unwrap_err()
            .to_string(),
        "model `b`: base_url `localhost:8000` is not an http:// or https:// URL"
    );
    let bad =
        model_config("name: b\nuse: langchain_openai:ChatOpenAI\nmodel: m\nmax_retries: -1\n");
    assert_eq!(
        OpenAiConfig::from_model_config(&bad, &env)
            .unwrap_err()
            .to_string(),
        "model `b`: max_retries must be a whole number, not -1"
    );
}

#[test]
fn model_from_config_picks_by_name_or_builds_the_environment_default() {
    let app: AppConfig = serde_yaml::from_str(
        "models:\n  - {name: first, use: 'langchain_openai:ChatOpenAI', model: m1, base_url: 'http://a/v1'}\n  \
         - {name: second, use: 'langchain_openai:ChatOpenAI', model: m2, base_url: 'http://b/v1'}\n",
    )
    .unwrap();
    let none = env_of(&[]);
    assert_eq!(
        model_from_config(&app, None, &none).unwrap().name(),
        "first"
    );
    assert_eq!(
        model_from_config(&app, Some("second"), &none)
            .unwrap()
            .name(),
        "second"
    );
    assert_eq!(
        model_from_config(&app, Some("third"), &none)
            .err()
            .unwrap()
            .to_string(),
        "no model named `third`; configured models: first, second"
    );

    let empty = AppConfig::default();
    assert_eq!(
        model_from_config(&empty, None, &none).err().unwrap().to_string(),
        "no chat model is configured: add a `models:` entry to the config, or set OPENAI_BASE_URL (or ANTLER_MODEL_BASE_URL) and OPENAI_MODEL (or ANTLER_MODEL)"
    );
    let env = env_of(&[
        ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        ("OPENAI_MODEL", "smollm2"),
    ]);
    let default = select_model_config(&empty, None, &env).unwrap();
    assert_eq!(
        (
            default.name.as_str(),
            default.model.as_str(),
            default.use_.as_str()
        ),
        ("smollm2", "smollm2", USE_CHAT_OPENAI)
    );
    assert_eq!(
        model_from_config(&empty, None, &env).unwrap().name(),
        "smollm2"
    );
    assert_eq!(
        model_from_config(&empty, Some("gpt"), &env)
            .err()
            .unwrap()
            .to_string(),
        "no model named `gpt`; configured models: smollm2"
    );
}

#[test]
fn models_of_one_configuration_share_one_http_client() {
    use crate::http_clients::{builds_of, ClientKind};
    // A connect timeout no other test uses: this test's client kind alone.
    let connect_timeout = Duration::from_millis(7_331);
    let kind = ClientKind::Model { connect_timeout };
    for run in 0..4 {
        let mut config = OpenAiConfig::new(format!("m{run}"), "gpt", "http://127.0.0.1:9/v1");
        config.connect_timeout = connect_timeout;
        OpenAiModel::new(config).unwrap();
    }
    // Each build parses the system's CA store: four runs, one build.
    assert_eq!(builds_of(kind), 1);
}

#[test]
fn a_404_names_the_url_and_what_is_usually_wrong() {
    assert_eq!(
        not_found_hint("http://127.0.0.1:8080", "smol"),
        "the base_url is probably missing `/v1` (OpenAI-compatible servers such as llama.cpp, vLLM and Ollama serve /v1/chat/completions): try base_url: http://127.0.0.1:8080/v1"
    );
    assert_eq!(
        not_found_hint("http://127.0.0.1:8080/", "smol"),
        not_found_hint("http://127.0.0.1:8080", "smol")
    );
    assert_eq!(
        not_found_hint("https://api.example.com/v1/", "gpt-x"),
        "check the model's base_url (Antler posts to <base_url>/chat/completions) and that the server serves the model `gpt-x`"
    );
    let err = ModelError::EndpointNotFound {
        model: "m".into(),
        url: "http://h:1/chat/completions".into(),
        message: "Not Found".into(),
        hint: not_found_hint("http://h:1", "x"),
    };
    assert!(err
        .to_string()
        .starts_with("model `m`: HTTP 404 from http://h:1/chat/completions (Not Found): the base_url is probably missing `/v1`"));
}

fn body_for(yaml: &str, thinking: bool, messages: &[Message]) -> Value {
    let config = OpenAiConfig::from_model_config(&model_config(yaml), &env_of(&[])).unwrap();
    let mut request = ModelRequest::new(messages, &[], &[]);
    request.thinking = thinking;
    wire::request_body(&config, &request)
}

#[test]
fn the_thinking_toggle_follows_deerflows_rules() {
    let hi = [Message::human("hi")];
    let gateway =
        "name: ds\nuse: deerflow.models.patched_deepseek:PatchedChatDeepSeek\nmodel: deepseek-v4\n\
                   api_base: http://h/v1\nsupports_thinking: true\nreasoning_effort: high\n\
                   when_thinking_enabled: {extra_body: {thinking: {type: enabled}}}\n\
                   extra_body: {top_k: 20}\n";
    // On: `when_thinking_enabled` merged; `extra_body` keys in the body itself.
    let on = body_for(gateway, true, &hi);
    assert_eq!(on["thinking"], json!({"type": "enabled"}));
    assert_eq!(on["top_k"], json!(20));
    assert!(on.get("extra_body").is_none(), "{on}");
    // `reasoning_effort` is dropped without `supports_reasoning_effort`.
    assert!(on.get("reasoning_effort").is_none(), "{on}");
    // Off, rule 2: thinking disabled through extra_body, effort minimal (kept only with
    // supports_reasoning_effort).
    let off = body_for(gateway, false, &hi);
    assert_eq!(off["thinking"], json!({"type": "disabled"}));
    assert!(off.get("reasoning_effort").is_none());
    let off = body_for(
        &format!("{gateway}supports_reasoning_effort: true\n"),
        false,
        &hi,
    );
    assert_eq!(off["reasoning_effort"], json!("minimal"));
    assert_eq!(
        body_for(
            &format!("{gateway}supports_reasoning_effort: true\n"),
            true,
            &hi
        )["reasoning_effort"],
        json!("high")
    );

    // Rule 1: `when_thinking_disabled` wins.
    let explicit =
        format!("{gateway}when_thinking_disabled: {{extra_body: {{thinking: {{type: off}}}}}}\n");
    assert_eq!(
        body_for(&explicit, false, &hi)["thinking"],
        json!({"type": "off"})
    );

    // Rule 3: vLLM/Qwen's chat_template_kwargs set to false.
    let vllm = "name: q\nuse: deerflow.models.vllm_provider:VllmChatModel\nmodel: qwen3\nbase_url: http://h/v1\n\
                supports_thinking: true\nwhen_thinking_enabled: {extra_body: {chat_template_kwargs: {enable_thinking: true}}}\n";
    assert_eq!(
        body_for(vllm, true, &hi)["chat_template_kwargs"],
        json!({"enable_thinking": true})
    );
    assert_eq!(
        body_for(vllm, false, &hi)["chat_template_kwargs"],
        json!({"enable_thinking": false})
    );
    // Without supports_thinking, thinking is off whatever the call asks (D.1).
    let unsupported = vllm.replace("supports_thinking: true\n", "");
    assert_eq!(
        body_for(&unsupported, true, &hi)["chat_template_kwargs"],
        json!({"enable_thinking": false})
    );
    // No settings: nothing is sent either way.
    let bare = "name: m\nuse: langchain_openai:ChatOpenAI\nmodel: m\nbase_url: http://h/v1\nsupports_thinking: true\n";
    for thinking in [true, false] {
        let body = body_for(bare, thinking, &hi);
        assert!(body.get("thinking").is_none() && body.get("chat_template_kwargs").is_none());
    }
}

fn thought(key: &str, text: &str) -> Message {
    Message::Ai {
        id: "ai-1".into(),
        content: "Hi.".into(),
        tool_calls: vec![],
        reasoning: Some(crate::thread::state::Reasoning {
            text: text.into(),
            replay: vec![crate::thread::state::ReplayItem {
                provider: wire::REPLAY_PROVIDER.into(),
                item: json!({ "key": key }),
            }],
        }),
    }
}

#[test]
fn reasoning_goes_back_only_for_the_classes_that_replay_it() {
    let messages = [
        Message::human("hi"),
        thought("reasoning_content", "They greet."),
        Message::human("again"),
    ];
    let assistant = |yaml: &str| body_for(yaml, true, &messages)["messages"][1].clone();
    for use_ in [
        "langchain_deepseek:ChatDeepSeek",
        "deerflow.models.patched_deepseek:PatchedChatDeepSeek",
        "deerflow.models.patched_mimo:PatchedChatMiMo",
        "deerflow.models.patched_stepfun:PatchedChatStepFun",
    ] {
        let sent = assistant(&format!(
            "name: d\nuse: {use_}\nmodel: m\nbase_url: http://h/v1\n"
        ));
        assert_eq!(sent["reasoning_content"], json!("They greet."), "{use_}");
    }
    let vllm = assistant("name: v\nuse: deerflow.models.vllm_provider:VllmChatModel\nmodel: m\nbase_url: http://h/v1\n");
    assert_eq!(vllm["reasoning"], json!("They greet."));
    assert!(vllm.get("reasoning_content").is_none());
    let plain =
        assistant("name: o\nuse: langchain_openai:ChatOpenAI\nmodel: m\nbase_url: http://h/v1\n");
    assert_eq!(plain, json!({"role": "assistant", "content": "Hi."}));
    // `replay_reasoning` overrides the class both ways.
    let forced = assistant("name: o\nuse: langchain_openai:ChatOpenAI\nmodel: m\nbase_url: http://h/v1\nreplay_reasoning: true\n");
    assert_eq!(forced["reasoning_content"], json!("They greet."));
    let refused = assistant("name: d\nuse: langchain_deepseek:ChatDeepSeek\nmodel: m\nbase_url: http://h/v1\nreplay_reasoning: false\n");
    assert!(refused.get("reasoning_content").is_none());
    // Another provider's reasoning is never sent as reasoning_content.
    let mut foreign = thought("reasoning_content", "Anthropic thinking.");
    if let Message::Ai {
        reasoning: Some(r), ..
    } = &mut foreign
    {
        r.replay[0].provider = "anthropic".into();
    }
    let body = body_for(
        "name: d\nuse: langchain_deepseek:ChatDeepSeek\nmodel: m\nbase_url: http://h/v1\n",
        true,
        &[Message::human("hi"), foreign],
    );
    assert!(body["messages"][1].get("reasoning_content").is_none());
}

#[derive(Default)]
struct Heard(std::sync::Mutex<Vec<String>>);

impl crate::model::ModelObserver for Heard {
    fn text_delta(&self, text: &str) {
        self.0.lock().unwrap().push(format!("text:{text}"));
    }
    fn reasoning_delta(&self, text: &str) {
        self.0.lock().unwrap().push(format!("reasoning:{text}"));
    }
}

#[test]
fn streamed_reasoning_and_text_are_told_to_the_observer_and_kept_for_replay() {
    let heard = Heard::default();
    let mut request = ModelRequest::new(&[], &[], &[]);
    request.observer = Some(&heard);
    let mut assembler = ReplyAssembler::new("deepseek", &request);
    for delta in [
        json!({"reasoning_content": "Think."}),
        json!({"content": "Hel"}),
        json!({"content": "lo"}),
    ] {
        assembler.push_chunk(&chunk(delta)).unwrap();
    }
    let reply = assembler.finish().unwrap();
    assert_eq!(
        *heard.0.lock().unwrap(),
        ["reasoning:Think.", "text:Hel", "text:lo"]
    );
    let reasoning = reply.reasoning.unwrap();
    assert_eq!(reasoning.replay[0].provider, wire::REPLAY_PROVIDER);
    assert_eq!(
        reasoning.replay[0].item,
        json!({"key": "reasoning_content"})
    );
}

#[test]
fn an_azure_entry_posts_to_its_deployment_with_the_api_key_header() {
    let env = env_of(&[
        ("AZURE_OPENAI_ENDPOINT", "https://res.openai.azure.com/"),
        ("AZURE_OPENAI_API_KEY", "az-secret-9"),
        ("OPENAI_API_VERSION", "2024-10-21"),
    ]);
    let entry = model_config(
        "name: az\nuse: langchain_openai:AzureChatOpenAI\nmodel: gpt-4o\nazure_deployment: prod-4o\n",
    );
    let (config, endpoint, wire) = azure::azure_chat(&entry, &env).unwrap();
    assert_eq!(
        endpoint.url,
        "https://res.openai.azure.com/openai/deployments/prod-4o/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(endpoint.headers.len(), 1);
    assert_eq!(endpoint.headers[0].0.as_str(), "api-key");
    assert_eq!(endpoint.headers[0].1.to_str().unwrap(), "az-secret-9");
    assert!(!format!("{config:?} {endpoint:?}").contains("az-secret-9"));
    assert_eq!(wire.extra["api_version"], json!("2024-10-21"));
    assert_eq!(
        wire.base_url.as_deref(),
        Some("https://res.openai.azure.com")
    );

    // LangChain's own names win over the environment; `deployment_name`, then `model`.
    let named = model_config(
        "name: az\nuse: langchain_openai:AzureChatOpenAI\nmodel: gpt-4o\n\
         azure_endpoint: https://other.openai.azure.com/openai\nopenai_api_version: 2025-01-01-preview\napi_key: k2\n",
    );
    let (_, endpoint, _) = azure::azure_chat(&named, &env).unwrap();
    assert_eq!(
        endpoint.url,
        "https://other.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2025-01-01-preview"
    );
    assert_eq!(endpoint.headers[0].1.to_str().unwrap(), "k2");

    // No version anywhere is a config error; so is a deployment that would change the URL.
    let err = azure::azure_chat(
        &entry,
        &env_of(&[("AZURE_OPENAI_ENDPOINT", "https://r.openai.azure.com")]),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "model `az`: Azure OpenAI needs an api_version (or openai_api_version, or $OPENAI_API_VERSION)"
    );
    let evil = model_config("name: az\nuse: langchain_openai:AzureChatOpenAI\nmodel: a/../b?x\n");
    assert!(azure::azure_chat(&evil, &env)
        .unwrap_err()
        .to_string()
        .contains("may hold only letters"));
    assert_eq!(
        crate::model::check_model_entry(&entry, &env).unwrap(),
        crate::model::Provider::AzureOpenAi
    );
}
