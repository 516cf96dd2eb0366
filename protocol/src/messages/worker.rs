//! Messages between the lead and a subagent worker. A task travels as the engine's
//! JSON (`TaskSpec`, `TaskEvent`, `TaskResult`): the protocol carries it, the engine
//! reads it, so the wire does not change when the engine's task grows a field.

use serde::{Deserialize, Serialize};

use super::control::Health;

/// Requests a subagent worker answers beyond the control pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
}

/// One task for a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskAssignment {
    pub run_id: String,
    pub tool_call_id: String,
    /// The engine's `TaskSpec` as JSON (it holds the model's key: never log it).
    pub spec_json: String,
}

/// Replies from a subagent worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkerReply {
    Capacity {
        health: Health,
        slots: u32,
        busy: u32,
    },
    /// A stream item: one of the task's events (the engine's `TaskEvent` as JSON).
    TaskEvent { event_json: String },
    /// The final reply: how the task ended (the engine's `TaskResult` as JSON).
    TaskEnded { result_json: String },
    /// No task of that run and call is running or kept here.
    UnknownTask,
    /// How many tasks a cancel reached.
    Cancelled { tasks: u32 },
    /// The worker takes no new tasks.
    Draining,
}
