//! Messages between the lead and a subagent worker: a task (its [`TaskSpec`]) goes out,
//! its [`TaskEvent`]s and its [`TaskResult`] come back, all protocol types (`task`), so
//! a task whose engine form grows a field changes the schema fingerprint.

use serde::{Deserialize, Serialize};

use super::control::Health;
use super::task::{TaskEvent, TaskResult, TaskSpec};

/// Requests a subagent worker answers beyond the control pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, strum::IntoStaticStr)]
#[strum(prefix = "Worker::")]
pub enum WorkerRequest {
    /// The worker's health and free task slots.
    Capacity,
    /// Runs one task in a new task graph. The reply is a stream: `TaskEvent` items as
    /// they happen, then `TaskEnded`. A task without a free slot is refused with
    /// `RemoteError::Overloaded`, never queued. A dropped stream leaves the task running:
    /// its result is kept for [`WorkerRequest::Attach`].
    RunTask(TaskAssignment),
    /// Re-attaches to the task of (`run_id`, `tool_call_id`): its events from now on and
    /// its end while it runs, its kept result once finished, `UnknownTask` otherwise.
    Attach {
        run_id: String,
        tool_call_id: String,
    },
    /// Cancels the task `tool_call_id` of `run_id`, or every task of the run.
    Cancel {
        run_id: String,
        tool_call_id: Option<String>,
    },
    /// Stop taking tasks (the worker is being removed); running ones finish.
    Drain,
    /// The parent run's user answered the held call `call_id` of the task
    /// (`run_id`, `tool_call_id`): it runs, or becomes the denial its model reads.
    AnswerApproval(ApprovalAnswer),
}

/// A person's answer to a subagent's held call ([`WorkerRequest::AnswerApproval`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalAnswer {
    pub run_id: String,
    pub tool_call_id: String,
    /// The subagent's own call id.
    pub call_id: String,
    pub choice: ApprovalAnswerChoice,
    /// Who answered.
    pub by: Option<String>,
    /// Unix milliseconds.
    pub at: u64,
    pub reason: Option<String>,
}

/// What a person may answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ApprovalAnswerChoice {
    Approve,
    ApproveForThread,
    Deny,
}

/// One task for a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskAssignment {
    pub run_id: String,
    pub tool_call_id: String,
    /// The task (it holds the model's key, which its `Debug` form leaves out), boxed so
    /// the other requests stay small.
    pub spec: Box<TaskSpec>,
}

/// Replies from a subagent worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[strum(prefix = "Worker::")]
pub enum WorkerReply {
    Capacity {
        health: Health,
        slots: u32,
        busy: u32,
    },
    /// A stream item: one of the task's events.
    TaskEvent { event: TaskEvent },
    /// The final reply: how the task ended.
    TaskEnded { result: TaskResult },
    /// No task of that run and call is running or kept here.
    UnknownTask,
    /// How many tasks a cancel reached.
    Cancelled { tasks: u32 },
    /// The worker takes no new tasks.
    Draining,
    /// Whether a held call took the answer (`false`: no such call waits here).
    ApprovalTaken { taken: bool },
}
