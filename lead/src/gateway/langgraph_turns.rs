//! A thread's turns as the LangGraph API shows them (LangChain message dicts with ids):
//! which messages a user sees (a human or AI message not `hide_from_ui`), and where a
//! turn a branch or a replay names begins and ends (DeerFlow's rules in
//! `routers/threads.py` and `thread_runs.py`). Pure: the routes bring the messages.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

/// A message's id, when it has a non-empty one.
pub(super) fn id_of(message: &Value) -> Option<&str> {
    message["id"].as_str().filter(|id| !id.is_empty())
}

fn hidden(message: &Value) -> bool {
    message["additional_kwargs"]["hide_from_ui"] == Value::Bool(true)
}

/// A human or AI message the user sees.
pub(super) fn visible(message: &Value) -> bool {
    !hidden(message) && matches!(message["type"].as_str(), Some("human" | "ai"))
}

/// A visible human message.
pub(super) fn visible_human(message: &Value) -> bool {
    visible(message) && message["type"] == "human"
}

/// A visible AI message (not a summary).
pub(super) fn visible_ai(message: &Value) -> bool {
    visible(message) && message["type"] == "ai" && message["name"] != "summary"
}

/// The text of a message's content (a string, or its text blocks joined).
pub(super) fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.as_str().or_else(|| b["text"].as_str()))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

fn positions(messages: &[Value]) -> HashMap<&str, usize> {
    messages
        .iter()
        .enumerate()
        .filter_map(|(i, m)| id_of(m).map(|id| (id, i)))
        .collect()
}

/// Whether `messages` ends with the turn `targets` names: every target is an AI message
/// here, and no visible message follows the last of them (DeerFlow's
/// `_matches_branch_target`).
pub(super) fn ends_with_turn(messages: &[Value], targets: &HashSet<String>) -> bool {
    if targets.is_empty() {
        return false;
    }
    let at = positions(messages);
    let mut end = 0;
    for target in targets {
        let Some(&i) = at.get(target.as_str()) else {
            return false;
        };
        if messages[i]["type"] != "ai" {
            return false;
        }
        end = end.max(i);
    }
    !messages[end + 1..].iter().any(visible)
}

/// The visible human message the turn `targets` answers: the last one before the first
/// target (DeerFlow's `_branch_target_human_message`).
pub(super) fn human_of_turn<'a>(
    messages: &'a [Value],
    targets: &HashSet<String>,
) -> Option<&'a Value> {
    let at = positions(messages);
    let start = targets
        .iter()
        .map(|t| at.get(t.as_str()).copied())
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .min()?;
    messages[..start].iter().rev().find(|m| visible_human(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn thread() -> Vec<Value> {
        vec![
            json!({"type": "human", "id": "h1", "content": "first"}),
            json!({"type": "ai", "id": "ai-1", "content": "one", "tool_calls": [{"id": "c"}]}),
            json!({"type": "tool", "id": "tool-c", "content": "out"}),
            json!({"type": "ai", "id": "ai-2", "content": "two"}),
            json!({"type": "human", "id": "hidden", "content": "x",
                   "additional_kwargs": {"hide_from_ui": true}}),
            json!({"type": "human", "id": "h2", "content": [{"type": "text", "text": "second"}]}),
            json!({"type": "ai", "id": "ai-3", "content": "three"}),
        ]
    }

    fn ids(list: &[&str]) -> HashSet<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_turn_ends_the_messages_only_when_nothing_visible_follows() {
        let all = thread();
        assert!(ends_with_turn(&all, &ids(&["ai-3"])));
        assert!(!ends_with_turn(&all, &ids(&["ai-2"])));
        // A hidden message after the turn does not count.
        assert!(ends_with_turn(&all[..5], &ids(&["ai-1", "ai-2"])));
        // A human target, a missing one, none.
        assert!(!ends_with_turn(&all, &ids(&["h2"])));
        assert!(!ends_with_turn(&all, &ids(&["ai-9"])));
        assert!(!ends_with_turn(&all, &HashSet::new()));
    }

    #[test]
    fn the_turns_human_is_the_last_visible_one_before_it() {
        let all = thread();
        assert_eq!(
            human_of_turn(&all, &ids(&["ai-1", "ai-2"])).and_then(id_of),
            Some("h1")
        );
        assert_eq!(
            human_of_turn(&all, &ids(&["ai-3"])).and_then(id_of),
            Some("h2")
        );
        assert_eq!(text_of(&all[5]), "second");
        assert!(human_of_turn(&all, &ids(&["ai-9"])).is_none());
    }
}
