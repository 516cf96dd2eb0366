//! DeerFlow's tool-call middlewares (spec 4), one module each, with their exact texts
//! as constants. Each is a plain value with the hooks it needs (`before_model`,
//! `after_model`, `check_call`, `wrap_result`); the run loop applies them in DeerFlow's
//! chain order (spec 4.1): dangling tool calls, guardrail, tool error handling, skill
//! tool policy, MCP routing before the deferred filter, subagent limit, loop detection,
//! clarification last; the tool output budget wraps every result. `invalid_calls` (with
//! `schema`) answers the calls a model got wrong before any of them runs; `terminal_response`
//! asks again once after an empty reply; `uploads` puts the `<current_uploads>` block on a
//! run's user turn before its first model call; `approvals` decides each call on its
//! arguments after the deferred filter, before clarification (issue 37).

pub mod approvals;
pub mod clarification;
pub mod dangling;
pub mod deferred;
pub mod finish_reason;
pub mod guardrail;
pub mod invalid_calls;
pub mod loop_detection;
pub mod output_budget;
pub mod read_before_write;
pub mod schema;
pub mod skill_policy;
pub mod subagent_limit;
pub mod summarization;
pub mod terminal_response;
pub mod title;
pub mod token_budget;
pub mod tool_error;
pub mod uploads;

use crate::thread::state::{Message, ToolStatus};

/// The `tool_call_id` DeerFlow uses for a call that carried none.
pub use crate::catalog::MISSING_TOOL_CALL_ID;

/// A tool message with `status="error"`; an empty id becomes [`MISSING_TOOL_CALL_ID`].
pub fn error_message(tool_call_id: &str, name: &str, content: impl Into<String>) -> Message {
    let id = if tool_call_id.is_empty() {
        MISSING_TOOL_CALL_ID
    } else {
        tool_call_id
    };
    Message::tool(id, name, content, ToolStatus::Error)
}
