//! `TerminalResponseMiddleware` (spec D.5): a reply with no text and no tool call is
//! asked again once, with a hidden reminder sent with that request only; a second empty
//! reply is stored as DeerFlow's fallback text and ends the run as `error`. A reply cut
//! at the output limit is not empty here (the finish-reason cap owns it). Antler applies
//! it to every empty reply, not only after a tool ran.

use crate::model::ModelReply;
use crate::thread::state::Message;

/// The reminder the retry is sent with (a hidden user message).
pub const RECOVERY_PROMPT: &str = "<system_reminder>\nYour previous response after the tool execution was empty. Review the tool results already present in the conversation and provide a concise, user-visible final response. Do not call another tool unless it is strictly necessary.\n</system_reminder>";

/// The hidden message's `name`.
pub const RECOVERY_NAME: &str = "terminal_response_recovery";

/// What the run's answer becomes when the retry is empty too.
pub const EMPTY_REPLY_FALLBACK: &str = "The model completed the tool run but returned no final response, including after one automatic retry. Please try again or use a different model.";

/// Finish reasons of a reply cut at the output limit.
const LENGTH_FINISH_REASONS: &[&str] = &["length", "max_tokens", "max_output_tokens"];

/// Whether `reply` is empty: no visible text, no call (valid or not), and not cut at
/// the output limit.
pub fn is_empty(reply: &ModelReply) -> bool {
    let cut = reply.finish_reason.as_deref().is_some_and(|r| {
        LENGTH_FINISH_REASONS
            .iter()
            .any(|l| r.eq_ignore_ascii_case(l))
    });
    reply.content.trim().is_empty()
        && reply.tool_calls.is_empty()
        && reply.invalid_calls.is_empty()
        && !cut
}

/// The hidden reminder the retry carries.
pub fn recovery_message() -> Message {
    Message::Human {
        content: RECOVERY_PROMPT.to_owned(),
        name: Some(RECOVERY_NAME.to_owned()),
        hide_from_ui: true,
        additional_kwargs: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_reply_without_text_calls_or_a_length_cut_is_empty() {
        let mut reply = ModelReply {
            content: " \n".into(),
            ..ModelReply::default()
        };
        assert!(is_empty(&reply));
        reply.finish_reason = Some("length".into());
        assert!(!is_empty(&reply));
        reply.finish_reason = Some("stop".into());
        reply.content = "Hi.".into();
        assert!(!is_empty(&reply));
    }
}
