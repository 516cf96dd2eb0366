//! Provider finish reasons (spec D.3), `after_model`: a text-only reply cut at the output
//! limit (`finish_reason: length`, `stop_reason: max_tokens`, `MAX_TOKENS`) ends the run as
//! `model_length_capped`, unless a stop reason is set already; a reply a provider stopped for
//! safety (`content_filter`, `refusal`, Gemini's safety reasons) with tool calls or no text
//! has its tool calls suppressed, DeerFlow's note appended, and ends as `safety_capped`
//! (unless `safety_finish_reason.enabled` is false: [`SafetyFinishReason`]).

use crate::model::ModelReply;
use crate::thread::state::StopReason;

/// With tool calls: `{field}`, `{value}` and `{detector}` as Python reprs.
pub const SAFETY_WITH_TOOL_CALLS: &str = "The model provider stopped this response with a safety-related signal ({field}={value}, detector={detector}). Any tool calls produced in this turn were suppressed because their arguments may be truncated and unsafe to execute. Please rephrase the request or ask for a narrower output.";
/// Empty, without tool calls.
pub const SAFETY_EMPTY: &str = "The model provider stopped this response with a safety-related signal ({field}={value}, detector={detector}) and returned no content. Please rephrase your request or start a new conversation.";

/// Gemini's safety finish reasons, compared in upper case.
const GEMINI_SAFETY: &[&str] = &[
    "SAFETY",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "RECITATION",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_RECITATION",
];

/// `SafetyFinishReasonMiddleware`'s switch (`safety_finish_reason.enabled`, DeerFlow's
/// default on): off, a reply stopped for safety goes through as the provider sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SafetyFinishReason {
    pub enabled: bool,
}

impl Default for SafetyFinishReason {
    fn default() -> Self {
        SafetyFinishReason { enabled: true }
    }
}

/// The stop reason a reply's finish reason means, after rewriting it as DeerFlow does;
/// `current` is the run's stop reason so far.
#[cfg(test)]
pub fn after_model(reply: &mut ModelReply, current: Option<StopReason>) -> Option<StopReason> {
    after_model_with(reply, current, SafetyFinishReason::default())
}

/// [`after_model`] with the safety check switched as configured.
pub fn after_model_with(
    reply: &mut ModelReply,
    current: Option<StopReason>,
    safety: SafetyFinishReason,
) -> Option<StopReason> {
    let reason = reply.finish_reason.clone()?;
    let has_text = !reply.content.trim().is_empty();
    if reply.tool_calls.is_empty() && has_text {
        // `stop_reason: max_tokens` and Gemini's `MAX_TOKENS` are one case-insensitive test.
        let length =
            reason.eq_ignore_ascii_case("length") || reason.eq_ignore_ascii_case("max_tokens");
        return (length && current.is_none()).then_some(StopReason::ModelLengthCapped);
    }
    if !safety.enabled {
        return None;
    }
    let detector = if reason.eq_ignore_ascii_case("content_filter") {
        "openai_content_filter"
    } else if reason.eq_ignore_ascii_case("refusal") {
        "anthropic_refusal"
    } else if GEMINI_SAFETY.contains(&reason.to_ascii_uppercase().as_str()) {
        "gemini_safety"
    } else {
        return None;
    };
    let template = if reply.tool_calls.is_empty() {
        SAFETY_EMPTY
    } else {
        SAFETY_WITH_TOOL_CALLS
    };
    let note = template
        .replacen("{field}", "finish_reason", 1)
        .replacen("{value}", &format!("'{reason}'"), 1)
        .replacen("{detector}", &format!("'{detector}'"), 1);
    reply.tool_calls.clear();
    reply.content = format!("{}\n\n{note}", reply.content);
    Some(StopReason::SafetyCapped)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::thread::state::ToolCall;

    fn reply(content: &str, calls: usize, finish: &str) -> ModelReply {
        ModelReply {
            content: content.into(),
            tool_calls: (0..calls)
                .map(|i| ToolCall {
                    id: format!("c{i}"),
                    name: "bash".into(),
                    args: serde_json::json!({}),
                })
                .collect(),
            finish_reason: Some(finish.into()),
            ..ModelReply::default()
        }
    }

    #[test]
    fn a_cut_text_reply_is_model_length_capped_unless_already_stopped() {
        let mut r = reply("Half an ans", 0, "length");
        assert_eq!(
            after_model(&mut r, None),
            Some(StopReason::ModelLengthCapped)
        );
        assert_eq!(r.content, "Half an ans");
        let mut r = reply("Half", 0, "length");
        assert_eq!(after_model(&mut r, Some(StopReason::LoopCapped)), None);
        let mut r = reply("Done.", 0, "stop");
        assert_eq!(after_model(&mut r, None), None);
    }

    #[test]
    fn a_filtered_reply_loses_its_tool_calls_and_says_why() {
        let mut r = reply("", 2, "content_filter");
        assert_eq!(after_model(&mut r, None), Some(StopReason::SafetyCapped));
        assert!(r.tool_calls.is_empty());
        assert_eq!(r.content, "\n\nThe model provider stopped this response with a safety-related signal (finish_reason='content_filter', detector='openai_content_filter'). Any tool calls produced in this turn were suppressed because their arguments may be truncated and unsafe to execute. Please rephrase the request or ask for a narrower output.");
        let mut r = reply(" ", 0, "SAFETY");
        assert_eq!(
            after_model(&mut r, Some(StopReason::LoopCapped)),
            Some(StopReason::SafetyCapped)
        );
        assert!(r.content.ends_with(
            "and returned no content. Please rephrase your request or start a new conversation."
        ));
        let mut r = reply("Visible text.", 0, "content_filter");
        assert_eq!(
            after_model(&mut r, None),
            None,
            "visible text is left alone"
        );
    }

    #[test]
    fn switched_off_a_safety_stop_goes_through_untouched() {
        let mut r = ModelReply {
            content: "partial".into(),
            tool_calls: vec![crate::thread::state::ToolCall {
                id: "c".into(),
                name: "bash".into(),
                args: serde_json::json!({}),
            }],
            finish_reason: Some("content_filter".into()),
            ..ModelReply::default()
        };
        let off = SafetyFinishReason { enabled: false };
        assert_eq!(after_model_with(&mut r, None, off), None);
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.content, "partial");
    }
}
