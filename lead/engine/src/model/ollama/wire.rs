//! Ollama's native `/api/chat` wire format: the request (`messages` with roles
//! system/user/assistant/tool, `tools` in OpenAI's function format, `images` as base64,
//! `options`, `think`) built from a run's messages, and the assembly of its NDJSON
//! stream (or one whole reply) into a [`ModelReply`]. Ollama's tool calls carry their
//! arguments as a JSON object and no id: the assembler names them `call-{turn}-{n}`
//! (an `id` the server gives is kept), and a tool result goes back as a `tool` message
//! naming the tool (`tool_name`).

use serde_json::{json, Map, Value};

use super::config::OllamaConfig;
use crate::model::openai::wire::{IMAGES_HEADING, IMAGE_UNAVAILABLE};
use crate::model::stream::StreamItem;
use crate::model::transport::{error_text, quote, Flow, ReplyReader};
use crate::model::{
    finish_reason, ImagePart, InvalidToolCall, ModelError, ModelObserver, ModelReply, ModelRequest,
};
use crate::thread::state::{Message, Reasoning, TokenUsage, ToolCall};

/// The request body: `model`, `messages`, `stream: true`, `tools` (when any are
/// visible), `options` (when any are set), `think` (see [`OllamaConfig::think`]) and
/// the entry's top-level keys.
pub fn request_body(config: &OllamaConfig, request: &ModelRequest<'_>) -> Value {
    let mut body = Map::new();
    body.insert(
        "model".to_owned(),
        Value::String(config.common.model.clone()),
    );
    let mut messages: Vec<Value> = request.messages.iter().map(message_json).collect();
    if !request.images.is_empty() {
        messages.push(images_message(request.images));
    }
    body.insert("messages".to_owned(), Value::Array(messages));
    body.insert("stream".to_owned(), Value::Bool(true));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|spec| json!({"type": "function", "function": spec.openai_function()}))
            .collect();
        body.insert("tools".to_owned(), Value::Array(tools));
    }
    if !config.options.is_empty() {
        body.insert("options".to_owned(), Value::Object(config.options.clone()));
    }
    if let Some(think) = config.think(request.thinking) {
        body.insert("think".to_owned(), think);
    }
    for (key, value) in &config.top_level {
        body.insert(key.clone(), value.clone());
    }
    Value::Object(body)
}

/// One state message as an Ollama chat message (a summary is a user message).
pub fn message_json(message: &Message) -> Value {
    match message {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::Human { content, .. } => json!({"role": "user", "content": content}),
        Message::Ai {
            content,
            tool_calls,
            ..
        } => {
            if tool_calls.is_empty() {
                return json!({"role": "assistant", "content": content});
            }
            let calls: Vec<Value> = tool_calls
                .iter()
                .map(|call| {
                    let arguments = match &call.args {
                        Value::Object(_) => call.args.clone(),
                        _ => json!({}),
                    };
                    json!({"function": {"name": call.name, "arguments": arguments}})
                })
                .collect();
            json!({"role": "assistant", "content": content, "tool_calls": calls})
        }
        Message::Tool { name, content, .. } => {
            json!({"role": "tool", "content": content, "tool_name": name})
        }
    }
}

/// The user message that shows a vision model its viewed images: the heading and a
/// line per image, the readable ones as base64 in `images`.
fn images_message(images: &[ImagePart]) -> Value {
    let mut text = IMAGES_HEADING.to_owned();
    let mut data = Vec::new();
    for image in images {
        text.push_str(&format!("\n- **{}** ({})", image.path, image.mime_type));
        match &image.base64 {
            Some(base64) => data.push(Value::String(base64.clone())),
            None => text.push_str(IMAGE_UNAVAILABLE),
        }
    }
    json!({"role": "user", "content": text, "images": data})
}

/// Assembles Ollama's chat responses (NDJSON lines, or one whole reply) into a
/// [`ModelReply`].
pub struct ReplyAssembler<'a> {
    model: String,
    turn: usize,
    observer: Option<&'a dyn ModelObserver>,
    content: String,
    thinking: String,
    calls: Vec<ToolCall>,
    invalid: Vec<InvalidToolCall>,
    done: bool,
    done_reason: Option<String>,
    usage: Option<TokenUsage>,
}

impl<'a> ReplyAssembler<'a> {
    pub fn new(model: &str, request: &ModelRequest<'a>) -> ReplyAssembler<'a> {
        ReplyAssembler {
            model: model.to_owned(),
            turn: request.turn(),
            observer: request.observer,
            content: String::new(),
            thinking: String::new(),
            calls: Vec::new(),
            invalid: Vec::new(),
            done: false,
            done_reason: None,
            usage: None,
        }
    }

    /// Adds one response; `Done` once it says `done: true`.
    pub fn push(&mut self, response: &Value) -> Result<Flow, ModelError> {
        if let Some(error) = response.get("error") {
            return Err(ModelError::InvalidReply {
                model: self.model.clone(),
                message: format!("the server reported: {}", error_text(error)),
            });
        }
        let Some(message) = response.get("message") else {
            if response.get("done").is_none() {
                return Err(ModelError::InvalidReply {
                    model: self.model.clone(),
                    message: format!("no `message` in {}", quote(&response.to_string())),
                });
            }
            return Ok(self.end(response));
        };
        if let Some(text) = message.get("content").and_then(Value::as_str) {
            if !text.is_empty() {
                self.content.push_str(text);
                if let Some(observer) = self.observer {
                    observer.text_delta(text);
                }
            }
        }
        if let Some(text) = message.get("thinking").and_then(Value::as_str) {
            if !text.is_empty() {
                self.thinking.push_str(text);
                if let Some(observer) = self.observer {
                    observer.reasoning_delta(text);
                }
            }
        }
        let calls = message.get("tool_calls").and_then(Value::as_array);
        for call in calls.into_iter().flatten() {
            self.call(call);
        }
        Ok(self.end(response))
    }

    fn call(&mut self, call: &Value) {
        let n = self.calls.len() + self.invalid.len() + 1;
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .map_or_else(|| format!("call-{}-{n}", self.turn), str::to_owned);
        let function = call.get("function");
        let name = function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let arguments = function.and_then(|f| f.get("arguments"));
        let parsed = match arguments {
            None | Some(Value::Null) => Ok(json!({})),
            Some(args @ Value::Object(_)) => Ok(args.clone()),
            // Some servers send the object as a JSON string.
            Some(Value::String(text)) if text.trim().is_empty() => Ok(json!({})),
            Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
                Ok(args @ Value::Object(_)) => Ok(args),
                Ok(other) => Err((
                    text.clone(),
                    format!("expected a JSON object, got {}", quote(&other.to_string())),
                )),
                Err(e) => Err((text.clone(), format!("not JSON ({e}): {}", quote(text)))),
            },
            Some(other) => Err((
                other.to_string(),
                format!("expected a JSON object, got {}", quote(&other.to_string())),
            )),
        };
        match parsed {
            Ok(args) => self.calls.push(ToolCall { id, name, args }),
            Err((arguments, error)) => self.invalid.push(InvalidToolCall {
                id,
                name,
                arguments: quote(&arguments),
                error,
            }),
        }
    }

    fn end(&mut self, response: &Value) -> Flow {
        if response.get("done").and_then(Value::as_bool) != Some(true) {
            return Flow::Continue;
        }
        self.done = true;
        self.done_reason = response
            .get("done_reason")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let count = |name: &str| response.get(name).and_then(Value::as_u64);
        let (input, output) = (count("prompt_eval_count"), count("eval_count"));
        if input.is_some() || output.is_some() {
            let (input, output) = (input.unwrap_or(0), output.unwrap_or(0));
            self.usage = Some(TokenUsage {
                input_tokens: input,
                output_tokens: output,
                total_tokens: input + output,
                ..TokenUsage::default()
            });
        }
        Flow::Done
    }

    /// Whether the reply said `done`.
    pub fn finished(&self) -> bool {
        self.done
    }

    /// The reply: id `ai-{turn}`; `done_reason` in OpenAI's words (`stop` is
    /// `tool_calls` when the reply calls tools, `length` stays; a `done` without a
    /// reason is `stop`; any other reason, such as `load`, as Ollama wrote it).
    pub fn finish(self) -> Result<ModelReply, ModelError> {
        let turn = self.turn;
        let has_calls = !self.calls.is_empty() || !self.invalid.is_empty();
        let finish = self.done.then(|| match self.done_reason.as_deref() {
            None | Some("stop") if has_calls => finish_reason::TOOL_CALLS.to_owned(),
            None | Some("stop") => finish_reason::STOP.to_owned(),
            Some("length") => finish_reason::LENGTH.to_owned(),
            Some(other) => other.to_owned(),
        });
        let reasoning = (!self.thinking.is_empty()).then(|| Reasoning {
            text: self.thinking,
            replay: Vec::new(),
        });
        Ok(ModelReply {
            id: format!("ai-{turn}"),
            content: self.content,
            tool_calls: self.calls,
            invalid_calls: self.invalid,
            reasoning,
            usage: self.usage,
            finish_reason: finish,
        })
    }
}

impl ReplyReader for ReplyAssembler<'_> {
    fn item(&mut self, item: &StreamItem) -> Result<Flow, ModelError> {
        let value: Value =
            serde_json::from_str(item.data.trim()).map_err(|e| ModelError::InvalidReply {
                model: self.model.clone(),
                message: format!("a stream line is not JSON ({e}): {}", quote(&item.data)),
            })?;
        self.push(&value)
    }

    fn whole(&mut self, body: &Value) -> Result<(), ModelError> {
        self.push(body).map(|_| ())
    }

    fn finished(&self) -> bool {
        ReplyAssembler::finished(self)
    }

    fn finish(self) -> Result<ModelReply, ModelError> {
        ReplyAssembler::finish(self)
    }
}
