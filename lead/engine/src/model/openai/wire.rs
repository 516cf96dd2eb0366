//! The OpenAI chat-completions wire format: the request body built from a run's
//! messages and visible tools (with the thinking toggle, `extra_body` and the reasoning
//! replay of spec D.2/D.3), and the assembly of a reply's deltas (content, reasoning, and
//! tool calls keyed by `index`) into one [`ModelReply`], each text and reasoning delta
//! told to the request's observer. A non-streamed reply goes through the same assembly
//! as one whole chunk.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::config::{OpenAiConfig, ReasoningReplay};
use super::thinking::{self, deep_merge, extra_body_of};
use crate::model::stream::StreamItem;
use crate::model::transport::quote;
use crate::model::transport::{error_text, Flow, ReplyReader};
use crate::model::{
    ImagePart, InvalidToolCall, ModelError, ModelObserver, ModelReply, ModelRequest,
};
use crate::thread::state::{Message, Reasoning, ReplayItem, TokenUsage, ToolCall};

/// A streamed chunk as most servers send it, read without building a JSON tree: its text
/// borrowed where it has no escapes. Unknown fields are skipped; a chunk that does not fit
/// (a field of another type) is read as a `Value` instead.
#[derive(serde::Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<ChunkChoice<'a>>>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(serde::Deserialize)]
struct ChunkChoice<'a> {
    #[serde(default, borrow)]
    delta: Option<ChunkDelta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
struct ChunkDelta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default)]
    tool_calls: Option<Value>,
}

/// The provider tag of the reasoning an OpenAI-compatible server wrote (its `item` names
/// the key the server used: `reasoning_content` or `reasoning`).
pub const REPLAY_PROVIDER: &str = "openai_chat";

/// The request body: `model`, `messages`, `stream: true`, `tools` (omitted when none
/// are visible, and `tool_choice` with them), the configured parameters, then what the
/// thinking toggle adds for this call ([`thinking::overlay`]), then `extra_body` (the
/// entry's, then the toggle's) deep-merged; `reasoning_effort` only when the entry
/// `supports_reasoning_effort` (spec D.1 step 4).
pub fn request_body(config: &OpenAiConfig, request: &ModelRequest<'_>) -> Value {
    let mut body = Map::new();
    body.insert("model".to_owned(), Value::String(config.model.clone()));
    let mut messages: Vec<Value> = request
        .messages
        .iter()
        .map(|m| message_json(m, config.replay))
        .collect();
    if !request.images.is_empty() {
        messages.push(images_message(request.images));
    }
    body.insert("messages".to_owned(), Value::Array(messages));
    body.insert("stream".to_owned(), Value::Bool(true));
    // The usage of a streamed reply comes in a last chunk only when asked for.
    body.insert("stream_options".to_owned(), json!({"include_usage": true}));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|spec| json!({"type": "function", "function": spec.openai_function()}))
            .collect();
        body.insert("tools".to_owned(), Value::Array(tools));
    }
    for (key, value) in &config.params {
        if key == "tool_choice" && request.tools.is_empty() {
            continue;
        }
        body.insert(key.clone(), value.clone());
    }
    let on = thinking::thinking_on(&config.thinking, request.thinking);
    let overlay = thinking::overlay(&config.thinking, on);
    for (key, value) in &overlay {
        if key != thinking::EXTRA_BODY {
            body.insert(key.clone(), value.clone());
        }
    }
    deep_merge(&mut body, &config.extra_body);
    if let Some(extra) = extra_body_of(&overlay) {
        deep_merge(&mut body, extra);
    }
    if !config.supports_reasoning_effort {
        body.remove("reasoning_effort");
    }
    Value::Object(body)
}

/// The heading of the viewed images (spec C.2).
pub const IMAGES_HEADING: &str = "Here are the images you've viewed:";
/// An image that could not be read again: unlike DeerFlow, no host path.
pub const IMAGE_UNAVAILABLE: &str = "  (file unavailable or changed on disk)";

/// The user message that shows a vision model the images of its last `view_image` calls:
/// text lines naming each, and `image_url` parts with base64 data URLs.
fn images_message(images: &[ImagePart]) -> Value {
    let mut parts = vec![json!({"type": "text", "text": IMAGES_HEADING})];
    for image in images {
        parts.push(json!({"type": "text", "text": format!("\n- **{}** ({})", image.path, image.mime_type)}));
        parts.push(match &image.base64 {
            Some(data) => json!({"type": "image_url", "image_url": {"url": format!("data:{};base64,{data}", image.mime_type)}}),
            None => json!({"type": "text", "text": IMAGE_UNAVAILABLE}),
        });
    }
    json!({"role": "user", "content": parts})
}

/// One state message as an OpenAI chat message. A summary is sent as a user message.
/// An assistant message with tool calls and no text has `content: ""`, not `null`:
/// llama-cpp-python's server refuses `null` (and a missing `content`), OpenAI takes both.
/// An assistant message whose reasoning an OpenAI-compatible server wrote carries it
/// back as `replay` says (spec D.3).
pub fn message_json(message: &Message, replay: ReasoningReplay) -> Value {
    match message {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::Human { content, .. } => json!({"role": "user", "content": content}),
        Message::Ai {
            content,
            tool_calls,
            reasoning,
            ..
        } => {
            let mut out = assistant_json(content, tool_calls);
            if let Some((key, text)) = replayed_reasoning(reasoning.as_ref(), replay) {
                out[key] = Value::String(text.to_owned());
            }
            out
        }
        Message::Tool {
            tool_call_id,
            content,
            ..
        } => json!({"role": "tool", "tool_call_id": tool_call_id, "content": content}),
    }
}

/// The key and text of the reasoning an assistant message sends back: only reasoning an
/// OpenAI-compatible server wrote ([`REPLAY_PROVIDER`]), never another provider's.
fn replayed_reasoning(
    reasoning: Option<&Reasoning>,
    replay: ReasoningReplay,
) -> Option<(&'static str, &str)> {
    let reasoning = reasoning.filter(|r| !r.text.is_empty())?;
    let written = reasoning
        .replay
        .iter()
        .find(|item| item.provider == REPLAY_PROVIDER)?;
    let key = match replay {
        ReasoningReplay::Never => return None,
        ReasoningReplay::Key(key) => key,
        ReasoningReplay::AsWritten => match written.item.get("key").and_then(Value::as_str) {
            Some("reasoning") => "reasoning",
            _ => "reasoning_content",
        },
    };
    Some((key, reasoning.text.as_str()))
}

fn assistant_json(content: &str, tool_calls: &[ToolCall]) -> Value {
    if tool_calls.is_empty() {
        return json!({"role": "assistant", "content": content});
    }
    let calls: Vec<Value> = tool_calls
        .iter()
        .map(|call| {
            json!({
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": arguments_text(&call.args)},
            })
        })
        .collect();
    json!({"role": "assistant", "content": content, "tool_calls": calls})
}

/// A call's arguments as the JSON string the wire carries (`{}` for none).
pub(crate) fn arguments_text(args: &Value) -> String {
    match args {
        Value::Null => "{}".to_owned(),
        args => args.to_string(),
    }
}

/// A tool call being streamed.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Assembles chat-completion chunks (or one whole completion) into a [`ModelReply`].
pub struct ReplyAssembler<'a> {
    model: String,
    observer: Option<&'a dyn ModelObserver>,
    turn: usize,
    content: String,
    calls: BTreeMap<u64, PartialCall>,
    finish_reason: Option<String>,
    usage: Option<TokenUsage>,
    reasoning: String,
    /// The key the server wrote its reasoning under, to send it back under the same.
    reasoning_key: Option<&'static str>,
}

impl std::fmt::Debug for ReplyAssembler<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyAssembler")
            .field("model", &self.model)
            .field("turn", &self.turn)
            .field("calls", &self.calls.len())
            .finish_non_exhaustive()
    }
}

impl<'a> ReplyAssembler<'a> {
    /// An assembler for the reply to `request`, on behalf of the model named `model`;
    /// the request's observer hears each text and reasoning delta.
    pub fn new(model: &str, request: &ModelRequest<'a>) -> ReplyAssembler<'a> {
        ReplyAssembler {
            model: model.to_owned(),
            observer: request.observer,
            turn: request.turn(),
            content: String::new(),
            calls: BTreeMap::new(),
            finish_reason: None,
            usage: None,
            reasoning: String::new(),
            reasoning_key: None,
        }
    }

    /// Whether a choice said why it finished (a stream that ends without `[DONE]` is
    /// complete only then).
    pub fn finished(&self) -> bool {
        self.finish_reason.is_some()
    }

    /// Adds one streamed chunk (`choices[0].delta`); `[DONE]` ends the reply.
    pub fn push_chunk(&mut self, data: &str) -> Result<Flow, ModelError> {
        // A server that sends several `data:` lines without a blank line between them.
        for line in data.split('\n').filter(|l| !l.trim().is_empty()) {
            let line = line.strip_prefix("data:").map_or(line, str::trim_start);
            if line.trim() == "[DONE]" {
                return Ok(Flow::Done);
            }
            // Most chunks read typed, borrowing their text (no JSON tree per token); a
            // chunk of another shape is read as a whole value, with its errors.
            match serde_json::from_str::<Chunk<'_>>(line) {
                Ok(chunk) if chunk.error.is_none() && chunk.choices.is_some() => {
                    self.push_chunk_typed(chunk)
                }
                _ => {
                    let chunk: Value = serde_json::from_str(line).map_err(|e| {
                        self.invalid(format!("a stream chunk is not JSON ({e}): {}", quote(line)))
                    })?;
                    self.push_value(&chunk, "delta")?;
                }
            }
        }
        Ok(Flow::Continue)
    }

    /// [`ReplyAssembler::push_value`] for a chunk read typed (one with `choices`): the
    /// same fields, the same order.
    fn push_chunk_typed(&mut self, chunk: Chunk<'_>) {
        if let Some(usage) = chunk.usage.as_ref().and_then(read_usage) {
            self.usage = Some(usage);
        }
        let Some(choice) = chunk.choices.into_iter().flatten().next() else {
            return;
        };
        if let Some(reason) = choice.finish_reason {
            self.finish_reason = Some(reason.into_owned());
        }
        let Some(delta) = choice.delta else {
            return;
        };
        if let Some(text) = delta.content {
            self.text(&text);
        }
        if let Some(text) = delta.reasoning_content {
            self.reasoning_text("reasoning_content", &text);
        }
        if let Some(text) = delta.reasoning {
            self.reasoning_text("reasoning", &text);
        }
        if let Some(calls) = delta.tool_calls.as_ref().and_then(Value::as_array) {
            self.push_calls(calls);
        }
    }

    fn text(&mut self, text: &str) {
        self.content.push_str(text);
        if let (Some(observer), false) = (self.observer, text.is_empty()) {
            observer.text_delta(text);
        }
    }

    fn reasoning_text(&mut self, key: &'static str, text: &str) {
        self.reasoning.push_str(text);
        self.reasoning_key.get_or_insert(key);
        if let (Some(observer), false) = (self.observer, text.is_empty()) {
            observer.reasoning_delta(text);
        }
    }

    /// Adds a whole non-streamed completion (`choices[0].message`).
    pub fn push_completion(&mut self, completion: &Value) -> Result<(), ModelError> {
        self.push_value(completion, "message")
    }

    fn push_value(&mut self, value: &Value, part: &str) -> Result<(), ModelError> {
        if let Some(error) = value.get("error") {
            return Err(self.invalid(format!("the server reported: {}", error_text(error))));
        }
        if let Some(usage) = value.get("usage").and_then(read_usage) {
            self.usage = Some(usage);
            if value.get("choices").is_none() {
                return Ok(());
            }
        }
        let Some(choices) = value.get("choices").and_then(Value::as_array) else {
            return Err(self.invalid(format!("no `choices` in {}", quote(&value.to_string()))));
        };
        // Only the first choice is read: Antler never asks for `n > 1`.
        let Some(choice) = choices.first() else {
            return Ok(());
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        let Some(delta) = choice.get(part) else {
            return Ok(());
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.text(text);
        }
        // DeepSeek, Qwen, MiMo, StepFun: `reasoning_content`; vLLM: `reasoning`.
        for key in ["reasoning_content", "reasoning"] {
            if let Some(text) = delta.get(key).and_then(Value::as_str) {
                self.reasoning_text(key, text);
            }
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            self.push_calls(calls);
        }
        Ok(())
    }

    /// Adds tool-call fragments, keyed by their `index`.
    fn push_calls(&mut self, calls: &[Value]) {
        for (position, call) in calls.iter().enumerate() {
            let index = call
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(position as u64);
            let partial = self.calls.entry(index).or_default();
            // The id and name come in the call's first chunk; some servers repeat them
            // in every chunk, which must not double them.
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                if partial.id.is_empty() {
                    partial.id = id.to_owned();
                }
            }
            let function = call.get("function");
            if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
                if partial.name != name {
                    partial.name.push_str(name);
                }
            }
            match function.and_then(|f| f.get("arguments")) {
                Some(Value::String(fragment)) => partial.arguments.push_str(fragment),
                // Some servers send the arguments of a whole reply as an object.
                Some(args @ Value::Object(_)) => partial.arguments.push_str(&args.to_string()),
                _ => {}
            }
        }
    }

    /// The assembled reply: id `ai-{turn}` like the scripted model's, tool calls in
    /// `index` order, a missing call id made `call-{turn}-{n}`. A call whose arguments
    /// are not a JSON object is not a call: it is an [`InvalidToolCall`] (empty arguments
    /// are `{}`), so no half-parsed call reaches a tool.
    pub fn finish(self) -> Result<ModelReply, ModelError> {
        let turn = self.turn;
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        let mut invalid_calls = Vec::new();
        for (n, call) in self.calls.into_values().enumerate() {
            let id = if call.id.is_empty() {
                format!("call-{turn}-{}", n + 1)
            } else {
                call.id
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
        let reasoning = (!self.reasoning.is_empty()).then(|| Reasoning {
            text: self.reasoning,
            replay: self
                .reasoning_key
                .map(|key| {
                    vec![ReplayItem {
                        provider: REPLAY_PROVIDER.to_owned(),
                        item: json!({ "key": key }),
                    }]
                })
                .unwrap_or_default(),
        });
        Ok(ModelReply {
            id: format!("ai-{turn}"),
            content: self.content,
            tool_calls,
            invalid_calls,
            reasoning,
            usage: self.usage,
            finish_reason: self.finish_reason,
        })
    }

    fn invalid(&self, message: String) -> ModelError {
        ModelError::InvalidReply {
            model: self.model.clone(),
            message,
        }
    }
}

/// An OpenAI `usage` object (`prompt_tokens`, `completion_tokens`, `total_tokens`; the
/// Responses API's `input_tokens`/`output_tokens` too); `total_tokens` defaults to their sum.
pub(crate) fn read_usage(usage: &Value) -> Option<TokenUsage> {
    let field = |names: &[&str]| names.iter().find_map(|n| usage.get(*n)?.as_u64());
    let input = field(&["prompt_tokens", "input_tokens"]);
    let output = field(&["completion_tokens", "output_tokens"]);
    let total = field(&["total_tokens"]);
    if input.is_none() && output.is_none() && total.is_none() {
        return None;
    }
    let (input, output) = (input.unwrap_or(0), output.unwrap_or(0));
    let detail = |outer: &[&str], inner: &str| {
        outer
            .iter()
            .find_map(|o| usage.get(*o)?.get(inner)?.as_u64())
            .unwrap_or(0)
    };
    Some(TokenUsage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: total.unwrap_or(input + output),
        cache_read_input_tokens: detail(
            &["prompt_tokens_details", "input_tokens_details"],
            "cached_tokens",
        ),
        cache_creation_input_tokens: 0,
        reasoning_tokens: detail(
            &["completion_tokens_details", "output_tokens_details"],
            "reasoning_tokens",
        ),
    })
}

/// A tool call's `arguments` string as a JSON object.
pub(crate) fn parse_arguments(arguments: &str) -> Result<Value, String> {
    if arguments.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(other) => Err(format!(
            "expected a JSON object, got {}",
            quote(&other.to_string())
        )),
        Err(e) => Err(format!("not JSON ({e}): {}", quote(arguments))),
    }
}

impl ReplyReader for ReplyAssembler<'_> {
    fn item(&mut self, item: &StreamItem) -> Result<Flow, ModelError> {
        self.push_chunk(&item.data)
    }

    fn whole(&mut self, body: &Value) -> Result<(), ModelError> {
        self.push_completion(body)
    }

    fn finished(&self) -> bool {
        ReplyAssembler::finished(self)
    }

    fn finish(self) -> Result<ModelReply, ModelError> {
        ReplyAssembler::finish(self)
    }
}
