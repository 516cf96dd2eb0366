//! The Messages API reply: the assembly of a stream's events (`message_start`,
//! `content_block_start`/`delta`/`stop`, `message_delta`, `message_stop`, `ping`,
//! `error`) or of a whole JSON message into one [`ModelReply`]. Text blocks make the
//! answer; thinking and redacted thinking blocks make its [`Reasoning`], kept whole with
//! their signatures to be sent back; `tool_use` blocks make the calls. Invariants: a
//! `tool_use` whose input is not a JSON object is an [`InvalidToolCall`], never a call;
//! a stream is complete only at `message_stop`; thinking never reaches the answer.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::REPLAY_PROVIDER;
use crate::model::finish_reason;
use crate::model::stream::StreamItem;
use crate::model::transport::{error_text, in_stream_failure, quote, Flow, ReplyReader};
use crate::model::{InvalidToolCall, ModelError, ModelObserver, ModelReply, ModelRequest};
use crate::thread::state::{Reasoning, ReplayItem, TokenUsage, ToolCall};

/// Anthropic's `stop_reason` in OpenAI's words (spec D.3's caps read these):
/// `end_turn`, `stop_sequence` and `pause_turn` (a server tool paused a long turn: the
/// reply so far is whole) are `stop`; `tool_use` is `tool_calls`; `max_tokens` and
/// `model_context_window_exceeded` are `length`; `refusal` is `content_filter`. Any
/// other value is kept as written.
pub fn map_stop_reason(stop_reason: &str) -> String {
    match stop_reason {
        "end_turn" | "stop_sequence" | "pause_turn" => finish_reason::STOP,
        "tool_use" => finish_reason::TOOL_CALLS,
        "max_tokens" | "model_context_window_exceeded" => finish_reason::LENGTH,
        "refusal" => finish_reason::CONTENT_FILTER,
        other => other,
    }
    .to_owned()
}

/// One content block being assembled.
#[derive(Debug)]
enum Block {
    Text(String),
    Thinking {
        thinking: String,
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        json: String,
        input: Value,
    },
    /// A block type Antler does not read (server tool results, citations...).
    Other,
}

/// The usage counters as the API reports them.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    input: Option<u64>,
    output: Option<u64>,
    cache_creation: Option<u64>,
    cache_read: Option<u64>,
}

impl Usage {
    /// Adds what `usage` says: `message_delta`'s counts are cumulative, so a field it
    /// gives replaces `message_start`'s.
    fn update(&mut self, usage: &Value) {
        let field = |name: &str| usage.get(name).and_then(Value::as_u64);
        self.input = field("input_tokens").or(self.input);
        self.output = field("output_tokens").or(self.output);
        self.cache_creation = field("cache_creation_input_tokens").or(self.cache_creation);
        self.cache_read = field("cache_read_input_tokens").or(self.cache_read);
    }

    /// Antler's usage: `input_tokens` is every input token, cached or not (the API's
    /// `input_tokens` counts only those after the last cache breakpoint), so that it
    /// means what OpenAI's `prompt_tokens` means and LangChain's `usage_metadata` says;
    /// the cache writes and reads are also given apart; `total_tokens` is input
    /// (cache included) plus output.
    fn token_usage(self) -> Option<TokenUsage> {
        if self.input.is_none() && self.output.is_none() {
            return None;
        }
        let cache_creation = self.cache_creation.unwrap_or(0);
        let cache_read = self.cache_read.unwrap_or(0);
        let input = self.input.unwrap_or(0) + cache_creation + cache_read;
        let output = self.output.unwrap_or(0);
        Some(TokenUsage {
            input_tokens: input,
            output_tokens: output,
            total_tokens: input + output,
            cache_creation_input_tokens: cache_creation,
            cache_read_input_tokens: cache_read,
            reasoning_tokens: 0,
        })
    }
}

/// Assembles a Messages API reply, streamed or whole, into a [`ModelReply`], telling the
/// request's observer each piece of text and thinking as it streams.
pub struct ReplyAssembler<'a> {
    model: String,
    turn: usize,
    observer: Option<&'a dyn ModelObserver>,
    blocks: BTreeMap<u64, Block>,
    stop_reason: Option<String>,
    usage: Usage,
    stopped: bool,
}

impl<'a> ReplyAssembler<'a> {
    /// An assembler for the reply to `request`, on behalf of the model named `model`.
    pub fn new(model: &str, request: &ModelRequest<'a>) -> ReplyAssembler<'a> {
        ReplyAssembler {
            model: model.to_owned(),
            turn: request.turn(),
            observer: request.observer,
            blocks: BTreeMap::new(),
            stop_reason: None,
            usage: Usage::default(),
            stopped: false,
        }
    }

    /// Adds one streamed event (its JSON `data`; the event name is also its `type`).
    pub fn push_event(&mut self, data: &str) -> Result<Flow, ModelError> {
        let event: Value = serde_json::from_str(data).map_err(|e| {
            self.invalid(format!("a stream event is not JSON ({e}): {}", quote(data)))
        })?;
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match event.get("type").and_then(Value::as_str).unwrap_or("") {
            "message_start" => {
                if let Some(usage) = event.get("message").and_then(|m| m.get("usage")) {
                    self.usage.update(usage);
                }
            }
            "content_block_start" => {
                let block = event.get("content_block").cloned().unwrap_or(Value::Null);
                self.start_block(index, &block);
            }
            "content_block_delta" => {
                if let Some(delta) = event.get("delta") {
                    self.delta(index, delta);
                }
            }
            "message_delta" => {
                if let Some(reason) = event
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(usage) = event.get("usage") {
                    self.usage.update(usage);
                }
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(Flow::Done);
            }
            "error" => return Err(self.server_error(event.get("error"))),
            // `ping`, `content_block_stop`, and event types added after this client
            // (the API's versioning policy allows new ones).
            _ => {}
        }
        Ok(Flow::Continue)
    }

    /// Adds a whole (non-streamed) message.
    pub fn push_message(&mut self, message: &Value) -> Result<(), ModelError> {
        if message.get("type").and_then(Value::as_str) == Some("error") {
            return Err(self.server_error(message.get("error")));
        }
        let Some(content) = message.get("content").and_then(Value::as_array) else {
            return Err(self.invalid(format!("no `content` in {}", quote(&message.to_string()))));
        };
        for (index, block) in content.iter().enumerate() {
            self.start_block(index as u64, block);
        }
        if let Some(reason) = message.get("stop_reason").and_then(Value::as_str) {
            self.stop_reason = Some(reason.to_owned());
        }
        if let Some(usage) = message.get("usage") {
            self.usage.update(usage);
        }
        self.stopped = true;
        Ok(())
    }

    /// Whether the reply said it was complete (`message_stop`, or a whole message).
    pub fn finished(&self) -> bool {
        self.stopped
    }

    fn start_block(&mut self, index: u64, block: &Value) {
        let field = |name: &str| {
            block
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let assembled = match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = field("text");
                self.tell_text(&text);
                Block::Text(text)
            }
            Some("thinking") => {
                let thinking = field("thinking");
                self.tell_reasoning(&thinking);
                Block::Thinking {
                    thinking,
                    signature: field("signature"),
                }
            }
            Some("redacted_thinking") => Block::RedactedThinking {
                data: field("data"),
            },
            Some("tool_use") => Block::ToolUse {
                id: field("id"),
                name: field("name"),
                json: String::new(),
                input: block.get("input").cloned().unwrap_or(Value::Null),
            },
            _ => Block::Other,
        };
        self.blocks.insert(index, assembled);
    }

    fn delta(&mut self, index: u64, delta: &Value) {
        let piece = |name: &str| delta.get(name).and_then(Value::as_str).unwrap_or("");
        let kind = delta.get("type").and_then(Value::as_str).unwrap_or("");
        // A delta for a block that never started opens one of the delta's kind.
        let block = self.blocks.entry(index).or_insert_with(|| match kind {
            "text_delta" => Block::Text(String::new()),
            "thinking_delta" | "signature_delta" => Block::Thinking {
                thinking: String::new(),
                signature: String::new(),
            },
            "input_json_delta" => Block::ToolUse {
                id: String::new(),
                name: String::new(),
                json: String::new(),
                input: Value::Null,
            },
            _ => Block::Other,
        });
        match (kind, block) {
            ("text_delta", Block::Text(text)) => {
                let piece = piece("text");
                text.push_str(piece);
                if let Some(observer) = self.observer {
                    observer.text_delta(piece);
                }
            }
            ("thinking_delta", Block::Thinking { thinking, .. }) => {
                let piece = piece("thinking");
                thinking.push_str(piece);
                if let Some(observer) = self.observer {
                    observer.reasoning_delta(piece);
                }
            }
            ("signature_delta", Block::Thinking { signature, .. }) => {
                signature.push_str(piece("signature"));
            }
            ("input_json_delta", Block::ToolUse { json, .. }) => {
                json.push_str(piece("partial_json"));
            }
            // `citations_delta`, and deltas that do not fit their block.
            _ => {}
        }
    }

    fn tell_text(&self, text: &str) {
        if let (Some(observer), false) = (self.observer, text.is_empty()) {
            observer.text_delta(text);
        }
    }

    fn tell_reasoning(&self, text: &str) {
        if let (Some(observer), false) = (self.observer, text.is_empty()) {
            observer.reasoning_delta(text);
        }
    }

    /// The assembled reply: id `ai-{turn}`; the text blocks joined as the answer; the
    /// thinking blocks as its reasoning (their text joined by blank lines, the blocks
    /// themselves, signatures included, to send back); the `tool_use` blocks as calls,
    /// in block order, a missing id made `call-{turn}-{n}`. Consecutive `tool_use`
    /// blocks with one id are one call (a proxy that splits a streamed call into several
    /// blocks, as LiteLLM does). A call whose input is not a JSON object is an
    /// [`InvalidToolCall`].
    pub fn finish(self) -> Result<ModelReply, ModelError> {
        let turn = self.turn;
        let mut content = String::new();
        let mut thoughts: Vec<String> = Vec::new();
        let mut replay = Vec::new();
        let mut calls: Vec<(String, String, String, Value)> = Vec::new();
        for block in self.blocks.into_values() {
            match block {
                Block::Text(text) => content.push_str(&text),
                Block::Thinking {
                    thinking,
                    signature,
                } => {
                    replay.push(
                        json!({"type": "thinking", "thinking": thinking, "signature": signature}),
                    );
                    thoughts.push(thinking);
                }
                Block::RedactedThinking { data } => {
                    replay.push(json!({"type": "redacted_thinking", "data": data}));
                }
                Block::ToolUse {
                    id,
                    name,
                    json,
                    input,
                } => match calls.last_mut() {
                    Some(last) if !id.is_empty() && last.0 == id => last.2.push_str(&json),
                    _ => calls.push((id, name, json, input)),
                },
                Block::Other => {}
            }
        }
        let mut tool_calls = Vec::with_capacity(calls.len());
        let mut invalid_calls = Vec::new();
        for (n, (id, name, json, input)) in calls.into_iter().enumerate() {
            let id = if id.is_empty() {
                format!("call-{turn}-{}", n + 1)
            } else {
                id
            };
            match tool_input(&json, input) {
                Ok(args) => tool_calls.push(ToolCall { id, name, args }),
                Err((arguments, error)) => invalid_calls.push(InvalidToolCall {
                    id,
                    name,
                    arguments: quote(&arguments),
                    error,
                }),
            }
        }
        let reasoning = (!replay.is_empty()).then(|| Reasoning {
            text: thoughts
                .into_iter()
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
                .join("\n\n"),
            replay: replay
                .into_iter()
                .map(|item| ReplayItem {
                    provider: REPLAY_PROVIDER.to_owned(),
                    item,
                })
                .collect(),
        });
        Ok(ModelReply {
            id: format!("ai-{turn}"),
            content,
            tool_calls,
            invalid_calls,
            reasoning,
            usage: self.usage.token_usage(),
            finish_reason: self.stop_reason.as_deref().map(map_stop_reason),
        })
    }

    fn server_error(&self, error: Option<&Value>) -> ModelError {
        let kind = error
            .and_then(|e| e.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("error");
        let message = error.map(error_text).unwrap_or_default();
        let message = format!(
            "the server sent an error event ({kind}): {}",
            quote(&message)
        );
        // The API's error types that mean what an HTTP status would have said, had the
        // error come before the stream: retried by the run's model like that status.
        let status = match kind {
            "overloaded_error" => Some(529),
            "rate_limit_error" => Some(429),
            "api_error" => Some(500),
            "timeout_error" => Some(504),
            _ => None,
        };
        in_stream_failure(&self.model, status, message)
    }

    fn invalid(&self, message: String) -> ModelError {
        ModelError::InvalidReply {
            model: self.model.clone(),
            message,
        }
    }
}

/// A call's input: the streamed JSON when there is any, else the block's own `input`
/// (a whole message, or a stream with no deltas); it must be an object. `Err` holds the
/// arguments as written and why they are invalid.
fn tool_input(json: &str, input: Value) -> Result<Value, (String, String)> {
    let value = if json.trim().is_empty() {
        match input {
            Value::Null => Value::Object(Map::new()),
            other => other,
        }
    } else {
        serde_json::from_str::<Value>(json)
            .map_err(|e| (json.to_owned(), format!("not JSON ({e}): {}", quote(json))))?
    };
    match value {
        Value::Object(_) => Ok(value),
        other => {
            let written = other.to_string();
            let error = format!("expected a JSON object, got {}", quote(&written));
            Err((written, error))
        }
    }
}

impl ReplyReader for ReplyAssembler<'_> {
    fn item(&mut self, item: &StreamItem) -> Result<Flow, ModelError> {
        self.push_event(&item.data)
    }

    fn whole(&mut self, body: &Value) -> Result<(), ModelError> {
        self.push_message(body)
    }

    fn finished(&self) -> bool {
        ReplyAssembler::finished(self)
    }

    fn finish(self) -> Result<ModelReply, ModelError> {
        ReplyAssembler::finish(self)
    }
}
