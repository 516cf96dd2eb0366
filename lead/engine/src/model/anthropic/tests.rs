//! Unit tests of the Anthropic client: the request built from a conversation (system,
//! alternation, tool results, images, cache breakpoints, thinking), the assembly of
//! documented event streams (the SDK's fixtures' shapes) and whole messages, and the
//! config. The network is tested in `tests/tests/suite/model_anthropic.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;

use antler_protocol::config::ModelConfig;
use serde_json::{json, Value};

use super::config::AnthropicConfig;
use super::reply::{map_stop_reason, ReplyAssembler};
use super::request::request_body;
use super::*;
use crate::catalog::ToolSpec;
use crate::model::{ImagePart, ModelObserver};
use crate::thread::state::{Message, Reasoning, ReplayItem, TokenUsage, ToolCall, ToolStatus};

fn weather_tool() -> ToolSpec {
    ToolSpec::builtin(
        "get_weather",
        "The weather in a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

fn time_tool() -> ToolSpec {
    ToolSpec::builtin(
        "get_time",
        "The time in a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    )
}

fn entry(yaml: &str) -> ModelConfig {
    serde_yaml::from_str(yaml).unwrap()
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn config(extra: &str) -> AnthropicConfig {
    let yaml = format!(
        "name: claude\nuse: langchain_anthropic:ChatAnthropic\nmodel: claude-sonnet-4-5\napi_key: sk-ant-test\n{extra}"
    );
    AnthropicConfig::from_model_config(&entry(&yaml), &no_env).unwrap()
}

fn thinking_block(text: &str, signature: &str) -> ReplayItem {
    ReplayItem {
        provider: REPLAY_PROVIDER.to_owned(),
        item: json!({"type": "thinking", "thinking": text, "signature": signature}),
    }
}

/// A tool loop: the task, a reply with thinking, text and two calls, their results (one
/// an error), and a reminder the run appended after them.
fn tool_loop() -> Vec<Message> {
    vec![
        Message::System {
            content: "You are Antler.".to_owned(),
        },
        Message::human("Weather and time in Paris?"),
        Message::Ai {
            id: "ai-1".to_owned(),
            content: "Let me look.".to_owned(),
            tool_calls: vec![
                ToolCall {
                    id: "toolu_1".to_owned(),
                    name: "get_weather".to_owned(),
                    args: json!({"city": "Paris"}),
                },
                ToolCall {
                    id: "toolu_2".to_owned(),
                    name: "get_time".to_owned(),
                    args: json!({"city": "Paris"}),
                },
            ],
            reasoning: Some(Reasoning {
                text: "Two tools.".to_owned(),
                replay: vec![
                    thinking_block("Two tools.", "sig-1"),
                    ReplayItem {
                        provider: "openai_chat".to_owned(),
                        item: json!({"key": "reasoning_content"}),
                    },
                ],
            }),
        },
        Message::tool("toolu_1", "get_weather", "sunny", ToolStatus::Success),
        Message::tool("toolu_2", "get_time", "no clock", ToolStatus::Error),
        Message::human("[TOKEN BUDGET WARNING] Wrap up."),
    ]
}

fn messages_of(body: &Value) -> &Vec<Value> {
    body["messages"].as_array().unwrap()
}

/// Every `cache_control` in a body, by where it is.
fn breakpoints(body: &Value) -> Vec<String> {
    let mut found = Vec::new();
    for (n, tool) in body["tools"].as_array().into_iter().flatten().enumerate() {
        if tool.get("cache_control").is_some() {
            found.push(format!("tools[{n}]"));
        }
    }
    for (n, block) in body["system"].as_array().into_iter().flatten().enumerate() {
        if block.get("cache_control").is_some() {
            found.push(format!("system[{n}]"));
        }
    }
    for (m, message) in messages_of(body).iter().enumerate() {
        for (n, block) in message["content"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Some(marker) = block.get("cache_control") {
                assert_eq!(marker, &json!({"type": "ephemeral"}));
                assert_ne!(block["type"], "thinking", "{body}");
                found.push(format!("messages[{m}][{n}]"));
            }
        }
    }
    found
}

#[test]
fn a_conversation_becomes_alternating_turns_with_the_system_prompt_on_top() {
    let config = config("enable_prompt_caching: false\ntemperature: 0.2\nstop: END");
    let (weather, time) = (weather_tool(), time_tool());
    let tools = [&weather, &time];
    let messages = tool_loop();
    let body = request_body(&config, &ModelRequest::new(&messages, &tools, &[]));
    assert_eq!(
        body,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 8192,
            "temperature": 0.2,
            "stop_sequences": ["END"],
            "system": "You are Antler.",
            "messages": [
                {"role": "user", "content": "Weather and time in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {"city": "Paris"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no clock", "is_error": true},
                    {"type": "text", "text": "[TOKEN BUDGET WARNING] Wrap up."},
                ]},
            ],
            "tools": [
                {"name": "get_weather", "description": "The weather in a city.", "input_schema":
                    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
                {"name": "get_time", "description": "The time in a city.", "input_schema":
                    {"type": "object", "properties": {"city": {"type": "string"}}}},
            ],
            "stream": true,
        })
    );
}

#[test]
fn a_human_message_before_tool_results_in_one_turn_goes_after_them() {
    let config = config("enable_prompt_caching: false");
    let mut messages = tool_loop();
    // A summary between the call and its results (the order a compaction can leave).
    let summary = Message::Human {
        content: "Summary so far.".to_owned(),
        name: Some("summary".to_owned()),
        hide_from_ui: true,
        additional_kwargs: None,
    };
    messages.insert(3, summary);
    messages.pop();
    let body = request_body(&config, &ModelRequest::new(&messages, &[], &[]));
    let last = &messages_of(&body)[2];
    let kinds: Vec<&str> = last["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["tool_result", "tool_result", "text"]);
    assert_eq!(last["content"][2]["text"], "Summary so far.");
    // Without tools there is no `tools` key and no `tool_choice`.
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
}

#[test]
fn empty_assistant_turns_are_left_out_and_neighbours_merge() {
    let config = config("enable_prompt_caching: false");
    let messages = vec![
        Message::human("one"),
        Message::Ai {
            id: "ai-1".to_owned(),
            content: "  ".to_owned(),
            tool_calls: Vec::new(),
            reasoning: None,
        },
        Message::human("two"),
    ];
    let body = request_body(&config, &ModelRequest::new(&messages, &[], &[]));
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "one"}, {"type": "text", "text": "two"}
        ]}])
    );
}

#[test]
fn viewed_images_go_as_base64_image_blocks_in_the_last_user_turn() {
    let config = config("enable_prompt_caching: false");
    let messages = vec![
        Message::human("Look."),
        Message::Ai {
            id: "ai-1".to_owned(),
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "toolu_1".to_owned(),
                name: "view_image".to_owned(),
                args: json!({"image_path": "/mnt/user-data/uploads/a.png"}),
            }],
            reasoning: None,
        },
        Message::tool("toolu_1", "view_image", "ok", ToolStatus::Success),
    ];
    let images = [
        ImagePart {
            path: "/mnt/user-data/uploads/a.png".to_owned(),
            mime_type: "image/png".to_owned(),
            base64: Some("iVBORw0KGgo=".to_owned()),
        },
        ImagePart {
            path: "/mnt/user-data/uploads/b.jpg".to_owned(),
            mime_type: "image/jpeg".to_owned(),
            base64: None,
        },
    ];
    let body = request_body(&config, &ModelRequest::new(&messages, &[], &images));
    let turns = messages_of(&body);
    assert_eq!(turns.len(), 3);
    assert_eq!(
        turns[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"},
            {"type": "text", "text": "Here are the images you've viewed:"},
            {"type": "text", "text": "\n- **/mnt/user-data/uploads/a.png** (image/png)"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            {"type": "text", "text": "\n- **/mnt/user-data/uploads/b.jpg** (image/jpeg)"},
            {"type": "text", "text": "  (file unavailable or changed on disk)"},
        ])
    );
}

#[test]
fn cache_breakpoints_mark_the_tools_the_system_prompt_and_the_last_turns_four_at_most() {
    let config = config("");
    assert!(config.prompt_caching);
    let (weather, time) = (weather_tool(), time_tool());
    let tools = [&weather, &time];

    // Turn 1: the task alone.
    let first = vec![
        Message::System {
            content: "You are Antler.".to_owned(),
        },
        Message::human("Weather and time in Paris?"),
    ];
    let body1 = request_body(&config, &ModelRequest::new(&first, &tools, &[]));
    assert_eq!(
        breakpoints(&body1),
        ["tools[1]", "system[0]", "messages[0][0]"]
    );
    assert_eq!(
        body1["system"],
        json!([{"type": "text", "text": "You are Antler.", "cache_control": {"type": "ephemeral"}}])
    );

    // Turn 2, after the tool loop: the same tools and system, marked the same way, and
    // the last two turns marked (never the thinking block).
    let messages = tool_loop();
    let body2 = request_body(&config, &ModelRequest::new(&messages, &tools, &[]));
    assert_eq!(
        breakpoints(&body2),
        ["tools[1]", "system[0]", "messages[1][2]", "messages[2][2]"]
    );
    assert_eq!(body1["tools"], body2["tools"]);
    assert_eq!(body1["system"], body2["system"]);
}

#[test]
fn with_thinking_on_the_limit_of_four_holds_and_thinking_blocks_stay_unmarked() {
    let config = config(
        "supports_thinking: true\nmax_tokens: 4096\nwhen_thinking_enabled:\n  thinking: {type: enabled}\nprompt_cache_size: 10",
    );
    let (weather, time) = (weather_tool(), time_tool());
    let tools = [&weather, &time];
    let mut messages = tool_loop();
    messages.push(Message::Ai {
        id: "ai-2".to_owned(),
        content: "More.".to_owned(),
        tool_calls: Vec::new(),
        reasoning: None,
    });
    messages.push(Message::human("Go on."));
    let body = request_body(&config, &ModelRequest::new(&messages, &tools, &[]));
    let marks = breakpoints(&body);
    assert_eq!(marks.len(), 4, "{marks:?}");
    assert_eq!(&marks[..2], ["tools[1]", "system[0]"]);
}

#[test]
fn an_oauth_token_goes_as_a_bearer_with_its_betas_and_turns_caching_off() {
    let oauth = AnthropicConfig::from_model_config(
        &entry("name: claude\nuse: deerflow.models.claude_provider:ClaudeChatModel\nmodel: claude-sonnet-4-5\n"),
        &|name| (name == "CLAUDE_CODE_OAUTH_TOKEN").then(|| "sk-ant-oat01-secret".to_owned()),
    )
    .unwrap();
    assert!(oauth.is_oauth() && !oauth.prompt_caching);
    let tool = weather_tool();
    let tools = [&tool];
    let messages = tool_loop();
    let body = request_body(&oauth, &ModelRequest::new(&messages, &tools, &[]));
    assert!(breakpoints(&body).is_empty(), "{body}");
    let model = AnthropicModel::new(oauth).unwrap();
    let headers: Vec<(String, String)> = model
        .endpoint
        .headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        headers,
        [
            ("anthropic-version".to_owned(), "2023-06-01".to_owned()),
            (
                "authorization".to_owned(),
                "Bearer sk-ant-oat01-secret".to_owned()
            ),
            ("anthropic-beta".to_owned(), OAUTH_BETAS.to_owned()),
        ]
    );
    // The key never shows in Debug.
    assert!(!format!("{model:?}").contains("sk-ant-oat01-secret"));
}

#[test]
fn an_api_key_goes_as_x_api_key_to_base_url_v1_messages() {
    let model = AnthropicModel::new(config("betas: [context-1m-2025-08-07]")).unwrap();
    assert_eq!(model.endpoint.url, "https://api.anthropic.com/v1/messages");
    let names: Vec<String> = model
        .endpoint
        .headers
        .iter()
        .map(|(k, _)| k.to_string())
        .collect();
    assert_eq!(names, ["anthropic-version", "x-api-key", "anthropic-beta"]);
    assert_eq!(model.endpoint.headers[1].1.to_str().unwrap(), "sk-ant-test");
    assert!(model.endpoint.headers[1].1.is_sensitive());
    assert!(!format!("{model:?}").contains("sk-ant-test"));

    // A base URL that already names /v1 is not given a second one.
    let proxy = config("base_url: http://127.0.0.1:4000/v1/");
    assert_eq!(proxy.endpoint(), "http://127.0.0.1:4000/v1/messages");
    let gateway = config("base_url: http://gw.internal/anthropic");
    assert_eq!(
        gateway.endpoint(),
        "http://gw.internal/anthropic/v1/messages"
    );
    let hint = AnthropicModel::new(gateway)
        .unwrap()
        .endpoint
        .not_found_hint;
    assert!(hint
        .unwrap()
        .contains("here http://gw.internal/anthropic/v1/messages"),);
}

#[test]
fn the_key_and_endpoint_come_from_deerflow_keys_or_the_environment() {
    let env = |name: &str| match name {
        "ANTHROPIC_API_KEY" => Some("sk-ant-env".to_owned()),
        "ANTHROPIC_BASE_URL" => Some("http://127.0.0.1:9/".to_owned()),
        "MY_KEY" => Some("sk-ant-var".to_owned()),
        _ => None,
    };
    let from_env = AnthropicConfig::from_model_config(
        &entry("name: c\nuse: langchain_anthropic:ChatAnthropic\nmodel: m\n"),
        &env,
    )
    .unwrap();
    assert_eq!(from_env.api_key.unwrap().expose(), "sk-ant-env");
    assert_eq!(from_env.base_url, "http://127.0.0.1:9");
    let named = AnthropicConfig::from_model_config(
        &entry("name: c\nuse: langchain_anthropic:ChatAnthropic\nmodel: m\nanthropic_api_key: $MY_KEY\n"),
        &env,
    )
    .unwrap();
    assert_eq!(named.api_key.unwrap().expose(), "sk-ant-var");
    let unset = AnthropicConfig::from_model_config(
        &entry("name: c\nuse: langchain_anthropic:ChatAnthropic\nmodel: m\napi_key: $NOPE\n"),
        &env,
    )
    .unwrap_err();
    assert_eq!(
        unset.to_string(),
        "model `c`: api_key names $NOPE, which is not set"
    );
    // The provider dispatch builds this client for both DeerFlow ids.
    for use_ in [
        "langchain_anthropic:ChatAnthropic",
        "deerflow.models.claude_provider:ClaudeChatModel",
    ] {
        let e = entry(&format!("name: c\nuse: {use_}\nmodel: m\n"));
        assert_eq!(
            crate::model::check_model_entry(&e, &env).unwrap(),
            crate::model::Provider::Anthropic
        );
        assert_eq!(
            crate::model::model_from_entry(&e, &env).unwrap().name(),
            "c"
        );
    }
}

#[test]
fn a_subagent_gets_the_entry_with_its_endpoint_and_key_written_out() {
    let env = |name: &str| (name == "ANTHROPIC_API_KEY").then(|| "sk-ant-env".to_owned());
    let e = entry("name: c\nuse: langchain_anthropic:ChatAnthropic\nmodel: m\nmax_tokens: 2048\n");
    let model = AnthropicModel::from_model_config(&e, &env).unwrap();
    struct Task;
    impl crate::model::SubagentRequest for Task {
        fn description(&self) -> &str {
            "t"
        }
        fn subagent_type(&self) -> &str {
            "general-purpose"
        }
    }
    let Some(WireModel::Entry { entry: sent }) = model.for_subagent(&Task) else {
        panic!("no entry");
    };
    assert_eq!(sent.base_url.as_deref(), Some("https://api.anthropic.com"));
    assert_eq!(sent.api_key.as_deref(), Some("sk-ant-env"));
    assert_eq!(sent.extra["max_tokens"], 2048);
    // The worker builds the same client from it with no environment at all.
    let rebuilt = AnthropicConfig::from_model_config(&sent, &no_env).unwrap();
    assert_eq!(rebuilt.api_key.unwrap().expose(), "sk-ant-env");
    assert_eq!(rebuilt.max_tokens, 2048);
}

#[test]
fn thinking_gets_its_budget_when_on_and_nothing_is_sent_when_off() {
    let messages = [Message::human("Think.")];
    let thinking_of = |config: &AnthropicConfig, on: bool| {
        let mut request = ModelRequest::new(&messages, &[], &[]);
        request.thinking = on;
        request_body(config, &request).get("thinking").cloned()
    };
    // No budget: 80% of max_tokens (DeerFlow's automatic budget).
    let auto = config(
        "supports_thinking: true\nmax_tokens: 16000\nwhen_thinking_enabled:\n  thinking: {type: enabled}",
    );
    assert_eq!(
        thinking_of(&auto, true),
        Some(json!({"type": "enabled", "budget_tokens": 12800}))
    );
    assert_eq!(thinking_of(&auto, false), None);
    // The `thinking` shortcut, with a budget as written, and `when_thinking_disabled`.
    let explicit = config(
        "supports_thinking: true\nmax_tokens: 4096\nthinking: {type: enabled, budget_tokens: 2048}\nwhen_thinking_disabled:\n  thinking: {type: disabled}\ntemperature: 0.3\ntop_k: 5",
    );
    // The API refuses temperature and top_k with thinking; they stay for calls without.
    let mut request = ModelRequest::new(&messages, &[], &[]);
    let with = request_body(&explicit, &request);
    assert!(with.get("temperature").is_none() && with.get("top_k").is_none());
    request.thinking = false;
    let without = request_body(&explicit, &request);
    assert_eq!(
        (&without["temperature"], &without["top_k"]),
        (&json!(0.3), &json!(5))
    );
    assert_eq!(
        thinking_of(&explicit, true),
        Some(json!({"type": "enabled", "budget_tokens": 2048}))
    );
    assert_eq!(
        thinking_of(&explicit, false),
        Some(json!({"type": "disabled"}))
    );
    // A model that does not support thinking never gets it.
    let unsupported = config("max_tokens: 4096\nthinking: {type: enabled, budget_tokens: 2048}");
    assert_eq!(thinking_of(&unsupported, true), None);
    // The default max_tokens (8192) gives 6553.
    let default = config("supports_thinking: true\nthinking: {type: enabled}");
    assert_eq!(
        thinking_of(&default, true),
        Some(json!({"type": "enabled", "budget_tokens": 6553}))
    );

    // Budgets the API refuses are config errors.
    let error = |extra: &str| {
        let yaml = format!("name: claude\nuse: langchain_anthropic:ChatAnthropic\nmodel: m\nsupports_thinking: true\n{extra}");
        AnthropicConfig::from_model_config(&entry(&yaml), &no_env)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        error("max_tokens: 1000\nthinking: {type: enabled}"),
        "model `claude`: thinking budget_tokens 800 must be at least 1024 and less than max_tokens 1000"
    );
    assert_eq!(
        error("max_tokens: 4096\nthinking: {type: enabled, budget_tokens: 4096}"),
        "model `claude`: thinking budget_tokens 4096 must be at least 1024 and less than max_tokens 4096"
    );
}

#[test]
fn thinking_blocks_go_back_before_the_tool_use_blocks_only_with_thinking_on() {
    let config = config(
        "supports_thinking: true\nmax_tokens: 4096\nthinking: {type: enabled}\nenable_prompt_caching: false",
    );
    let mut messages = tool_loop();
    if let Message::Ai { reasoning, .. } = &mut messages[2] {
        let r = reasoning.as_mut().unwrap();
        r.replay.push(ReplayItem {
            provider: REPLAY_PROVIDER.to_owned(),
            item: json!({"type": "redacted_thinking", "data": "EmwKAhgB"}),
        });
    }
    let body = request_body(&config, &ModelRequest::new(&messages, &[], &[]));
    let assistant = &messages_of(&body)[1]["content"];
    let kinds: Vec<&str> = assistant
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "thinking",
            "redacted_thinking",
            "text",
            "tool_use",
            "tool_use"
        ]
    );
    assert_eq!(
        assistant[0],
        json!({"type": "thinking", "thinking": "Two tools.", "signature": "sig-1"})
    );

    // Thinking off (an auxiliary call): the blocks stay home.
    let mut request = ModelRequest::new(&messages, &[], &[]);
    request.thinking = false;
    let off = request_body(&config, &request);
    assert_eq!(messages_of(&off)[1]["content"][0]["type"], "text");
}

/// The events of a stream as `data` lines (the event name is the JSON's `type`).
fn assemble<'a>(
    request: &ModelRequest<'a>,
    events: &[Value],
) -> (ReplyAssembler<'a>, Result<(), ModelError>) {
    let mut assembler = ReplyAssembler::new("claude", request);
    for event in events {
        if let Err(e) = assembler.push_event(&event.to_string()) {
            return (assembler, Err(e));
        }
    }
    (assembler, Ok(()))
}

fn message_start(usage: Value) -> Value {
    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage}})
}

fn message_end(stop_reason: &str, usage: Value) -> [Value; 2] {
    [
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": usage}),
        json!({"type": "message_stop"}),
    ]
}

#[derive(Default)]
struct Heard {
    text: Mutex<Vec<String>>,
    reasoning: Mutex<Vec<String>>,
}

impl ModelObserver for Heard {
    fn text_delta(&self, text: &str) {
        self.text.lock().unwrap().push(text.to_owned());
    }
    fn reasoning_delta(&self, text: &str) {
        self.reasoning.lock().unwrap().push(text.to_owned());
    }
}

#[test]
fn a_streamed_text_reply_is_assembled_and_heard_piece_by_piece() {
    // The SDK's `basic_response.txt` fixture.
    let messages = [Message::human("Hi")];
    let heard = Heard::default();
    let mut request = ModelRequest::new(&messages, &[], &[]);
    request.observer = Some(&heard);
    let mut events = vec![
        message_start(json!({"input_tokens": 11, "output_tokens": 1})),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "ping"}),
    ];
    for piece in ["Hello", " there", "!"] {
        events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}));
    }
    events.push(json!({"type": "content_block_stop", "index": 0}));
    events.extend(message_end("end_turn", json!({"output_tokens": 6})));
    let (assembler, outcome) = assemble(&request, &events);
    outcome.unwrap();
    assert!(assembler.finished());
    let reply = assembler.finish().unwrap();
    assert_eq!(reply.id, "ai-1");
    assert_eq!(reply.content, "Hello there!");
    assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
    assert_eq!(reply.reasoning, None);
    assert_eq!(
        reply.usage,
        Some(TokenUsage {
            input_tokens: 11,
            output_tokens: 6,
            total_tokens: 17,
            ..TokenUsage::default()
        })
    );
    assert_eq!(*heard.text.lock().unwrap(), ["Hello", " there", "!"]);
}

#[test]
fn a_tool_use_streamed_in_pieces_is_one_call_and_usage_counts_the_cache() {
    // The SDK's `tool_use_response.txt` fixture, with cache counts.
    let messages = [Message::human("Weather in Paris?")];
    let request = ModelRequest::new(&messages, &[], &[]);
    let mut events = vec![
        message_start(
            json!({"input_tokens": 377, "cache_creation_input_tokens": 1200,
            "cache_read_input_tokens": 3000, "output_tokens": 1, "service_tier": "standard"}),
        ),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "I'll check."}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use",
            "id": "toolu_01NRLabsLyVHZPKxbKvkfSMn", "name": "get_weather", "input": {}}}),
    ];
    for piece in ["", "{\"locati", "on\": \"P", "ar", "is\"}"] {
        events.push(json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": piece}}));
    }
    events.push(json!({"type": "content_block_stop", "index": 1}));
    events.extend(message_end("tool_use", json!({"output_tokens": 65})));
    let (assembler, outcome) = assemble(&request, &events);
    outcome.unwrap();
    let reply = assembler.finish().unwrap();
    assert_eq!(reply.content, "I'll check.");
    assert_eq!(
        reply.tool_calls,
        [ToolCall {
            id: "toolu_01NRLabsLyVHZPKxbKvkfSMn".to_owned(),
            name: "get_weather".to_owned(),
            args: json!({"location": "Paris"}),
        }]
    );
    assert!(reply.invalid_calls.is_empty());
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        reply.usage,
        Some(TokenUsage {
            input_tokens: 377 + 1200 + 3000,
            output_tokens: 65,
            total_tokens: 377 + 1200 + 3000 + 65,
            cache_creation_input_tokens: 1200,
            cache_read_input_tokens: 3000,
            reasoning_tokens: 0,
        })
    );
}

#[test]
fn a_call_split_into_blocks_with_one_id_is_one_call() {
    // LiteLLM streams a call as one block per JSON fragment, all with the same id.
    let messages = [Message::human("Weather?")];
    let request = ModelRequest::new(&messages, &[], &[]);
    let mut events = vec![message_start(
        json!({"input_tokens": 0, "output_tokens": 0}),
    )];
    for (index, piece) in ["{", " \"city", "\": \"Paris\"", " }", ""]
        .iter()
        .enumerate()
    {
        events.push(
            json!({"type": "content_block_start", "index": index, "content_block":
            {"type": "tool_use", "id": "call_0", "name": "get_weather", "input": {}}}),
        );
        events.push(json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}));
        events.push(json!({"type": "content_block_stop", "index": index}));
    }
    events.extend(message_end(
        "tool_use",
        json!({"input_tokens": 14, "output_tokens": 75}),
    ));
    let (assembler, outcome) = assemble(&request, &events);
    outcome.unwrap();
    let reply = assembler.finish().unwrap();
    assert_eq!(reply.tool_calls.len(), 1, "{reply:?}");
    assert_eq!(reply.tool_calls[0].args, json!({"city": "Paris"}));
    assert_eq!(reply.usage.unwrap().input_tokens, 14);
}

#[test]
fn thinking_with_its_signature_is_kept_for_replay_and_never_in_the_answer() {
    let messages = [Message::human("27 * 453?")];
    let heard = Heard::default();
    let mut request = ModelRequest::new(&messages, &[], &[]);
    request.observer = Some(&heard);
    let events = [
        message_start(json!({"input_tokens": 50, "output_tokens": 1})),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me solve this step by step:\n\n1. "}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "27 * 453 = 12231"}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "27 * 453 = 12,231"}}),
        json!({"type": "content_block_stop", "index": 2}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 90}}),
        json!({"type": "message_stop"}),
    ];
    let (assembler, outcome) = assemble(&request, &events);
    outcome.unwrap();
    let reply = assembler.finish().unwrap();
    assert_eq!(reply.content, "27 * 453 = 12,231");
    let reasoning = reply.reasoning.unwrap();
    assert_eq!(
        reasoning.text,
        "Let me solve this step by step:\n\n1. 27 * 453 = 12231"
    );
    assert_eq!(
        reasoning.replay,
        [
            thinking_block(
                "Let me solve this step by step:\n\n1. 27 * 453 = 12231",
                "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
            ),
            ReplayItem {
                provider: REPLAY_PROVIDER.to_owned(),
                item: json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}),
            },
        ]
    );
    assert_eq!(
        *heard.reasoning.lock().unwrap(),
        ["Let me solve this step by step:\n\n1. ", "27 * 453 = 12231"]
    );
    assert_eq!(*heard.text.lock().unwrap(), ["27 * 453 = 12,231"]);
}

#[test]
fn stop_reasons_are_mapped_to_the_finish_reasons_the_caps_read() {
    for (stop_reason, finish) in [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("tool_use", "tool_calls"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("refusal", "content_filter"),
        ("something_new", "something_new"),
    ] {
        assert_eq!(map_stop_reason(stop_reason), finish);
    }
}

#[test]
fn a_tool_use_whose_json_does_not_parse_is_an_invalid_call_never_a_call() {
    // The SDK's `tool_use_invalid_json_response.txt` shape: JSON cut at max_tokens, and
    // a second call whose input is not an object.
    let messages = [Message::human("Write it.")];
    let request = ModelRequest::new(&messages, &[], &[]);
    let mut events = vec![message_start(
        json!({"input_tokens": 5, "output_tokens": 1}),
    )];
    events.push(
        json!({"type": "content_block_start", "index": 0, "content_block":
        {"type": "tool_use", "id": "toolu_a", "name": "write_file", "input": {}}}),
    );
    events.push(json!({"type": "content_block_delta", "index": 0, "delta":
        {"type": "input_json_delta", "partial_json": "{\"path\": \"a.md\", \"content\": \"# Title\\nhello wor"}}));
    events.push(
        json!({"type": "content_block_start", "index": 1, "content_block":
        {"type": "tool_use", "id": "toolu_b", "name": "ls", "input": {}}}),
    );
    events.push(json!({"type": "content_block_delta", "index": 1, "delta":
        {"type": "input_json_delta", "partial_json": "[1, 2]"}}));
    events.extend(message_end("max_tokens", json!({"output_tokens": 30})));
    let (assembler, outcome) = assemble(&request, &events);
    outcome.unwrap();
    let reply = assembler.finish().unwrap();
    assert!(reply.tool_calls.is_empty(), "{reply:?}");
    assert_eq!(reply.finish_reason.as_deref(), Some("length"));
    assert_eq!(reply.invalid_calls.len(), 2);
    let cut = &reply.invalid_calls[0];
    assert_eq!(
        (cut.id.as_str(), cut.name.as_str()),
        ("toolu_a", "write_file")
    );
    assert_eq!(
        cut.arguments,
        "{\"path\": \"a.md\", \"content\": \"# Title\\nhello wor"
    );
    assert!(cut.error.starts_with("not JSON ("), "{}", cut.error);
    assert_eq!(
        reply.invalid_calls[1].error,
        "expected a JSON object, got [1,2]"
    );
}

#[test]
fn a_stream_without_message_stop_is_unfinished_and_an_error_event_fails_the_reply() {
    let messages = [Message::human("Hi")];
    let request = ModelRequest::new(&messages, &[], &[]);
    let cut = [
        message_start(json!({"input_tokens": 5, "output_tokens": 1})),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
    ];
    let (assembler, outcome) = assemble(&request, &cut);
    outcome.unwrap();
    // The transport reads `finished() == false` at the end of the body as a cut stream.
    assert!(!assembler.finished());

    let overloaded = [
        message_start(json!({"input_tokens": 5, "output_tokens": 1})),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ];
    let (_, outcome) = assemble(&request, &overloaded);
    assert_eq!(
        outcome.unwrap_err().to_string(),
        "model `claude`: HTTP 529 after 1 attempt(s): the server sent an error event (overloaded_error): Overloaded"
    );

    let mut garbage = ReplyAssembler::new("claude", &request);
    let error = garbage.push_event("{not json").unwrap_err().to_string();
    assert!(error.contains("a stream event is not JSON"), "{error}");
}

#[test]
fn a_whole_message_is_read_like_a_stream() {
    // The Messages API's documented non-streamed reply.
    let messages = [Message::human("Weather?")];
    let request = ModelRequest::new(&messages, &[], &[]);
    let mut assembler = ReplyAssembler::new("claude", &request);
    assembler
        .push_message(&json!({
            "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [
                {"type": "thinking", "thinking": "Use the tool.", "signature": "sig"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": "Paris"},
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 21, "output_tokens": 8, "cache_read_input_tokens": 100},
        }))
        .unwrap();
    assert!(assembler.finished());
    let reply = assembler.finish().unwrap();
    assert_eq!(reply.content, "Checking.");
    assert_eq!(reply.tool_calls.len(), 1);
    assert_eq!(reply.tool_calls[0].args, json!({"city": "Paris"}));
    assert_eq!(reply.invalid_calls[0].id, "toolu_2");
    assert_eq!(reply.reasoning.unwrap().text, "Use the tool.");
    let usage = reply.usage.unwrap();
    assert_eq!(
        (usage.input_tokens, usage.cache_read_input_tokens),
        (121, 100)
    );

    let mut error = ReplyAssembler::new("claude", &request);
    let message = error
        .push_message(&json!({"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"}}))
        .unwrap_err()
        .to_string();
    assert!(
        message.ends_with("(invalid_request_error): max_tokens: Field required"),
        "{message}"
    );
}
