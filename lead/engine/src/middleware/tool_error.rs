//! `ToolErrorHandlingMiddleware` (spec 4.2): a tool that fails becomes an error tool
//! message and the run goes on. Only interrupts (clarification) pass through, and they
//! are not failures here. `detail` is trimmed and capped at 500 characters.

use std::fmt;

use super::error_message;
use crate::catalog::builtins::TASK;
use crate::thread::state::Message;

/// The message a failed tool call gets.
pub const TOOL_FAILED: &str = "Error: Tool '{name}' failed with {class}: {detail}. Continue with available context, or choose an alternative tool.";

/// The message a failed `task` call gets.
pub const TASK_FAILED: &str = "Task failed. Error: {class}: {detail}. Continue with available context, or choose an alternative tool.";

/// LangGraph's message for a call to a tool that does not exist.
pub const INVALID_TOOL: &str =
    "Error: {requested_tool} is not a valid tool, try one of [{available_tools}].";

/// The name used when a failed call carried none.
pub const UNKNOWN_TOOL_NAME: &str = "unknown_tool";

/// Longest detail kept; longer ones are cut to 497 characters plus `...`.
pub const MAX_DETAIL_CHARS: usize = 500;

/// The class of a tool failure: the exception DeerFlow raises for it, by name. The model
/// reads it in the error message ([`TOOL_FAILED`], [`TASK_FAILED`]) and tests compare it, so
/// `Display` prints exactly that name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// A call's arguments do not validate (pydantic's `ValidationError`).
    ValidationError,
    /// An argument has the right type but a value the tool refuses.
    ValueError,
    /// A file the call names does not exist.
    FileNotFoundError,
    /// The tool did not finish within its deadline.
    TimeoutError,
    /// The tool's HTTP client could not be built or connect.
    ConnectionError,
    /// A web backend answered with an HTTP error (or could not be reached).
    HTTPError,
    /// A web backend's body is not JSON.
    JSONDecodeError,
    /// A web backend needs an API key and none is configured.
    MissingAPIKeyError,
    /// A web backend refused the API key (HTTP 401).
    InvalidAPIKeyError,
    /// A web backend's usage limit is reached (HTTP 429).
    UsageLimitExceededError,
    /// A web backend forbids the request (HTTP 403, 432, 433).
    ForbiddenError,
    /// A web backend refused the request as malformed (HTTP 400).
    BadRequestError,
    /// No executor runs the tool here (not in the catalog, no backend, no ACP agent).
    ToolUnavailable,
    /// `tool_search` cannot search the catalog.
    ToolSearchUnavailable,
    /// sandbox-host or mcp-host could not be reached, or answered out of turn.
    HostUnavailable,
    /// The sandbox failed the operation.
    SandboxError,
    /// An MCP tool's result is an error (langchain's `ToolException`).
    ToolException,
    /// Python's catch-all for a failure with no better class.
    RuntimeError,
    /// The subagent worker running a task went away.
    WorkerLost,
}

impl FailureClass {
    /// The exception's name, as the model reads it.
    pub fn name(self) -> &'static str {
        match self {
            FailureClass::ValidationError => "ValidationError",
            FailureClass::ValueError => "ValueError",
            FailureClass::FileNotFoundError => "FileNotFoundError",
            FailureClass::TimeoutError => "TimeoutError",
            FailureClass::ConnectionError => "ConnectionError",
            FailureClass::HTTPError => "HTTPError",
            FailureClass::JSONDecodeError => "JSONDecodeError",
            FailureClass::MissingAPIKeyError => "MissingAPIKeyError",
            FailureClass::InvalidAPIKeyError => "InvalidAPIKeyError",
            FailureClass::UsageLimitExceededError => "UsageLimitExceededError",
            FailureClass::ForbiddenError => "ForbiddenError",
            FailureClass::BadRequestError => "BadRequestError",
            FailureClass::ToolUnavailable => "ToolUnavailable",
            FailureClass::ToolSearchUnavailable => "ToolSearchUnavailable",
            FailureClass::HostUnavailable => "HostUnavailable",
            FailureClass::SandboxError => "SandboxError",
            FailureClass::ToolException => "ToolException",
            FailureClass::RuntimeError => "RuntimeError",
            FailureClass::WorkerLost => "WorkerLost",
        }
    }
}

impl fmt::Display for FailureClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A class compares equal to its exception's name.
impl PartialEq<str> for FailureClass {
    fn eq(&self, other: &str) -> bool {
        self.name() == other
    }
}

/// A class compares equal to its exception's name.
impl PartialEq<&str> for FailureClass {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

/// A tool failure: the error's class (`TimeoutError`, `ToolException`, ...) and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolFailure {
    pub class: FailureClass,
    pub detail: String,
}

impl ToolFailure {
    pub fn new(class: FailureClass, detail: impl Into<String>) -> ToolFailure {
        ToolFailure {
            class,
            detail: detail.into(),
        }
    }
}

/// `detail`: the trimmed text, or the class when it is empty, capped at 500 characters.
pub fn failure_detail(failure: &ToolFailure) -> String {
    let detail = failure.detail.trim();
    let detail = if detail.is_empty() {
        failure.class.name()
    } else {
        detail
    };
    if detail.chars().count() <= MAX_DETAIL_CHARS {
        return detail.to_owned();
    }
    let mut cut: String = detail.chars().take(MAX_DETAIL_CHARS - 3).collect();
    cut.push_str("...");
    cut
}

/// The error tool message for a failed call.
pub fn failed_call_message(name: &str, tool_call_id: &str, failure: &ToolFailure) -> Message {
    let name = if name.is_empty() {
        UNKNOWN_TOOL_NAME
    } else {
        name
    };
    let template = if name == TASK {
        TASK_FAILED
    } else {
        TOOL_FAILED
    };
    let content = template
        .replacen("{name}", name, 1)
        .replacen("{class}", failure.class.name(), 1)
        .replacen("{detail}", &failure_detail(failure), 1);
    error_message(tool_call_id, name, content)
}

/// The error tool message for a call to a tool that is not in the catalog.
pub fn invalid_tool_message<'a>(
    name: &str,
    tool_call_id: &str,
    available: impl IntoIterator<Item = &'a str>,
) -> Message {
    let available: Vec<&str> = available.into_iter().collect();
    let content = INVALID_TOOL.replacen("{requested_tool}", name, 1).replacen(
        "{available_tools}",
        &available.join(", "),
        1,
    );
    error_message(tool_call_id, name, content)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::thread::state::ToolStatus;

    fn content(message: &Message) -> (&str, &str, &str, ToolStatus) {
        match message {
            Message::Tool {
                tool_call_id,
                name,
                content,
                status,
                ..
            } => (tool_call_id, name, content, *status),
            other => panic!("not a tool message: {other:?}"),
        }
    }

    #[test]
    fn a_failure_becomes_deerflows_error_message() {
        let message = failed_call_message(
            "web_fetch",
            "c1",
            &ToolFailure::new(FailureClass::TimeoutError, "  timed out after 30s \n"),
        );
        assert_eq!(
            content(&message),
            (
                "c1",
                "web_fetch",
                "Error: Tool 'web_fetch' failed with TimeoutError: timed out after 30s. Continue with available context, or choose an alternative tool.",
                ToolStatus::Error
            )
        );
    }

    #[test]
    fn empty_detail_is_the_class_and_missing_names_and_ids_have_defaults() {
        let message =
            failed_call_message("", "", &ToolFailure::new(FailureClass::RuntimeError, " "));
        assert_eq!(
            content(&message),
            (
                "missing_tool_call_id",
                "unknown_tool",
                "Error: Tool 'unknown_tool' failed with RuntimeError: RuntimeError. Continue with available context, or choose an alternative tool.",
                ToolStatus::Error
            )
        );
    }

    #[test]
    fn long_detail_is_cut_to_497_characters_and_an_ellipsis() {
        let failure = ToolFailure::new(FailureClass::ValueError, "é".repeat(600));
        let detail = failure_detail(&failure);
        assert_eq!(detail.chars().count(), 500);
        assert!(detail.ends_with("é..."));
        let exact = ToolFailure::new(FailureClass::ValueError, "x".repeat(500));
        assert_eq!(failure_detail(&exact), "x".repeat(500));
    }

    #[test]
    fn task_failures_use_the_task_text() {
        let message = failed_call_message(
            "task",
            "t1",
            &ToolFailure::new(FailureClass::WorkerLost, "gone"),
        );
        assert_eq!(
            content(&message).2,
            "Task failed. Error: WorkerLost: gone. Continue with available context, or choose an alternative tool."
        );
    }

    #[test]
    fn unknown_tools_get_langgraphs_message() {
        let message = invalid_tool_message("nope", "c9", ["bash", "read_file"]);
        assert_eq!(
            content(&message).2,
            "Error: nope is not a valid tool, try one of [bash, read_file]."
        );
    }
}
