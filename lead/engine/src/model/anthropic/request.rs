//! The Messages API request built from a run's messages: the system prompt at the top
//! level, user and assistant turns that alternate (consecutive messages of one role are
//! merged into one turn, tool results first), `tool_use`/`tool_result` and image
//! blocks, the thinking blocks a tool-use turn must carry back, the thinking settings,
//! and the prompt-cache breakpoints. Invariants: at most [`MAX_CACHE_BREAKPOINTS`]
//! `cache_control` markers, never on a thinking block; the cached prefix (tools, then
//! system) is the same on every turn of a run.

use serde_json::{json, Map, Value};

use super::config::AnthropicConfig;
use super::REPLAY_PROVIDER;
use crate::model::{ImagePart, ModelRequest};
use crate::thread::state::{Message, ToolStatus};

/// The most `cache_control` breakpoints one request may carry (the API's limit).
pub const MAX_CACHE_BREAKPOINTS: usize = 4;
/// The heading of the viewed images (spec C.2).
pub const IMAGES_HEADING: &str = "Here are the images you've viewed:";
/// An image that could not be read again: unlike DeerFlow, no host path.
pub const IMAGE_UNAVAILABLE: &str = "  (file unavailable or changed on disk)";

/// The sampling parameters the API refuses when thinking is on.
pub const THINKING_REFUSES: &[&str] = &["temperature", "top_k"];

const USER: &str = "user";
const ASSISTANT: &str = "assistant";

/// One turn of the conversation as the API takes it.
#[derive(Debug)]
struct Turn {
    role: &'static str,
    blocks: Vec<Value>,
}

/// The request body: `model`, `max_tokens`, `system`, `messages`, `tools` and
/// `tool_choice` (only with tools), `stream` (true unless `disable_streaming`), the
/// configured parameters, then the thinking settings of this call
/// (`when_thinking_enabled` with its budget when the request's thinking is on and the
/// model supports it, `when_thinking_disabled` when it is off), and the cache
/// breakpoints ([`place_cache_breakpoints`]). With thinking on, `temperature` and
/// `top_k` are left out: the API refuses them with thinking, and they still apply to
/// the calls that run with thinking off (titles, summaries).
pub fn request_body(config: &AnthropicConfig, request: &ModelRequest<'_>) -> Value {
    let mut body = Map::new();
    body.insert("model".to_owned(), Value::String(config.model.clone()));
    body.insert("max_tokens".to_owned(), config.max_tokens.into());
    for (key, value) in &config.params {
        body.insert(key.clone(), value.clone());
    }
    let thinking = if request.thinking {
        config.thinking_on.as_ref()
    } else {
        config.thinking_off.as_ref()
    };
    for (key, value) in thinking.into_iter().flatten() {
        body.insert(key.clone(), value.clone());
    }
    let thinking_on = body
        .get("thinking")
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|t| t != "disabled");
    if thinking_on {
        for key in THINKING_REFUSES {
            body.remove(*key);
        }
    }

    let mut system: Vec<Value> = request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::System { content } if !content.trim().is_empty() => Some(text(content)),
            _ => None,
        })
        .collect();
    let mut turns = turns(request.messages, request.images, thinking_on);
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|spec| {
            json!({
                "name": spec.name,
                "description": spec.description,
                "input_schema": spec.parameters.value(),
            })
        })
        .collect();
    if config.prompt_caching {
        place_cache_breakpoints(
            &mut tools,
            &mut system,
            &mut turns,
            config.prompt_cache_size,
        );
    }

    if !system.is_empty() {
        // A single uncached block goes as a string: the documented shorthand, and the
        // only form some proxies pass on.
        let system = match system.as_slice() {
            [only] if only.get("cache_control").is_none() => only["text"].clone(),
            _ => Value::Array(system),
        };
        body.insert("system".to_owned(), system);
    }
    let messages = turns
        .into_iter()
        .map(|turn| json!({"role": turn.role, "content": content(turn.blocks)}))
        .collect();
    body.insert("messages".to_owned(), Value::Array(messages));
    if !tools.is_empty() {
        body.insert("tools".to_owned(), Value::Array(tools));
        if let Some(choice) = &config.tool_choice {
            body.insert("tool_choice".to_owned(), choice.clone());
        }
    }
    body.insert("stream".to_owned(), Value::Bool(config.stream));
    Value::Object(body)
}

/// A text block.
fn text(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// A turn's content: a lone uncached text block as a string (the shorthand every
/// server and proxy takes), else the blocks.
fn content(mut blocks: Vec<Value>) -> Value {
    if blocks.len() == 1 && blocks[0]["type"] == "text" && blocks[0].get("cache_control").is_none()
    {
        return blocks.swap_remove(0)["text"].take();
    }
    Value::Array(blocks)
}

/// The conversation as alternating turns. A human message (a summary too) is a user
/// text block; an AI message is its replayed thinking blocks (when thinking is on), its
/// text and its `tool_use` blocks, in that order; a tool message is a user
/// `tool_result` block (`is_error` for an error result); the viewed images are a user
/// turn at the end. Consecutive turns of one role are merged, and in a user turn the
/// `tool_result` blocks come first, as the API requires. An AI message with nothing to
/// say is left out.
fn turns(messages: &[Message], images: &[ImagePart], thinking_on: bool) -> Vec<Turn> {
    let mut turns: Vec<Turn> = Vec::new();
    let mut push = |role: &'static str, blocks: Vec<Value>| {
        if blocks.is_empty() {
            return;
        }
        match turns.last_mut() {
            Some(last) if last.role == role => last.blocks.extend(blocks),
            _ => turns.push(Turn { role, blocks }),
        }
    };
    for message in messages {
        match message {
            Message::System { .. } => {}
            Message::Human { content, .. } => {
                if !content.is_empty() {
                    push(USER, vec![text(content)]);
                }
            }
            Message::Ai {
                content,
                tool_calls,
                reasoning,
                ..
            } => {
                let mut blocks = Vec::new();
                if thinking_on {
                    let replay = reasoning.iter().flat_map(|r| &r.replay);
                    blocks.extend(
                        replay
                            .filter(|item| item.provider == REPLAY_PROVIDER)
                            .map(|item| item.item.clone()),
                    );
                }
                if !content.trim().is_empty() {
                    blocks.push(text(content));
                }
                for call in tool_calls {
                    let input = match &call.args {
                        Value::Object(_) => call.args.clone(),
                        _ => json!({}),
                    };
                    blocks.push(json!({
                        "type": "tool_use", "id": call.id, "name": call.name, "input": input,
                    }));
                }
                push(ASSISTANT, blocks);
            }
            Message::Tool {
                tool_call_id,
                content,
                status,
                ..
            } => {
                let mut block = json!({"type": "tool_result", "tool_use_id": tool_call_id});
                if !content.is_empty() {
                    block["content"] = Value::String(content.clone());
                }
                if *status == ToolStatus::Error {
                    block["is_error"] = Value::Bool(true);
                }
                push(USER, vec![block]);
            }
        }
    }
    if !images.is_empty() {
        push(USER, image_blocks(images));
    }
    for turn in &mut turns {
        if turn.role == USER {
            // A stable sort: tool results first, each group in its order.
            turn.blocks.sort_by_key(|b| b["type"] != "tool_result");
        }
    }
    turns
}

/// The blocks that show a vision model the images of its last `view_image` calls: a
/// heading, then per image a text line naming it and a base64 `image` block.
fn image_blocks(images: &[ImagePart]) -> Vec<Value> {
    let mut blocks = vec![text(IMAGES_HEADING)];
    for image in images {
        blocks.push(text(&format!(
            "\n- **{}** ({})",
            image.path, image.mime_type
        )));
        blocks.push(match &image.base64 {
            Some(data) => json!({
                "type": "image",
                "source": {"type": "base64", "media_type": image.mime_type, "data": data},
            }),
            None => text(IMAGE_UNAVAILABLE),
        });
    }
    blocks
}

/// Marks the cache breakpoints (`cache_control: {type: ephemeral}`), at most
/// [`MAX_CACHE_BREAKPOINTS`], in this order: the last tool and the last system block
/// (the static prefix every turn of a run repeats, so every turn after the first reads
/// it from cache), then the last cacheable block of each of the last
/// `prompt_cache_size` turns, newest first, while breakpoints remain (so the next turn
/// reads the conversation so far from cache). DeerFlow's `ClaudeChatModel` marks every
/// system block and every block of its last 3 messages, which can pass the API's limit
/// of 4; this keeps to it. A thinking block cannot carry a marker, nor can an empty
/// text block.
fn place_cache_breakpoints(
    tools: &mut [Value],
    system: &mut [Value],
    turns: &mut [Turn],
    prompt_cache_size: usize,
) {
    let mut left = MAX_CACHE_BREAKPOINTS;
    let mut mark = |block: &mut Value| {
        if left > 0 {
            block["cache_control"] = json!({"type": "ephemeral"});
            left -= 1;
        }
    };
    if let Some(tool) = tools.last_mut() {
        mark(tool);
    }
    if let Some(block) = system.last_mut() {
        mark(block);
    }
    for turn in turns.iter_mut().rev().take(prompt_cache_size) {
        if let Some(block) = turn.blocks.iter_mut().rev().find(|b| cacheable(b)) {
            mark(block);
        }
    }
}

fn cacheable(block: &Value) -> bool {
    match block["type"].as_str() {
        Some("thinking" | "redacted_thinking") => false,
        Some("text") => block["text"].as_str().is_some_and(|t| !t.is_empty()),
        _ => true,
    }
}
