//! `DanglingToolCallMiddleware` (spec 4.5): a tool call that never got a result (the
//! lead died while it ran, or the run was cut) gets a synthetic error result, so every
//! call the model made is answered before the model is asked again.

use std::collections::HashSet;

use super::error_message;
use crate::thread::state::Message;

/// The result a dangling tool call gets.
pub const INTERRUPTED_CALL: &str = "[Tool call was interrupted and did not return a result.]";

/// The synthetic results for every unanswered call in `messages`, in call order.
pub fn interrupted_results(messages: &[Message]) -> Vec<Message> {
    let answered: HashSet<&str> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    messages
        .iter()
        .flat_map(Message::tool_calls)
        .filter(|call| !answered.contains(call.id.as_str()))
        .map(|call| error_message(&call.id, &call.name, INTERRUPTED_CALL))
        .collect()
}

/// The messages as the model should see them: each dangling call's synthetic result is
/// placed right after the AI message that made it (after the results it did get).
pub fn patched(messages: &[Message]) -> Vec<Message> {
    let answered: HashSet<&str> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    let mut out = Vec::with_capacity(messages.len());
    let mut pending: Vec<Message> = Vec::new();
    for message in messages {
        if matches!(message, Message::Ai { .. }) || !matches!(message, Message::Tool { .. }) {
            out.append(&mut pending);
        }
        out.push(message.clone());
        pending.extend(
            message
                .tool_calls()
                .iter()
                .filter(|call| !answered.contains(call.id.as_str()))
                .map(|call| error_message(&call.id, &call.name, INTERRUPTED_CALL)),
        );
    }
    out.append(&mut pending);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::thread::state::{ToolCall, ToolStatus};
    use serde_json::json;

    fn ai(id: &str, calls: &[&str]) -> Message {
        Message::Ai {
            id: id.into(),
            content: String::new(),
            tool_calls: calls
                .iter()
                .map(|c| ToolCall {
                    id: (*c).into(),
                    name: "bash".into(),
                    args: json!({}),
                })
                .collect(),
            reasoning: None,
        }
    }

    fn ok(id: &str) -> Message {
        Message::tool(id, "bash", "ok", ToolStatus::Success)
    }

    fn interrupted(id: &str) -> Message {
        Message::tool(
            id,
            "bash",
            "[Tool call was interrupted and did not return a result.]",
            ToolStatus::Error,
        )
    }

    #[test]
    fn unanswered_calls_get_the_interrupted_result() {
        let messages = vec![Message::human("go"), ai("m1", &["c1", "c2"]), ok("c1")];
        assert_eq!(interrupted_results(&messages), [interrupted("c2")]);
        let complete = vec![ai("m1", &["c1"]), ok("c1")];
        assert!(interrupted_results(&complete).is_empty());
    }

    #[test]
    fn patched_messages_place_results_after_the_calling_message() {
        let messages = vec![
            Message::human("go"),
            ai("m1", &["c1", "c2"]),
            ok("c1"),
            Message::human("again"),
            ai("m2", &["c3"]),
        ];
        assert_eq!(
            patched(&messages),
            [
                Message::human("go"),
                ai("m1", &["c1", "c2"]),
                ok("c1"),
                interrupted("c2"),
                Message::human("again"),
                ai("m2", &["c3"]),
                interrupted("c3"),
            ]
        );
    }
}
