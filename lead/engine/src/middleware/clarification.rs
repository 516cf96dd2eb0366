//! `ClarificationMiddleware` (spec 3.2), always last: an `ask_clarification` call
//! interrupts the run with the formatted question, or, where nobody can answer
//! (non-interactive runs), returns DeerFlow's "proceed with your best judgment" text
//! and the run goes on. Form fields (`fields`) are not rendered yet.

use std::collections::HashSet;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::catalog::builtins::ASK_CLARIFICATION;
use crate::thread::state::{Message, ToolCall, ToolStatus};

/// The result of `ask_clarification` when clarification is disabled.
pub const CLARIFICATION_DISABLED: &str = "Clarification is disabled in this context — the human is not present to answer synchronously. Do not ask for confirmation. Proceed with your best judgment, carry out the requested action, and state any assumptions you made in your final response.";

/// The icon of a clarification type; unknown types get ❓.
pub fn type_icon(clarification_type: &str) -> &'static str {
    match clarification_type {
        "ambiguous_requirement" => "🤔",
        "approach_choice" => "🔀",
        "risk_confirmation" => "⚠️",
        "suggestion" => "💡",
        _ => "❓",
    }
}

/// What the middleware does with one `ask_clarification` call.
#[derive(Clone, Debug, PartialEq)]
pub enum Clarification {
    /// The run stops and shows `question`; `message` is the tool message stored.
    Interrupt {
        request_id: String,
        question: String,
        message: Message,
    },
    /// Clarification is disabled: the tool result, and the run goes on.
    Proceed(Message),
}

/// Handles a call to `ask_clarification`.
pub fn handle(call: &ToolCall, enabled: bool) -> Clarification {
    if !enabled {
        return Clarification::Proceed(Message::tool(
            &call.id,
            ASK_CLARIFICATION,
            CLARIFICATION_DISABLED,
            ToolStatus::Success,
        ));
    }
    let question = format_question(&call.args);
    let request_id = if call.id.is_empty() {
        let digest = Sha256::digest(question.as_bytes());
        format!("clarification:{}", &hex::encode(digest)[..16])
    } else {
        format!("clarification:{}", call.id)
    };
    Clarification::Interrupt {
        request_id,
        message: Message::tool(&call.id, ASK_CLARIFICATION, &question, ToolStatus::Success),
        question,
    }
}

/// The formatted question: icon, context, question, then the numbered options.
pub fn format_question(args: &Value) -> String {
    let text = |key: &str| args.get(key).and_then(Value::as_str).unwrap_or_default();
    let icon = type_icon(text("clarification_type"));
    let question = text("question");
    let context = text("context");
    let mut parts = Vec::new();
    if context.is_empty() {
        parts.push(format!("{icon} {question}"));
    } else {
        parts.push(format!("{icon} {context}"));
        parts.push(format!("\n{question}"));
    }
    let options = normalize_options(args.get("options").unwrap_or(&Value::Null));
    if !options.is_empty() {
        parts.push(String::new());
        parts.extend(
            options
                .iter()
                .enumerate()
                .map(|(i, option)| format!("  {}. {option}", i + 1)),
        );
    }
    parts.join("\n")
}

/// Options as DeerFlow normalises them: a JSON string is parsed (else it is one
/// option), objects are flattened to their scalar leaves, XML tags are stripped, values
/// trimmed, blanks and duplicates dropped.
pub fn normalize_options(options: &Value) -> Vec<String> {
    let parsed;
    let options = match options {
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(value @ (Value::Array(_) | Value::Object(_))) => {
                parsed = value;
                &parsed
            }
            _ => options,
        },
        other => other,
    };
    let mut leaves = Vec::new();
    collect_leaves(options, &mut leaves);
    let mut seen = HashSet::new();
    leaves
        .into_iter()
        .map(|leaf| strip_tags(&leaf).trim().to_owned())
        .filter(|leaf| !leaf.is_empty() && seen.insert(leaf.clone()))
        .collect()
}

fn collect_leaves(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Null => {}
        Value::String(text) => out.push(text.clone()),
        Value::Array(items) => items.iter().for_each(|item| collect_leaves(item, out)),
        Value::Object(map) => map.values().for_each(|item| collect_leaves(item, out)),
        other => out.push(other.to_string()),
    }
}

/// Removes XML-like tags (`<b>`, `</b>`, `<br/>`): a `<` followed by a letter or `/`
/// up to the next `>`; any other `<` is kept.
fn strip_tags(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let is_tag = after
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '/');
        match after.find('>').filter(|_| is_tag) {
            Some(end) => rest = &after[end + 1..],
            None => {
                out.push('<');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(args: Value) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: ASK_CLARIFICATION.into(),
            args,
        }
    }

    #[test]
    fn the_question_is_formatted_with_icon_context_and_options() {
        let args = json!({
            "question": "Which format?",
            "clarification_type": "approach_choice",
            "context": "The report can be written two ways.",
            "options": ["Markdown", "<b>PDF</b>", " Markdown ", ""]
        });
        assert_eq!(
            format_question(&args),
            "🔀 The report can be written two ways.\n\nWhich format?\n\n  1. Markdown\n  2. PDF"
        );
        let plain = json!({"question": "Which year?", "clarification_type": "missing_info"});
        assert_eq!(format_question(&plain), "❓ Which year?");
        let unknown = json!({"question": "Sure?", "clarification_type": "other"});
        assert_eq!(format_question(&unknown), "❓ Sure?");
        let risk = json!({"question": "Delete it?", "clarification_type": "risk_confirmation"});
        assert_eq!(format_question(&risk), "⚠️ Delete it?");
    }

    #[test]
    fn options_are_normalised() {
        assert_eq!(normalize_options(&json!("[\"a\", \"b\"]")), ["a", "b"]);
        assert_eq!(normalize_options(&json!("not json")), ["not json"]);
        assert_eq!(
            normalize_options(&json!({"x": "a", "y": {"z": 2}, "w": null})),
            ["a", "2"]
        );
        assert_eq!(normalize_options(&json!(7)), ["7"]);
        assert_eq!(
            normalize_options(&json!(["a < b", "<i>x</i><br/>"])),
            ["a < b", "x"]
        );
    }

    #[test]
    fn an_enabled_clarification_interrupts_with_the_request_id() {
        let outcome = handle(
            &call(json!({"question": "Which?", "clarification_type": "suggestion"})),
            true,
        );
        assert_eq!(
            outcome,
            Clarification::Interrupt {
                request_id: "clarification:c1".into(),
                question: "💡 Which?".into(),
                message: Message::tool("c1", "ask_clarification", "💡 Which?", ToolStatus::Success),
            }
        );
        let mut no_id = call(json!({"question": "Which?"}));
        no_id.id.clear();
        let Clarification::Interrupt { request_id, .. } = handle(&no_id, true) else {
            panic!("not an interrupt");
        };
        let digest = hex::encode(Sha256::digest("❓ Which?".as_bytes()));
        assert_eq!(request_id, format!("clarification:{}", &digest[..16]));
    }

    #[test]
    fn a_disabled_clarification_proceeds_with_deerflows_text() {
        assert_eq!(
            handle(&call(json!({"question": "Which?"})), false),
            Clarification::Proceed(Message::tool(
                "c1",
                "ask_clarification",
                "Clarification is disabled in this context — the human is not present to answer synchronously. Do not ask for confirmation. Proceed with your best judgment, carry out the requested action, and state any assumptions you made in your final response.",
                ToolStatus::Success
            ))
        );
    }
}
