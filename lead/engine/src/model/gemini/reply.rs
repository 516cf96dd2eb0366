//! The assembly of Gemini's `GenerateContentResponse`s (SSE chunks of
//! `streamGenerateContent`, or one whole `generateContent` reply) into a [`ModelReply`].
//! Gemini's function calls may have no id: they are named `call-{turn}-{n}` (a
//! `functionCall.id` the server gives is kept). Thought parts are the reasoning's text;
//! thought signatures are kept in [`Reasoning::replay`] under [`REPLAY_PROVIDER`], keyed
//! to the part they came on (the text, or the call by its id), for `request` to send
//! back on that same part.

use serde_json::{json, Value};

use crate::model::stream::StreamItem;
use crate::model::transport::{error_text, quote, Flow, ReplyReader};
use crate::model::{
    finish_reason, InvalidToolCall, ModelError, ModelObserver, ModelReply, ModelRequest,
};
use crate::thread::state::{Reasoning, ReplayItem, TokenUsage, ToolCall};

/// The provider tag of Gemini's thought signatures in [`Reasoning::replay`].
pub const REPLAY_PROVIDER: &str = "gemini";
/// The replay item key of a signature that belongs to the reply's text part.
pub const REPLAY_TEXT: &str = "text";
/// The replay item key of a signature that belongs to a `functionCall` part (the call id).
pub const REPLAY_CALL: &str = "call";
/// The replay item key of the signature itself.
pub const REPLAY_SIGNATURE: &str = "thoughtSignature";

/// Why the prompt was refused (`promptFeedback.blockReason`); `{reason}` and `{detail}`
/// (the `blockReasonMessage`, or nothing).
pub const PROMPT_BLOCKED: &str =
    "Gemini refused the prompt (promptFeedback.blockReason {reason}){detail}; rephrase the request or remove the content it objects to";
/// The error of a call Gemini could not write (`MALFORMED_FUNCTION_CALL`); `{message}`
/// is its `finishMessage`.
pub const MALFORMED_CALL: &str =
    "Gemini could not write a valid function call (finishReason MALFORMED_FUNCTION_CALL): {message}";
/// The error of a call to a tool the request did not declare (`UNEXPECTED_TOOL_CALL`).
pub const UNEXPECTED_CALL: &str =
    "Gemini called a tool that was not declared (finishReason UNEXPECTED_TOOL_CALL): {message}";

/// Assembles `GenerateContentResponse`s into a [`ModelReply`].
pub struct ReplyAssembler<'a> {
    model: String,
    turn: usize,
    observer: Option<&'a dyn ModelObserver>,
    content: String,
    reasoning: String,
    calls: Vec<ToolCall>,
    invalid: Vec<InvalidToolCall>,
    replay: Vec<ReplayItem>,
    text_signature: Option<Value>,
    /// Gemini's own `finishReason`.
    finish: Option<String>,
    finish_message: Option<String>,
    usage: Option<TokenUsage>,
}

impl<'a> ReplyAssembler<'a> {
    /// An assembler of the reply to `request` for the model named `model`.
    pub fn new(model: &str, request: &ModelRequest<'a>) -> ReplyAssembler<'a> {
        ReplyAssembler {
            model: model.to_owned(),
            turn: request.turn(),
            observer: request.observer,
            content: String::new(),
            reasoning: String::new(),
            calls: Vec::new(),
            invalid: Vec::new(),
            replay: Vec::new(),
            text_signature: None,
            finish: None,
            finish_message: None,
            usage: None,
        }
    }

    /// Adds one response (a streamed chunk, or the whole reply; a JSON array of them, as
    /// `streamGenerateContent` sends without `alt=sse`, is each in turn).
    pub fn push(&mut self, response: &Value) -> Result<(), ModelError> {
        if let Value::Array(responses) = response {
            for one in responses {
                self.push(one)?;
            }
            return Ok(());
        }
        if let Some(error) = response.get("error") {
            return Err(self.invalid_reply(format!("the server reported: {}", error_text(error))));
        }
        if let Some(usage) = response.get("usageMetadata").and_then(read_usage) {
            self.usage = Some(usage);
        }
        let candidate = response
            .get("candidates")
            .and_then(Value::as_array)
            .and_then(|c| c.first());
        if let Some(reason) = response
            .get("promptFeedback")
            .and_then(|f| f.get("blockReason"))
            .and_then(Value::as_str)
        {
            if candidate.is_none() {
                let detail = response["promptFeedback"]
                    .get("blockReasonMessage")
                    .and_then(Value::as_str)
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default();
                return Err(self.invalid_reply(
                    PROMPT_BLOCKED
                        .replacen("{reason}", reason, 1)
                        .replacen("{detail}", &detail, 1),
                ));
            }
        }
        // Only the first candidate is read: Antler never asks for more.
        let Some(candidate) = candidate else {
            if response.get("usageMetadata").is_none() {
                return Err(self.invalid_reply(format!(
                    "no `candidates` in {}",
                    quote(&response.to_string())
                )));
            }
            return Ok(());
        };
        let parts = candidate
            .get("content")
            .and_then(|c| c.get("parts"))
            .and_then(Value::as_array);
        for part in parts.into_iter().flatten() {
            self.part(part);
        }
        if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
            self.finish = Some(reason.to_owned());
        }
        if let Some(message) = candidate.get("finishMessage").and_then(Value::as_str) {
            self.finish_message = Some(message.to_owned());
        }
        Ok(())
    }

    fn part(&mut self, part: &Value) {
        let signature = part
            .get(REPLAY_SIGNATURE)
            .filter(|s| s.is_string())
            .cloned();
        if let Some(call) = part.get("functionCall") {
            let n = self.calls.len() + self.invalid.len() + 1;
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
                .map_or_else(|| format!("call-{}-{n}", self.turn), str::to_owned);
            let name = call
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            if let Some(signature) = signature {
                self.replay.push(ReplayItem {
                    provider: REPLAY_PROVIDER.to_owned(),
                    item: json!({ REPLAY_CALL: id, REPLAY_SIGNATURE: signature }),
                });
            }
            match call.get("args") {
                None | Some(Value::Null) => self.calls.push(ToolCall {
                    id,
                    name,
                    args: json!({}),
                }),
                Some(args @ Value::Object(_)) => self.calls.push(ToolCall {
                    id,
                    name,
                    args: args.clone(),
                }),
                Some(other) => self.invalid.push(InvalidToolCall {
                    id,
                    name,
                    arguments: quote(&other.to_string()),
                    error: format!("expected a JSON object, got {}", quote(&other.to_string())),
                }),
            }
            return;
        }
        let text = part.get("text").and_then(Value::as_str);
        if part.get("thought").and_then(Value::as_bool) == Some(true) {
            if let Some(text) = text.filter(|t| !t.is_empty()) {
                self.reasoning.push_str(text);
                if let Some(observer) = self.observer {
                    observer.reasoning_delta(text);
                }
            }
        } else if let Some(text) = text.filter(|t| !t.is_empty()) {
            self.content.push_str(text);
            if let Some(observer) = self.observer {
                observer.text_delta(text);
            }
        }
        // A signature on a text or thought part (or on an empty part closing a stream)
        // is the text's: the last one wins, as Gemini puts it on the last part.
        if let Some(signature) = signature {
            self.text_signature = Some(signature);
        }
    }

    /// Whether the reply said why it finished (a stream that ends before is cut).
    pub fn finished(&self) -> bool {
        self.finish.is_some()
    }

    /// The reply: id `ai-{turn}`, the finish reason in OpenAI's words (`STOP` is
    /// `tool_calls` when the reply calls tools; `MAX_TOKENS` is `length`; the safety
    /// reasons are `content_filter`; `MALFORMED_FUNCTION_CALL` and
    /// `UNEXPECTED_TOOL_CALL` are `tool_calls` with an [`InvalidToolCall`] carrying
    /// Gemini's `finishMessage`; any other reason is Gemini's word in lower case).
    pub fn finish(mut self) -> Result<ModelReply, ModelError> {
        let turn = self.turn;
        let message = self.finish_message.take().unwrap_or_default();
        let template = match self.finish.as_deref() {
            Some("MALFORMED_FUNCTION_CALL") => Some(MALFORMED_CALL),
            Some("UNEXPECTED_TOOL_CALL") => Some(UNEXPECTED_CALL),
            _ => None,
        };
        if let Some(template) = template {
            let n = self.calls.len() + self.invalid.len() + 1;
            self.invalid.push(InvalidToolCall {
                id: format!("call-{turn}-{n}"),
                name: called_name(&message),
                arguments: quote(&message),
                error: template.replacen("{message}", &quote(&message), 1),
            });
        }
        let finish_reason = self
            .finish
            .as_deref()
            .map(|reason| openai_finish_reason(reason, !self.calls.is_empty()));
        if let Some(signature) = self.text_signature {
            self.replay.push(ReplayItem {
                provider: REPLAY_PROVIDER.to_owned(),
                item: json!({ REPLAY_TEXT: true, REPLAY_SIGNATURE: signature }),
            });
        }
        let reasoning =
            (!self.reasoning.is_empty() || !self.replay.is_empty()).then(|| Reasoning {
                text: self.reasoning,
                replay: self.replay,
            });
        Ok(ModelReply {
            id: format!("ai-{turn}"),
            content: self.content,
            tool_calls: self.calls,
            invalid_calls: self.invalid,
            reasoning,
            usage: self.usage,
            finish_reason,
        })
    }

    fn invalid_reply(&self, message: String) -> ModelError {
        ModelError::InvalidReply {
            model: self.model.clone(),
            message,
        }
    }
}

/// Gemini's safety finish reasons.
pub const SAFETY_REASONS: &[&str] = &[
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_RECITATION",
];

/// A Gemini `finishReason` in OpenAI's words (see [`ReplyAssembler::finish`]).
pub fn openai_finish_reason(reason: &str, has_calls: bool) -> String {
    match reason {
        "STOP" if has_calls => finish_reason::TOOL_CALLS.to_owned(),
        "STOP" => finish_reason::STOP.to_owned(),
        "MAX_TOKENS" => finish_reason::LENGTH.to_owned(),
        "MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL" => finish_reason::TOOL_CALLS.to_owned(),
        safety if SAFETY_REASONS.contains(&safety) => finish_reason::CONTENT_FILTER.to_owned(),
        other => other.to_ascii_lowercase(),
    }
}

/// The function a `finishMessage` names (`Malformed function call: print(default_api.f(…))`
/// names `f`), else empty.
fn called_name(message: &str) -> String {
    let after = message
        .rsplit_once("default_api.")
        .map_or("", |(_, rest)| rest);
    after
        .split('(')
        .next()
        .filter(|name| {
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        })
        .unwrap_or("")
        .to_owned()
}

/// Gemini's `usageMetadata`: input is `promptTokenCount` (+ `toolUsePromptTokenCount`),
/// output is `candidatesTokenCount` + `thoughtsTokenCount` (as OpenAI counts reasoning in
/// completion tokens), reasoning is `thoughtsTokenCount`, cache reads are
/// `cachedContentTokenCount`, the total is `totalTokenCount` (else the sum).
pub fn read_usage(usage: &Value) -> Option<TokenUsage> {
    let field = |name: &str| usage.get(name).and_then(Value::as_u64);
    let prompt = field("promptTokenCount");
    let candidates = field("candidatesTokenCount");
    let total = field("totalTokenCount");
    if prompt.is_none() && candidates.is_none() && total.is_none() {
        return None;
    }
    let thoughts = field("thoughtsTokenCount").unwrap_or(0);
    let input = prompt.unwrap_or(0) + field("toolUsePromptTokenCount").unwrap_or(0);
    let output = candidates.unwrap_or(0) + thoughts;
    Some(TokenUsage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: total.unwrap_or(input + output),
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: field("cachedContentTokenCount").unwrap_or(0),
        reasoning_tokens: thoughts,
    })
}

impl ReplyReader for ReplyAssembler<'_> {
    fn item(&mut self, item: &StreamItem) -> Result<Flow, ModelError> {
        let data = item.data.trim();
        if data == "[DONE]" {
            return Ok(Flow::Done);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            self.invalid_reply(format!("a stream chunk is not JSON ({e}): {}", quote(data)))
        })?;
        self.push(&chunk)?;
        Ok(Flow::Continue)
    }

    fn whole(&mut self, body: &Value) -> Result<(), ModelError> {
        self.push(body)
    }

    fn finished(&self) -> bool {
        ReplyAssembler::finished(self)
    }

    fn finish(self) -> Result<ModelReply, ModelError> {
        ReplyAssembler::finish(self)
    }
}
