//! `LoopDetectionMiddleware` (spec 4.5), `after_model`: the same set of tool calls
//! (names and arguments, in any order) repeated within the last `window_size` model
//! replies gets a warning at `warn_threshold` and a forced stop at `hard_limit`. The
//! counts are read from the state's messages, so a resumed run counts the same.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::model::ModelReply;
use crate::thread::state::{Message, StopReason, ToolCall};

/// The warning injected (as a user message) at the warn threshold.
pub const LOOP_WARNING: &str = "[LOOP DETECTED] You are repeating the same tool calls. Stop calling tools and produce your final answer now. If you cannot complete the task, summarize what you accomplished so far.";

/// Appended to the reply whose tool calls are stripped at the hard limit.
pub const LOOP_HARD_STOP: &str = "[FORCED STOP] Repeated tool calls exceeded the safety limit. Producing final answer with results collected so far.";

pub const DEFAULT_WARN_THRESHOLD: usize = 3;
pub const DEFAULT_HARD_LIMIT: usize = 5;
pub const DEFAULT_WINDOW_SIZE: usize = 20;

/// What loop detection decided about one reply.
#[derive(Clone, Debug, PartialEq)]
pub enum LoopVerdict {
    /// Nothing repeats enough.
    Pass,
    /// Add this message after the reply's tool results.
    Warn(Message),
    /// The reply's tool calls were stripped; the run stops with this reason.
    HardStop(StopReason),
}

/// The thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopDetection {
    pub warn_threshold: usize,
    pub hard_limit: usize,
    pub window_size: usize,
}

impl Default for LoopDetection {
    fn default() -> Self {
        LoopDetection {
            warn_threshold: DEFAULT_WARN_THRESHOLD,
            hard_limit: DEFAULT_HARD_LIMIT,
            window_size: DEFAULT_WINDOW_SIZE,
        }
    }
}

impl LoopDetection {
    /// `after_model` for `reply`, given the messages before it.
    pub fn after_model(&self, history: &[Message], reply: &mut ModelReply) -> LoopVerdict {
        if reply.tool_calls.is_empty() {
            return LoopVerdict::Pass;
        }
        let current = call_set_hash(&reply.tool_calls);
        let earlier = history
            .iter()
            .filter(|m| !m.tool_calls().is_empty())
            .rev()
            .take(self.window_size.saturating_sub(1))
            .filter(|m| call_set_hash(m.tool_calls()) == current)
            .count();
        let count = earlier + 1;
        if count >= self.hard_limit {
            tracing::warn!(count, "loop hard limit reached, forcing a final answer");
            reply.tool_calls.clear();
            reply.content = format!("{}\n\n{LOOP_HARD_STOP}", reply.content);
            return LoopVerdict::HardStop(StopReason::LoopCapped);
        }
        if count == self.warn_threshold {
            return LoopVerdict::Warn(Message::human(LOOP_WARNING));
        }
        LoopVerdict::Pass
    }
}

/// The order-independent identity of a set of tool calls.
pub fn call_set_hash(calls: &[ToolCall]) -> String {
    let mut keys: Vec<String> = calls
        .iter()
        .map(|call| format!("{}:{}", call.name, sorted_json(&call.args)))
        .collect();
    keys.sort();
    let digest = Sha256::digest(keys.join("\n").as_bytes());
    hex::encode(&digest[..6])
}

/// JSON with object keys sorted at every level.
fn sorted_json(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let inner: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), sorted_json(v)))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(sorted_json).collect();
            format!("[{}]", inner.join(","))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reply(n: usize, args: Value) -> ModelReply {
        ModelReply {
            id: format!("ai-{n}"),
            content: "again".into(),
            tool_calls: vec![ToolCall {
                id: format!("c{n}"),
                name: "bash".into(),
                args,
            }],
            ..ModelReply::default()
        }
    }

    #[test]
    fn the_third_repeat_warns_and_the_fifth_stops() {
        let detection = LoopDetection::default();
        let mut history = vec![Message::human("go")];
        let mut verdicts = Vec::new();
        for n in 1..=5 {
            let mut r = reply(n, json!({"command": "ls", "opts": {"b": 1, "a": 2}}));
            verdicts.push(detection.after_model(&history, &mut r));
            history.push(r.into_message());
        }
        assert_eq!(verdicts[0], LoopVerdict::Pass);
        assert_eq!(verdicts[1], LoopVerdict::Pass);
        assert_eq!(verdicts[2], LoopVerdict::Warn(Message::human(LOOP_WARNING)));
        assert_eq!(verdicts[3], LoopVerdict::Pass);
        assert_eq!(verdicts[4], LoopVerdict::HardStop(StopReason::LoopCapped));
        assert_eq!(
            history.last(),
            Some(&Message::Ai {
                id: "ai-5".into(),
                content: "again\n\n[FORCED STOP] Repeated tool calls exceeded the safety limit. Producing final answer with results collected so far.".into(),
                tool_calls: vec![],
                reasoning: None,
            })
        );
    }

    #[test]
    fn different_arguments_and_key_order_are_told_apart_correctly() {
        let a = reply(1, json!({"x": 1, "y": 2})).tool_calls;
        let b = reply(2, json!({"y": 2, "x": 1})).tool_calls;
        let c = reply(3, json!({"x": 2, "y": 2})).tool_calls;
        assert_eq!(call_set_hash(&a), call_set_hash(&b));
        assert_ne!(call_set_hash(&a), call_set_hash(&c));
    }

    #[test]
    fn repeats_outside_the_window_do_not_count() {
        let detection = LoopDetection {
            window_size: 3,
            ..LoopDetection::default()
        };
        let mut history = Vec::new();
        for n in 0..4 {
            let args = if n % 2 == 0 {
                json!({"n": 0})
            } else {
                json!({"n": n})
            };
            history.push(reply(n, args).into_message());
        }
        let mut r = reply(9, json!({"n": 0}));
        assert_eq!(detection.after_model(&history, &mut r), LoopVerdict::Pass);
    }
}
