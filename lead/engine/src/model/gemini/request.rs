//! The Gemini request (`generateContent`): `systemInstruction` (the system messages),
//! `contents` with roles `user`/`model` (adjacent messages of a role merged), tools as
//! `functionDeclarations` in Gemini's schema subset, `safetySettings` and
//! `generationConfig`. A call goes back as a `functionCall` part with its thought
//! signature, and its result as a `functionResponse` naming the function (with the call
//! id only when Gemini gave one: the ids Antler made up are never sent).

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::config::GeminiConfig;
use super::reply::{REPLAY_CALL, REPLAY_PROVIDER, REPLAY_SIGNATURE, REPLAY_TEXT};
use super::schema;
use crate::model::openai::wire::{IMAGES_HEADING, IMAGE_UNAVAILABLE};
use crate::model::{ImagePart, ModelRequest};
use crate::thread::state::{Message, Reasoning, ReplayItem, ToolCall, ToolStatus};

/// A tool result whose call is not in the conversation (a call whose arguments were
/// invalid is never part of the AI message): sent as user text, since a
/// `functionResponse` must answer a `functionCall` of the turn before.
pub const UNMATCHED_RESULT: &str = "[Result of tool call {id} ({name})]\n{content}";

/// The request body of `request`: `contents`, `systemInstruction`, `tools` with
/// `toolConfig` (when tools are visible), `safetySettings` and `generationConfig` (when
/// the entry sets any).
pub fn request_body(config: &GeminiConfig, request: &ModelRequest<'_>) -> Value {
    let mut body = Map::new();
    let (system, contents) = contents(request.messages, request.images);
    body.insert("contents".to_owned(), Value::Array(contents));
    if let Some(system) = system {
        body.insert("systemInstruction".to_owned(), system);
    }
    if !request.tools.is_empty() {
        let declarations: Vec<Value> = request
            .tools
            .iter()
            .map(|spec| {
                let mut declaration = Map::new();
                declaration.insert("name".to_owned(), Value::String(spec.name.clone()));
                declaration.insert(
                    "description".to_owned(),
                    Value::String(spec.description.clone()),
                );
                if let Some(parameters) = schema::function_parameters(spec.parameters.value()) {
                    declaration.insert("parameters".to_owned(), parameters);
                }
                Value::Object(declaration)
            })
            .collect();
        body.insert(
            "tools".to_owned(),
            json!([{ "functionDeclarations": declarations }]),
        );
        if let Some(mode) = &config.function_calling_mode {
            body.insert(
                "toolConfig".to_owned(),
                json!({"functionCallingConfig": {"mode": mode}}),
            );
        }
    }
    if let Some(safety) = &config.safety_settings {
        body.insert("safetySettings".to_owned(), safety.clone());
    }
    let mut generation = config.generation.clone();
    if let Some(thinking) = config.knobs_for(request.thinking).config() {
        generation.insert("thinkingConfig".to_owned(), thinking);
    }
    if !generation.is_empty() {
        body.insert("generationConfig".to_owned(), Value::Object(generation));
    }
    Value::Object(body)
}

/// Whether `id` is one the assembler made up (`call-{turn}-{n}`), not the server's.
pub fn is_synthetic_id(id: &str) -> bool {
    let Some(rest) = id.strip_prefix("call-") else {
        return false;
    };
    let mut numbers = rest.split('-');
    let digits =
        |s: Option<&str>| s.is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
    digits(numbers.next()) && digits(numbers.next()) && numbers.next().is_none()
}

/// The `systemInstruction` (every system message, in order) and the `contents`:
/// adjacent messages of one role are one content, an AI message with neither text nor
/// calls is left out (Gemini refuses a content without parts), and the viewed images
/// come last as a user content with `inlineData` parts.
fn contents(messages: &[Message], images: &[ImagePart]) -> (Option<Value>, Vec<Value>) {
    let names: HashMap<&str, &str> = messages
        .iter()
        .flat_map(|m| m.tool_calls())
        .map(|call| (call.id.as_str(), call.name.as_str()))
        .collect();
    let mut system = Vec::new();
    let mut out = Contents::default();
    for message in messages {
        match message {
            Message::System { content } => system.push(json!({ "text": content })),
            Message::Human { content, .. } => out.push("user", vec![json!({ "text": content })]),
            Message::Ai {
                content,
                tool_calls,
                reasoning,
                ..
            } => out.push(
                "model",
                model_parts(content, tool_calls, reasoning.as_ref()),
            ),
            Message::Tool {
                tool_call_id,
                name,
                content,
                status,
                ..
            } => {
                let part = match names.get(tool_call_id.as_str()) {
                    Some(call_name) => {
                        let key = match status {
                            ToolStatus::Success => "output",
                            ToolStatus::Error => "error",
                        };
                        let mut response = Map::new();
                        response.insert("name".to_owned(), Value::String((*call_name).to_owned()));
                        response.insert("response".to_owned(), json!({ key: content }));
                        if !is_synthetic_id(tool_call_id) {
                            response.insert("id".to_owned(), Value::String(tool_call_id.clone()));
                        }
                        json!({ "functionResponse": response })
                    }
                    None => json!({ "text": UNMATCHED_RESULT
                        .replacen("{id}", tool_call_id, 1)
                        .replacen("{name}", name, 1)
                        .replacen("{content}", content, 1) }),
                };
                out.push("user", vec![part]);
            }
        }
    }
    if !images.is_empty() {
        out.push("user", image_parts(images));
    }
    let system = (!system.is_empty()).then(|| json!({ "parts": system }));
    (system, out.0)
}

/// Contents being built, adjacent ones of a role merged.
#[derive(Default)]
struct Contents(Vec<Value>);

impl Contents {
    fn push(&mut self, role: &str, parts: Vec<Value>) {
        if parts.is_empty() {
            return;
        }
        if let Some(last) = self.0.last_mut() {
            if last["role"] == role {
                if let Some(Value::Array(existing)) = last.get_mut("parts") {
                    existing.extend(parts);
                    return;
                }
            }
        }
        self.0.push(json!({ "role": role, "parts": parts }));
    }
}

/// An AI message's parts: its text (when it has text or a signature), then one
/// `functionCall` per call, each with its thought signature.
fn model_parts(content: &str, calls: &[ToolCall], reasoning: Option<&Reasoning>) -> Vec<Value> {
    let mut text_signature = None;
    let mut call_signatures: HashMap<&str, &Value> = HashMap::new();
    let items = reasoning
        .into_iter()
        .flat_map(|r| &r.replay)
        .filter(|item| item.provider == REPLAY_PROVIDER);
    for ReplayItem { item, .. } in items {
        let Some(signature) = item.get(REPLAY_SIGNATURE) else {
            continue;
        };
        if let Some(id) = item.get(REPLAY_CALL).and_then(Value::as_str) {
            call_signatures.insert(id, signature);
        } else if item.get(REPLAY_TEXT).is_some() {
            text_signature = Some(signature);
        }
    }
    let mut parts = Vec::with_capacity(1 + calls.len());
    if !content.is_empty() || text_signature.is_some() {
        let mut part = json!({ "text": content });
        if let Some(signature) = text_signature {
            part[REPLAY_SIGNATURE] = signature.clone();
        }
        parts.push(part);
    }
    for call in calls {
        let args = match &call.args {
            Value::Object(_) => call.args.clone(),
            _ => json!({}),
        };
        let mut function_call = json!({ "name": call.name, "args": args });
        if !is_synthetic_id(&call.id) {
            function_call["id"] = Value::String(call.id.clone());
        }
        let mut part = json!({ "functionCall": function_call });
        if let Some(signature) = call_signatures.get(call.id.as_str()) {
            part[REPLAY_SIGNATURE] = (*signature).clone();
        }
        parts.push(part);
    }
    parts
}

/// The viewed images: the heading, then per image a line naming it and its
/// `inlineData` (or the note that it is unavailable).
fn image_parts(images: &[ImagePart]) -> Vec<Value> {
    let mut parts = vec![json!({ "text": IMAGES_HEADING })];
    for image in images {
        parts.push(json!({ "text": format!("\n- **{}** ({})", image.path, image.mime_type) }));
        parts.push(match &image.base64 {
            Some(data) => json!({ "inlineData": { "mimeType": image.mime_type, "data": data } }),
            None => json!({ "text": IMAGE_UNAVAILABLE }),
        });
    }
    parts
}
