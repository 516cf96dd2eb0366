//! DeerFlow's thinking toggle for OpenAI-family entries (spec D.2) and the request-body
//! merging it needs: the constructor arguments a call adds when thinking is on
//! (`when_thinking_enabled`) or off (`when_thinking_disabled`, else the gateway's
//! `extra_body.thinking`, vLLM's `chat_template_kwargs`, Anthropic-style `thinking`), and
//! `extra_body` deep-merged into the body. Invariant: thinking is on only when the call
//! asks for it and the entry `supports_thinking` (DeerFlow forces it off otherwise).

use serde_json::{json, Map, Value};

use crate::model::entry::ThinkingSettings;

/// The `extra_body` key: its keys are merged into the request body (the OpenAI SDK's
/// `extra_body`).
pub const EXTRA_BODY: &str = "extra_body";
/// The effort DeerFlow sets when it turns a gateway's thinking off (D.2 rule 2).
pub const EFFORT_WHEN_DISABLED: &str = "minimal";
/// The keys of `chat_template_kwargs` that turn Qwen/vLLM thinking on (D.2 rule 3).
pub const TEMPLATE_THINKING_KEYS: &[&str] = &["thinking", "enable_thinking"];

/// Whether a call runs with thinking: asked for, and supported by the entry.
pub fn thinking_on(settings: &ThinkingSettings, asked: bool) -> bool {
    asked && settings.supports_thinking
}

/// The constructor arguments the toggle adds to a call (spec D.2), first rule that
/// matches: thinking on: `when_thinking_enabled` (the `thinking` shortcut merged in);
/// off: `when_thinking_disabled`; else, when `wte.extra_body.thinking.type` is set,
/// `extra_body.thinking = {type: disabled}` and `reasoning_effort: minimal`; else, when
/// `wte.extra_body.chat_template_kwargs` has `thinking`/`enable_thinking`, those set to
/// false; else, when `wte.thinking.type` is set, `thinking = {type: disabled}`; else
/// nothing.
pub fn overlay(settings: &ThinkingSettings, on: bool) -> Map<String, Value> {
    let wte = &settings.when_enabled;
    if on {
        return wte.clone();
    }
    if let Some(disabled) = &settings.when_disabled {
        return disabled.clone();
    }
    let extra_body = wte.get(EXTRA_BODY);
    let mut out = Map::new();
    if extra_body
        .and_then(|b| b.get("thinking"))
        .and_then(|t| t.get("type"))
        .is_some()
    {
        out.insert(
            EXTRA_BODY.to_owned(),
            json!({"thinking": {"type": "disabled"}}),
        );
        out.insert("reasoning_effort".to_owned(), json!(EFFORT_WHEN_DISABLED));
        return out;
    }
    if let Some(kwargs) = extra_body
        .and_then(|b| b.get("chat_template_kwargs"))
        .and_then(Value::as_object)
    {
        let off: Map<String, Value> = TEMPLATE_THINKING_KEYS
            .iter()
            .filter(|k| kwargs.contains_key(**k))
            .map(|k| ((*k).to_owned(), Value::Bool(false)))
            .collect();
        if !off.is_empty() {
            out.insert(
                EXTRA_BODY.to_owned(),
                json!({ "chat_template_kwargs": off }),
            );
            return out;
        }
    }
    if wte.get("thinking").and_then(|t| t.get("type")).is_some() {
        out.insert("thinking".to_owned(), json!({"type": "disabled"}));
    }
    out
}

/// Merges `source` into `target`: objects key by key, any other value replaces.
pub fn deep_merge(target: &mut Map<String, Value>, source: &Map<String, Value>) {
    for (key, value) in source {
        match (target.get_mut(key), value) {
            (Some(Value::Object(into)), Value::Object(from)) => deep_merge(into, from),
            _ => {
                target.insert(key.clone(), value.clone());
            }
        }
    }
}

/// `extra_body` of an entry or of an overlay, as an object (`None`: absent or not one).
pub fn extra_body_of(map: &Map<String, Value>) -> Option<&Map<String, Value>> {
    map.get(EXTRA_BODY).and_then(Value::as_object)
}
