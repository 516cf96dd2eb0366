//! The OpenAI Responses wire format: the request body (`instructions`, `input` items,
//! flat function tools, `reasoning`, `store`/`include`) built from a run's messages, and
//! the assembly of a reply (the streamed `response.*` events, or one whole `response`
//! object) into one [`ModelReply`]. Reasoning items come back with their id, summary and
//! `encrypted_content` as [`ReplayItem`]s tagged [`REPLAY_PROVIDER`], and go back in the
//! next request before the function calls of their turn.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::config::{ResponsesConfig, CODEX_DEFAULT_EFFORT, CODEX_EFFORT_OFF};
use crate::model::openai::thinking::{self, deep_merge, extra_body_of};
use crate::model::openai::wire::{
    arguments_text, parse_arguments, read_usage, IMAGES_HEADING, IMAGE_UNAVAILABLE,
};
use crate::model::stream::StreamItem;
use crate::model::transport::{error_text, in_stream_failure, quote, Flow, ReplyReader};
use crate::model::{
    finish_reason, ImagePart, InvalidToolCall, ModelError, ModelObserver, ModelReply, ModelRequest,
};
use crate::thread::state::{Message, Reasoning, ReplayItem, TokenUsage, ToolCall};

/// The provider tag of the reasoning items a Responses server wrote.
pub const REPLAY_PROVIDER: &str = "openai_responses";
/// What `include` asks for when the provider does not store responses.
pub const INCLUDE_ENCRYPTED_REASONING: &str = "reasoning.encrypted_content";

/// The streamed events read (the Responses API's names).
pub mod event {
    pub const OUTPUT_ITEM_ADDED: &str = "response.output_item.added";
    pub const OUTPUT_ITEM_DONE: &str = "response.output_item.done";
    pub const OUTPUT_TEXT_DELTA: &str = "response.output_text.delta";
    pub const FUNCTION_CALL_ARGUMENTS_DELTA: &str = "response.function_call_arguments.delta";
    pub const FUNCTION_CALL_ARGUMENTS_DONE: &str = "response.function_call_arguments.done";
    pub const REASONING_SUMMARY_TEXT_DELTA: &str = "response.reasoning_summary_text.delta";
    pub const REASONING_TEXT_DELTA: &str = "response.reasoning_text.delta";
    pub const COMPLETED: &str = "response.completed";
    pub const INCOMPLETE: &str = "response.incomplete";
    pub const FAILED: &str = "response.failed";
    pub const ERROR: &str = "error";
}

/// The request body: `model`, `instructions` (the leading system messages), `input`,
/// `tools` (flat function tools, `strict: false`; omitted when none are visible, and
/// `tool_choice` with them), `stream` (true unless `streaming: false`), `store`, the configured parameters and
/// `max_output_tokens`, `reasoning` (with thinking off: Codex's effort `none`), `include:
/// ["reasoning.encrypted_content"]` when reasoning is asked for and `store` is false,
/// then what the thinking toggle adds and `extra_body`, deep-merged.
pub fn request_body(config: &ResponsesConfig, request: &ModelRequest<'_>) -> Value {
    let mut body = Map::new();
    body.insert("model".to_owned(), Value::String(config.model.clone()));
    let (instructions, mut input) = input_items(request.messages, config.store);
    if !instructions.is_empty() {
        body.insert("instructions".to_owned(), Value::String(instructions));
    }
    if !request.images.is_empty() {
        input.push(images_message(request.images));
    }
    body.insert("input".to_owned(), Value::Array(input));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|spec| {
                let mut tool = Map::new();
                tool.insert("type".to_owned(), json!("function"));
                if let Value::Object(function) = spec.openai_function() {
                    tool.extend(function);
                }
                tool.insert("strict".to_owned(), Value::Bool(false));
                Value::Object(tool)
            })
            .collect();
        body.insert("tools".to_owned(), Value::Array(tools));
    }
    body.insert("stream".to_owned(), Value::Bool(config.stream));
    body.insert("store".to_owned(), Value::Bool(config.store));
    for (key, value) in &config.params {
        if key == "tool_choice" {
            if !request.tools.is_empty() {
                body.insert(key.clone(), tool_choice(value));
            }
            continue;
        }
        body.insert(key.clone(), value.clone());
    }
    if let Some(max) = &config.max_output_tokens {
        body.insert("max_output_tokens".to_owned(), max.clone());
    }

    let on = thinking::thinking_on(&config.thinking, request.thinking);
    let overlay = thinking::overlay(&config.thinking, on);
    let mut reasoning = config.reasoning.clone();
    for (key, value) in &overlay {
        match (key.as_str(), value) {
            (thinking::EXTRA_BODY, _) => {}
            ("reasoning", Value::Object(map)) => deep_merge(&mut reasoning, map),
            ("reasoning_effort", effort) => {
                if config.supports_reasoning_effort || config.codex {
                    reasoning.insert("effort".to_owned(), effort.clone());
                }
            }
            ("max_tokens", max) if !config.codex => {
                body.insert("max_output_tokens".to_owned(), max.clone());
            }
            ("max_tokens", _) => {}
            _ => {
                body.insert(key.clone(), value.clone());
            }
        }
    }
    if config.codex {
        if !on {
            reasoning.insert("effort".to_owned(), json!(CODEX_EFFORT_OFF));
        } else {
            reasoning
                .entry("effort")
                .or_insert_with(|| json!(CODEX_DEFAULT_EFFORT));
            reasoning.entry("summary").or_insert_with(|| json!("auto"));
        }
    }
    if !reasoning.is_empty() {
        let effort_off = reasoning.get("effort").and_then(Value::as_str) == Some(CODEX_EFFORT_OFF);
        if !config.store && !effort_off {
            body.insert("include".to_owned(), json!([INCLUDE_ENCRYPTED_REASONING]));
        }
        body.insert("reasoning".to_owned(), Value::Object(reasoning));
    }
    deep_merge(&mut body, &config.extra_body);
    if let Some(extra) = extra_body_of(&overlay) {
        deep_merge(&mut body, extra);
    }
    Value::Object(body)
}

/// A chat-style `tool_choice` (`{type: function, function: {name}}`) in the Responses
/// shape (`{type: function, name}`); strings (`auto`, `required`, `none`) as they are.
fn tool_choice(value: &Value) -> Value {
    match value.get("function").and_then(|f| f.get("name")) {
        Some(name) => json!({"type": "function", "name": name}),
        None => value.clone(),
    }
}

/// The leading system messages joined as `instructions`, and every other message as
/// input items: a later system message is a `developer` message, a user turn a `user`
/// message (its text as string content; the viewed images as `input_text` and
/// `input_image` parts), an assistant turn its reasoning items (see [`replay_items`]),
/// its text as an `output_text` message and its `function_call`s, a tool result a
/// `function_call_output`.
pub fn input_items(messages: &[Message], store: bool) -> (String, Vec<Value>) {
    let mut instructions = Vec::new();
    let mut input = Vec::new();
    let mut leading = true;
    for message in messages {
        match message {
            Message::System { content } if leading => instructions.push(content.as_str()),
            // Text-only turns as the documented string content (`EasyInputMessage`): LiteLLM
            // in front of a chat server drops `input_text` parts; images use parts.
            Message::System { content } => input.push(json!({
                "type": "message", "role": "developer", "content": content,
            })),
            Message::Human { content, .. } => input.push(json!({
                "type": "message", "role": "user", "content": content,
            })),
            Message::Ai {
                content,
                tool_calls,
                reasoning,
                ..
            } => {
                input.extend(replay_items(reasoning.as_ref(), store));
                if !content.is_empty() {
                    input.push(json!({
                        "type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": content}],
                    }));
                }
                for call in tool_calls {
                    input.push(json!({
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": arguments_text(&call.args),
                    }));
                }
            }
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => input.push(json!({
                "type": "function_call_output",
                "call_id": tool_call_id,
                "output": content,
            })),
        }
        if !matches!(message, Message::System { .. }) {
            leading = false;
        }
    }
    (instructions.join("\n\n"), input)
}

/// The reasoning items of an assistant turn that go back: only those a Responses server
/// wrote; with `store: false` only those with `encrypted_content` (an id alone names
/// nothing the provider kept).
fn replay_items(reasoning: Option<&Reasoning>, store: bool) -> Vec<Value> {
    let Some(reasoning) = reasoning else {
        return Vec::new();
    };
    reasoning
        .replay
        .iter()
        .filter(|r| r.provider == REPLAY_PROVIDER)
        .filter(|r| {
            store
                || r.item
                    .get("encrypted_content")
                    .is_some_and(|c| c.as_str().is_some_and(|c| !c.is_empty()))
        })
        .map(|r| r.item.clone())
        .collect()
}

/// The user message that shows a vision model the images of its last `view_image` calls
/// (spec C.2): `input_text` lines naming each, `input_image` parts with data URLs.
fn images_message(images: &[ImagePart]) -> Value {
    let text = |t: String| json!({"type": "input_text", "text": t});
    let mut parts = vec![text(IMAGES_HEADING.to_owned())];
    for image in images {
        parts.push(text(format!(
            "\n- **{}** ({})",
            image.path, image.mime_type
        )));
        parts.push(match &image.base64 {
            Some(data) => json!({"type": "input_image", "detail": "auto",
                "image_url": format!("data:{};base64,{data}", image.mime_type)}),
            None => text(IMAGE_UNAVAILABLE.to_owned()),
        });
    }
    json!({"type": "message", "role": "user", "content": parts})
}

/// One output item as the stream builds it.
#[derive(Debug, Default)]
struct OutputItem {
    kind: String,
    call_id: String,
    name: String,
    arguments: String,
    /// Its text or reasoning came as deltas (the done item's copy is not added again).
    streamed: bool,
    done: bool,
}

/// Assembles Responses events (or one whole `response`) into a [`ModelReply`].
pub struct ResponsesAssembler<'a> {
    model: String,
    observer: Option<&'a dyn ModelObserver>,
    turn: usize,
    content: String,
    /// The output items by `output_index`.
    items: BTreeMap<u64, OutputItem>,
    reasoning: String,
    /// The (output index, summary index) the last reasoning piece belonged to.
    reasoning_part: Option<(u64, u64)>,
    replay: Vec<ReplayItem>,
    status: Option<String>,
    incomplete_reason: Option<String>,
    usage: Option<TokenUsage>,
    done: bool,
}

impl std::fmt::Debug for ResponsesAssembler<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponsesAssembler")
            .field("model", &self.model)
            .field("turn", &self.turn)
            .field("items", &self.items.len())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<'a> ResponsesAssembler<'a> {
    /// An assembler for the reply to `request` (its observer hears the deltas).
    pub fn new(model: &str, request: &ModelRequest<'a>) -> ResponsesAssembler<'a> {
        ResponsesAssembler {
            model: model.to_owned(),
            observer: request.observer,
            turn: request.turn(),
            content: String::new(),
            items: BTreeMap::new(),
            reasoning: String::new(),
            reasoning_part: None,
            replay: Vec::new(),
            status: None,
            incomplete_reason: None,
            usage: None,
            done: false,
        }
    }

    /// Whether a terminal event (`response.completed`, `response.incomplete`) came.
    pub fn finished(&self) -> bool {
        self.done
    }

    /// Adds one streamed event (its `type` field names it; the SSE `event:` name when
    /// the data has none).
    pub fn push_event(&mut self, name: Option<&str>, data: &str) -> Result<Flow, ModelError> {
        if data.trim() == "[DONE]" {
            return Ok(Flow::Done);
        }
        let value: Value = serde_json::from_str(data).map_err(|e| {
            self.invalid(format!("a stream event is not JSON ({e}): {}", quote(data)))
        })?;
        let kind = value
            .get("type")
            .and_then(Value::as_str)
            .or(name)
            .unwrap_or("")
            .to_owned();
        let index = value
            .get("output_index")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let text = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or("");
        match kind.as_str() {
            event::OUTPUT_ITEM_ADDED => {
                if let Some(item) = value.get("item") {
                    let entry = self.items.entry(index).or_default();
                    entry.kind = item_str(item, "type");
                    entry.call_id = item_str(item, "call_id");
                    entry.name = item_str(item, "name");
                    entry.arguments = item_str(item, "arguments");
                }
            }
            event::OUTPUT_TEXT_DELTA => {
                let delta = text("delta");
                self.items.entry(index).or_default().streamed = true;
                self.add_text(delta);
            }
            event::FUNCTION_CALL_ARGUMENTS_DELTA => {
                let delta = text("delta").to_owned();
                self.items
                    .entry(index)
                    .or_default()
                    .arguments
                    .push_str(&delta);
            }
            event::FUNCTION_CALL_ARGUMENTS_DONE => {
                let entry = self.items.entry(index).or_default();
                if let Some(arguments) = value.get("arguments").and_then(Value::as_str) {
                    entry.arguments = arguments.to_owned();
                }
                if let Some(name) = value.get("name").and_then(Value::as_str) {
                    entry.name = name.to_owned();
                }
            }
            event::REASONING_SUMMARY_TEXT_DELTA | event::REASONING_TEXT_DELTA => {
                let part = value
                    .get("summary_index")
                    .or(value.get("content_index"))
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                self.items.entry(index).or_default().streamed = true;
                let delta = text("delta").to_owned();
                self.add_reasoning((index, part), &delta);
            }
            event::OUTPUT_ITEM_DONE => {
                if let Some(item) = value.get("item") {
                    self.item_done(index, item);
                }
            }
            event::COMPLETED | event::INCOMPLETE | event::FAILED => {
                let response = value.get("response").unwrap_or(&Value::Null);
                self.read_response(response)?;
                return Ok(Flow::Done);
            }
            event::ERROR => {
                let message = value
                    .get("message")
                    .map(error_text)
                    .or_else(|| value.get("error").map(error_text))
                    .unwrap_or_else(|| value.to_string());
                let code = value
                    .get("code")
                    .or_else(|| value.get("error").and_then(|e| e.get("code")));
                return Err(self.failure(code, format!("the server reported: {message}")));
            }
            // `response.created`, `response.in_progress`, content parts, `.done` texts.
            _ => {}
        }
        Ok(Flow::Continue)
    }

    /// A failure the server reported inside a 200 stream: the error codes that mean what an
    /// HTTP status would have said (`server_error` 500, `rate_limit_exceeded` 429,
    /// `server_is_overloaded` 503) fail the call as that status, so the run's model
    /// retries it as it would before the stream; any other is an invalid reply.
    fn failure(&self, code: Option<&Value>, message: String) -> ModelError {
        let status = match code.and_then(Value::as_str) {
            Some("server_error") => Some(500),
            Some("rate_limit_exceeded") => Some(429),
            Some("server_is_overloaded" | "overloaded") => Some(503),
            _ => None,
        };
        in_stream_failure(&self.model, status, message)
    }

    /// Reads a `response` object (a terminal event's, or a whole reply): its status, why
    /// it is incomplete, its usage, and every output item the stream did not finish.
    pub fn read_response(&mut self, response: &Value) -> Result<(), ModelError> {
        let status = response.get("status").and_then(Value::as_str);
        if matches!(status, Some("failed") | Some("cancelled")) {
            let message = response
                .get("error")
                .filter(|e| !e.is_null())
                .map(error_text)
                .unwrap_or_else(|| "no error given".to_owned());
            let code = response.get("error").and_then(|e| e.get("code"));
            return Err(self.failure(
                code,
                format!("the response {}: {message}", status.unwrap_or("failed")),
            ));
        }
        if status.is_none() {
            if let Some(error) = response.get("error").filter(|e| !e.is_null()) {
                return Err(self.invalid(format!("the server reported: {}", error_text(error))));
            }
        }
        self.status = status.map(str::to_owned);
        self.incomplete_reason = response
            .get("incomplete_details")
            .and_then(|d| d.get("reason"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(usage) = response.get("usage").and_then(read_usage) {
            self.usage = Some(usage);
        }
        let output = response.get("output").and_then(Value::as_array);
        for (index, item) in output.into_iter().flatten().enumerate() {
            self.item_done(index as u64, item);
        }
        self.done = true;
        Ok(())
    }

    /// A finished output item: a function call's call id, name and whole arguments; a
    /// message's text and a reasoning item's summary when no delta brought them; a
    /// reasoning item kept to go back.
    fn item_done(&mut self, index: u64, item: &Value) {
        let entry = self.items.entry(index).or_default();
        if entry.done {
            return;
        }
        entry.done = true;
        let streamed = entry.streamed;
        let kind = item_str(item, "type");
        entry.kind = kind.clone();
        match kind.as_str() {
            "function_call" => {
                for (field, key) in [
                    (&mut entry.call_id, "call_id"),
                    (&mut entry.name, "name"),
                    (&mut entry.arguments, "arguments"),
                ] {
                    if let Some(value) = item.get(key).and_then(Value::as_str) {
                        *field = value.to_owned();
                    }
                }
            }
            "message" if !streamed => {
                let parts = item.get("content").and_then(Value::as_array);
                for part in parts.into_iter().flatten() {
                    let key = match part.get("type").and_then(Value::as_str) {
                        Some("output_text") => "text",
                        Some("refusal") => "refusal",
                        _ => continue,
                    };
                    if let Some(text) = part.get(key).and_then(Value::as_str) {
                        self.add_text(text);
                    }
                }
            }
            "reasoning" => {
                let summary = item.get("summary").cloned().unwrap_or_else(|| json!([]));
                if !streamed {
                    let texts: Vec<String> = summary
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|s| s.get("text").and_then(Value::as_str))
                        .map(str::to_owned)
                        .collect();
                    for (n, text) in texts.iter().enumerate() {
                        self.add_reasoning((index, n as u64), text);
                    }
                }
                let mut kept = json!({
                    "type": "reasoning",
                    "id": item.get("id").cloned().unwrap_or(Value::Null),
                    "summary": summary,
                });
                if let Some(encrypted) = item
                    .get("encrypted_content")
                    .filter(|c| c.as_str().is_some_and(|c| !c.is_empty()))
                {
                    kept["encrypted_content"] = encrypted.clone();
                }
                self.replay.push(ReplayItem {
                    provider: REPLAY_PROVIDER.to_owned(),
                    item: kept,
                });
            }
            _ => {}
        }
    }

    fn add_text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.content.push_str(text);
        if let Some(observer) = self.observer {
            observer.text_delta(text);
        }
    }

    /// Adds reasoning text; a new summary part starts a new paragraph.
    fn add_reasoning(&mut self, part: (u64, u64), text: &str) {
        if text.is_empty() {
            return;
        }
        if self.reasoning_part.is_some_and(|p| p != part) && !self.reasoning.is_empty() {
            self.reasoning.push_str("\n\n");
        }
        self.reasoning_part = Some(part);
        self.reasoning.push_str(text);
        if let Some(observer) = self.observer {
            observer.reasoning_delta(text);
        }
    }

    /// The assembled reply: id `ai-{turn}`, function calls in output order (a call
    /// whose arguments are not a JSON object is an [`InvalidToolCall`]); the finish
    /// reason from the status: `incomplete` for `max_output_tokens` is `length`, for
    /// `content_filter` `content_filter`; complete with calls `tool_calls`, else `stop`.
    pub fn finish(self) -> Result<ModelReply, ModelError> {
        let turn = self.turn;
        let mut tool_calls = Vec::new();
        let mut invalid_calls = Vec::new();
        let calls = self
            .items
            .into_values()
            .filter(|item| item.kind == "function_call");
        for (n, call) in calls.enumerate() {
            let id = if call.call_id.is_empty() {
                format!("call-{turn}-{}", n + 1)
            } else {
                call.call_id
            };
            match parse_arguments(&call.arguments) {
                Ok(args) => tool_calls.push(ToolCall {
                    id,
                    name: call.name,
                    args,
                }),
                Err(error) => invalid_calls.push(InvalidToolCall {
                    id,
                    name: call.name,
                    arguments: quote(&call.arguments),
                    error,
                }),
            }
        }
        let finish = match (self.status.as_deref(), self.incomplete_reason.as_deref()) {
            (Some("incomplete"), Some("content_filter")) => finish_reason::CONTENT_FILTER,
            (Some("incomplete"), _) => finish_reason::LENGTH,
            _ if !tool_calls.is_empty() || !invalid_calls.is_empty() => finish_reason::TOOL_CALLS,
            _ => finish_reason::STOP,
        };
        let reasoning =
            (!self.reasoning.is_empty() || !self.replay.is_empty()).then(|| Reasoning {
                text: self.reasoning,
                replay: self.replay,
            });
        Ok(ModelReply {
            id: format!("ai-{turn}"),
            content: self.content,
            tool_calls,
            invalid_calls,
            reasoning,
            usage: self.usage,
            finish_reason: Some(finish.to_owned()),
        })
    }

    fn invalid(&self, message: String) -> ModelError {
        ModelError::InvalidReply {
            model: self.model.clone(),
            message,
        }
    }
}

fn item_str(item: &Value, key: &str) -> String {
    item.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

impl ReplyReader for ResponsesAssembler<'_> {
    fn item(&mut self, item: &StreamItem) -> Result<Flow, ModelError> {
        self.push_event(item.event.as_deref(), &item.data)
    }

    fn whole(&mut self, body: &Value) -> Result<(), ModelError> {
        // A whole reply is the `response` object (some servers wrap it).
        let response = body
            .get("response")
            .filter(|r| r.is_object())
            .unwrap_or(body);
        self.read_response(response)
    }

    fn finished(&self) -> bool {
        ResponsesAssembler::finished(self)
    }

    fn finish(self) -> Result<ModelReply, ModelError> {
        ResponsesAssembler::finish(self)
    }
}
