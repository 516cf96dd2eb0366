//! Unit tests of the Gemini client: request building (roles, function responses matched
//! to calls by name, thought signatures sent back on their parts, images, thinking and
//! generation config), tool schema conversion, reply assembly from the documented
//! payloads (streamed and whole), usage, finish reasons, and the entry's settings.
//! Network behaviour is in `tests/tests/suite/model_gemini.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use antler_protocol::config::ModelConfig;
use serde_json::{json, Value};

use super::config::GeminiConfig;
use super::reply::{self, ReplyAssembler};
use super::request;
use super::schema::{convert, function_parameters};
use crate::catalog::ToolSpec;
use crate::model::stream::StreamItem;
use crate::model::transport::ReplyReader;
use crate::model::{check_model_entry, ImagePart, ModelError, ModelReply, ModelRequest, Provider};
use crate::thread::state::{Message, TokenUsage, ToolStatus};

fn entry(yaml: &str) -> ModelConfig {
    serde_yaml::from_str(yaml).unwrap()
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn config(extra: &str) -> GeminiConfig {
    let yaml = format!(
        "name: g\nuse: langchain_google_genai:ChatGoogleGenerativeAI\nmodel: gemini-2.5-flash\napi_key: k-123\n{extra}"
    );
    GeminiConfig::from_model_config(&entry(&yaml), &no_env).unwrap()
}

fn weather_tool() -> ToolSpec {
    ToolSpec::builtin(
        "get_weather",
        "The weather in a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}),
    )
}

/// Feeds SSE chunks (each a `GenerateContentResponse`) to an assembler.
fn assemble(request: &ModelRequest<'_>, chunks: &[Value]) -> Result<ModelReply, ModelError> {
    let mut reader = ReplyAssembler::new("g", request);
    for chunk in chunks {
        reader.item(&StreamItem {
            event: None,
            data: chunk.to_string(),
        })?;
    }
    assert!(reader.finished());
    reader.finish()
}

/// The documented streamed reply of a thinking model that calls a function: a thought
/// part, then the call with its signature, then the finish reason and usage.
fn call_chunks() -> Vec<Value> {
    vec![
        json!({"candidates": [{"content": {"parts": [{"text": "The user wants the weather.", "thought": true}], "role": "model"}, "index": 0}],
               "usageMetadata": {"promptTokenCount": 40, "totalTokenCount": 40}, "modelVersion": "gemini-2.5-flash"}),
        json!({"candidates": [{"content": {"parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2lnLUE="}], "role": "model"}, "finishReason": "STOP", "index": 0}],
               "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 12, "thoughtsTokenCount": 30, "cachedContentTokenCount": 8, "totalTokenCount": 82}, "modelVersion": "gemini-2.5-flash"}),
    ]
}

#[test]
fn a_streamed_function_call_has_a_stable_id_its_signature_and_the_thoughts() {
    let messages = [Message::human("Weather in Paris?")];
    let tool = weather_tool();
    let tools = [&tool];
    let reply = assemble(&ModelRequest::new(&messages, &tools, &[]), &call_chunks()).unwrap();
    assert_eq!(reply.id, "ai-1");
    assert_eq!(reply.tool_calls.len(), 1);
    assert_eq!(reply.tool_calls[0].id, "call-1-1");
    assert_eq!(reply.tool_calls[0].name, "get_weather");
    assert_eq!(reply.tool_calls[0].args, json!({"city": "Paris"}));
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
    let reasoning = reply.reasoning.clone().unwrap();
    assert_eq!(reasoning.text, "The user wants the weather.");
    assert_eq!(reasoning.replay.len(), 1);
    assert_eq!(reasoning.replay[0].provider, "gemini");
    assert_eq!(
        reasoning.replay[0].item,
        json!({"call": "call-1-1", "thoughtSignature": "c2lnLUE="})
    );
    assert_eq!(
        reply.usage,
        Some(TokenUsage {
            input_tokens: 40,
            output_tokens: 42,
            total_tokens: 82,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 8,
            reasoning_tokens: 30,
        })
    );
    assert!(
        !reply.content.contains("user wants"),
        "thoughts are not the answer"
    );
}

#[test]
fn the_next_request_sends_the_call_back_with_its_signature_and_answers_it_by_name() {
    let tool = weather_tool();
    let tools = [&tool];
    let first = [Message::human("Weather in Paris?")];
    let reply = assemble(&ModelRequest::new(&first, &tools, &[]), &call_chunks()).unwrap();
    let messages = vec![
        Message::System {
            content: "Be brief.".to_owned(),
        },
        Message::human("Weather in Paris?"),
        reply.into_message(),
        Message::tool("call-1-1", "get_weather", "sunny", ToolStatus::Success),
        Message::tool("call-9-9", "bash", "Error: bad args", ToolStatus::Error),
    ];
    let config = config("temperature: 0.2\nmax_tokens: 256\n");
    let body = request::request_body(&config, &ModelRequest::new(&messages, &tools, &[]));
    assert_eq!(
        body,
        json!({
            "systemInstruction": {"parts": [{"text": "Be brief."}]},
            "contents": [
                {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2lnLUE="}]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}},
                    {"text": "[Result of tool call call-9-9 (bash)]\nError: bad args"},
                ]},
            ],
            "tools": [{"functionDeclarations": [{
                "name": "get_weather", "description": "The weather in a city.",
                "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]},
            }]}],
            "generationConfig": {"temperature": 0.2, "maxOutputTokens": 256},
        })
    );
}

#[test]
fn server_ids_are_kept_and_sent_back_an_error_result_is_an_error_response() {
    let messages = [Message::human("go")];
    let chunks = [
        json!({"candidates": [{"content": {"role": "model", "parts": [
        {"text": "Checking.", "thoughtSignature": "dGV4dA=="},
        {"functionCall": {"id": "fc-7", "name": "ls", "args": {}}},
    ]}, "finishReason": "STOP"}]}),
    ];
    let reply = assemble(&ModelRequest::new(&messages, &[], &[]), &chunks).unwrap();
    assert_eq!(reply.tool_calls[0].id, "fc-7");
    let conversation = vec![
        Message::human("go"),
        reply.into_message(),
        Message::tool("fc-7", "ls", "denied", ToolStatus::Error),
    ];
    let body = request::request_body(&config(""), &ModelRequest::new(&conversation, &[], &[]));
    assert_eq!(
        body["contents"][1],
        json!({"role": "model", "parts": [
            {"text": "Checking.", "thoughtSignature": "dGV4dA=="},
            {"functionCall": {"name": "ls", "args": {}, "id": "fc-7"}},
        ]})
    );
    assert_eq!(
        body["contents"][2]["parts"][0],
        json!({"functionResponse": {"name": "ls", "response": {"error": "denied"}, "id": "fc-7"}})
    );
}

#[test]
fn a_signature_on_the_empty_last_part_of_a_text_stream_goes_back_on_the_text() {
    let messages = [Message::human("hi")];
    let chunks = [
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}]}),
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "lo."}]}}]}),
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "", "thoughtSignature": "ZW5k"}]}, "finishReason": "STOP"}],
               "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2, "totalTokenCount": 5}}),
    ];
    let reply = assemble(&ModelRequest::new(&messages, &[], &[]), &chunks).unwrap();
    assert_eq!(reply.content, "Hello.");
    assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
    assert_eq!(reply.usage.unwrap().total_tokens, 5);
    let conversation = [Message::human("hi"), reply.into_message()];
    let body = request::request_body(&config(""), &ModelRequest::new(&conversation, &[], &[]));
    assert_eq!(
        body["contents"][1],
        json!({"role": "model", "parts": [{"text": "Hello.", "thoughtSignature": "ZW5k"}]})
    );
}

#[test]
fn another_providers_replay_items_are_not_sent() {
    let conversation = [
        Message::human("hi"),
        Message::Ai {
            id: "ai-1".into(),
            content: "Hello.".into(),
            tool_calls: Vec::new(),
            reasoning: Some(crate::thread::state::Reasoning {
                text: "thought".into(),
                replay: vec![crate::thread::state::ReplayItem {
                    provider: "anthropic".into(),
                    item: json!({"text": true, "thoughtSignature": "x", "signature": "y"}),
                }],
            }),
        },
    ];
    let body = request::request_body(&config(""), &ModelRequest::new(&conversation, &[], &[]));
    assert_eq!(
        body["contents"][1],
        json!({"role": "model", "parts": [{"text": "Hello."}]})
    );
}

#[test]
fn viewed_images_are_inline_data_parts() {
    let messages = [Message::human("What is this?")];
    let images = [
        ImagePart {
            path: "/mnt/user-data/uploads/a.png".into(),
            mime_type: "image/png".into(),
            base64: Some("iVBORw0KGgo=".into()),
        },
        ImagePart {
            path: "/mnt/user-data/uploads/b.jpg".into(),
            mime_type: "image/jpeg".into(),
            base64: None,
        },
    ];
    let body = request::request_body(&config(""), &ModelRequest::new(&messages, &[], &images));
    // The images join the user turn before them (adjacent user contents are one).
    assert_eq!(
        body["contents"],
        json!([{"role": "user", "parts": [
            {"text": "What is this?"},
            {"text": "Here are the images you've viewed:"},
            {"text": "\n- **/mnt/user-data/uploads/a.png** (image/png)"},
            {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
            {"text": "\n- **/mnt/user-data/uploads/b.jpg** (image/jpeg)"},
            {"text": "  (file unavailable or changed on disk)"},
        ]}])
    );
}

#[test]
fn thinking_config_follows_the_entry_and_the_call() {
    let messages = [Message::human("hi")];
    let thinking = config(
        "supports_thinking: true\nthinking_budget: 1024\nwhen_thinking_disabled:\n  thinking_budget: 0\n",
    );
    let mut request = ModelRequest::new(&messages, &[], &[]);
    assert_eq!(
        request::request_body(&thinking, &request)["generationConfig"],
        json!({"thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": true}})
    );
    request.thinking = false;
    assert_eq!(
        request::request_body(&thinking, &request)["generationConfig"],
        json!({"thinkingConfig": {"thinkingBudget": 0}})
    );
    // Without supports_thinking, nothing is asked; when_thinking_enabled applies only
    // with it.
    let plain = config("when_thinking_enabled:\n  thinking_budget: 2048\n");
    request.thinking = true;
    assert!(request::request_body(&plain, &request)
        .get("generationConfig")
        .is_none());
    let enabled = config(
        "supports_thinking: true\nwhen_thinking_enabled:\n  thinking_level: high\n  include_thoughts: false\n",
    );
    assert_eq!(
        request::request_body(&enabled, &request)["generationConfig"],
        json!({"thinkingConfig": {"includeThoughts": false, "thinkingLevel": "high"}})
    );
}

#[test]
fn tool_choice_is_the_function_calling_mode() {
    let tool = weather_tool();
    let tools = [&tool];
    let messages = [Message::human("hi")];
    let body = request::request_body(
        &config("tool_choice: any\n"),
        &ModelRequest::new(&messages, &tools, &[]),
    );
    assert_eq!(
        body["toolConfig"],
        json!({"functionCallingConfig": {"mode": "ANY"}})
    );
}

#[test]
fn schemas_lose_what_gemini_cannot_express_and_keep_the_rest() {
    let schema = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "additionalProperties": false,
        "$defs": {
            "Point": {"type": "object", "properties": {"x": {"type": "number", "format": "double"}, "y": {"type": "number"}}, "required": ["x", "y"]},
            "Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}, "value": {"type": "integer"}}}
        },
        "properties": {
            "at": {"$ref": "#/$defs/Point", "description": "Where."},
            "label": {"type": ["string", "null"], "default": "none", "examples": ["a"], "format": "email"},
            "level": {"enum": [1, 2, 3]},
            "mode": {"const": "fast"},
            "when": {"type": "string", "format": "date-time"},
            "either": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "many": {"type": ["string", "integer"]},
            "one": {"oneOf": [{"type": "string"}, {"type": "object", "properties": {"k": {"type": "boolean"}}}]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": true},
            "map": {"type": "object", "additionalProperties": {"type": "string"}},
            "list": {"$ref": "#/$defs/Node"},
            "merged": {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, {"properties": {"b": {"type": "integer"}}}]},
        },
        "required": ["at", "ghost"],
    });
    let converted = convert(&schema);
    assert_eq!(
        converted,
        json!({
            "type": "OBJECT",
            "properties": {
                "at": {"description": "Where.", "type": "OBJECT", "required": ["x", "y"],
                       "properties": {"x": {"type": "NUMBER", "format": "double"}, "y": {"type": "NUMBER"}}},
                "label": {"type": "STRING", "nullable": true},
                "level": {"type": "STRING", "enum": ["1", "2", "3"]},
                "mode": {"type": "STRING", "enum": ["fast"]},
                "when": {"type": "STRING", "format": "date-time"},
                "either": {"type": "STRING", "nullable": true},
                "many": {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]},
                "one": {"anyOf": [{"type": "STRING"}, {"type": "OBJECT", "properties": {"k": {"type": "BOOLEAN"}}}]},
                "tags": {"type": "ARRAY", "items": {"type": "STRING"}, "minItems": 1},
                "map": {"type": "OBJECT"},
                "list": {"type": "OBJECT", "properties": {"next": {"type": "OBJECT"}, "value": {"type": "INTEGER"}}},
                "merged": {"type": "OBJECT", "properties": {"a": {"type": "STRING"}, "b": {"type": "INTEGER"}}, "required": ["a"]},
            },
            "required": ["at"],
        })
    );
    // A tool without arguments declares no parameters.
    assert_eq!(
        function_parameters(&json!({"type": "object", "properties": {}})),
        None
    );
    assert_eq!(function_parameters(&json!({})), Some(json!({})));
}

#[test]
fn finish_reasons_are_mapped_to_openai_words() {
    for (gemini, calls, openai) in [
        ("STOP", false, "stop"),
        ("STOP", true, "tool_calls"),
        ("MAX_TOKENS", false, "length"),
        ("SAFETY", false, "content_filter"),
        ("RECITATION", false, "content_filter"),
        ("BLOCKLIST", false, "content_filter"),
        ("PROHIBITED_CONTENT", false, "content_filter"),
        ("SPII", false, "content_filter"),
        ("MALFORMED_FUNCTION_CALL", false, "tool_calls"),
        ("OTHER", false, "other"),
        ("LANGUAGE", false, "language"),
    ] {
        assert_eq!(
            reply::openai_finish_reason(gemini, calls),
            openai,
            "{gemini}"
        );
    }
}

#[test]
fn a_malformed_function_call_is_an_invalid_call_the_run_can_show() {
    let messages = [Message::human("go")];
    let chunks = [
        json!({"candidates": [{"content": {"role": "model", "parts": []},
        "finishReason": "MALFORMED_FUNCTION_CALL",
        "finishMessage": "Malformed function call: print(default_api.get_weather(city=Paris)"}]}),
    ];
    let reply = assemble(&ModelRequest::new(&messages, &[], &[]), &chunks).unwrap();
    assert!(reply.tool_calls.is_empty());
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(reply.invalid_calls.len(), 1);
    let invalid = &reply.invalid_calls[0];
    assert_eq!(invalid.id, "call-1-1");
    assert_eq!(invalid.name, "get_weather");
    assert_eq!(
        invalid.error,
        "Gemini could not write a valid function call (finishReason MALFORMED_FUNCTION_CALL): Malformed function call: print(default_api.get_weather(city=Paris)"
    );
}

#[test]
fn a_blocked_prompt_is_a_clear_error_and_a_safety_stop_is_content_filter() {
    let messages = [Message::human("bad")];
    let request = ModelRequest::new(&messages, &[], &[]);
    let mut reader = ReplyAssembler::new("g", &request);
    let err = reader
        .whole(
            &json!({"promptFeedback": {"blockReason": "SAFETY", "safetyRatings": []},
                        "usageMetadata": {"promptTokenCount": 5, "totalTokenCount": 5}}),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "model `g`: invalid reply: Gemini refused the prompt (promptFeedback.blockReason SAFETY); rephrase the request or remove the content it objects to"
    );
    let reply = assemble(
        &request,
        &[json!({"candidates": [{"finishReason": "SAFETY", "safetyRatings": [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true}]}]})],
    )
    .unwrap();
    assert_eq!(reply.finish_reason.as_deref(), Some("content_filter"));
    assert_eq!(reply.content, "");
}

#[test]
fn a_whole_reply_and_an_error_chunk_are_read() {
    let messages = [Message::human("hi")];
    let request = ModelRequest::new(&messages, &[], &[]);
    let mut reader = ReplyAssembler::new("g", &request);
    reader
        .whole(&json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hi!"}]}, "finishReason": "MAX_TOKENS"}],
                       "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 1, "totalTokenCount": 3}}))
        .unwrap();
    let reply = reader.finish().unwrap();
    assert_eq!(reply.content, "Hi!");
    assert_eq!(reply.finish_reason.as_deref(), Some("length"));
    let err = assemble(
        &request,
        &[
            json!({"error": {"code": 500, "message": "Internal error encountered.", "status": "INTERNAL"}}),
        ],
    );
    assert!(err.is_err());
}

#[test]
fn the_entry_gives_the_endpoint_and_the_key_which_never_shows() {
    let config = config("base_url: https://proxy.example/v1beta/\n");
    assert_eq!(
        config.url(true),
        "https://proxy.example/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert_eq!(
        config.url(false),
        "https://proxy.example/v1beta/models/gemini-2.5-flash:generateContent"
    );
    assert!(!format!("{config:?}").contains("k-123"));
    let public = GeminiConfig::from_model_config(
        &entry("name: g\nuse: langchain_google_genai:ChatGoogleGenerativeAI\nmodel: models/gemini-2.5-pro\ngemini_api_key: $MY_KEY\n"),
        &|name: &str| (name == "MY_KEY").then(|| "from-var".to_owned()),
    )
    .unwrap();
    assert_eq!(
        public.url(true),
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    );
    assert_eq!(public.common.api_key.as_ref().unwrap().expose(), "from-var");
    // The environment's keys, in DeerFlow's order.
    let from_env = GeminiConfig::from_model_config(
        &entry(
            "name: g\nuse: langchain_google_genai:ChatGoogleGenerativeAI\nmodel: gemini-2.5-pro\n",
        ),
        &|name: &str| match name {
            "GEMINI_API_KEY" => Some("gem".to_owned()),
            "GOOGLE_API_KEY" => Some("goo".to_owned()),
            _ => None,
        },
    )
    .unwrap();
    assert_eq!(from_env.common.api_key.as_ref().unwrap().expose(), "gem");
    assert_eq!(from_env.entry.api_key.as_deref(), Some("gem"));
    // `config check` knows the provider and refuses what cannot be used.
    let ok = entry(
        "name: g\nuse: langchain_google_genai:ChatGoogleGenerativeAI\nmodel: gemini-2.5-flash\n",
    );
    assert_eq!(check_model_entry(&ok, &no_env).unwrap(), Provider::Gemini);
    let bad = entry("name: g\nprovider: gemini\nuse: x:Y\nmodel: gemini flash\n");
    assert_eq!(
        check_model_entry(&bad, &no_env).unwrap_err().to_string(),
        "model `g`: model `gemini flash` is not a Gemini model id (letters, digits, `-`, `.`, `_`)"
    );
}

#[test]
fn safety_settings_are_sent_as_gemini_lists_them() {
    let messages = [Message::human("hi")];
    let request = ModelRequest::new(&messages, &[], &[]);
    let body = request::request_body(
        &config("safety_settings:\n  HARM_CATEGORY_DANGEROUS_CONTENT: BLOCK_ONLY_HIGH\n"),
        &request,
    );
    assert_eq!(
        body["safetySettings"],
        json!([{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "threshold": "BLOCK_ONLY_HIGH"}])
    );
}

#[test]
fn disable_streaming_picks_the_whole_reply_endpoint() {
    assert_eq!(config("").streaming, super::Streaming::Always);
    assert_eq!(
        config("disable_streaming: true\n").streaming,
        super::Streaming::Never
    );
    assert_eq!(
        config("disable_streaming: tool_calling\n").streaming,
        super::Streaming::NotWithTools
    );
}
