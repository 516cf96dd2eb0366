//! How a run hands its `task` calls on: the [`Delegator`] trait (the lead implements it
//! with its `SubagentDispatcher`, which places tasks on workers; a run without one is
//! never offered `task`), and the tool message a task's result becomes.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::{TaskArgs, TaskEvent, TaskResult};
use crate::catalog::builtins::TASK;
use crate::thread::state::{Delegation, Message, StateUpdate, ToolStatus};

/// One `task` call of a run, as the run loop hands it over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskCall {
    pub run_id: String,
    pub tool_call_id: String,
    pub user_id: String,
    pub thread_id: String,
    pub args: TaskArgs,
    /// The rules the parent's thread approved for the thread (its subagent passes them).
    pub thread_rules: Vec<String>,
    /// Whether the parent run's user can answer the task's asks.
    pub parent_answers: bool,
}

/// Where a task's events go (the parent run's event stream).
pub type TaskEventSink = Arc<dyn Fn(TaskEvent) + Send + Sync>;

/// Runs a run's `task` calls somewhere else and reports how they ended.
pub trait Delegator: Send + Sync {
    /// Runs one task to its end (every failure, capacity included, is a result).
    fn delegate(&self, call: TaskCall, events: TaskEventSink) -> BoxFuture<'static, TaskResult>;
    /// The task `tool_call_id` of `run_id` started before the lead restarted: re-attached
    /// while it runs, or its kept result; `None` when no worker knows it.
    fn collect(
        &self,
        run_id: &str,
        tool_call_id: &str,
        events: TaskEventSink,
    ) -> BoxFuture<'static, Option<TaskResult>>;
    /// Cancels every task of `run_id` (the parent was cancelled, answered or failed).
    fn cancel_run(&self, run_id: &str);
}

/// The state update a task's result makes: its tool message (7.2's content and
/// `additional_kwargs`), the delegation entry with its status, and its token usage
/// added to the run's totals once.
pub fn task_update(run_id: &str, tool_call_id: &str, result: &TaskResult) -> StateUpdate {
    let status = if result.status == super::TaskStatus::Completed {
        ToolStatus::Success
    } else {
        ToolStatus::Error
    };
    let mut update = StateUpdate::messages([Message::Tool {
        tool_call_id: tool_call_id.to_owned(),
        name: TASK.to_owned(),
        content: result.content(),
        status,
        additional_kwargs: Some(Box::new(result.additional_kwargs())),
    }]);
    update.delegations.push(Delegation {
        id: tool_call_id.to_owned(),
        run_id: run_id.to_owned(),
        status: Some(result.status.as_str().to_owned()),
    });
    if !result.token_usage.is_zero() {
        update.token_usage = Some(result.token_usage);
    }
    update
}
