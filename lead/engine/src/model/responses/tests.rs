//! Unit tests of the Responses client: the request shape (instructions, input items,
//! flat tools, reasoning, store/include, Codex's rules, the thinking toggle), the
//! assembly of documented event sequences and whole replies, reasoning items kept and
//! sent back, finish reasons, and Azure's Responses URL. Network behaviour is tested in
//! `tests/tests/suite/model_responses.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;

use antler_protocol::config::ModelConfig;
use serde_json::{json, Value};

use super::config::ResponsesConfig;
use super::wire::{request_body, ResponsesAssembler};
use super::*;
use crate::catalog::ToolSpec;
use crate::model::{finish_reason, ModelObserver};
use crate::thread::state::{Message, Reasoning, ReplayItem, TokenUsage, ToolCall, ToolStatus};

fn weather_tool() -> ToolSpec {
    ToolSpec::builtin(
        "get_weather",
        "The weather in a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

fn entry(yaml: &str) -> ModelConfig {
    serde_yaml::from_str(yaml).unwrap()
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn config_of(yaml: &str) -> ResponsesConfig {
    let entry = entry(yaml);
    let common = crate::model::entry::Common::of(
        &entry,
        &no_env,
        &crate::model::openai::config::OPENAI_DEFAULTS,
    )
    .unwrap();
    ResponsesConfig::of_entry(&entry, common).unwrap()
}

fn reasoning_item(id: &str, encrypted: Option<&str>) -> ReplayItem {
    let mut item = json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": "Look it up."}]});
    if let Some(e) = encrypted {
        item["encrypted_content"] = json!(e);
    }
    ReplayItem {
        provider: "openai_responses".into(),
        item,
    }
}

fn conversation() -> Vec<Message> {
    vec![
        Message::System {
            content: "Be brief.".into(),
        },
        Message::human("Weather in Paris?"),
        Message::Ai {
            id: "ai-1".into(),
            content: "Checking.".into(),
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "get_weather".into(),
                args: json!({"city": "Paris"}),
            }],
            reasoning: Some(Reasoning {
                text: "Look it up.".into(),
                replay: vec![
                    reasoning_item("rs_1", Some("gAAAA-secret")),
                    // Another provider's item never goes to this one.
                    ReplayItem {
                        provider: "anthropic".into(),
                        item: json!({"type": "thinking"}),
                    },
                ],
            }),
        },
        Message::tool("call_1", "get_weather", "sunny", ToolStatus::Success),
    ]
}

#[test]
fn messages_and_tools_become_input_items_and_flat_function_tools() {
    let tool = weather_tool();
    let tools = [&tool];
    let messages = conversation();
    let mut config = ResponsesConfig::new("r", "gpt-5", "http://h/v1/");
    config.params.insert(
        "tool_choice".into(),
        json!({"type": "function", "function": {"name": "get_weather"}}),
    );
    config.max_output_tokens = Some(json!(256));
    config.reasoning.insert("effort".into(), json!("low"));
    assert_eq!(config.endpoint(), "http://h/v1/responses");
    let body = request_body(&config, &ModelRequest::new(&messages, &tools, &[]));
    assert_eq!(
        body,
        json!({
            "model": "gpt-5",
            "instructions": "Be brief.",
            "input": [
                {"type": "message", "role": "user", "content": "Weather in Paris?"},
                // The turn's reasoning item goes back before its text and its calls.
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look it up."}], "encrypted_content": "gAAAA-secret"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            ],
            "tools": [{"type": "function", "name": "get_weather", "description": "The weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                "strict": false}],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "stream": true,
            "store": false,
            "max_output_tokens": 256,
            "reasoning": {"effort": "low"},
            "include": ["reasoning.encrypted_content"],
        })
    );
    // No tools: neither `tools` nor `tool_choice`; no reasoning asked: no `include`.
    let plain = ResponsesConfig::new("r", "gpt-4.1", "http://h/v1");
    let body = request_body(&plain, &ModelRequest::new(&messages[..2], &[], &[]));
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
    assert!(body.get("include").is_none() && body.get("reasoning").is_none());
}

#[test]
fn without_encrypted_content_a_reasoning_item_goes_back_only_when_stored() {
    let mut messages = conversation();
    if let Message::Ai { reasoning, .. } = &mut messages[2] {
        *reasoning = Some(Reasoning {
            text: String::new(),
            replay: vec![reasoning_item("rs_2", None)],
        });
    }
    let request = ModelRequest::new(&messages, &[], &[]);
    let mut config = ResponsesConfig::new("r", "m", "http://h/v1");
    let types = |body: &Value| -> Vec<String> {
        body["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["type"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(!types(&request_body(&config, &request)).contains(&"reasoning".to_owned()));
    config.store = true;
    let body = request_body(&config, &request);
    assert_eq!(types(&body)[1], "reasoning");
    assert_eq!(body["store"], json!(true));
}

#[test]
fn entry_keys_become_reasoning_store_and_limits() {
    let config = config_of(
        "name: r\nuse: langchain_openai:ChatOpenAI\nmodel: o4-mini\nbase_url: http://h/v1\n\
         use_responses_api: true\noutput_version: responses/v1\nmax_tokens: 500\n\
         reasoning: {effort: high, summary: auto}\nstore: true\ntemperature: 1\n\
         extra_body: {service_tier: flex}\n",
    );
    let body = request_body(
        &config,
        &ModelRequest::new(&[Message::human("hi")], &[], &[]),
    );
    assert_eq!(body["max_output_tokens"], json!(500));
    assert_eq!(
        body["reasoning"],
        json!({"effort": "high", "summary": "auto"})
    );
    assert_eq!(body["store"], json!(true));
    assert_eq!(body["stream"], json!(true));
    let whole = config_of("name: r\nuse: x:Y\nmodel: m\nbase_url: http://h/v1\nstreaming: false\n");
    assert_eq!(
        request_body(&whole, &ModelRequest::new(&[], &[], &[]))["stream"],
        json!(false)
    );
    // Stored responses need no encrypted reasoning.
    assert!(body.get("include").is_none());
    assert_eq!(body["temperature"], json!(1));
    assert_eq!(body["service_tier"], json!("flex"));

    // `reasoning_effort` counts only with `supports_reasoning_effort`.
    let dropped =
        config_of("name: r\nuse: x:Y\nmodel: m\nbase_url: http://h/v1\nreasoning_effort: high\n");
    assert!(dropped.reasoning.is_empty());
    let kept = config_of("name: r\nuse: x:Y\nmodel: m\nbase_url: http://h/v1\nreasoning_effort: high\nsupports_reasoning_effort: true\n");
    assert_eq!(kept.reasoning["effort"], json!("high"));

    let bad = entry("name: r\nuse: x:Y\nmodel: m\nbase_url: http://h/v1\noutput_version: v9\n");
    let common = crate::model::entry::Common::of(
        &bad,
        &no_env,
        &crate::model::openai::config::OPENAI_DEFAULTS,
    )
    .unwrap();
    assert_eq!(
        ResponsesConfig::of_entry(&bad, common)
            .unwrap_err()
            .to_string(),
        "model `r`: output_version `v9` is not one Antler reads: responses/v1"
    );
}

#[test]
fn codex_drops_max_tokens_and_its_effort_follows_thinking() {
    let yaml = "name: codex\nuse: deerflow.models.openai_codex_provider:CodexChatModel\n\
                model: gpt-5-codex\nbase_url: http://h/v1\nmax_tokens: 900\nsupports_thinking: true\n";
    let config = config_of(yaml);
    let messages = [Message::human("hi")];
    let mut request = ModelRequest::new(&messages, &[], &[]);
    let on = request_body(&config, &request);
    assert!(on.get("max_output_tokens").is_none(), "{on}");
    assert_eq!(
        on["reasoning"],
        json!({"effort": "medium", "summary": "auto"})
    );
    assert_eq!(on["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(on["store"], json!(false));
    request.thinking = false;
    let off = request_body(&config, &request);
    assert_eq!(off["reasoning"], json!({"effort": "none"}));
    assert!(off.get("include").is_none());
    // An explicit effort is kept when thinking is on.
    let explicit = config_of(&format!("{yaml}reasoning_effort: high\n"));
    request.thinking = true;
    assert_eq!(
        request_body(&explicit, &request)["reasoning"]["effort"],
        json!("high")
    );
}

#[test]
fn the_thinking_toggle_reaches_the_responses_body() {
    let config = config_of(
        "name: r\nuse: x:Y\nmodel: m\nbase_url: http://h/v1\nsupports_thinking: true\n\
         when_thinking_enabled: {reasoning: {effort: high}}\n\
         when_thinking_disabled: {reasoning: {effort: minimal}, extra_body: {text: {verbosity: low}}}\n",
    );
    let messages = [Message::human("hi")];
    let mut request = ModelRequest::new(&messages, &[], &[]);
    assert_eq!(
        request_body(&config, &request)["reasoning"],
        json!({"effort": "high"})
    );
    request.thinking = false;
    let off = request_body(&config, &request);
    assert_eq!(off["reasoning"], json!({"effort": "minimal"}));
    assert_eq!(off["text"], json!({"verbosity": "low"}));
}

/// An SSE event's data as the Responses API documents it.
fn ev(kind: &str, mut fields: Value) -> String {
    fields["type"] = json!(kind);
    fields.to_string()
}

#[derive(Default)]
struct Heard(Mutex<Vec<String>>);

impl ModelObserver for Heard {
    fn text_delta(&self, text: &str) {
        self.0.lock().unwrap().push(format!("text:{text}"));
    }
    fn reasoning_delta(&self, text: &str) {
        self.0.lock().unwrap().push(format!("reasoning:{text}"));
    }
}

#[test]
fn a_streamed_reply_assembles_reasoning_text_calls_and_usage() {
    let heard = Heard::default();
    let messages = conversation();
    let mut request = ModelRequest::new(&messages, &[], &[]);
    request.observer = Some(&heard);
    let mut assembler = ResponsesAssembler::new("r", &request);
    let reasoning_done = json!({"id": "rs_9", "type": "reasoning", "summary": [
        {"type": "summary_text", "text": "First."}, {"type": "summary_text", "text": "Second."}],
        "encrypted_content": "gAAAA-enc"});
    let events = [
        ev(
            "response.created",
            json!({"response": {"id": "resp_1", "status": "in_progress", "output": []}, "sequence_number": 0}),
        ),
        ev(
            "response.output_item.added",
            json!({"output_index": 0, "item": {"id": "rs_9", "type": "reasoning", "summary": []}, "sequence_number": 1}),
        ),
        ev(
            "response.reasoning_summary_text.delta",
            json!({"item_id": "rs_9", "output_index": 0, "summary_index": 0, "delta": "First.", "sequence_number": 2}),
        ),
        ev(
            "response.reasoning_summary_text.delta",
            json!({"item_id": "rs_9", "output_index": 0, "summary_index": 1, "delta": "Second.", "sequence_number": 3}),
        ),
        ev(
            "response.output_item.done",
            json!({"output_index": 0, "item": reasoning_done, "sequence_number": 4}),
        ),
        ev(
            "response.output_item.added",
            json!({"output_index": 1, "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "status": "in_progress"}, "sequence_number": 5}),
        ),
        ev(
            "response.output_text.delta",
            json!({"item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": "Check", "sequence_number": 6}),
        ),
        ev(
            "response.output_text.delta",
            json!({"item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": "ing.", "sequence_number": 7}),
        ),
        ev(
            "response.output_item.done",
            json!({"output_index": 1, "item": {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]}, "sequence_number": 8}),
        ),
        ev(
            "response.output_item.added",
            json!({"output_index": 2, "item": {"id": "fc_1", "type": "function_call", "call_id": "call_7", "name": "get_weather", "arguments": "", "status": "in_progress"}, "sequence_number": 9}),
        ),
        ev(
            "response.function_call_arguments.delta",
            json!({"item_id": "fc_1", "output_index": 2, "delta": "{\"city\":", "sequence_number": 10}),
        ),
        ev(
            "response.function_call_arguments.delta",
            json!({"item_id": "fc_1", "output_index": 2, "delta": "\"Oslo\"}", "sequence_number": 11}),
        ),
        ev(
            "response.function_call_arguments.done",
            json!({"item_id": "fc_1", "output_index": 2, "arguments": "{\"city\":\"Oslo\"}", "sequence_number": 12}),
        ),
        ev(
            "response.output_item.done",
            json!({"output_index": 2, "item": {"id": "fc_1", "type": "function_call", "call_id": "call_7", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}", "status": "completed"}, "sequence_number": 13}),
        ),
        ev(
            "response.completed",
            json!({"response": {"id": "resp_1", "status": "completed", "incomplete_details": null, "error": null,
            "output": [reasoning_done, {"id": "msg_1", "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
                {"id": "fc_1", "type": "function_call", "call_id": "call_7", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}],
            "usage": {"input_tokens": 300, "input_tokens_details": {"cached_tokens": 128}, "output_tokens": 90,
                "output_tokens_details": {"reasoning_tokens": 64}, "total_tokens": 390}}, "sequence_number": 14}),
        ),
    ];
    for (n, data) in events.iter().enumerate() {
        let flow = assembler.push_event(None, data).unwrap();
        assert_eq!(flow == Flow::Done, n == events.len() - 1);
    }
    assert!(assembler.finished());
    let reply = assembler.finish().unwrap();
    assert_eq!(reply.id, "ai-2");
    assert_eq!(reply.content, "Checking.");
    assert_eq!(
        reply.tool_calls,
        vec![ToolCall {
            id: "call_7".into(),
            name: "get_weather".into(),
            args: json!({"city": "Oslo"})
        }]
    );
    assert_eq!(
        reply.finish_reason.as_deref(),
        Some(finish_reason::TOOL_CALLS)
    );
    assert_eq!(
        reply.usage,
        Some(TokenUsage {
            input_tokens: 300,
            output_tokens: 90,
            total_tokens: 390,
            cache_read_input_tokens: 128,
            reasoning_tokens: 64,
            ..TokenUsage::default()
        })
    );
    let reasoning = reply.reasoning.unwrap();
    assert_eq!(reasoning.text, "First.\n\nSecond.");
    assert_eq!(
        reasoning.replay,
        vec![ReplayItem {
            provider: "openai_responses".into(),
            item: json!({"type": "reasoning", "id": "rs_9", "summary": [
                {"type": "summary_text", "text": "First."}, {"type": "summary_text", "text": "Second."}],
                "encrypted_content": "gAAAA-enc"}),
        }]
    );
    assert_eq!(
        *heard.0.lock().unwrap(),
        [
            "reasoning:First.",
            "reasoning:Second.",
            "text:Check",
            "text:ing."
        ]
    );
}

#[test]
fn a_whole_response_and_its_status_give_the_finish_reason() {
    let request = ModelRequest::new(&[], &[], &[]);
    let read = |body: Value| {
        let mut assembler = ResponsesAssembler::new("r", &request);
        crate::model::transport::ReplyReader::whole(&mut assembler, &body)?;
        assembler.finish()
    };
    let text = json!({"id": "resp_2", "object": "response", "status": "completed", "error": null,
        "output": [{"type": "message", "id": "msg_2", "role": "assistant", "content": [{"type": "output_text", "text": "Hello!", "annotations": []}]}],
        "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7}});
    let reply = read(text).unwrap();
    assert_eq!(reply.content, "Hello!");
    assert_eq!(reply.finish_reason.as_deref(), Some(finish_reason::STOP));
    assert_eq!(reply.usage.unwrap().total_tokens, 7);

    for (reason, expected) in [
        ("max_output_tokens", finish_reason::LENGTH),
        ("content_filter", finish_reason::CONTENT_FILTER),
    ] {
        let cut =
            json!({"status": "incomplete", "incomplete_details": {"reason": reason}, "output": []});
        assert_eq!(read(cut).unwrap().finish_reason.as_deref(), Some(expected));
    }

    let failed = json!({"status": "failed", "error": {"code": "server_error", "message": "The model failed."}, "output": []});
    assert_eq!(
        read(failed).unwrap_err().to_string(),
        "model `r`: HTTP 500 after 1 attempt(s): the response failed: The model failed."
    );
}

#[test]
fn error_and_failed_events_fail_the_reply_and_bad_arguments_are_invalid_calls() {
    let request = ModelRequest::new(&[], &[], &[]);
    let mut assembler = ResponsesAssembler::new("r", &request);
    let err = assembler
        .push_event(Some("error"), &json!({"type": "error", "code": "rate_limit_exceeded", "message": "Slow down.", "param": null, "sequence_number": 3}).to_string())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "model `r`: HTTP 429 after 1 attempt(s): the server reported: Slow down."
    );

    let mut assembler = ResponsesAssembler::new("r", &request);
    let err = assembler
        .push_event(None, &ev("response.failed", json!({"response": {"status": "failed", "error": {"code": "server_error", "message": "boom"}}})))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "model `r`: HTTP 500 after 1 attempt(s): the response failed: boom"
    );

    let mut assembler = ResponsesAssembler::new("r", &request);
    assembler
        .push_event(None, &ev("response.output_item.done", json!({"output_index": 0, "item": {"type": "function_call", "call_id": "c", "name": "get_weather", "arguments": "{\"city\": \"Par"}})))
        .unwrap();
    // A stream that ends without a terminal event is not finished (the transport
    // retries it as a cut stream).
    assert!(!assembler.finished());
    let reply = assembler.finish().unwrap();
    assert!(reply.tool_calls.is_empty());
    assert_eq!(reply.invalid_calls[0].id, "c");
}

#[test]
fn the_provider_builds_responses_and_azure_clients_from_entries() {
    let env = |name: &str| match name {
        "AZURE_OPENAI_ENDPOINT" => Some("https://res.openai.azure.com/".to_owned()),
        "AZURE_OPENAI_API_KEY" => Some("az-key-123".to_owned()),
        _ => None,
    };
    let responses = entry("name: r\nuse: langchain_openai:ChatOpenAI\nmodel: gpt-5\nbase_url: http://h/v1\nwire_api: responses\n");
    assert_eq!(
        crate::model::check_model_entry(&responses, &env).unwrap(),
        crate::model::Provider::OpenAiResponses
    );
    let model = ResponsesModel::from_model_config(&responses, &env).unwrap();
    assert_eq!(model.endpoint.url, "http://h/v1/responses");

    let azure = entry("name: az\nuse: langchain_openai:AzureChatOpenAI\nmodel: gpt-4o\nazure_deployment: prod-4o\nuse_responses_api: true\n");
    let model = ResponsesModel::azure(&azure, &env).unwrap();
    assert_eq!(
        model.endpoint.url,
        "https://res.openai.azure.com/openai/v1/responses"
    );
    assert_eq!(model.config.model, "prod-4o");
    assert_eq!(model.endpoint.headers[0].0.as_str(), "api-key");
    let debug = format!("{model:?}");
    assert!(!debug.contains("az-key-123"), "{debug}");
    let dated = entry("name: az\nuse: langchain_openai:AzureChatOpenAI\nmodel: gpt-4o\napi_version: 2025-04-01-preview\nuse_responses_api: true\n");
    assert_eq!(
        ResponsesModel::azure(&dated, &env).unwrap().endpoint.url,
        "https://res.openai.azure.com/openai/responses?api-version=2025-04-01-preview"
    );
    // The worker gets the endpoint, deployment and key written out.
    let Some(WireModel::Entry { entry: wire }) = model.for_subagent(&NoTask) else {
        panic!("no wire entry");
    };
    assert_eq!(
        wire.base_url.as_deref(),
        Some("https://res.openai.azure.com")
    );
    assert_eq!(wire.api_key.as_deref(), Some("az-key-123"));
    assert_eq!(wire.extra["azure_deployment"], json!("prod-4o"));
}

use crate::model::transport::Flow;

struct NoTask;

impl crate::model::SubagentRequest for NoTask {
    fn description(&self) -> &str {
        "t"
    }
    fn subagent_type(&self) -> &str {
        "general-purpose"
    }
}
