//! The `task` tool (spec 3.7, 7) as a run sees it: delegation of bounded work to a
//! subagent. `mod` holds what the lead and the workers agree on: the call's arguments, a
//! task's statuses and stop reasons, its result and how the parent's model sees it (7.2's
//! texts and `additional_kwargs`), and the events a task streams (7.4); `delegation` is
//! how a run hands its `task` calls to whoever places them (the lead's
//! `SubagentDispatcher`). The task as it travels and the graph that runs it on a worker
//! are the `task` room's, above the run loop.

pub mod delegation;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::thread::state::TokenUsage;

/// The built-in general-purpose subagent.
pub const GENERAL_PURPOSE: &str = "general-purpose";
/// The built-in bash subagent (only when host bash is allowed).
pub const BASH_SUBAGENT: &str = "bash";
/// The refusal of the bash subagent when host bash is not allowed (7.1).
pub const BASH_SUBAGENT_DISABLED: &str = "Bash subagent is disabled for LocalSandboxProvider because host bash execution is not a secure sandbox boundary. Use the general-purpose subagent with sandboxed tools instead.";
/// An unknown `subagent_type` (7.4): `{t}` and `{names}`.
pub const UNKNOWN_SUBAGENT: &str = "Unknown subagent type '{t}'. Available: {names}";
/// The bound of a result brief or an error in `additional_kwargs` (7.2).
pub const BRIEF_CHARS: usize = 2000;
/// The error of a task that ran past its timeout (7.3): `{t}` seconds.
pub const TIMED_OUT_ERROR: &str = "Execution timed out after {t} seconds";
/// The error of a cancelled task (7.3).
pub const CANCELLED_ERROR: &str = "Cancelled by user";
/// A completed task whose model said nothing (7.3).
pub const NO_RESPONSE: &str = "No response generated";
/// A task that hit its turn limit with no usable text (7.3): `{n}`.
pub const MAX_TURNS_ERROR: &str = "Reached max_turns={n}";

/// The arguments of a `task` call.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct TaskArgs {
    pub description: String,
    pub prompt: String,
    pub subagent_type: String,
}

impl crate::model::SubagentRequest for TaskArgs {
    fn description(&self) -> &str {
        &self.description
    }

    fn subagent_type(&self) -> &str {
        &self.subagent_type
    }
}

impl TaskArgs {
    /// The arguments of `args`, or what is wrong with them (for the tool error message).
    pub fn parse(args: &Value) -> Result<TaskArgs, String> {
        let field = |name: &str| -> Result<String, String> {
            match args.get(name) {
                Some(Value::String(text)) => Ok(text.clone()),
                Some(_) => Err(format!("{name}: must be a string")),
                None => Err(format!("{name}: field required")),
            }
        };
        Ok(TaskArgs {
            description: field("description")?,
            prompt: field("prompt")?,
            subagent_type: field("subagent_type")?,
        })
    }
}

/// A task's terminal status on the wire (`subagent_status`, 7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Completed,
    Failed,
    Cancelled,
    TimedOut,
    PollingTimedOut,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
            TaskStatus::TimedOut => "timed_out",
            TaskStatus::PollingTimedOut => "polling_timed_out",
        }
    }
}

/// Why a task stopped early (`subagent_stop_reason`, 7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStopReason {
    TokenCapped,
    TurnCapped,
    LoopCapped,
}

impl TaskStopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStopReason::TokenCapped => "token_capped",
            TaskStopReason::TurnCapped => "turn_capped",
            TaskStopReason::LoopCapped => "loop_capped",
        }
    }

    /// The cap's label in the content the model sees.
    pub fn label(self) -> &'static str {
        match self {
            TaskStopReason::TokenCapped => "token budget",
            TaskStopReason::TurnCapped => "turn budget",
            TaskStopReason::LoopCapped => "repeated tool-call loop",
        }
    }
}

/// How one task ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskResult {
    pub status: TaskStatus,
    /// The subagent's final text (completed tasks).
    pub result: Option<String>,
    pub error: Option<String>,
    pub stop_reason: Option<TaskStopReason>,
    pub model_name: Option<String>,
    pub token_usage: TokenUsage,
    /// The worker that ran it (for logs and `antler run`).
    #[serde(default)]
    pub worker: Option<String>,
}

impl TaskResult {
    /// A task that failed before or without running (unknown type, refused, lost).
    pub fn failed(error: impl Into<String>) -> TaskResult {
        TaskResult {
            status: TaskStatus::Failed,
            result: None,
            error: Some(error.into()),
            stop_reason: None,
            model_name: None,
            token_usage: TokenUsage::default(),
            worker: None,
        }
    }

    /// The content of the task's tool message (`format_subagent_result_message`, 7.2).
    pub fn content(&self) -> String {
        let error = self.error.as_deref().filter(|e| !e.trim().is_empty());
        match self.status {
            TaskStatus::Completed => {
                let result = self.result.as_deref().unwrap_or_default();
                match self.stop_reason {
                    Some(cap) => {
                        format!("Task Succeeded (capped: {}). Result: {result}", cap.label())
                    }
                    None => format!("Task Succeeded. Result: {result}"),
                }
            }
            TaskStatus::Cancelled => match error {
                Some(e) => format!("Task cancelled by user. Error: {e}"),
                None => "Task cancelled by user.".to_owned(),
            },
            TaskStatus::TimedOut => match error {
                Some(e) => format!("Task timed out. Error: {e}"),
                None => "Task timed out.".to_owned(),
            },
            TaskStatus::PollingTimedOut => match error {
                Some(e) => e.to_owned(),
                None => "Task polling timed out.".to_owned(),
            },
            TaskStatus::Failed => match (self.stop_reason, error) {
                (None, None) => "Task failed.".to_owned(),
                (None, Some(e)) => format!("Task failed. Error: {e}"),
                (Some(cap), None) => format!("Task failed (capped: {}).", cap.label()),
                (Some(cap), Some(e)) => {
                    format!("Task failed (capped: {}). Error: {e}", cap.label())
                }
            },
        }
    }

    /// The task message's `additional_kwargs` (7.2).
    pub fn additional_kwargs(&self) -> Value {
        let mut kwargs = Map::new();
        kwargs.insert("subagent_status".into(), self.status.as_str().into());
        if self.status == TaskStatus::Completed {
            if let Some(result) = self.result.as_deref().filter(|r| !r.trim().is_empty()) {
                kwargs.insert("subagent_result_brief".into(), bounded(result).into());
                kwargs.insert(
                    "subagent_result_sha256".into(),
                    hex::encode(Sha256::digest(result.as_bytes())).into(),
                );
            }
        } else if let Some(error) = self.error.as_deref().filter(|e| !e.trim().is_empty()) {
            kwargs.insert("subagent_error".into(), bounded(error).into());
        }
        if let Some(reason) = self.stop_reason {
            kwargs.insert("subagent_stop_reason".into(), reason.as_str().into());
        }
        if let Some(model) = &self.model_name {
            kwargs.insert("subagent_model_name".into(), model.clone().into());
        }
        kwargs.insert(
            "subagent_token_usage".into(),
            serde_json::json!({
                "input_tokens": self.token_usage.input_tokens,
                "output_tokens": self.token_usage.output_tokens,
                "total_tokens": self.token_usage.total_tokens,
            }),
        );
        Value::Object(kwargs)
    }
}

/// `text` bounded to [`BRIEF_CHARS`] characters: two thirds of the cap from the head,
/// `"\n...\n"`, then the tail (7.2).
pub fn bounded(text: &str) -> String {
    let count = text.chars().count();
    if count <= BRIEF_CHARS {
        return text.to_owned();
    }
    const MARK: &str = "\n...\n";
    let head = BRIEF_CHARS * 2 / 3;
    let tail = BRIEF_CHARS - head - MARK.len();
    let mut out: String = text.chars().take(head).collect();
    out.push_str(MARK);
    out.extend(text.chars().skip(count - tail));
    out
}

/// What a task reports as it goes (7.4's custom events), streamed to the parent run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TaskEvent {
    /// The task was placed on a worker.
    TaskStarted {
        task_id: String,
        description: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        model_name: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        worker: Option<String>,
    },
    /// No worker had a free slot: the task waits for one, at most `deadline_ms`.
    TaskWaiting {
        task_id: String,
        deadline_ms: u64,
    },
    /// A new AI message of the subagent.
    TaskRunning {
        task_id: String,
        message: String,
        /// 1-based.
        message_index: usize,
        total_messages: usize,
        #[serde(skip_serializing_if = "Option::is_none")]
        usage: Option<TokenUsage>,
        #[serde(skip_serializing_if = "Option::is_none")]
        model_name: Option<String>,
    },
    /// A tool call of the subagent came back (Antler's: the parent sees what its
    /// subagent did, not only what it said).
    TaskTool {
        task_id: String,
        name: String,
        /// The subagent's own call id.
        call_id: String,
        error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// An MCP server the subagent called asks the parent run's user (policy `ask`):
    /// answered as the parent run's elicitation; `run_id` is the task's own run id, by
    /// which mcp-host knows the waiting call.
    TaskElicitation {
        task_id: String,
        run_id: String,
        id: String,
        server: String,
        message: String,
        requested_schema: serde_json::Value,
    },
    /// A call of the subagent waits for the parent run's user (an approval rule asks,
    /// issue 37): held on the worker until answered or `deadline_at` (Unix ms). `args`
    /// are redacted.
    TaskApproval {
        task_id: String,
        /// The subagent's own call id.
        call_id: String,
        tool: String,
        args: serde_json::Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        origin: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        justification: Option<String>,
        asked_at: u64,
        deadline_at: u64,
    },
    /// How the subagent's held call was decided, as the worker applied it (`approve`,
    /// `approve_for_thread`, `deny`, `expired`).
    TaskApprovalDecided {
        task_id: String,
        call_id: String,
        tool: String,
        decision: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        by: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        at: u64,
        /// Milliseconds from the ask to its answer (a person's or the deadline's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        waited_ms: Option<u64>,
    },
    TaskCompleted {
        task_id: String,
        result: TaskResult,
    },
    TaskFailed {
        task_id: String,
        result: TaskResult,
    },
    TaskCancelled {
        task_id: String,
        result: TaskResult,
    },
    TaskTimedOut {
        task_id: String,
        result: TaskResult,
    },
}

impl TaskEvent {
    /// The last event of a task that ended with `result`, typed by its status.
    pub fn ended(task_id: &str, result: TaskResult) -> TaskEvent {
        let task_id = task_id.to_owned();
        match result.status {
            TaskStatus::Completed => TaskEvent::TaskCompleted { task_id, result },
            TaskStatus::Failed => TaskEvent::TaskFailed { task_id, result },
            TaskStatus::Cancelled => TaskEvent::TaskCancelled { task_id, result },
            TaskStatus::TimedOut | TaskStatus::PollingTimedOut => {
                TaskEvent::TaskTimedOut { task_id, result }
            }
        }
    }

    /// The result of a terminal event.
    pub fn result(&self) -> Option<&TaskResult> {
        match self {
            TaskEvent::TaskCompleted { result, .. }
            | TaskEvent::TaskFailed { result, .. }
            | TaskEvent::TaskCancelled { result, .. }
            | TaskEvent::TaskTimedOut { result, .. } => Some(result),
            _ => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn result(status: TaskStatus) -> TaskResult {
        TaskResult {
            status,
            result: None,
            error: None,
            stop_reason: None,
            model_name: None,
            token_usage: TokenUsage::default(),
            worker: None,
        }
    }

    #[test]
    fn contents_are_deerflows_for_every_status() {
        let mut done = result(TaskStatus::Completed);
        done.result = Some("42".into());
        assert_eq!(done.content(), "Task Succeeded. Result: 42");
        done.stop_reason = Some(TaskStopReason::TurnCapped);
        assert_eq!(
            done.content(),
            "Task Succeeded (capped: turn budget). Result: 42"
        );
        let mut cancelled = result(TaskStatus::Cancelled);
        assert_eq!(cancelled.content(), "Task cancelled by user.");
        cancelled.error = Some(CANCELLED_ERROR.into());
        assert_eq!(
            cancelled.content(),
            "Task cancelled by user. Error: Cancelled by user"
        );
        let mut timed = result(TaskStatus::TimedOut);
        assert_eq!(timed.content(), "Task timed out.");
        timed.error = Some("late".into());
        assert_eq!(timed.content(), "Task timed out. Error: late");
        assert_eq!(
            result(TaskStatus::PollingTimedOut).content(),
            "Task polling timed out."
        );
        let mut failed = result(TaskStatus::Failed);
        assert_eq!(failed.content(), "Task failed.");
        failed.stop_reason = Some(TaskStopReason::LoopCapped);
        assert_eq!(
            failed.content(),
            "Task failed (capped: repeated tool-call loop)."
        );
        failed.error = Some("boom".into());
        assert_eq!(
            failed.content(),
            "Task failed (capped: repeated tool-call loop). Error: boom"
        );
        failed.stop_reason = None;
        assert_eq!(failed.content(), "Task failed. Error: boom");
    }

    #[test]
    fn kwargs_carry_a_bounded_brief_and_its_digest() {
        let long: String = (0..3000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let mut done = result(TaskStatus::Completed);
        done.result = Some(long.clone());
        done.token_usage = TokenUsage {
            input_tokens: 5,
            output_tokens: 2,
            total_tokens: 7,
            ..TokenUsage::default()
        };
        let kwargs = done.additional_kwargs();
        let brief = kwargs["subagent_result_brief"].as_str().unwrap();
        assert_eq!(brief.chars().count(), BRIEF_CHARS);
        assert!(brief.starts_with(&long[..1333]));
        assert!(brief.contains("\n...\n"));
        assert!(brief.ends_with(&long[long.len() - 662..]));
        assert_eq!(
            kwargs["subagent_result_sha256"],
            hex::encode(Sha256::digest(long.as_bytes()))
        );
        assert_eq!(kwargs["subagent_token_usage"]["total_tokens"], 7);
        assert!(kwargs.get("subagent_error").is_none());
        let mut failed = result(TaskStatus::Failed);
        failed.error = Some("boom".into());
        let kwargs = failed.additional_kwargs();
        assert_eq!(kwargs["subagent_status"], "failed");
        assert_eq!(kwargs["subagent_error"], "boom");
        assert!(kwargs.get("subagent_result_brief").is_none());
    }
}
